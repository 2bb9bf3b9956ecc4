// redlock/observer.hpp: hooks for metrics and tracing. Derive from redlock::Observer, override
// the hooks you need, and set it process-wide or for one lock:
//
//   struct Counting : redlock::Observer {
//     void on_acquire(const redlock::AcquireEvent& e) noexcept override { ... }
//   };
//   redlock::set_observer(std::make_shared<Counting>());  // every lock and node of the process
//   opts.observer = std::make_shared<Counting>();          // or one lock (LockOptions)
//
// examples/metrics/ turns these hooks into Prometheus text (counters and histograms).
#ifndef REDLOCK_OBSERVER_HPP
#define REDLOCK_OBSERVER_HPP

#include <chrono>       // std::chrono::nanoseconds
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uint64_t
#include <memory>       // std::shared_ptr
#include <string_view>  // std::string_view

#include <redlock/options.hpp>  // LostEvent, LostReason

namespace redlock {

// How an acquire call (lock, try_lock, try_lock_for, try_lock_until; a Semaphore's acquire) ended.
enum class AcquireOutcome {
  acquired,   // it returned true
  contended,  // it returned false: held by another, the deadline passed, or cancel_waits()
  failed,     // it threw (a redlock::Error: unreachable, timeout, server or protocol failure)
};

// Short lowercase name ("acquired", "contended", "failed"). Thread-safe.
const char* to_string(AcquireOutcome outcome) noexcept;

// One acquire call that reached the store (a re-entrant acquire by the holding thread does not).
struct AcquireEvent {
  std::string_view key;  // the lock's key (valid during the hook only)
  AcquireOutcome outcome{};
  std::chrono::nanoseconds latency{};  // from the call to its return, waiting included
  std::size_t attempts{0};             // attempts sent to the store (a hand-over is not one)
  std::size_t nodes{1};                // nodes of the lock (1 for a Lock or a Semaphore)
  std::size_t granted{0};              // nodes that granted the last attempt (its vote)
  bool handed_over{false};             // fair mode: the hold came by a hand-over, not an attempt
  std::uint64_t fence{0};              // the hold's fence (0: not acquired, or no fencing)
};

// The end of a hold's last level: release(), unlock(), a guard's destructor.
struct ReleaseEvent {
  std::string_view key;
  bool kept{false};                    // the lease was still ours up to the release
  bool failed{false};                  // the release threw (the lease then expires by its ttl)
  std::chrono::nanoseconds held{};     // from the acquire to the release
  std::chrono::nanoseconds latency{};  // the release's round trip
  std::size_t listeners{0};            // waiting processes the release was announced to
};

// An extend(ttl) call, or one renewal of the watchdog.
struct ExtendEvent {
  std::string_view key;
  bool renewal{false};                 // the watchdog's (false: extend(ttl))
  bool held{false};                    // the lease is still held after it
  std::chrono::nanoseconds latency{};  // the extend's round trip
  // Renewals: how long after its planned time the renewal was sent (the watchdog's lateness).
  std::chrono::nanoseconds lateness{};
};

// A node's health as this process sees it.
enum class NodeHealth {
  reachable,    // it answers again
  unreachable,  // a connection or a command to it failed
  slow,         // it timed out: acquires skip it for a back-off (at most 1 s)
};

// Short lowercase name ("reachable", "unreachable", "slow"). Thread-safe.
const char* to_string(NodeHealth health) noexcept;

struct NodeEvent {
  std::string_view address;  // host:port or the socket path
  NodeHealth health{};
  std::string_view why;  // the failure's message (empty for reachable)
};

// A waiter woken (fair mode: also a hand-over taken).
enum class WakeKind {
  released,    // it heard a release announced and tries again
  handed_over  // fair mode: the lock was handed to it; it holds without another round trip
};

struct WakeEvent {
  std::string_view key;
  WakeKind kind{};
};

// Metrics and tracing hooks. Every hook has an empty default; override those you need. Hooks run
// on the thread of the event (a caller's thread, the watchdog's renewal thread, a node's I/O),
// never while the library holds a lock of its own, and may run on several threads at once: an
// observer must be thread-safe. They must not throw (they are noexcept) and should be quick (they
// run inside the timed path of the call they observe). String views are valid during the hook
// only.
class Observer {
 public:
  virtual ~Observer();
  virtual void on_acquire(const AcquireEvent& event) noexcept;
  virtual void on_release(const ReleaseEvent& event) noexcept;
  virtual void on_extend(const ExtendEvent& event) noexcept;
  // A held lease lost (the same moment LostEvent reaches LockOptions::on_lost).
  virtual void on_lost(const LostEvent& event) noexcept;
  virtual void on_node(const NodeEvent& event) noexcept;
  virtual void on_wake(const WakeEvent& event) noexcept;
};

// Sets the process-wide observer (nullptr: none, the default), used by every lock without its own
// LockOptions::observer and for node health. An observer once set is kept alive until the process
// exits (a hook may still be running on another thread when it is replaced). Never throws but
// std::bad_alloc. Thread-safe.
void set_observer(std::shared_ptr<Observer> observer);

// The process-wide observer, or nullptr. Never throws. Thread-safe.
Observer* observer() noexcept;

}  // namespace redlock

#endif  // REDLOCK_OBSERVER_HPP
