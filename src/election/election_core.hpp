// src/election/election_core.hpp: what an Election is: a lock of the lock layer (a LockCore
// with fencing on, renewed by the watchdog) over a backend's lease, plus that backend's leader
// board, where a confirmed grant is claimed with the candidate's id and where anyone reads who
// leads. Every backend shares this class; a backend brings only its LeaderBoard.
//
// Leadership is not tied to a thread: each campaign uses a fresh LockCore (a "generation"); a
// grant's hold is handed out of it (LockCore::hand_out), so the campaigning thread's exit does
// not release it, and a resign from any thread ends it (lock/hold_end).
#ifndef REDLOCK_SRC_ELECTION_ELECTION_CORE_HPP
#define REDLOCK_SRC_ELECTION_ELECTION_CORE_HPP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <redlock/election.hpp>
#include <redlock/lease.hpp>
#include <redlock/options.hpp>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

class HoldState;
class LockCore;

// A reading of the board: the leader (if any) and how long its lease has left by the server
// (-1: unknown), after which an observer asks again.
struct Sighting {
  std::optional<Leader> leader;
  std::chrono::milliseconds expires_in{-1};
};

// Whether a read of the board also watches it (see LeaderBoard::read).
enum class Look { once, watch };

// Where a backend records the leader's id for a term, and reads it back.
class LeaderBoard {
 public:
  virtual ~LeaderBoard() = default;
  // After a grant of the lease with `token` and `fence`: records `id` as the leader of term
  // `fence` if the server still holds the lease for `token`, and announces the change. Returns
  // true if the server confirmed. Throws the transport or server failure.
  virtual bool claim(const std::string& token, std::uint64_t fence, const std::string& id) = 0;
  // Who leads now; never a leader whose lease expired. `look` watch: the read also asks the
  // server to notify a change of what it read (ZooKeeper's one-shot watches; the other stores
  // always announce). Throws the transport or server failure.
  virtual Sighting read(Look look) = 0;
  // True while this process cannot tell whether it still leads (ZooKeeper: disconnected, the
  // session suspended): a leader does not count itself leading then.
  virtual bool suspended() const noexcept { return false; }
  // Whether suspended() can ever be true (then run() watches it while its worker runs).
  virtual bool may_suspend() const noexcept { return false; }
  // A subscription to the board's change notices (claims, releases), registered before the read
  // that follows it. Never null.
  virtual std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline) = 0;
};

// One request to stop: a flag, waiters and callbacks (StopToken's state).
struct StopState {
  std::mutex mutex;
  std::condition_variable cv;
  bool stopped{false};
  std::vector<std::function<void()>> callbacks;

  void request() noexcept;
};

class ElectionCore {
 public:
  // `lease` is the backend's lease of the name (fencing on); `lock_options` the validated
  // options a LockCore over it takes (auto_renew on). Never throws but std::bad_alloc.
  ElectionCore(std::shared_ptr<LeaseBackend> lease, LockOptions lock_options,
               std::shared_ptr<LeaderBoard> board, std::string name, std::string id,
               ElectionOptions options);
  ~ElectionCore();

  // Waits until leading or `deadline` (max(): none). Returns the term or nothing.
  std::optional<std::uint64_t> campaign(SteadyClock::time_point deadline);
  bool resign() noexcept;
  bool is_leader() const noexcept;
  std::uint64_t term() const noexcept;
  std::chrono::milliseconds validity() const noexcept;
  LeaseToken lease() const noexcept;
  std::optional<Leader> leader() const { return board_->read(Look::once).leader; }
  void observe(std::function<void(const std::optional<Leader>&)> callback);
  void run(const std::function<void(StopToken, std::uint64_t)>& worker);
  void stop() noexcept;
  // stop(), resign(), and the observers' thread ended. Never throws. Idempotent.
  void shutdown() noexcept;

  const std::string& name() const noexcept { return name_; }
  const std::string& id() const noexcept { return id_; }

 private:
  // The current term's state; `core` null when not leading.
  struct Term {
    std::shared_ptr<LockCore> core;
    std::shared_ptr<HoldState> hold;  // handed out of `core`: no thread's
    LeaseToken lease;
    std::uint64_t fence{0};
    std::shared_ptr<StopState> stop;  // run()'s worker stop, requested when the term ends
  };
  std::optional<std::uint64_t> attempt(const std::shared_ptr<LockCore>& core,
                                       SteadyClock::time_point deadline);
  std::shared_ptr<LockCore> generation();
  void forget(const std::shared_ptr<LockCore>& core) noexcept;
  Term take_term() noexcept;
  bool end_term(Term term) noexcept;
  std::optional<std::uint64_t> campaign_in_run();
  void back_off();
  void observe_loop();
  void run_term(const std::function<void(StopToken, std::uint64_t)>& worker,
                const std::shared_ptr<StopState>& stop, std::uint64_t term);
  void tell(const std::optional<Leader>& seen, std::optional<Leader>& last, std::size_t& told,
            bool& known);

  std::shared_ptr<LeaseBackend> lease_;
  LockOptions lock_options_;
  std::shared_ptr<LeaderBoard> board_;
  std::string name_;
  std::string id_;
  ElectionOptions options_;

  mutable std::mutex mutex_;               // guards everything below
  std::condition_variable stopped_cv_;     // back_off() waits on it
  std::shared_ptr<LockCore> campaigning_;  // the generation a campaign may be waiting on
  Term term_;
  bool stopped_{false};
  bool running_{false};
  bool closing_{false};  // shutdown(): the observers' thread ends
  std::vector<std::function<void(const std::optional<Leader>&)>> callbacks_;
  std::unique_ptr<ReleaseWatch> observe_watch_;  // woken by stop()
  std::thread observer_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_ELECTION_ELECTION_CORE_HPP
