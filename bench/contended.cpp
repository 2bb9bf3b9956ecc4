// bench/contended.cpp: section 3, many workers fighting over one key.
//
// Workers are threads of this process (sharing one Client: one pool, one subscriber connection)
// or processes (this binary re-executed with --contended-worker, each with its own Client). Each
// has its own redlock::Lock on the same key and loops: lock(), hold, unlock(). They share a memfd
// mapping that holds the start/end of the window, per-worker counters and samples, and the last
// release: (CLOCK_MONOTONIC ns since the start) << 8 | (worker id + 1), written by a holder just
// before it calls unlock(). A worker that acquires reads it; if another worker wrote it, the gap
// is one handoff. Only acquisitions inside the window count (the wind-down after it does not);
// commands per acquisition divide the INFO commandstats delta by every acquisition.
#include <signal.h>     // SIGKILL
#include <spawn.h>      // posix_spawn
#include <sys/mman.h>   // memfd_create, mmap, munmap
#include <sys/prctl.h>  // prctl, PR_SET_PDEATHSIG
#include <sys/time.h>   // timeval
#include <sys/wait.h>   // waitpid
#include <unistd.h>     // ftruncate, close, readlink, getppid

#include <algorithm>  // std::min, std::max
#include <atomic>     // std::atomic
#include <cstdio>     // std::snprintf
#include <cstring>    // std::strncpy, std::strerror
#include <iostream>   // std::cout, std::cerr
#include <map>        // std::map
#include <set>        // std::set
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <thread>     // std::thread
#include <vector>     // std::vector

#include <fmt/format.h>

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"

extern char** environ;

namespace bench {
namespace {

using std::chrono::milliseconds;

constexpr int kMaxWorkers = 16;
constexpr std::size_t kSampleCap = std::size_t{1} << 17;  // per worker and kind; later ones dropped
constexpr milliseconds kContendedTtl{10'000};
// Commands only ever run inside the library's scripts in this workload (counted by commandstats
// all the same), and our own INFO.
const std::set<std::string> kNotClientSent{"get", "del", "publish", "info"};
// In fair mode every lock command is a script: what the scripts run inside is not client-sent.
const std::set<std::string> kFairScriptInternal{"set",    "pttl", "lrem", "hdel",
                                                "lindex", "hget", "lpop", "rpush",
                                                "hset",   "time", "incr", "pexpire"};

bool client_sent(const std::string& command, bool fair) {
  return kNotClientSent.count(command) == 0 && (!fair || kFairScriptInternal.count(command) == 0);
}

struct WorkerSlot {
  std::atomic<int> state;                   // 0 starting, 1 ready, 2 done, 3 failed
  std::atomic<std::uint64_t> acquisitions;  // inside the window
  std::atomic<std::uint64_t> total;         // including the wind-down
  std::atomic<std::uint64_t> handoffs;      // inside the window
  std::atomic<std::int64_t> unfinished_ns;  // a wait still going on at the end: end - its start
  char error[256];
  std::int64_t wait_ns[kSampleCap];
  std::int64_t handoff_ns[kSampleCap];
};

// Lives in a memfd mapping: zero-filled when created, which is the initial state of every field.
struct Shared {
  std::atomic<int> go;
  std::atomic<std::int64_t> start_ns;
  std::atomic<std::int64_t> end_ns;
  std::atomic<std::uint64_t> last_release;  // 0: none yet
  WorkerSlot workers[kMaxWorkers];
};

struct WorkerConfig {
  std::string key;
  bool wake{true};
  bool fair{false};
  std::int64_t hold_us{0};
  std::int64_t retry_ms{50};
};

// A shared, zero-filled Shared in a memfd (inherited by spawned workers through its fd).
class Region {
 public:
  Region() {
    fd_ = ::memfd_create("redlock-bench", 0);  // no MFD_CLOEXEC: workers inherit it
    if (fd_ < 0) throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    if (::ftruncate(fd_, sizeof(Shared)) != 0) {
      ::close(fd_);
      throw std::runtime_error(std::string("ftruncate: ") + std::strerror(errno));
    }
    shared_ = map(fd_);
  }
  ~Region() {
    ::munmap(shared_, sizeof(Shared));
    ::close(fd_);
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  static Shared* map(int fd) {
    void* p = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    return static_cast<Shared*>(p);
  }
  Shared& shared() noexcept { return *shared_; }
  int fd() const noexcept { return fd_; }

 private:
  int fd_{-1};
  Shared* shared_{nullptr};
};

// One Client: a Lock; more: a Redlock over them.
void worker(Shared& shm, int id, const std::vector<redlock::Client>& clients,
            const WorkerConfig& config) {
  WorkerSlot& me = shm.workers[id];
  try {
    redlock::LockOptions options;
    options.ttl = kContendedTtl;
    options.wake_on_release = config.wake;
    options.fair = config.fair;
    options.retry_delay = milliseconds(config.retry_ms);
    std::unique_ptr<redlock::LockBase> owned;
    if (clients.size() == 1) {
      owned = std::make_unique<redlock::Lock>(clients.front(), config.key, options);
    } else {
      owned = std::make_unique<redlock::Redlock>(clients, config.key, options);
    }
    redlock::LockBase& lock = *owned;
    for (const auto& client : clients) client.ping();  // pooled connections before the start
    me.state.store(1);
    while (shm.go.load(std::memory_order_acquire) == 0) {
      std::this_thread::sleep_for(milliseconds(1));  // gently: the others are starting too
    }
    const std::int64_t start = shm.start_ns.load();
    const std::int64_t end = shm.end_ns.load();
    if (now_ns() < start) std::this_thread::sleep_for(std::chrono::nanoseconds(start - now_ns()));
    const auto hold = std::chrono::microseconds(config.hold_us);
    const auto tag = static_cast<std::uint64_t>(id + 1);
    std::size_t waits = 0;
    for (;;) {
      const std::int64_t t0 = now_ns();
      if (t0 >= end) break;
      lock.lock();
      const std::int64_t t1 = now_ns();
      me.total.fetch_add(1, std::memory_order_relaxed);
      if (t1 >= end) me.unfinished_ns.store(end - t0);
      if (t1 < end) {
        me.acquisitions.fetch_add(1, std::memory_order_relaxed);
        if (waits < kSampleCap) me.wait_ns[waits++] = t1 - t0;
        const std::uint64_t last = shm.last_release.load(std::memory_order_acquire);
        if (last != 0 && (last & 0xff) != tag) {
          const std::uint64_t n = me.handoffs.load(std::memory_order_relaxed);
          if (n < kSampleCap) {
            me.handoff_ns[n] = t1 - (start + static_cast<std::int64_t>(last >> 8));
          }
          me.handoffs.store(n + 1, std::memory_order_relaxed);
        }
      }
      if (hold.count() > 0) std::this_thread::sleep_for(hold);
      shm.last_release.store((static_cast<std::uint64_t>(now_ns() - start) << 8) | tag,
                             std::memory_order_release);
      lock.unlock();
    }
    me.state.store(2);
  } catch (const std::exception& e) {
    std::strncpy(me.error, e.what(), sizeof me.error - 1);
    me.state.store(3);
  }
}

struct Spec {
  bool processes{false};
  int hold_ms{0};
  bool wake{true};
  bool fair{false};
  bool redlock{false};  // a Redlock over the section's 3 servers instead of a Lock on one
};

struct Outcome {
  double seconds{0};
  std::uint64_t acquisitions{0};
  std::uint64_t total{0};
  std::uint64_t handoffs{0};
  std::uint64_t min_per_worker{0};
  std::uint64_t max_per_worker{0};
  Summary wait;
  double wait_max_ns{0};  // including waits still going on at the end (a starved worker's)
  Summary handoff;
  Summary ping;
  bool fair{false};
  std::map<std::string, std::uint64_t> calls;  // commandstats delta
  double client_commands{0};                   // client-sent commands per acquisition
  std::string error;
};

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("readlink(/proc/self/exe) failed");
  return std::string(buf, static_cast<std::size_t>(n));
}

// The workers of one run, threads or processes. However the run ends (an exception included),
// finish() lets every worker stop: it opens the window, already closed, if it was never opened,
// joins the threads and reaps the processes, killing any still running `grace` after the end
// (they are ours).
class Crew {
 public:
  explicit Crew(Shared& shm) : shm_(shm) {}
  ~Crew() { finish(std::chrono::seconds(30)); }
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  // Worker `id` as a process running `args`; a failure to start marks it failed.
  void spawn(int id, std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
    if (rc != 0) {
      WorkerSlot& w = shm_.workers[id];
      std::snprintf(w.error, sizeof w.error, "posix_spawn: %s", std::strerror(rc));
      w.state.store(3);
      pid = -1;
    }
    children_.push_back(Child{pid, id, pid <= 0});
  }
  template <class Fn>
  void thread(Fn fn) {
    threads_.emplace_back(std::move(fn));
  }

  // True once every worker reached `level` (1 ready, 2 done; 3 failed counts as both). Reaps
  // processes that exited; one that exited without reporting is marked failed.
  bool at_least(int level, int workers) {
    for (Child& c : children_) {
      int status = 0;
      if (c.reaped || ::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.reaped = true;
      WorkerSlot& w = shm_.workers[c.id];
      if (w.state.load() < 2) {
        std::snprintf(w.error, sizeof w.error, "worker process exited early (status %d)", status);
        w.state.store(3);
      }
    }
    for (int id = 0; id < workers; ++id) {
      if (shm_.workers[id].state.load() < level) return false;
    }
    return true;
  }

  void finish(std::chrono::nanoseconds grace) noexcept {
    if (shm_.go.load() == 0) {  // never started: start with a window that is already over
      shm_.start_ns.store(now_ns());
      shm_.end_ns.store(now_ns());
      shm_.go.store(1);
    }
    const std::int64_t deadline = now_ns() + grace.count();
    for (;;) {
      at_least(2, 0);  // reaps whatever exited
      bool all = true;
      for (const Child& c : children_) all = all && c.reaped;
      if (all || now_ns() >= deadline) break;
      std::this_thread::sleep_for(milliseconds(5));
    }
    for (Child& c : children_) {
      if (c.reaped) continue;
      if (now_ns() >= deadline) ::kill(c.pid, SIGKILL);
      int status = 0;
      ::waitpid(c.pid, &status, 0);
      c.reaped = true;
    }
    for (auto& t : threads_) {
      if (t.joinable()) t.join();  // threads always finish: every holder releases
    }
  }

 private:
  struct Child {
    pid_t pid;
    int id;
    bool reaped;
  };
  Shared& shm_;
  std::vector<Child> children_;
  std::vector<std::thread> threads_;
};

Outcome run_one(const Config& config, const std::vector<redlock::Endpoint>& endpoints,
                redisContext* admin, const Spec& spec, const std::string& key) {
  Outcome out;
  Region region;
  Shared& shm = region.shared();
  const int n = config.workers;
  WorkerConfig wc;
  wc.key = key;
  wc.wake = spec.wake;
  wc.fair = spec.fair;
  out.fair = spec.fair;
  wc.hold_us = spec.hold_ms * 1000;
  wc.retry_ms = redlock::LockOptions{}.retry_delay.count();

  // The floor first, on a quiet machine: no worker exists yet.
  out.ping = summarize(ping_rtts(admin, config.quick ? 200 : 1000));

  const std::size_t nodes = spec.redlock ? endpoints.size() : 1;
  std::vector<redlock::Client> clients;  // threads share them; declared before the crew
  std::string ports;
  for (std::size_t i = 0; i < nodes; ++i) {
    if (!spec.processes) clients.emplace_back(endpoints[i]);
    ports += (i ? "," : "") + std::to_string(endpoints[i].port);
  }
  const redlock::Endpoint& endpoint = endpoints.front();
  Crew crew(shm);
  for (int id = 0; id < n; ++id) {
    if (spec.processes) {
      crew.spawn(
          id, {self_exe(), "--contended-worker", std::to_string(region.fd()), std::to_string(id),
               ports, std::to_string(endpoint.command_timeout.count()), wc.key, wc.wake ? "1" : "0",
               wc.fair ? "1" : "0", std::to_string(wc.hold_us), std::to_string(wc.retry_ms)});
    } else {
      crew.thread([&shm, &clients, &wc, id] { worker(shm, id, clients, wc); });
    }
  }
  const std::int64_t ready_by = now_ns() + 20'000'000'000;
  while (!crew.at_least(1, n) && now_ns() < ready_by) std::this_thread::sleep_for(milliseconds(1));

  const auto calls0 = command_calls(admin);
  const std::int64_t start = now_ns() + 2'000'000;  // workers poll `go` every millisecond
  const auto length = static_cast<std::int64_t>(config.seconds * 1e9);
  shm.start_ns.store(start);
  shm.end_ns.store(start + length);
  shm.go.store(1, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::nanoseconds(start + length - now_ns()));
  const std::int64_t done_by = now_ns() + 30'000'000'000;
  while (!crew.at_least(2, n) && now_ns() < done_by) std::this_thread::sleep_for(milliseconds(5));
  crew.finish(std::chrono::seconds(5));  // done workers exit at once; stuck ones are killed
  const auto calls1 = command_calls(admin);
  out.seconds = static_cast<double>(length) / 1e9;

  std::vector<std::int64_t> waits;
  std::vector<std::int64_t> handoffs;
  out.min_per_worker = ~std::uint64_t{0};
  for (int id = 0; id < n; ++id) {
    WorkerSlot& w = shm.workers[id];
    if (w.state.load() == 3 && out.error.empty()) {
      out.error = fmt::format("worker {}: {}", id, w.error);
    } else if (w.state.load() != 2 && out.error.empty()) {
      out.error = fmt::format("worker {} did not finish", id);
    }
    const std::uint64_t a = w.acquisitions.load();
    out.acquisitions += a;
    out.total += w.total.load();
    out.handoffs += w.handoffs.load();
    out.min_per_worker = std::min(out.min_per_worker, a);
    out.max_per_worker = std::max(out.max_per_worker, a);
    waits.insert(waits.end(), w.wait_ns, w.wait_ns + std::min<std::uint64_t>(a, kSampleCap));
    handoffs.insert(handoffs.end(), w.handoff_ns,
                    w.handoff_ns + std::min<std::uint64_t>(w.handoffs.load(), kSampleCap));
  }
  out.wait = summarize(std::move(waits));
  out.wait_max_ns = out.wait.max_ns;
  for (int id = 0; id < n; ++id) {
    out.wait_max_ns =
        std::max(out.wait_max_ns, static_cast<double>(shm.workers[id].unfinished_ns.load()));
  }
  out.handoff = summarize(std::move(handoffs));
  std::uint64_t client_sent_total = 0;
  for (const auto& [name, calls] : calls1) {
    const auto before = calls0.find(name);
    const std::uint64_t d = calls - (before == calls0.end() ? 0 : before->second);
    if (d == 0) continue;
    out.calls[name] = d;
    if (client_sent(name, spec.fair)) client_sent_total += d;
  }
  out.client_commands =
      out.total > 0 ? static_cast<double>(client_sent_total) / static_cast<double>(out.total) : 0;
  return out;
}

std::string breakdown(const Outcome& o) {
  std::string text;
  for (const auto& [name, calls] : o.calls) {
    if (!client_sent(name, o.fair)) continue;
    const double per =
        static_cast<double>(calls) / static_cast<double>(std::max<std::uint64_t>(o.total, 1));
    if (per < 0.005) continue;
    if (!text.empty()) text += " ";
    text += name + " " + num(per);
  }
  return text;
}

// ---- Ping-pong: the handoff path alone -------------------------------------------------------
// Two workers strictly alternate: A holds, B is already blocked waiting, A releases, B acquires
// (one handoff), A waits for its turn and blocks in lock() while B holds for 1 ms, and so on.
// No thundering herd, no releaser re-acquiring first: just release -> notification -> acquire.

struct PingPong {
  std::atomic<int> turn{0};  // the worker that may call lock() next
  std::atomic<std::int64_t> released_at{0};
  std::atomic<bool> stop{false};
};

// The floor: a worker with a command context and its own context SUBSCRIBEd to the release
// channel for good; it waits by reading that context and retries SET on any other holder's
// release message (the payload is the released token).
class RawWaiter {
 public:
  RawWaiter(const redlock::Endpoint& endpoint, const std::string& key)
      : command_(raw_connect(endpoint)), sub_(raw_connect(endpoint)), lock_key_(key) {
    channel_ = key + ":released";
    timeval tv{10, 0};  // a wait may be long; a dead context is an error anyway
    redisSetTimeout(sub_.get(), tv);
    RawReply r = raw_command(sub_.get(), {"SUBSCRIBE", channel_});
    if (r->type != REDIS_REPLY_ARRAY) throw std::runtime_error("raw SUBSCRIBE failed");
    ttl_ = std::to_string(kContendedTtl.count());
  }
  void lock() {
    token_ = raw_token();
    for (;;) {
      RawReply r = raw_command(command_.get(), {"SET", lock_key_, token_, "NX", "PX", ttl_, "GET"});
      if (r->type == REDIS_REPLY_NIL) return;
      for (;;) {  // wait for someone else's release
        void* raw = nullptr;
        if (redisGetReply(sub_.get(), &raw) != REDIS_OK || raw == nullptr) {
          throw std::runtime_error(std::string("raw subscriber: ") + sub_->errstr);
        }
        RawReply m(static_cast<redisReply*>(raw));
        if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
            std::string(m->element[2]->str, m->element[2]->len) != released_) {
          break;
        }
      }
    }
  }
  void unlock() {
    released_ = token_;
    raw_command(command_.get(),
                {"EVALSHA", release_script_sha(), "1", lock_key_, token_, channel_, "0"});
  }

 private:
  RawContext command_;
  RawContext sub_;
  std::string lock_key_;
  std::string channel_;
  std::string token_;
  std::string released_;
  std::string ttl_;
};

// The library side: its own Client (as separate processes would have), wake_on_release on;
// with Fair, in fair mode (the release hands the lock over: no acquire round trip).
template <bool Fair>
class LibWaiter {
 public:
  LibWaiter(const redlock::Endpoint& endpoint, const std::string& key)
      : client_(endpoint), lock_(client_, key, options()) {}
  void lock() { lock_.lock(); }
  void unlock() { lock_.unlock(); }

 private:
  static redlock::LockOptions options() {
    redlock::LockOptions o;
    o.ttl = kContendedTtl;
    o.fair = Fair;
    return o;
  }
  redlock::Client client_;
  redlock::Lock lock_;
};

template <class Waiter>
void ping_pong_worker(int me, PingPong& pp, Waiter& waiter, std::int64_t end,
                      std::vector<std::int64_t>& handoffs) {
  const int other = 1 - me;
  for (;;) {
    while (pp.turn.load() != me) {
      if (pp.stop.load()) return;
      std::this_thread::yield();
    }
    waiter.lock();
    const std::int64_t acquired = now_ns();
    const std::int64_t released = pp.released_at.load();
    if (pp.stop.load()) {
      waiter.unlock();
      return;
    }
    if (released != 0) handoffs.push_back(acquired - released);
    pp.turn.store(other);
    // Give the other worker time to call lock(), fail, subscribe and wait.
    std::this_thread::sleep_for(milliseconds(1));
    if (now_ns() >= end) pp.stop.store(true);
    pp.released_at.store(now_ns());
    waiter.unlock();
    if (pp.stop.load()) return;
  }
}

template <class Waiter>
std::vector<std::int64_t> ping_pong(const redlock::Endpoint& endpoint, const std::string& key,
                                    double seconds) {
  Waiter a(endpoint, key);
  Waiter b(endpoint, key);
  PingPong pp;
  const std::int64_t end = now_ns() + static_cast<std::int64_t>(seconds * 1e9);
  std::vector<std::int64_t> ha;
  std::vector<std::int64_t> hb;
  std::string error;
  auto guarded = [&](int me, Waiter& w, std::vector<std::int64_t>& h) {
    try {
      ping_pong_worker(me, pp, w, end, h);
    } catch (const std::exception& e) {
      error = e.what();
      pp.stop.store(true);
      pp.turn.store(1 - me);
    }
  };
  std::thread tb([&] { guarded(1, b, hb); });
  guarded(0, a, ha);
  tb.join();
  if (!error.empty()) throw std::runtime_error(error);
  ha.insert(ha.end(), hb.begin(), hb.end());
  return ha;
}

void section_ping_pong(const Config& config, const redlock::Endpoint& endpoint, redisContext* admin,
                       Json& out) {
  const int rounds = config.rounds;  // 7 by default, as sections 1-2: one round moves by +-10%
  std::vector<std::int64_t> lib;
  std::vector<std::int64_t> fair;
  std::vector<std::int64_t> raw;
  std::vector<std::int64_t> pings;
  std::vector<std::int64_t> idle_pings;
  std::vector<std::int64_t> deliveries;
  for (int round = 0; round < rounds; ++round) {
    const auto pd = publish_delivery(endpoint, config.quick ? 50 : 300, milliseconds(1));
    deliveries.insert(deliveries.end(), pd.begin(), pd.end());
    const auto p = ping_rtts(admin, config.quick ? 200 : 1000);
    pings.insert(pings.end(), p.begin(), p.end());
    const auto q = ping_rtts(admin, config.quick ? 50 : 300, std::chrono::milliseconds(1));
    idle_pings.insert(idle_pings.end(), q.begin(), q.end());
    const std::string key = redlock::test::key("s3:pingpong" + std::to_string(round));
    // Alternate which goes first, so that neither always follows the same thing.
    std::vector<std::int64_t> r;
    std::vector<std::int64_t> l;
    std::vector<std::int64_t> f;
    if (round % 2 == 0) {
      r = ping_pong<RawWaiter>(endpoint, key + ":raw", config.seconds);
      l = ping_pong<LibWaiter<false>>(endpoint, key + ":lib", config.seconds);
      f = ping_pong<LibWaiter<true>>(endpoint, key + ":fair", config.seconds);
    } else {
      f = ping_pong<LibWaiter<true>>(endpoint, key + ":fair", config.seconds);
      l = ping_pong<LibWaiter<false>>(endpoint, key + ":lib", config.seconds);
      r = ping_pong<RawWaiter>(endpoint, key + ":raw", config.seconds);
    }
    raw.insert(raw.end(), r.begin(), r.end());
    lib.insert(lib.end(), l.begin(), l.end());
    fair.insert(fair.end(), f.begin(), f.end());
  }
  const Summary ping = summarize(pings);
  const Summary idle_ping = summarize(idle_pings);
  const Summary delivery = summarize(deliveries);
  const Summary sl = summarize(lib);
  const Summary sf = summarize(fair);
  const Summary sr = summarize(raw);
  Table table({"handoff path", "handoffs", "p50 ms", "p99 ms", "max ms", "p50/PING", "p50/floor"});
  table.row({"library (own Client each, wake_on_release)", std::to_string(sl.count),
             num(sl.p50_ns / 1e6), num(sl.p99_ns / 1e6), num(sl.max_ns / 1e6),
             times(ratio(sl.p50_ns, ping.p50_ns)), times(ratio(sl.p50_ns, sr.p50_ns))});
  table.row({"library, fair mode (hand-over, no acquire round trip)", std::to_string(sf.count),
             num(sf.p50_ns / 1e6), num(sf.p99_ns / 1e6), num(sf.max_ns / 1e6),
             times(ratio(sf.p50_ns, ping.p50_ns)), times(ratio(sf.p50_ns, sr.p50_ns))});
  table.row({"raw floor (subscribed context, SET on message)", std::to_string(sr.count),
             num(sr.p50_ns / 1e6), num(sr.p99_ns / 1e6), num(sr.max_ns / 1e6),
             times(ratio(sr.p50_ns, ping.p50_ns)), "-"});
  table.row({"PING round trip, back to back", std::to_string(ping.count), num(ping.p50_ns / 1e6),
             num(ping.p99_ns / 1e6), num(ping.max_ns / 1e6), "1.00x", "-"});
  table.row({"PING round trip after 1 ms idle", std::to_string(idle_ping.count),
             num(idle_ping.p50_ns / 1e6), num(idle_ping.p99_ns / 1e6), num(idle_ping.max_ns / 1e6),
             times(ratio(idle_ping.p50_ns, ping.p50_ns)), "-"});
  table.row({"PUBLISH -> message read, raw, after 1 ms idle", std::to_string(delivery.count),
             num(delivery.p50_ns / 1e6), num(delivery.p99_ns / 1e6), num(delivery.max_ns / 1e6),
             times(ratio(delivery.p50_ns, ping.p50_ns)), "-"});
  std::cout
      << "\n  Handoff path alone: 2 workers strictly alternating (the waiter is blocked before "
         "the release), hold 1 ms, "
      << rounds << " interleaved rounds\n";
  table.print(std::cout);
  std::cout << "  target: library handoff p50 within 3x PING p50 -> "
            << (ratio(sl.p50_ns, ping.p50_ns) <= 3.0 ? "met" : "MISSED") << " ("
            << times(ratio(sl.p50_ns, ping.p50_ns)) << " back-to-back PING, "
            << times(ratio(sl.p50_ns, idle_ping.p50_ns)) << " PING after 1 ms idle); fair mode -> "
            << (ratio(sf.p50_ns, ping.p50_ns) <= 3.0 ? "met" : "MISSED") << " ("
            << times(ratio(sf.p50_ns, ping.p50_ns)) << " back-to-back PING, "
            << times(ratio(sf.p50_ns, idle_ping.p50_ns)) << " PING after 1 ms idle)\n";

  auto summary = [](const Summary& s) {
    Json j = Json::object();
    j.set("count", s.count);
    j.set("p50_ms", s.p50_ns / 1e6);
    j.set("p99_ms", s.p99_ns / 1e6);
    j.set("max_ms", s.max_ns / 1e6);
    return j;
  };
  out = Json::object();
  out.set("what", "2 workers strictly alternating, hold 1 ms: release -> notify -> acquire");
  out.set("rounds", rounds);
  out.set("library", summary(sl));
  out.set("library_fair", summary(sf));
  out.set("library_fair_p50_over_ping_p50", ratio(sf.p50_ns, ping.p50_ns));
  out.set("library_fair_p50_over_idle_ping_p50", ratio(sf.p50_ns, idle_ping.p50_ns));
  out.set("raw_floor", summary(sr));
  out.set("ping", summary(ping));
  out.set("ping_after_1ms_idle", summary(idle_ping));
  out.set("publish_delivery_after_1ms_idle", summary(delivery));
  out.set("library_p50_over_idle_ping_p50", ratio(sl.p50_ns, idle_ping.p50_ns));
  out.set("library_p50_over_ping_p50", ratio(sl.p50_ns, ping.p50_ns));
  out.set("raw_p50_over_ping_p50", ratio(sr.p50_ns, ping.p50_ns));
  out.set("library_p50_over_raw_p50", ratio(sl.p50_ns, sr.p50_ns));
}

}  // namespace

void section_contended(const Config& config, Report& report) {
  const long long retry_ms = redlock::LockOptions{}.retry_delay.count();
  std::cout << "\n[3] Contention: " << config.workers
            << " workers, each its own Lock on one key, loop lock() / hold / unlock(); ttl "
            << kContendedTtl.count() << " ms, retry_delay " << retry_ms
            << " ms (library default, both modes)\n";
  std::cout.flush();
  if (config.workers > kMaxWorkers) throw std::invalid_argument("too many workers");
  redlock::test::ServerGroup group(3);  // a Lock uses the first; the Redlock row all three
  std::vector<redlock::Endpoint> endpoints;
  for (std::size_t i = 0; i < group.size(); ++i)
    endpoints.push_back(endpoint_of(group[i], config.timeout));
  const redlock::Endpoint& endpoint = endpoints.front();
  RawContext admin = raw_connect(endpoint);

  Table table({"workers", "hold", "mode", "acq/s", "wait p50 ms", "p99 ms", "max ms",
               "acq/worker min-max", "handoffs", "handoff p50 ms", "p99 ms", "PING p50 ms",
               "p50/PING", "cmds/acq", "client commands per acquisition"});
  Json runs = Json::array();
  std::vector<std::string> target;
  std::vector<std::string> fairness;
  int index = 0;
  // wake: wake_on_release (the default); fair: fair mode; poll: wake_on_release off; the last
  // run is a Redlock(3) with the default options, across processes.
  std::vector<Spec> specs;
  for (const bool processes : {false, true}) {
    for (const int hold : {0, 1}) {
      for (const char* mode : {"wake", "fair", "poll"}) {
        const std::string m = mode;
        specs.push_back(Spec{processes, hold, m != "poll", m == "fair", false});
      }
    }
  }
  specs.push_back(Spec{true, 1, true, false, true});
  for (const Spec& spec : specs) {
    const bool processes = spec.processes;
    const int hold = spec.hold_ms;
    const bool wake = spec.wake;
    const std::string m = spec.fair ? "fair" : wake ? "wake" : "poll";
    const std::string mode_label = spec.redlock ? "wake, Redlock(3)" : m;
    const std::string label = fmt::format("{} {}, hold {} ms, {}", config.workers,
                                          processes ? "processes" : "threads", hold, mode_label);
    Outcome o;
    try {
      o = run_one(config, endpoints, admin.get(), spec,
                  redlock::test::key("s3:run" + std::to_string(index++)));
    } catch (const std::exception& e) {
      o.error = e.what();
    }
    if (!o.error.empty()) report.errors.push_back("section 3: " + label + ": " + o.error);
    const double rate = o.seconds > 0 ? static_cast<double>(o.acquisitions) / o.seconds : 0;
    const double over_ping = ratio(o.handoff.p50_ns, o.ping.p50_ns);
    const double acq = static_cast<double>(std::max<std::uint64_t>(o.acquisitions, 1));
    table.row({std::to_string(config.workers) + (processes ? " proc" : " thr"),
               std::to_string(hold) + " ms", spec.redlock ? "wake R3" : m, num(rate),
               num(o.wait.p50_ns / 1e6), num(o.wait.p99_ns / 1e6), num(o.wait_max_ns / 1e6),
               std::to_string(o.min_per_worker) + "-" + std::to_string(o.max_per_worker),
               num(100.0 * static_cast<double>(o.handoffs) / acq) + "%",
               num(o.handoff.p50_ns / 1e6), num(o.handoff.p99_ns / 1e6), num(o.ping.p50_ns / 1e6),
               times(over_ping), num(o.client_commands), breakdown(o)});
    if (wake) {
      target.push_back(fmt::format("{}: handoff p50 {} = {} PING p50 -> {}", label,
                                   num(o.handoff.p50_ns / 1e6) + " ms", times(over_ping),
                                   o.handoff.count == 0 ? "no handoffs"
                                   : over_ping <= 3.0   ? "within 3x"
                                                        : "MISSED (> 3x)"));
    }
    const double share =
        ratio(static_cast<double>(o.min_per_worker), static_cast<double>(o.max_per_worker));
    if (hold == 1) {
      fairness.push_back(fmt::format("{}: min/max {} , max wait {} ms -> {}", label, num(share),
                                     num(o.wait_max_ns / 1e6),
                                     share >= 0.5 && o.wait_max_ns < 50e6 ? "met" : "MISSED"));
    }
    Json j = Json::object();
    j.set("mode", processes ? "processes" : "threads");
    j.set("workers", config.workers);
    j.set("hold_ms", hold);
    j.set("wake_on_release", wake);
    j.set("fair", spec.fair);
    j.set("nodes", spec.redlock ? 3 : 1);
    j.set("min_over_max_per_worker", share);
    j.set("retry_delay_ms", retry_ms);
    j.set("seconds", o.seconds);
    j.set("acquisitions", o.acquisitions);
    j.set("acquisitions_incl_wind_down", o.total);
    j.set("acquisitions_per_s", rate);
    j.set("acquisitions_per_worker_min", o.min_per_worker);
    j.set("acquisitions_per_worker_max", o.max_per_worker);
    j.set("wait_p50_ms", o.wait.p50_ns / 1e6);
    j.set("wait_p99_ms", o.wait.p99_ns / 1e6);
    j.set("wait_max_ms", o.wait.max_ns / 1e6);
    j.set("wait_max_incl_unfinished_ms", o.wait_max_ns / 1e6);
    j.set("handoffs", o.handoffs);
    j.set("handoff_p50_ms", o.handoff.p50_ns / 1e6);
    j.set("handoff_p99_ms", o.handoff.p99_ns / 1e6);
    j.set("handoff_max_ms", o.handoff.max_ns / 1e6);
    j.set("ping_p50_ms", o.ping.p50_ns / 1e6);
    j.set("ping_p99_ms", o.ping.p99_ns / 1e6);
    j.set("handoff_p50_over_ping_p50", over_ping);
    j.set("client_commands_per_acquisition", o.client_commands);
    Json calls = Json::object();
    for (const auto& [name, c] : o.calls) calls.set(name, c);
    j.set("commandstats_delta", std::move(calls));
    if (!o.error.empty()) j.set("error", o.error);
    runs.push(std::move(j));
  }
  table.print(std::cout);
  std::cout
      << "  thr: threads of one process sharing one Client; proc: processes, one Client each. "
         "wait = lock() call to return (max includes waits unfinished at the end);\n  handoff = "
         "holder calls unlock() -> another worker's "
         "lock() returns (CLOCK_MONOTONIC); handoffs = share of acquisitions that changed "
         "owner;\n  cmds/acq = client-sent commands (INFO commandstats delta, commands run "
         "inside scripts excluded) per acquisition\n  mode: wake = wake_on_release (default), "
         "fair = LockOptions::fair (FIFO queue, hand-over), poll = wake_on_release off, wake R3 = "
         "a Redlock over 3 servers (cmds/acq: the first server's)\n"
         "  target (wake, fair): handoff p50 within 3x PING p50:\n";
  for (const auto& t : target) std::cout << "    " << t << "\n";
  std::cout << "  target (1 ms holds): acquisitions per worker min/max >= 0.5, max wait < 50 ms:\n";
  for (const auto& t : fairness) std::cout << "    " << t << "\n";

  Json ping_pong_json;
  try {
    load_scripts(admin.get());  // the raw waiter's EVALSHA
    section_ping_pong(config, endpoint, admin.get(), ping_pong_json);
  } catch (const std::exception& e) {
    report.errors.push_back(std::string("section 3: ping-pong: ") + e.what());
  }

  Json j = Json::object();
  j.set("what", "N workers contending for one key");
  j.set("ttl_ms", static_cast<long long>(kContendedTtl.count()));
  j.set("retry_delay_ms", retry_ms);
  j.set("runs", std::move(runs));
  j.set("ping_pong", std::move(ping_pong_json));
  report.sections.set("3_contended", std::move(j));
}

std::vector<std::int64_t> handoff_ping_pong(const redlock::Endpoint& endpoint,
                                            const std::string& key, double seconds,
                                            HandoffMode mode) {
  if (mode == HandoffMode::fair) return ping_pong<LibWaiter<true>>(endpoint, key, seconds);
  return ping_pong<LibWaiter<false>>(endpoint, key, seconds);
}

int contended_worker_main(int argc, char** argv) {
  // argv: exe --contended-worker fd id ports timeout_ms key wake fair hold_us retry_ms
  // (ports: one, a Lock; several, comma-separated, a Redlock)
  if (argc != 11) {
    std::cerr << "redlock-bench --contended-worker: internal mode, started by section 3\n";
    return 2;
  }
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) return 1;  // the benchmark already went away
  try {
    const int fd = std::stoi(argv[2]);
    const int id = std::stoi(argv[3]);
    Shared* shm = Region::map(fd);
    if (id < 0 || id >= kMaxWorkers) return 2;
    std::vector<redlock::Client> clients;
    const std::string ports = argv[4];
    for (std::size_t at = 0; at < ports.size();) {
      const std::size_t comma = std::min(ports.find(',', at), ports.size());
      redlock::Endpoint endpoint;
      endpoint.host = "127.0.0.1";
      endpoint.port = std::stoi(ports.substr(at, comma - at));
      endpoint.connect_timeout = milliseconds(std::stoll(argv[5]));
      endpoint.command_timeout = endpoint.connect_timeout;
      clients.emplace_back(endpoint);
      at = comma + 1;
    }
    WorkerConfig config;
    config.key = argv[6];
    config.wake = std::string(argv[7]) == "1";
    config.fair = std::string(argv[8]) == "1";
    config.hold_us = std::stoll(argv[9]);
    config.retry_ms = std::stoll(argv[10]);
    worker(*shm, id, clients, config);
    return shm->workers[id].state.load() == 2 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "redlock-bench worker: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace bench
