// redlock/election.hpp: leader election over a lock. One candidate at a time leads; its term is
// the lock's fencing token, so it grows strictly from each leader to the next.
//
//   redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:6379"));
//   redlock::Election election(client, "scheduler", "pod-7");
//   election.run([](redlock::StopToken stop, std::uint64_t term) {
//     while (!stop.stop_requested()) schedule_next(term);  // write with the term as fence
//   });                                                    // until election.stop()
//
//   // Any process, candidate or not:
//   if (auto leader = election.leader()) std::cout << leader->id << " " << leader->term;
//
// An Election is a lock (fencing forced on, renewed in the background) on the name's leader key,
// plus a record of the leader's id that the candidate writes once the server confirmed its grant
// ("the claim"): a candidate leads only after that claim succeeded. It steps down locally when
// its lease's validity (already reduced by the drift allowance) runs out on the steady clock,
// before the server can let anyone else in. resign() releases the lock, which wakes the next
// candidate at once. On Redis, leader() is one script (one round trip) that never reports an
// expired leader; observe() hears the claims and releases on the lock's release channel.
// The ZooKeeper and PostgreSQL forms are declared in <redlock/zookeeper.hpp> and
// <redlock/postgres.hpp> (their optional components).
#ifndef REDLOCK_ELECTION_HPP
#define REDLOCK_ELECTION_HPP

#include <chrono>       // std::chrono::milliseconds
#include <cstdint>      // std::uint64_t
#include <functional>   // std::function
#include <memory>       // std::shared_ptr
#include <optional>     // std::optional
#include <string>       // std::string
#include <type_traits>  // std::enable_if_t, std::is_invocable_v
#include <utility>      // std::move
#include <vector>       // std::vector
#if __cplusplus >= 202002L && __has_include(<stop_token>)
#include <stop_token>  // std::stop_token, std::stop_source, std::stop_callback (C++20)
#endif

#include <redlock/client.hpp>             // Client
#include <redlock/detail/chrono.hpp>      // saturating_ns
#include <redlock/detail/visibility.hpp>  // REDLOCK_LOCAL
#include <redlock/errors.hpp>             // what the members throw
#include <redlock/lease.hpp>              // LeaseToken
#include <redlock/watchdog.hpp>           // Watchdog

namespace redlock {

namespace detail {
class ElectionCore;
struct StopState;
}  // namespace detail

// Who leads, and since which term.
struct Leader {
  std::string id;         // the id the leader was constructed with
  std::uint64_t term{0};  // the leader's fencing token (> 0)
};
inline bool operator==(const Leader& a, const Leader& b) {
  return a.term == b.term && a.id == b.id;
}
inline bool operator!=(const Leader& a, const Leader& b) { return !(a == b); }

struct ElectionOptions {
  // How long the leader's lease lives on the server unless renewed (it is renewed every third of
  // it while leading). A crashed leader is replaced after at most this. Must be longer than the
  // drift allowance (ttl * clock_drift_factor + 2 ms).
  std::chrono::milliseconds ttl{10'000};
  // The pace of a campaign's attempts while no release can be heard (see LockOptions). > 0.
  std::chrono::milliseconds retry_delay{50};
  // Clock drift allowance, as LockOptions. In [0, 1).
  double clock_drift_factor{0.01};
  // run(): the pause after a term ends (lost, or the worker returned) before campaigning again.
  // 0: none.
  std::chrono::milliseconds backoff{100};
  // How long a campaign rides out servers that cannot be reached before it throws (see
  // LockOptions::max_unavailable). run() logs that error, backs off and campaigns again.
  std::chrono::milliseconds max_unavailable{10'000};
  // The watchdog that renews the leader's lease. nullptr: the backend's default (Redis and
  // PostgreSQL: Watchdog::shared(); ZooKeeper: the Session's own).
  std::shared_ptr<Watchdog> watchdog;
};

// The stop signal run() gives its worker: requested when the term ends (leadership lost, stop(),
// the Election destroyed). Copies share one state. A default-constructed token is never stopped.
class StopToken {
 public:
  StopToken() = default;
  // True once stop was requested. Never throws. Thread-safe.
  bool stop_requested() const noexcept;
  // Blocks up to `timeout` (milliseconds) until stop is requested. Returns stop_requested().
  // Never throws. Thread-safe.
  bool wait_for(std::chrono::milliseconds timeout) const;
  // Runs `callback` once when stop is requested, at once (on the calling thread) if it already
  // was. It runs on the thread that requests stop, so it must be quick and must not throw
  // (exceptions are swallowed). Throws std::bad_alloc only. Thread-safe.
  void on_stop(std::function<void()> callback) const;

 private:
  friend class detail::ElectionCore;
  explicit StopToken(std::shared_ptr<detail::StopState> state) noexcept
      : state_(std::move(state)) {}
  std::shared_ptr<detail::StopState> state_;
};

class Election {
 public:
  // A candidate `id` (any string; host:port, pod name) for the election `name`, on one Redis
  // Client (standalone, TLS, Sentinel or Cluster); the lease's key is `{<name>}:leader`, so
  // names `x` and `{x}` are two elections. Connects nothing yet. Throws std::invalid_argument
  // naming the argument for an empty name or id, a name over 4 MiB - 9 bytes (4,194,295: the
  // key's 4 MiB less `{}:leader`; the same limit on every store), and options outside their
  // ranges.
  Election(Client client, std::string name, std::string id, ElectionOptions options = {});
  // The same over a quorum of independent instances (as Redlock): the lease, the claim and
  // leader() count a majority. Also throws std::invalid_argument for zero instances or two
  // naming one server.
  Election(std::vector<Client> instances, std::string name, std::string id,
           ElectionOptions options = {});

  // Stops run() and the observers, resigns if leading (best effort: a failed release is logged
  // and the lease expires after ttl). Never throws.
  virtual ~Election();

  Election(const Election&) = delete;
  Election& operator=(const Election&) = delete;

  // Waits until this candidate leads and returns its term (> 0; the lock's fence). At once if
  // it already leads. Rides out unreachable servers for options.max_unavailable, then throws
  // that ConnectionError / TimeoutError (QuorumUnavailableError on a quorum); ServerError for
  // error replies; CancelledError after stop(). Thread-safe; concurrent campaigns on one
  // Election queue behind each other. Leadership is not tied to the calling thread.
  std::uint64_t campaign();

  // As campaign(), giving up after `timeout` (steady clock). Returns the term, or nothing if
  // another candidate still led at the deadline (or stop() was called). Throws as campaign().
  // Thread-safe.
  template <class Rep, class Period>
  std::optional<std::uint64_t> try_campaign_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_campaign_for_ns(detail::saturating_ns(timeout));
  }

  // Steps down: releases the lock, which wakes the next candidate at once (no ttl to wait).
  // Returns true if this candidate was leading and its lease was still its own. Does nothing
  // (false) when not leading. Never throws: a release that fails is logged and the lease
  // expires after ttl. Thread-safe. Also ends a run() worker's term (its stop is requested).
  bool resign() noexcept;

  // True while this candidate leads: claimed, not resigned, not lost, and its validity (reduced
  // by the drift allowance) not run out on the steady clock. Never throws. Thread-safe.
  bool is_leader() const noexcept;

  // The term while is_leader(), else 0. Never throws. Thread-safe.
  std::uint64_t term() const noexcept;

  // How long this candidate's leadership is still valid (the lease's validity on the steady
  // clock, reduced by the drift allowance, in milliseconds) while is_leader(), else zero. A
  // renewal pushes it forward. Never throws. Thread-safe.
  std::chrono::milliseconds validity() const noexcept;

  // The LeaseToken of the current term (raised when its lease is lost; reason() says why), or
  // an empty token (lost(), reason expired) when this candidate has not led since its last
  // resign. Never throws. Thread-safe.
  LeaseToken lease() const noexcept;

  // The current leader as the servers see it, or nothing (no leader, the leader's lease expired,
  // or a new leader's grant not yet claimed). Needs no campaign: any process may ask. One round
  // trip on one Redis Client (one per instance, in turn, on a quorum: a majority must agree;
  // ZooKeeper: two, PostgreSQL: one statement).
  // Throws ConnectionError / TimeoutError / QuorumUnavailableError / ServerError. Thread-safe.
  std::optional<Leader> leader() const;

  // Calls `callback` with the new leader (or nothing) on every change of leader: elected,
  // resigned, lost, expired; first once with the leader at the time. Redis: woken by the claim
  // and release notices on the lock's channel (no polling while a leader is known: an expiry
  // is noticed at the leader's remaining ttl; with no leader and nothing heard, asks again once
  // every ttl). Callbacks run on one thread of this Election, in order, and must not throw
  // (exceptions are logged and swallowed) nor destroy the Election. Transport failures are
  // retried every retry_delay * 10. Throws std::bad_alloc only. Thread-safe.
  void observe(std::function<void(const std::optional<Leader>&)> callback);

  // The service loop, on the calling thread: campaigns, runs worker(stop, term) while leading,
  // requests stop when leadership ends (renewal refused, quorum gone, validity run out, session
  // expired, resign(), stop()), and when the worker returns (by itself or stopped) resigns,
  // backs off (options.backoff) and campaigns again, until stop() or destruction. A campaign's
  // failure (servers unreachable past max_unavailable) is logged and retried after the back-off.
  // Returns after stop(). Rethrows what the worker throws (after resigning). Thread-safe: one
  // run() at a time per Election (a second throws std::logic_error).
  void run(std::function<void(StopToken, std::uint64_t)> worker);
#if defined(__cpp_lib_jthread)
  // C++20: the same with a worker taking std::stop_token.
  template <class Worker,
            std::enable_if_t<std::is_invocable_v<Worker&, std::stop_token, std::uint64_t>, int> = 0>
  void run(Worker worker) {
    run([&worker](StopToken stop, std::uint64_t term) {
      std::stop_source source;
      stop.on_stop([source]() mutable { source.request_stop(); });
      worker(source.get_token(), term);
    });
  }
#endif

  // Ends run() (its worker is asked to stop, then it resigns and returns) and every campaign in
  // progress or to come (sticky: they throw CancelledError or return nothing). Never throws.
  // Thread-safe, but not async-signal-safe.
  void stop() noexcept;

  // The name and this candidate's id. Thread-safe.
  const std::string& name() const noexcept;
  const std::string& id() const noexcept;

 protected:
  // For an election on another store (the optional components). Never throws.
  REDLOCK_LOCAL explicit Election(std::shared_ptr<detail::ElectionCore> core) noexcept;

 private:
  std::optional<std::uint64_t> try_campaign_for_ns(std::chrono::nanoseconds timeout);

  std::shared_ptr<detail::ElectionCore> core_;
};

}  // namespace redlock

#endif  // REDLOCK_ELECTION_HPP
