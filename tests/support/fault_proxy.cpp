// tests/support/fault_proxy.cpp: the FaultProxy event loop (see fault_proxy.hpp).
//
// Threading: the setters only touch atomics (and, for reset_all(), a mutex/condvar hand-shake)
// and then poke the self-pipe so the loop re-reads them at once. Everything else (sockets, pairs,
// queues) belongs to the loop thread alone, until the destructor joins it.
#include "support/fault_proxy.hpp"

#include <arpa/inet.h>    // inet_pton
#include <fcntl.h>        // fcntl, O_NONBLOCK, O_CLOEXEC
#include <netinet/in.h>   // sockaddr_in, sockaddr_in6, IPPROTO_TCP
#include <netinet/tcp.h>  // TCP_NODELAY
#include <poll.h>         // poll
#include <sys/socket.h>   // socket, accept, send, recv, setsockopt, shutdown
#include <unistd.h>       // close, pipe, read, write

#include <algorithm>     // std::max, std::min
#include <cerrno>        // errno
#include <cstring>       // std::memcpy
#include <deque>         // std::deque
#include <stdexcept>     // std::invalid_argument
#include <system_error>  // std::system_error
#include <utility>       // std::move

namespace redlock::test {

namespace {

using Clock = std::chrono::steady_clock;

// Bytes read per recv() call.
constexpr std::size_t kReadSize = 64 * 1024;
// Stop reading from a side while this much of its data waits to be forwarded (backpressure).
constexpr std::size_t kMaxQueuedBytes = 4 * 1024 * 1024;
// How long to stop accepting after accept() ran out of descriptors or memory.
constexpr std::chrono::milliseconds kAcceptBackoff{100};

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void close_fd(int& fd) noexcept {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

// Makes the next close() send RST instead of FIN.
void arm_reset(int fd) noexcept {
  if (fd < 0) return;
  linger lg{};
  lg.l_onoff = 1;
  lg.l_linger = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
}

void set_nodelay(int fd) noexcept {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool set_nonblocking_cloexec(int fd) noexcept {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return false;
  const int fdfl = ::fcntl(fd, F_GETFD);
  return fdfl >= 0 && ::fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) >= 0;
}

bool would_block(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

// Milliseconds from now until t, rounded up so poll() never wakes before t (no spinning).
int ms_until(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t - now).count();
  const auto ms = (ns + 999'999) / 1'000'000;
  return static_cast<int>(std::min<std::int64_t>(ms, 60'000));
}

}  // namespace

// A snapshot of the fault switches, taken once per loop iteration after poll() returns.
struct FaultProxy::Faults {
  std::chrono::milliseconds delay{0};
  bool blackhole{false};
  bool drop_after_request{false};
  bool refuse{false};
  bool half_open{false};
};

// One accepted client connection and its upstream connection.
struct FaultProxy::Pair {
  struct Chunk {
    Clock::time_point due;  // not forwarded before this
    std::string data;
    std::size_t sent{0};  // bytes of data already written
  };
  // One direction of traffic.
  struct Flow {
    std::deque<Chunk> queue;
    std::size_t queued_bytes{0};
    bool blocked{false};  // the last send() hit EAGAIN: wait for POLLOUT on the destination
    bool eof{false};      // the source sent FIN: close the pair once the queue is flushed
  };

  int client_fd{-1};
  int server_fd{-1};
  bool connecting{true};  // non-blocking connect() to the target still in progress
  bool draining{false};   // drop_after_request fired: client closed, server reply discarded
  bool dead{false};       // closed; removed from pairs_ at the next loop iteration
  bool orphan{false};     // half_open: the server side ended, the client side is left open
  Flow up;                // client -> server
  Flow down;              // server -> client
};

FaultProxy::FaultProxy(std::string target_host, int target_port)
    : target_host_(std::move(target_host)), target_port_(target_port), buffer_(kReadSize) {
  if (target_port_ < 1 || target_port_ > 65535) {
    throw std::invalid_argument("FaultProxy: target port out of range: " +
                                std::to_string(target_port_));
  }
  const std::string host = target_host_ == "localhost" ? "127.0.0.1" : target_host_;
  sockaddr_in v4{};
  sockaddr_in6 v6{};
  if (::inet_pton(AF_INET, host.c_str(), &v4.sin_addr) == 1) {
    if ((ntohl(v4.sin_addr.s_addr) >> 24) != 127) {
      throw std::invalid_argument("FaultProxy: target is not a loopback address: " + target_host_);
    }
    v4.sin_family = AF_INET;
    v4.sin_port = htons(static_cast<std::uint16_t>(target_port_));
    std::memcpy(&target_addr_, &v4, sizeof(v4));
    target_addr_len_ = sizeof(v4);
  } else if (::inet_pton(AF_INET6, host.c_str(), &v6.sin6_addr) == 1 &&
             IN6_IS_ADDR_LOOPBACK(&v6.sin6_addr)) {
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(static_cast<std::uint16_t>(target_port_));
    std::memcpy(&target_addr_, &v6, sizeof(v6));
    target_addr_len_ = sizeof(v6);
  } else {
    throw std::invalid_argument("FaultProxy: target is not a loopback address: " + target_host_);
  }

  try {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd_ < 0) throw_errno("FaultProxy: socket");
    if (!set_nonblocking_cloexec(listen_fd_)) throw_errno("FaultProxy: fcntl");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) < 0) {
      throw_errno("FaultProxy: bind");
    }
    if (::listen(listen_fd_, 128) < 0) throw_errno("FaultProxy: listen");
    socklen_t len = sizeof(addr);
    if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
      throw_errno("FaultProxy: getsockname");
    }
    port_ = ntohs(addr.sin_port);

    int fds[2];
    if (::pipe(fds) < 0) throw_errno("FaultProxy: pipe");
    wake_read_fd_ = fds[0];
    wake_write_fd_ = fds[1];
    if (!set_nonblocking_cloexec(wake_read_fd_) || !set_nonblocking_cloexec(wake_write_fd_)) {
      throw_errno("FaultProxy: fcntl");
    }

    thread_ = std::thread([this] { run(); });
  } catch (...) {
    close_fd(listen_fd_);
    close_fd(wake_read_fd_);
    close_fd(wake_write_fd_);
    throw;
  }
}

FaultProxy::~FaultProxy() {
  stop_.store(true);
  wake();
  if (thread_.joinable()) {
    try {
      thread_.join();
    } catch (...) {
      // join() only throws on misuse (e.g. joining itself); nothing sensible to do here.
    }
  }
  close_all(false);  // no-op unless the loop died early
  close_fd(listen_fd_);
  close_fd(wake_read_fd_);
  close_fd(wake_write_fd_);
}

int FaultProxy::port() const { return port_; }
const std::string& FaultProxy::target_host() const { return target_host_; }
int FaultProxy::target_port() const { return target_port_; }

void FaultProxy::set_delay(std::chrono::milliseconds d) {
  delay_ms_.store(std::max<std::int64_t>(d.count(), 0));
  wake();
}

void FaultProxy::set_blackhole(bool on) {
  blackhole_.store(on);
  wake();
}

void FaultProxy::set_drop_after_request(bool on) {
  drop_after_request_.store(on);
  wake();
}

void FaultProxy::drop_next_request() {
  drops_left_.store(1);
  wake();
}

void FaultProxy::set_rewrite(std::string from, std::string to) {
  if (from.size() != to.size()) {
    throw std::invalid_argument("FaultProxy::set_rewrite: from and to must have the same length");
  }
  std::lock_guard<std::mutex> guard(mutex_);
  rewrite_from_ = std::move(from);
  rewrite_to_ = std::move(to);
}

void FaultProxy::set_blackhole_on(std::string pattern) {
  std::lock_guard<std::mutex> guard(mutex_);
  blackhole_on_ = std::move(pattern);
}

void FaultProxy::set_refuse(bool on) {
  refuse_.store(on);
  wake();
}

void FaultProxy::set_half_open(bool on) {
  half_open_.store(on);
  wake();
}

void FaultProxy::reset_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  const std::uint64_t ticket = ++resets_requested_;
  wake();
  cv_.wait(lock, [&] { return resets_done_ >= ticket || loop_exited_; });
}

void FaultProxy::clear() {
  delay_ms_.store(0);
  blackhole_.store(false);
  drop_after_request_.store(false);
  drops_left_.store(0);
  refuse_.store(false);
  half_open_.store(false);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    blackhole_on_.clear();
  }
  wake();
}

bool FaultProxy::blackholed() const { return blackhole_.load(); }

std::size_t FaultProxy::connections() const { return connections_.load(); }

std::uint64_t FaultProxy::bytes_forwarded() const { return bytes_forwarded_.load(); }

void FaultProxy::wake() noexcept {
  const char byte = 1;
  // A full pipe already guarantees a wake-up, so EAGAIN is fine to ignore.
  [[maybe_unused]] const auto n = ::write(wake_write_fd_, &byte, 1);
}

void FaultProxy::drain_wake_pipe() noexcept {
  char sink[64];
  while (::read(wake_read_fd_, sink, sizeof(sink)) > 0) {
  }
}

FaultProxy::Faults FaultProxy::load_faults() const {
  Faults f;
  f.delay = std::chrono::milliseconds(delay_ms_.load());
  f.blackhole = blackhole_.load();
  f.drop_after_request = drop_after_request_.load();
  f.refuse = refuse_.load();
  f.half_open = half_open_.load();
  return f;
}

void FaultProxy::run() noexcept {
  try {
    loop();
  } catch (...) {
    // Only allocation failure can get here; the proxy just stops proxying.
  }
  close_all(false);
  std::lock_guard<std::mutex> lock(mutex_);
  loop_exited_ = true;
  cv_.notify_all();
}

void FaultProxy::loop() {
  std::vector<pollfd> fds;
  std::vector<Pair*> owners;  // owners[i]: the pair fds[i] belongs to (nullptr: pipe/listener)
  Faults faults = load_faults();
  while (!stop_.load()) {
    service_resets();

    // Forget closed pairs.
    pairs_.erase(std::remove_if(pairs_.begin(), pairs_.end(),
                                [](const std::unique_ptr<Pair>& p) { return p->dead; }),
                 pairs_.end());

    // Build the poll set and the timeout (time to the next due chunk; -1: none).
    const Clock::time_point now = Clock::now();
    int timeout = -1;
    auto consider = [&timeout](int ms) { timeout = timeout < 0 ? ms : std::min(timeout, ms); };
    fds.clear();
    owners.clear();
    fds.push_back({wake_read_fd_, POLLIN, 0});
    owners.push_back(nullptr);
    if (now >= accept_paused_until_) {
      fds.push_back({listen_fd_, POLLIN, 0});
      owners.push_back(nullptr);
    } else {
      consider(ms_until(accept_paused_until_, now));
    }
    for (const auto& owned : pairs_) {
      Pair& p = *owned;
      if (p.client_fd >= 0) {
        short events = 0;
        if (!p.up.eof && p.up.queued_bytes < kMaxQueuedBytes) events |= POLLIN;
        if (p.down.blocked && !faults.blackhole) events |= POLLOUT;
        fds.push_back({p.client_fd, events, 0});
        owners.push_back(&p);
      }
      if (p.server_fd >= 0) {
        short events = 0;
        if (p.connecting) {
          events = POLLOUT;
        } else {
          if (!p.down.eof && p.down.queued_bytes < kMaxQueuedBytes) events |= POLLIN;
          if (p.up.blocked && !faults.blackhole) events |= POLLOUT;
        }
        fds.push_back({p.server_fd, events, 0});
        owners.push_back(&p);
      }
      if (faults.blackhole) continue;  // nothing is released while blackholed
      if (!p.connecting && !p.up.blocked && !p.up.queue.empty()) {
        consider(ms_until(p.up.queue.front().due, now));
      }
      if (p.client_fd >= 0 && !p.down.blocked && !p.down.queue.empty()) {
        consider(ms_until(p.down.queue.front().due, now));
      }
    }

    const int ready = ::poll(fds.data(), static_cast<nfds_t>(fds.size()), timeout);
    if (ready < 0 && errno != EINTR) throw_errno("FaultProxy: poll");
    if (stop_.load()) break;
    // Read the switches only now, so data read after a setter returned sees the new value.
    faults = load_faults();
    if (ready <= 0) {
      for (const auto& owned : pairs_) pump(*owned, faults);
      continue;
    }

    if (fds[0].revents != 0) drain_wake_pipe();
    if (fds.size() > 1 && owners[1] == nullptr && fds[1].revents != 0) {
      accept_pending(faults, Clock::now());
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      Pair* p = owners[i];
      const short rev = fds[i].revents;
      if (p == nullptr || rev == 0 || p->dead) continue;
      const bool is_client = fds[i].fd == p->client_fd;
      if (!is_client && fds[i].fd != p->server_fd) continue;  // fd closed and reused meanwhile
      if (!is_client && p->connecting) {
        finish_connect(*p);
        continue;
      }
      if (rev & POLLERR) {  // reset by peer or similar: nothing more can be delivered
        if (is_client || !orphan(*p, faults)) close_pair(*p, false);
        continue;
      }
      if (rev & (POLLIN | POLLHUP)) read_side(*p, is_client, faults);
      if (p->dead || (!is_client && p->orphan)) continue;
      if (rev & POLLHUP) {  // both directions gone (e.g. RST): nothing more can be delivered
        close_pair(*p, false);
        continue;
      }
      if (rev & POLLOUT) (is_client ? p->down : p->up).blocked = false;
    }
    for (const auto& owned : pairs_) pump(*owned, faults);
  }
}

void FaultProxy::service_resets() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (resets_done_ == resets_requested_) return;
  // Connections the kernel completed but we have not accepted yet count as current too.
  for (;;) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) break;
    arm_reset(fd);
    ::close(fd);
  }
  close_all(true);
  resets_done_ = resets_requested_;
  cv_.notify_all();
}

void FaultProxy::accept_pending(const Faults& faults, Clock::time_point now) {
  for (;;) {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      const int err = errno;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        accept_paused_until_ = now + kAcceptBackoff;  // avoid spinning on a readable listener
      }
      return;  // EAGAIN (all accepted), ECONNABORTED, ...: try again on the next POLLIN
    }
    if (faults.refuse || !set_nonblocking_cloexec(fd)) {
      ::close(fd);
      continue;
    }
    set_nodelay(fd);
    auto pair = std::make_unique<Pair>();
    pair->client_fd = fd;
    connections_.fetch_add(1);
    Pair& p = *pair;
    pairs_.push_back(std::move(pair));
    connect_upstream(p);
  }
}

void FaultProxy::connect_upstream(Pair& p) {
  p.server_fd = ::socket(target_addr_.ss_family, SOCK_STREAM, 0);
  if (p.server_fd < 0 || !set_nonblocking_cloexec(p.server_fd)) {
    close_pair(p, false);
    return;
  }
  set_nodelay(p.server_fd);
  if (::connect(p.server_fd, reinterpret_cast<const sockaddr*>(&target_addr_), target_addr_len_) ==
      0) {
    p.connecting = false;
  } else if (errno != EINPROGRESS && errno != EINTR) {
    close_pair(p, false);  // e.g. ECONNREFUSED: the client sees EOF
  }
}

void FaultProxy::finish_connect(Pair& p) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(p.server_fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
    close_pair(p, false);
    return;
  }
  p.connecting = false;
}

void FaultProxy::read_side(Pair& p, bool from_client, const Faults& faults) {
  const int fd = from_client ? p.client_fd : p.server_fd;
  Pair::Flow& flow = from_client ? p.up : p.down;
  const ssize_t n = ::recv(fd, buffer_.data(), buffer_.size(), 0);
  const bool ended = n == 0 || (n < 0 && !would_block(errno));
  if (ended && !from_client && orphan(p, faults)) return;
  if (n > 0 && p.orphan && !faults.blackhole) {
    close_pair(p, true);  // healed: the server has no such connection any more
    return;
  }
  if (n > 0) {
    const bool discard = faults.blackhole || (p.draining && !from_client);
    if (discard) return;
    Clock::time_point due = Clock::now() + faults.delay;
    if (!flow.queue.empty()) due = std::max(due, flow.queue.back().due);  // keep order
    std::string data(buffer_.data(), static_cast<std::size_t>(n));
    if (from_client) {
      std::lock_guard<std::mutex> guard(mutex_);
      if (!blackhole_on_.empty() && data.find(blackhole_on_) != std::string::npos) {
        blackhole_.store(true);
        return;
      }
      for (std::size_t at = rewrite_from_.empty() ? std::string::npos : data.find(rewrite_from_);
           at != std::string::npos; at = data.find(rewrite_from_, at + rewrite_to_.size())) {
        data.replace(at, rewrite_to_.size(), rewrite_to_);
      }
    }
    flow.queue.push_back(Pair::Chunk{due, std::move(data)});
    flow.queued_bytes += static_cast<std::size_t>(n);
  } else if (n == 0) {
    flow.eof = true;  // pump() closes the pair once what this side sent is flushed
  } else if (!would_block(errno)) {
    close_pair(p, false);
  }
}

void FaultProxy::pump(Pair& p, const Faults& faults) {
  if (p.dead) return;
  if (!faults.blackhole) {
    if (!p.connecting && flush(p, true) && !p.draining && p.up.queue.empty()) {
      int left = drops_left_.load();
      while (left > 0 && !drops_left_.compare_exchange_weak(left, left - 1)) {
      }
      if (faults.drop_after_request || left > 0) begin_drain(p);
    }
    if (p.dead) return;
    if (p.client_fd >= 0) flush(p, false);
    if (p.dead) return;
  }
  // EOF from a side: close the pair once that side's data is out (or will never go out).
  if (p.up.eof && (p.up.queue.empty() || faults.blackhole)) {
    close_pair(p, false);
  } else if (p.down.eof && (p.draining || p.down.queue.empty() || faults.blackhole)) {
    close_pair(p, false);
  }
}

// Sends the due chunks of one direction. Returns true if at least one chunk was completed.
bool FaultProxy::flush(Pair& p, bool upstream) {
  Pair::Flow& flow = upstream ? p.up : p.down;
  const int fd = upstream ? p.server_fd : p.client_fd;
  if (flow.blocked || flow.queue.empty()) return false;
  bool completed = false;
  const Clock::time_point now = Clock::now();
  while (!flow.queue.empty() && flow.queue.front().due <= now) {
    Pair::Chunk& chunk = flow.queue.front();
    const ssize_t n =
        ::send(fd, chunk.data.data() + chunk.sent, chunk.data.size() - chunk.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        flow.blocked = true;
        return completed;
      }
      close_pair(p, false);  // EPIPE, ECONNRESET, ...
      return completed;
    }
    bytes_forwarded_.fetch_add(static_cast<std::uint64_t>(n));
    chunk.sent += static_cast<std::size_t>(n);
    flow.queued_bytes -= static_cast<std::size_t>(n);
    if (chunk.sent < chunk.data.size()) {
      flow.blocked = true;  // short write: the socket buffer is full
      return completed;
    }
    flow.queue.pop_front();
    completed = true;
  }
  return completed;
}

void FaultProxy::begin_drain(Pair& p) {
  close_fd(p.client_fd);
  connections_.fetch_sub(1);
  p.down.queue.clear();
  p.down.queued_bytes = 0;
  p.down.blocked = false;
  p.up.eof = false;
  p.draining = true;
  // FIN to the server after the request: it still executes the request, replies (discarded
  // here), sees EOF and closes, which then closes the rest of this pair.
  ::shutdown(p.server_fd, SHUT_WR);
}

bool FaultProxy::orphan(Pair& p, const Faults& faults) noexcept {
  if (!faults.blackhole || !faults.half_open) return false;
  close_fd(p.server_fd);
  p.orphan = true;
  p.up = Pair::Flow{};
  p.down = Pair::Flow{};
  return true;
}

void FaultProxy::close_pair(Pair& p, bool with_reset) noexcept {
  if (p.dead) return;
  if (with_reset) {
    arm_reset(p.client_fd);
    arm_reset(p.server_fd);
  }
  if (p.client_fd >= 0) connections_.fetch_sub(1);
  close_fd(p.client_fd);
  close_fd(p.server_fd);
  p.up.queue.clear();
  p.down.queue.clear();
  p.up.queued_bytes = 0;
  p.down.queued_bytes = 0;
  p.dead = true;
}

void FaultProxy::close_all(bool with_reset) noexcept {
  for (const auto& p : pairs_) close_pair(*p, with_reset);
}

}  // namespace redlock::test
