// src/io/sentinel.hpp: where a Sentinel-managed master is now. A `MasterLocator` asks the
// sentinels of an endpoint (SENTINEL get-master-addr-by-name, one after the other; the one that
// answers moves to the front), confirms with ROLE that the address is a master, and keeps the
// answer until told it is stale: by a pool whose connection failed or got a READONLY, LOADING or
// MASTERDOWN reply, or by its watcher thread, which listens to one sentinel's +promoted-slave
// and +switch-master (and then tries the announced address first).
// Every answer has an epoch; a pooled connection made under an older epoch is never reused.
// A long-lived connection (the wake-on-release subscriber's) follows the answer: follow()
// calls it back whenever the answer is forgotten or a sentinel announces news of a failover.
//
//   auto locator = shared_locator(endpoint);       // one per sentinel set and service, per process
//   MasterLocator::Answer now = locator->master();  // throws ConnectionError or ServerError
//   start_dial(*now.endpoint, ...);                 // the master's host and port, its credentials
//
// Thread-safe. Lock order: the locator's resolve mutex, then its state mutex; neither is held
// while calling into anything but the sentinels' and the candidate master's pools.
#ifndef REDLOCK_SRC_IO_SENTINEL_HPP
#define REDLOCK_SRC_IO_SENTINEL_HPP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <redlock/endpoint.hpp>

namespace redlock {
namespace detail {

class ClientImpl;
struct Connection;

class MasterLocator : public std::enable_shared_from_this<MasterLocator> {
 public:
  struct Answer {
    std::shared_ptr<const Endpoint> endpoint;  // the master: host and port filled in, no sentinel
    std::uint64_t epoch{0};
  };

  // `endpoint.sentinel.service` must be set. Connects nothing yet.
  explicit MasterLocator(const Endpoint& endpoint);
  // Stops and joins the watcher thread. Never throws.
  ~MasterLocator();
  MasterLocator(const MasterLocator&) = delete;
  MasterLocator& operator=(const MasterLocator&) = delete;

  // The current master, asking the sentinels if it is not known. Callers that arrive while one
  // asks wait for its answer. Throws ConnectionError (no sentinel answered, or no reported
  // address confirmed that it is a master) or ServerError (no sentinel knows the service); the
  // message names every sentinel and address tried and what each said.
  Answer master();

  // The epoch of the current answer (it changes when the answer is forgotten).
  std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_acquire); }

  // Forgets the current answer (`why` goes to the log); the next master() asks again. Only the
  // first call after an answer changes the epoch. Never throws.
  void stale(std::string_view why) noexcept;

  // Calls `news` whenever the answer is forgotten (the epoch changes) and whenever a sentinel
  // announces a failover's progress (a master to try, a gate closed or opened), until the
  // returned registration is dropped; dropping it waits for a call under way. `news` runs on
  // the thread that learned it, under the locator's followers mutex: it must be quick, must
  // not throw, and must not call into the locator. The locator must be owned by a shared_ptr
  // (shared_locator's are); the registration keeps it alive. Throws std::bad_alloc.
  std::shared_ptr<void> follow(std::function<void()> news);

 private:
  // One sentinel's answer (or an announced master): an address for the service.
  struct Reported {
    std::string host;
    int port{0};
    std::size_t sentinel{0};  // who reported it
  };
  enum class Said : unsigned char { address, unknown, failed };
  Answer resolve();
  Said ask(std::size_t index, std::vector<Reported>& reported, std::string& log);
  bool confirm(const Reported& candidate, std::string& log);
  void adopt(const Reported& candidate, std::optional<std::size_t> sentinel);
  // stale() without telling the followers; true if there was an answer to forget.
  bool forget(std::string_view why) noexcept;
  void tell_followers() noexcept;
  void hear(const std::string& channel, const std::string& text);
  void start_watcher();
  void watch();
  std::unique_ptr<Connection> subscribe(std::size_t index, bool again) noexcept;
  bool read_events(Connection& connection, std::size_t index) noexcept;

  Endpoint template_;  // the master's settings (credentials, db, TLS, timeouts)
  std::vector<std::shared_ptr<ClientImpl>> sentinels_;
  std::mutex resolve_mutex_;  // one lookup at a time

  mutable std::mutex mutex_;        // guards the fields below
  std::vector<std::size_t> order_;  // sentinels by preference
  std::shared_ptr<const Endpoint> current_;
  std::unique_ptr<Reported> hint_;  // announced by a sentinel, tried first by the next lookup
  std::chrono::steady_clock::time_point gate_until_{};  // a failover under way: no new dials
  std::condition_variable stop_cv_;
  bool stopping_{false};

  std::mutex followers_mutex_;  // guards the two below; held while a follower is called
  std::vector<std::pair<std::uint64_t, std::function<void()>>> followers_;
  std::uint64_t last_follower_{0};

  std::atomic<std::uint64_t> epoch_{1};
  int wake_fd_{-1};  // eventfd: wakes the watcher's poll
  std::once_flag watcher_once_;
  std::thread watcher_;
};

// The process's locator for this endpoint's sentinels, service and settings (a registry of weak
// references, like shared_subscriber): every Client of one Sentinel set shares one lookup and
// one watcher. Thread-safe.
std::shared_ptr<MasterLocator> shared_locator(const Endpoint& endpoint);

// Whether an error reply says the server cannot take writes as a master now (READONLY, LOADING,
// MASTERDOWN). Through Sentinel such a reply means the master moved.
bool says_not_master(std::string_view error) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_SENTINEL_HPP
