// src/election/election_core.cpp: campaign (a lock acquire, then the claim), resign (the lock's
// release), run()'s service loop and the observers' thread, over any backend's lease and board.
#include "election/election_core.hpp"

#include <stdexcept>
#include <utility>

#include <redlock/errors.hpp>

#include "api/access.hpp"
#include "lock/hold_end.hpp"
#include "lock/lock_core.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {

void StopState::request() noexcept {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard<std::mutex> guard(mutex);
    if (stopped) return;
    stopped = true;
    run.swap(callbacks);
  }
  cv.notify_all();
  for (auto& callback : run) {
    try {
      callback();
    } catch (...) {
      logf(LogLevel::warn, "redlock: an Election stop callback threw; ignored");
    }
  }
}

ElectionCore::ElectionCore(std::shared_ptr<LeaseBackend> lease, LockOptions lock_options,
                           std::shared_ptr<LeaderBoard> board, std::string name, std::string id,
                           ElectionOptions options)
    : lease_(std::move(lease)),
      lock_options_(std::move(lock_options)),
      board_(std::move(board)),
      name_(std::move(name)),
      id_(std::move(id)),
      options_(std::move(options)) {
  if (!lock_options_.watchdog) lock_options_.watchdog = Watchdog::shared();  // as LockCore's
}

ElectionCore::~ElectionCore() { shutdown(); }

// The lock a campaign waits on: one per campaign that leads, so that a resign, from any thread,
// can destroy it (its hold released whatever thread acquired it). mutex_ held.
std::shared_ptr<LockCore> ElectionCore::generation() {
  if (!campaigning_) campaigning_ = std::make_shared<LockCore>(lease_, lock_options_);
  return campaigning_;
}

std::optional<std::uint64_t> ElectionCore::campaign(SteadyClock::time_point deadline) {
  for (;;) {
    std::shared_ptr<LockCore> core;
    Term stale;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (stopped_) {
        if (deadline == SteadyClock::time_point::max()) {
          throw CancelledError("redlock: campaign for " + name_ + " after stop()");
        }
        return std::nullopt;
      }
      if (term_.core && !term_.lease.lost()) return term_.fence;
      if (term_.core) stale = std::exchange(term_, Term{});
      core = generation();
    }
    if (stale.core) end_term(std::move(stale));
    if (auto term = attempt(core, deadline)) return term;
    if (SteadyClock::now() >= deadline) return std::nullopt;
  }
}

// One lock acquire on `core` until `deadline`, then the claim: leading only once the server
// confirmed it. Nothing if refused, cancelled (a resign or stop() replaced the generation) or
// the claim found the lease gone.
std::optional<std::uint64_t> ElectionCore::attempt(const std::shared_ptr<LockCore>& core,
                                                   SteadyClock::time_point deadline) {
  const bool forever = deadline == SteadyClock::time_point::max();
  bool held = false;
  try {
    held = core->acquire(forever ? Call::lock : Call::try_lock_for, deadline);
  } catch (const CancelledError&) {
    std::lock_guard<std::mutex> guard(mutex_);
    if (stopped_) throw;
    return std::nullopt;
  }
  if (!held) return std::nullopt;
  Term term{core, core->hand_out(), LeaseToken(), 0, std::make_shared<StopState>()};
  if (!term.hold) return std::nullopt;
  term.lease = Access::lease(term.hold);
  term.fence = term.hold->fence();
  bool claimed = false;
  try {
    claimed = board_->claim(term.hold->token(), term.fence, id_);
  } catch (...) {
    forget(core);
    end_term(std::move(term));
    throw;
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    claimed = claimed && !stopped_ && campaigning_ == core;
    if (claimed) {
      campaigning_.reset();
      term_ = term;
    }
  }
  if (!claimed) {
    forget(core);
    end_term(std::move(term));
    return std::nullopt;
  }
  // Another thread's campaign queued on this generation (whose gate stays closed) ends, and
  // finds this term.
  core->cancel_waits();
  const std::shared_ptr<StopState> stop = term.stop;
  term.lease.on_lost([stop] { stop->request(); });
  return term.fence;
}

// A generation that will not lead: the next campaign makes a new one.
void ElectionCore::forget(const std::shared_ptr<LockCore>& core) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (campaigning_ == core) campaigning_.reset();
}

ElectionCore::Term ElectionCore::take_term() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return std::exchange(term_, Term{});
}

// Ends a term: its worker is asked to stop, waits on its generation end, and the lease is
// released (announced: the next candidate is woken at once). Returns true if the lease was
// still ours. A loss found on the way is reported; a failure is logged and the lease expires.
bool ElectionCore::end_term(Term term) noexcept {
  if (term.stop) term.stop->request();
  term.core->cancel_waits();
  if (!term.hold) return false;
  const HoldEnd end = end_hold(*term.hold, lease_, lock_options_);
  if (end.lost) report_loss(term.hold, end.reason, lock_options_, lease_->key());
  term.hold->mark_released();
  if (end.error) {
    try {
      std::rethrow_exception(end.error);
    } catch (const std::exception& e) {
      logf(LogLevel::warn, "redlock: the leader of {} could not resign ({}); its lease expires",
           name_, e.what());
    } catch (...) {
    }
  }
  return end.kept;
}

bool ElectionCore::resign() noexcept {
  Term term = take_term();
  if (!term.core) return false;
  return end_term(std::move(term));
}

bool ElectionCore::is_leader() const noexcept { return term() != 0; }

std::uint64_t ElectionCore::term() const noexcept {
  std::uint64_t fence = 0;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (term_.core && !term_.lease.lost()) fence = term_.fence;
  }
  return fence != 0 && !board_->suspended() ? fence : 0;  // the board's mutex taken alone
}

std::chrono::milliseconds ElectionCore::validity() const noexcept {
  if (term() == 0) return std::chrono::milliseconds::zero();
  std::lock_guard<std::mutex> guard(mutex_);
  return validity_of(term_.hold.get());
}

LeaseToken ElectionCore::lease() const noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return term_.lease;
}

void ElectionCore::stop() noexcept {
  std::shared_ptr<LockCore> campaigning;
  std::shared_ptr<StopState> worker;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopped_ = true;
    campaigning = campaigning_;
    worker = term_.stop;
  }
  stopped_cv_.notify_all();
  if (campaigning) campaigning->cancel_waits();
  if (worker) worker->request();
}

void ElectionCore::shutdown() noexcept {
  stop();
  resign();
  std::thread observer;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    closing_ = true;
    if (observe_watch_) observe_watch_->wake();
    observer.swap(observer_);
  }
  stopped_cv_.notify_all();
  if (observer.joinable() && observer.get_id() != std::this_thread::get_id()) observer.join();
  if (observer.joinable()) observer.detach();  // destroyed from its own callback: let it end
}

}  // namespace detail
}  // namespace redlock
