// tests/support/fault_proxy.hpp: a fault-injecting TCP proxy for the redlock test suite.
//
// A FaultProxy sits between a client and a redis-server on loopback. It runs in-process on its
// own thread (a poll() loop over non-blocking sockets) and lets a test break the network at run
// time: delay every chunk, swallow traffic, cut the connection right after a request reached the
// server, refuse new connections, or reset everything with RST. It is how the tests reproduce
// slow, hung, flaky and dead Redis instances without root, iptables or tc.
//
//   redlock::test::FaultProxy proxy("127.0.0.1", server.port());
//   redlock::Endpoint ep;
//   ep.port = proxy.port();              // the client talks to the proxy
//   proxy.set_delay(std::chrono::milliseconds(100));   // each direction: +100 ms
//   proxy.set_blackhole(true);           // server looks hung: commands time out
//   proxy.clear();                       // healthy again (delay 0, every fault off)
//   proxy.reset_all();                   // every open connection gets an RST
//
// Faults, all independent and switchable at any time from any thread:
//   delay              every chunk read in either direction is forwarded d after it was read,
//                      order kept (a chunk is never released before the one queued ahead of it).
//   blackhole          connections are accepted and read, nothing is forwarded either way. Data
//                      read while it is on is discarded; data queued (delayed) before it was
//                      turned on is held back until it is turned off.
//   drop_after_request client->server data is forwarded, then the client side is closed (FIN)
//                      before any reply is forwarded. The server side is half-closed and its
//                      replies are read and discarded, so the server does execute the request.
//   rewrite            client->server bytes: every occurrence of `from` inside one chunk read is
//                      replaced by `to` (same length), e.g. to make a server refuse an argument
//                      it would accept ("GET" -> "GXT" plays a Redis that lacks SET ... GET).
//   refuse             new connections are closed right after accept(): the client's TCP connect
//                      succeeds but its first read sees EOF (or a write sees a reset).
//   half_open          with the blackhole on, a server side that ends (EOF or error: a CLIENT
//                      KILL, the server's tcp-keepalive) leaves the client side open, half-open,
//                      as behind a partition: its data is discarded, and once the blackhole is
//                      off the first bytes it sends are answered with RST (as the server's
//                      kernel answers a segment of a connection it no longer has).
//   reset_all()        one-shot: every live connection pair (and any connection still waiting in
//                      the accept queue) is closed with RST (SO_LINGER {1, 0}). Synchronous: when
//                      it returns the resets have been sent.
// EOF or an error on either side closes the pair (after flushing what that side sent, unless
// blackholed; see half_open). A failed upstream connect closes the client connection.
//
// Only loopback addresses are accepted as the target ("localhost", 127.0.0.0/8, "::1"); the proxy
// itself listens on 127.0.0.1 on an ephemeral port. All member functions are thread-safe.
#ifndef REDLOCK_TESTS_SUPPORT_FAULT_PROXY_HPP
#define REDLOCK_TESTS_SUPPORT_FAULT_PROXY_HPP

#include <sys/socket.h>  // sockaddr_storage, socklen_t

#include <atomic>              // std::atomic
#include <chrono>              // std::chrono::milliseconds, steady_clock
#include <condition_variable>  // std::condition_variable
#include <cstddef>             // std::size_t
#include <cstdint>             // std::uint64_t
#include <memory>              // std::unique_ptr
#include <mutex>               // std::mutex
#include <string>              // std::string
#include <thread>              // std::thread
#include <vector>              // std::vector

namespace redlock::test {

class FaultProxy {
 public:
  // Listens on 127.0.0.1 on an ephemeral port and starts the proxy thread. Every accepted
  // connection gets its own upstream connection to target_host:target_port.
  // Throws std::invalid_argument if target_host is not a loopback address or the port is out of
  // 1..65535, std::system_error if a socket, the wake-up pipe or the thread cannot be created.
  FaultProxy(std::string target_host, int target_port);
  // Stops the thread and closes every socket (pairs are closed with FIN). Never throws.
  ~FaultProxy();

  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // The port (on 127.0.0.1) clients connect to.
  int port() const;
  // Where the proxy forwards to.
  const std::string& target_host() const;
  int target_port() const;

  // Every chunk, in either direction, is forwarded d after it was read (order kept). Applies to
  // chunks read after the call; 0 (the default) forwards at once. Negative values count as 0.
  void set_delay(std::chrono::milliseconds d);
  // Accept and read, forward nothing either way; new connections are accepted but stall.
  void set_blackhole(bool on);
  // Forward client->server data, then close the client side before any reply is forwarded.
  void set_drop_after_request(bool on);
  // The same, once: the next request forwarded (on any connection) has its client side closed.
  void drop_next_request();
  // Rewrites client->server data: each `from` found within one chunk becomes `to`. Both must
  // have the same length (throws std::invalid_argument otherwise); an empty `from` turns it off.
  void set_rewrite(std::string from, std::string to);
  // Black-holes everything (as set_blackhole(true)) from the moment a client->server chunk
  // containing `pattern` is read; that chunk is not forwarded: the server stops answering just
  // as that request would reach it. An empty `pattern` turns it off.
  void set_blackhole_on(std::string pattern);
  // Close new connections immediately after accept().
  void set_refuse(bool on);
  // While blackholed, a server side that ends leaves its client side half-open (see above).
  void set_half_open(bool on);
  // Closes every current connection pair with RST. Returns once that is done.
  void reset_all();
  // Every fault off, delay 0. Held (blackholed) data already queued is then forwarded.
  void clear();

  // Whether everything is black-holed now: set_blackhole(true), or set_blackhole_on()'s pattern
  // was seen (a test counts the proxies a request reached before any of them answered).
  bool blackholed() const;
  // Live client connections (accepted, not refused, not yet closed).
  std::size_t connections() const;
  // Total bytes written to either side since construction (counted just after each send(), so
  // a peer may see data a moment before it is counted).
  std::uint64_t bytes_forwarded() const;

 private:
  struct Pair;
  struct Faults;

  void run() noexcept;
  void loop();
  void wake() noexcept;
  void drain_wake_pipe() noexcept;
  Faults load_faults() const;
  void service_resets();
  void accept_pending(const Faults& faults, std::chrono::steady_clock::time_point now);
  void connect_upstream(Pair& pair);
  void finish_connect(Pair& pair);
  void read_side(Pair& pair, bool from_client, const Faults& faults);
  void pump(Pair& pair, const Faults& faults);
  bool flush(Pair& pair, bool upstream);
  void begin_drain(Pair& pair);
  // half_open: closes the server side only; false (nothing done) unless blackholed and on.
  bool orphan(Pair& pair, const Faults& faults) noexcept;
  void close_pair(Pair& pair, bool with_reset) noexcept;
  void close_all(bool with_reset) noexcept;

  const std::string target_host_;
  const int target_port_;
  sockaddr_storage target_addr_{};
  socklen_t target_addr_len_{0};

  int listen_fd_{-1};
  int port_{0};
  int wake_read_fd_{-1};
  int wake_write_fd_{-1};

  // Fault switches (written by any thread, read by the loop).
  std::atomic<std::int64_t> delay_ms_{0};
  std::atomic<bool> blackhole_{false};
  std::atomic<bool> drop_after_request_{false};
  std::atomic<int> drops_left_{0};
  std::atomic<bool> refuse_{false};
  std::atomic<bool> half_open_{false};
  std::atomic<bool> stop_{false};
  std::string rewrite_from_;  // guarded by mutex_
  std::string rewrite_to_;    // guarded by mutex_
  std::string blackhole_on_;  // guarded by mutex_

  std::atomic<std::size_t> connections_{0};
  std::atomic<std::uint64_t> bytes_forwarded_{0};

  // reset_all() hand-shake with the loop.
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t resets_requested_{0};  // guarded by mutex_
  std::uint64_t resets_done_{0};       // guarded by mutex_
  bool loop_exited_{false};            // guarded by mutex_

  // Loop-thread state.
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::vector<char> buffer_;
  std::chrono::steady_clock::time_point accept_paused_until_{};

  std::thread thread_;
};

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_SUPPORT_FAULT_PROXY_HPP
