// tests/torture/liveness_nemesis.cpp: see liveness_nemesis.hpp.
#include "liveness_nemesis.hpp"

#include <signal.h>    // kill, SIGKILL
#include <sys/wait.h>  // waitpid

#include <algorithm>  // std::min, std::max, std::sort
#include <cerrno>     // errno, EINTR
#include <chrono>     // std::chrono::milliseconds
#include <exception>  // std::exception
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::runtime_error
#include <thread>     // std::this_thread::sleep_for
#include <utility>    // std::move, std::pair

#include "common.hpp"  // mono_ns, kLockKey

namespace redlock::torture {

namespace {

constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
constexpr auto kOldClientTimeout = std::chrono::milliseconds(500);
// The old client's compare-and-DEL: it deletes only its own value.
constexpr char kOldClientRelease[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end "
    "return 0";

// The store's own nemesis under ClientNemesis: none (the lock node is not faulted).
class NoFaults final : public Faults {
 public:
  std::int64_t step(std::int64_t) override { return kNever; }
  void heal_all() override {}
  const std::map<std::string, std::int64_t>& injected() const override { return none_; }
  const std::vector<std::string>& problems() const override { return nothing_; }

 private:
  std::map<std::string, std::int64_t> none_;
  std::vector<std::string> nothing_;
};

// The integer after " <key>=" in a log line, or -1.
std::int64_t field_of(const std::string& line, const char* key) {
  const std::string k = std::string(" ") + key + "=";
  const std::size_t at = line.find(k);
  if (at == std::string::npos) return -1;
  try {
    return std::stoll(line.substr(at + k.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

// When the longest-waiting acquire call of a worker started ("try" without its "wait" among
// the last 16 KiB of its log), or kNever if none is open.
std::int64_t oldest_open_try(const std::string& path) {
  std::map<std::int64_t, std::int64_t> open;  // thread -> t_try
  for (const std::string& line : log_tail(path, 16384)) {
    if (line.rfind("try ", 0) == 0) {
      open[field_of(line, "t")] = field_of(line, "t_try");
    } else if (line.rfind("wait ", 0) == 0) {
      open.erase(field_of(line, "t"));
    }
  }
  std::int64_t oldest = kNever;
  for (const auto& [thread, t_try] : open) {
    if (t_try >= 0) oldest = std::min(oldest, t_try);
  }
  return oldest;
}

}  // namespace

void set_liveness_bound(LivenessSetup& setup, int ttl_ms, int threads, int slack_ms) {
  const std::int64_t guard = ttl_ms * 11LL / 8;
  const std::int64_t claim = std::min<std::int64_t>(
      ttl_ms, std::max<std::int64_t>(100, std::min<std::int64_t>(ttl_ms / 5, 1000)));
  setup.bound_ns = (ttl_ms + guard + threads * claim + slack_ms) * kMs;
  setup.bound_text = "lease " + std::to_string(ttl_ms) + " + guard " + std::to_string(guard) +
                     " + " + std::to_string(threads) + " claim windows of " +
                     std::to_string(claim) + " (one stopped process's threads) + slack " +
                     std::to_string(slack_ms) + " ms";
}

LivenessNemesis::LivenessNemesis(test::RedisServer& node, Fleet fleet, std::int64_t ttl_ms,
                                 std::int64_t first, std::int64_t last, std::uint64_t seed,
                                 std::FILE* log)
    : node_(node),
      fleet_(fleet),
      clients_(std::make_unique<ClientNemesis>(std::make_unique<NoFaults>(), fleet.seats, ttl_ms,
                                               first, last, seed, log)),
      last_(last),
      rng_(seed ^ 0x6c6976656eULL),
      log_(log),
      next_kill_(first + 2000 * kMs),
      next_old_(first) {
  own_["kill_group"] = 0;
  own_["old_client"] = 0;
  merge_counts();
}

LivenessNemesis::~LivenessNemesis() { heal_all(); }

std::int64_t LivenessNemesis::step(std::int64_t now) {
  std::int64_t next = clients_->step(now);
  if (now >= next_kill_ && now < last_) {
    kill_group(now);
    next_kill_ = now + static_cast<std::int64_t>(3000 + rng_() % 2001) * kMs;
  }
  old_client(now);
  merge_counts();
  if (now < last_) next = std::min(next, next_kill_);
  if (old_state_ == 1) {
    next = std::min(next, old_release_at_);
  } else if (old_state_ == 2 || now < last_) {
    next = std::min(next, std::max(next_old_, now + 10 * kMs));  // SET NX polls every step
  }
  return next;
}

void LivenessNemesis::heal_all() {
  clients_->heal_all();
  if (old_state_ == 1) {
    old_hold_.held_to = mono_ns();
    old_state_ = 2;
  }
  for (int attempt = 0; attempt < 20 && old_state_ != 0; ++attempt) {
    if (!old_client_release()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (old_state_ != 0) own_problems_.push_back("old client: its key could not be deleted");
  merge_counts();
}

// The holder's process first, then the processes waiting longest; never the one under a client
// fault, nor a worker that is gone. Returns indexes into fleet_.workers.
std::vector<std::size_t> LivenessNemesis::pick_group() {
  std::vector<std::pair<std::int64_t, std::size_t>> waiting;  // (oldest open try, worker)
  std::vector<std::size_t> group;
  for (std::size_t i = 0; i < fleet_.workers.size(); ++i) {
    const Worker& w = fleet_.workers[i];
    if (w.done || w.index == clients_->active()) continue;
    const std::string& path = fleet_.log_paths[static_cast<std::size_t>(w.index)];
    if (group.empty() && log_shows_a_hold(path)) {
      group.push_back(i);
      continue;
    }
    const std::int64_t oldest = oldest_open_try(path);
    if (oldest != kNever) waiting.emplace_back(oldest, i);
  }
  std::sort(waiting.begin(), waiting.end());
  for (std::size_t k = 0; k < waiting.size() && group.size() < 3; ++k) {
    group.push_back(waiting[k].second);
  }
  return group;
}

void LivenessNemesis::kill_group(std::int64_t) {
  const std::vector<std::size_t> group = pick_group();
  if (group.empty()) return;
  std::string names;
  for (std::size_t i : group) ::kill(fleet_.workers[i].pid, SIGKILL);  // all at once
  for (std::size_t i : group) {
    Worker& w = fleet_.workers[i];
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.done = true;
    w.status = status;
    fleet_.seats[static_cast<std::size_t>(w.index)].pid = -1;
  }
  const std::int64_t dead = mono_ns();
  for (std::size_t i : group) {
    const int index = fleet_.workers[i].index;
    killed_[index] = dead;
    names += (names.empty() ? "" : ",") + std::to_string(index);
    try {
      ClientSeat seat;
      const WorkerConfig config = route_through_own_proxies(fleet_.base, seat);
      const int next =
          spawn_next_worker(fleet_.workers, config, fleet_.exe, fleet_.run_dir, fleet_.log_paths);
      seat.pid = fleet_.workers.back().pid;
      seat.log_path = fleet_.log_paths.back();
      fleet_.seats.push_back(std::move(seat));  // seats[next], as the fleet requires
      names += "->" + std::to_string(next);
    } catch (const std::exception& e) {  // the run goes on with fewer workers
      own_problems_.push_back(std::string("kill_group: no replacement: ") + e.what());
    }
  }
  ++own_["kill_group"];
  note("kill_group workers=" + names);
}

// Idle: from next_old_ on, SET NX (no PX) every step until it succeeds (in fair mode the key
// is free only between a dead lease's end and the queue's next grant, or with nobody queued);
// then hold 100-400 ms, then compare-and-DEL (retried until it answers).
void LivenessNemesis::old_client(std::int64_t now) {
  if (old_state_ == 1 && now >= old_release_at_) {
    old_hold_.held_to = mono_ns();
    old_state_ = 2;
  }
  if (old_state_ == 2) {
    old_client_release();
    return;
  }
  if (old_state_ != 0 || now < next_old_ || now >= last_) return;
  old_hold_ = OutsideHold{};
  old_hold_.from = mono_ns();
  const std::string value = "old-client-" + std::to_string(old_count_);
  try {
    const Reply r = node_.raw({"SET", kLockKey, value, "NX"}, kOldClientTimeout);
    if (r.is_nil() || r.is_error()) return;  // held by someone: try again next step
    old_hold_.held_from = mono_ns();
    old_state_ = 1;
    old_release_at_ = now + static_cast<std::int64_t>(100 + rng_() % 301) * kMs;
  } catch (const std::exception&) {  // unknown: perhaps set; delete it to be sure
    old_state_ = 2;
    old_hold_.held_to = mono_ns();
  }
  ++own_["old_client"];
  note("old_client set " + value + (old_state_ == 1 ? "" : " (outcome unknown)"));
}

// Returns true once the compare-and-DEL answered (the hold is over), false to retry.
bool LivenessNemesis::old_client_release() {
  const std::string value = "old-client-" + std::to_string(old_count_);
  try {
    const Reply r = node_.raw({"EVAL", kOldClientRelease, "1", kLockKey, value}, kOldClientTimeout);
    if (r.is_error()) throw std::runtime_error(r.str());
  } catch (const std::exception&) {
    return false;
  }
  old_hold_.to = mono_ns();
  outside_.push_back(old_hold_);
  old_state_ = 0;
  ++old_count_;
  next_old_ = old_hold_.to + static_cast<std::int64_t>(1000 + rng_() % 2001) * kMs;
  note("old_client del " + value);
  return true;
}

void LivenessNemesis::note(const std::string& what) {
  if (log_ == nullptr) return;
  std::fprintf(log_, "%lld %s\n", static_cast<long long>(mono_ns()), what.c_str());
  std::fflush(log_);
}

void LivenessNemesis::merge_counts() {
  injected_ = clients_->injected();
  for (const auto& [kind, n] : own_) injected_[kind] += n;
  problems_ = clients_->problems();
  problems_.insert(problems_.end(), own_problems_.begin(), own_problems_.end());
}

}  // namespace redlock::torture
