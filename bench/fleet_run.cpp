// bench/fleet_run.cpp: run_fleet() (fleet.hpp): forks the worker processes of one run, lets them
// loop through a warm-up and then the window, samples the servers around the window, reaps the
// workers and gathers their counts.
//
// The board (a MAP_SHARED anonymous mapping made before the forks) holds the window and one slot
// per worker. Workers sleep on futexes in it (`go` to start, `leave` to tear down) rather than
// polling: hundreds of polling processes would be the load. A worker is a child of fork() that
// runs no code of the parent's after it: it builds its lock (and with it every thread it has),
// runs its loop and ends with _exit(), so no atexit handler of the parent's (the servers'
// harness kills its servers at exit) and no destructor of a copied object runs in it. The parent
// always reaps every worker, killing those still there after the grace.
#include <linux/futex.h>  // FUTEX_WAIT, FUTEX_WAKE
#include <signal.h>       // kill, SIGKILL
#include <sys/mman.h>     // mmap, munmap
#include <sys/prctl.h>    // prctl, PR_SET_PDEATHSIG
#include <sys/syscall.h>  // SYS_futex
#include <sys/wait.h>     // waitpid
#include <unistd.h>       // fork, _exit, getppid, syscall

#include <algorithm>  // std::min, std::max
#include <atomic>     // std::atomic
#include <cerrno>     // errno
#include <cstdio>     // std::fflush
#include <cstring>    // std::strncpy, std::strerror
#include <iostream>   // std::cout
#include <stdexcept>  // std::runtime_error
#include <thread>     // std::this_thread
#include <vector>     // std::vector

#include "fleet.hpp"
#include "sent_commands.hpp"

namespace bench {
namespace {

using std::chrono::milliseconds;

constexpr int kMaxProcesses = 1024;

enum State : int { starting = 0, ready = 1, done = 2, failed = 3 };

struct Slot {
  std::atomic<int> state;
  std::uint64_t acquisitions;  // inside the window
  std::int64_t max_wait_ns;    // of the calls that ended inside the window
  std::uint64_t sent;          // commands sent from the window's start to the end of the loop
  char error[200];
};

// Zero-filled when mapped: the initial state of every field.
struct Board {
  std::atomic<int> go;     // futex: 0 until the window opens
  std::atomic<int> leave;  // futex: 0 until the parent has sampled the servers after the loops
  std::atomic<std::int64_t> start_ns;  // the window: [start_ns, end_ns); the loops start earlier
  std::atomic<std::int64_t> end_ns;
  Slot slots[kMaxProcesses];
};

void futex_wait(std::atomic<int>& word) {
  while (word.load() == 0) {
    ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT, 0, nullptr, nullptr, 0);
  }
}

void futex_wake_all(std::atomic<int>& word) {
  word.store(1);
  ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
}

// The loop of one worker: try_lock_until(end) / hold / unlock() from the warm-up until the
// window ends; what happens before the window's start is not counted.
void worker_loop(Board& board, Slot& me, WorkerMutex& lock, milliseconds hold) {
  const std::int64_t start = board.start_ns.load();
  const std::int64_t end = board.end_ns.load();
  const std::chrono::steady_clock::time_point deadline{std::chrono::nanoseconds(end)};
  std::uint64_t sent0 = 0;
  bool started = false;
  for (;;) {
    const std::int64_t t0 = now_ns();
    if (t0 >= end) break;
    if (!started && t0 >= start) {
      started = true;
      sent0 = sent_commands();
    }
    const bool held = lock.try_until(deadline);
    const std::int64_t t1 = now_ns();
    if (t1 >= start) me.max_wait_ns = std::max(me.max_wait_ns, t1 - t0);
    if (!held) continue;
    if (t1 >= start && t1 < end) ++me.acquisitions;
    std::this_thread::sleep_for(hold);
    lock.release();
  }
  me.sent = started ? sent_commands() - sent0 : 0;
}

[[noreturn]] void worker_main(Board& board, int id, pid_t parent, const MakeWorkerLock& make,
                              milliseconds hold) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the benchmark already went away
  Slot& me = board.slots[id];
  int status = 1;
  try {
    count_sent_commands();
    WorkerLock built = make();
    // One attempt (its deadline has passed): connections, scripts, subscriptions.
    if (built.lock->try_until(std::chrono::steady_clock::now())) built.lock->release();
    me.state.store(ready);
    futex_wait(board.go);
    worker_loop(board, me, *built.lock, hold);
    me.state.store(done);
    futex_wait(board.leave);
    status = 0;
  } catch (const std::exception& e) {
    std::strncpy(me.error, e.what(), sizeof me.error - 1);
    me.state.store(failed);
  }
  ::_exit(status);
}

// The forked workers of one run. However the run ends, the destructor lets every worker go and
// reaps it, killing those still there after the grace.
class Workers {
 public:
  explicit Workers(Board& board) : board_(board) {}
  ~Workers() { reap(std::chrono::seconds(30)); }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  void fork_all(int n, const MakeWorkerLock& make, milliseconds hold) {
    std::cout.flush();
    std::fflush(nullptr);  // nothing buffered is written twice (the workers never flush)
    const pid_t parent = ::getpid();
    for (int id = 0; id < n; ++id) {
      const pid_t pid = ::fork();
      if (pid == 0) worker_main(board_, id, parent, make, hold);
      if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
      pids_.push_back(pid);
    }
  }

  // True once every worker reached `level` (or failed). A worker that exited without saying so
  // is marked failed.
  bool all_at(int level) {
    bool all = true;
    for (std::size_t id = 0; id < pids_.size(); ++id) {
      Slot& s = board_.slots[id];
      if (pids_[id] > 0 && s.state.load() < done) {
        int status = 0;
        if (::waitpid(pids_[id], &status, WNOHANG) == pids_[id]) {
          pids_[id] = -1;
          if (s.state.load() < done) {
            std::snprintf(s.error, sizeof s.error, "exited early (status %d)", status);
            s.state.store(failed);
          }
        }
      }
      const int state = s.state.load();
      all = all && (state >= level || state == failed);
    }
    return all;
  }

  bool wait_for(int level, std::chrono::seconds limit) {
    const std::int64_t until = now_ns() + limit.count() * 1'000'000'000;
    while (!all_at(level)) {
      if (now_ns() >= until) return false;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return true;
  }

  void reap(std::chrono::seconds grace) noexcept {
    if (board_.go.load() == 0) {  // never opened: open a window that is already over
      board_.start_ns.store(now_ns());
      board_.end_ns.store(now_ns());
      futex_wake_all(board_.go);
    }
    futex_wake_all(board_.leave);
    const std::int64_t until = now_ns() + grace.count() * 1'000'000'000;
    for (pid_t& pid : pids_) {
      if (pid <= 0) continue;
      int status = 0;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (now_ns() >= until) ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(milliseconds(2));
      }
      pid = -1;
    }
  }

 private:
  Board& board_;
  std::vector<pid_t> pids_;
};

class BoardMap {
 public:
  BoardMap() {
    void* p =
        ::mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    board_ = static_cast<Board*>(p);
  }
  ~BoardMap() { ::munmap(board_, sizeof(Board)); }
  BoardMap(const BoardMap&) = delete;
  BoardMap& operator=(const BoardMap&) = delete;
  Board& board() { return *board_; }

 private:
  Board* board_{nullptr};
};

ServerSample minus(const ServerSample& after, const ServerSample& before) {
  ServerSample d;
  for (std::size_t i = 0; i < after.commands.size() && i < before.commands.size(); ++i) {
    d.commands.push_back(after.commands[i] - before.commands[i]);
  }
  d.cpu_us = after.cpu_us >= 0 && before.cpu_us >= 0 ? after.cpu_us - before.cpu_us : -1;
  return d;
}

void gather(const Board& board, int n, FleetResult& out) {
  out.min_per_process = ~std::uint64_t{0};
  double sent = 0;
  std::int64_t max_wait = 0;
  for (int id = 0; id < n; ++id) {
    const Slot& s = board.slots[id];
    if (s.state.load() == failed && out.error.empty()) {
      out.error = "worker " + std::to_string(id) + ": " + s.error;
    }
    out.acquisitions += s.acquisitions;
    out.min_per_process = std::min(out.min_per_process, s.acquisitions);
    out.max_per_process = std::max(out.max_per_process, s.acquisitions);
    max_wait = std::max(max_wait, s.max_wait_ns);
    sent += static_cast<double>(s.sent);
  }
  out.max_wait_ms = static_cast<double>(max_wait) / 1e6;
  out.client_commands = sent;
}

}  // namespace

FleetResult run_fleet(int processes, const FleetSettings& settings, const MakeWorkerLock& make,
                      const SampleServer& sample, SampleAt at) {
  if (processes < 1 || processes > kMaxProcesses) throw std::invalid_argument("fleet size");
  BoardMap map;
  Board& board = map.board();
  FleetResult out;
  out.processes = processes;
  Workers workers(board);
  workers.fork_all(processes, make, settings.hold);
  const auto setup = std::chrono::seconds(60 + processes / 4);
  if (!workers.wait_for(ready, setup)) throw std::runtime_error("workers did not get ready");
  // The warm-up: every worker has met contention, subscribed and queued before the window opens
  // (their first waits, all at one instant, are a start-up transient, not the fleet's steady
  // state). The servers are sampled as the window opens, the workers looping.
  const auto warm_up = static_cast<std::int64_t>(settings.warm_up_seconds * 1e9);
  const auto length = static_cast<std::int64_t>(settings.seconds * 1e9);
  const std::int64_t start = now_ns() + warm_up;
  board.start_ns.store(start);
  board.end_ns.store(start + length);
  futex_wake_all(board.go);
  std::this_thread::sleep_for(std::chrono::nanoseconds(start - now_ns()));
  const ServerSample before = sample();
  std::this_thread::sleep_for(std::chrono::nanoseconds(board.end_ns.load() - now_ns()));
  if (!workers.wait_for(done, std::chrono::seconds(30))) {
    out.error = "workers did not finish their loops";
  }
  if (at == SampleAt::workers_exited) workers.reap(std::chrono::seconds(30));
  const ServerSample after = sample();
  workers.reap(std::chrono::seconds(30));
  out.seconds = settings.seconds;
  out.server = minus(after, before);
  gather(board, processes, out);
  return out;
}

}  // namespace bench
