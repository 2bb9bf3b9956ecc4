// examples/async_service.cpp: a TCP service on asio whose requests take a lock in a coroutine,
// with a timeout, and give up their wait when the client hangs up.
//
//   example_async_service [--redis URI] [--port N] [--self-test]
//
// Each request is one line naming a key; the answer is one line:
//   OK <key> fence <n>     the lock was held for a short critical section, then released
//   BUSY <key>             someone else held it for the whole wait (1 s)
//   ERROR <message>        Redis could not be reached, or the key is not acceptable
// One io_context thread serves every connection: a request waiting for its lock is a suspended
// coroutine, not a blocked thread: waiting requests cost coroutine frames, not threads.
//
// What the async API adds to the blocking one:
//   - co_await redlock::async_try_acquire_for(lock, 1s, use_awaitable) yields an
//     std::optional<redlock::Hold>: empty on timeout; redlock::Error is thrown as by the
//     blocking call;
//   - the wait is cancelled through asio's per-operation cancellation: here the `||` of
//     awaitable operators cancels it when the client hangs up first (bind_cancellation_slot with
//     a cancellation_signal does the same for callback code); a cancelled wait leaves nothing on
//     the server;
//   - a Hold is owned by the coroutine, not by a thread: it may move between threads, and its
//     destructor releases without blocking.
// --self-test starts a throwaway redis-server and plays four clients against the service.
#include <chrono>     // std::chrono
#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint16_t, std::uint64_t
#include <cstdio>     // std::printf, std::fprintf
#include <exception>  // std::exception, std::exception_ptr, std::rethrow_exception
#include <optional>   // std::optional
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string
#include <variant>    // std::variant, std::get

// <redlock/asio.hpp> before any asio header: with clang and libstdc++ it turns on asio 1.22's
// coroutines (use_awaitable), which asio looks for in libc++ only.
#include <redlock/asio.hpp>     // async_try_acquire_for, async_acquire, async_release
#include <redlock/redlock.hpp>  // Client, Lock, Hold, Error

#include <asio.hpp>  // io_context, ip::tcp, co_spawn, use_awaitable, steady_timer, ...
#include <asio/experimental/awaitable_operators.hpp>  // operator||

#include "example_main.hpp"  // main(): --redis URI, --port N, --self-test

namespace {

using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;

constexpr auto kWait = 1s;  // how long a request waits for its lock before answering BUSY

// One request: wait for the key's lock, do the critical section, release, answer.
awaitable<std::string> handle(const redlock::Client& redis, const std::string& key) {
  if (key.empty() || key.size() > 64) co_return "ERROR a key is 1 to 64 bytes\n";
  try {
    // One Lock per request: requests contend through Redis, as separate processes would.
    redlock::LockOptions options;
    options.fencing = true;  // each hold gets a fence, larger than any earlier hold's
    redlock::Lock lock(redis, "examples:async_service:" + key, options);
    std::optional<redlock::Hold> hold =
        co_await redlock::async_try_acquire_for(lock, kWait, use_awaitable);
    if (!hold) co_return "BUSY " + key + "\n";  // contention is a result, not an exception

    // The critical section. It must not block the io_context's thread: wait on a timer.
    asio::steady_timer work(co_await asio::this_coro::executor, 20ms);
    co_await work.async_wait(use_awaitable);

    const std::uint64_t fence = hold->fence();
    co_await redlock::async_release(*hold, use_awaitable);  // false: the lease was lost meanwhile
    co_return "OK " + key + " fence " + std::to_string(fence) + "\n";
  } catch (const redlock::Error& e) {  // no server reachable, a server error, ...
    co_return std::string("ERROR ") + e.what() + "\n";
  }
}

// Completes when the client hangs up. A request the client sends meanwhile (it may pipeline) is
// kept in `input` for the session's next read.
awaitable<void> hang_up(tcp::socket& socket, std::string& input) {
  char chunk[512];
  for (;;) {
    asio::error_code ec;
    const std::size_t n = co_await socket.async_read_some(asio::buffer(chunk),
                                                          asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;  // EOF or a reset: gone (or cancelled, when the request was answered)
    input.append(chunk, n);
  }
}

// One connection: read a line, answer it, until the client hangs up.
awaitable<void> session(tcp::socket socket, const redlock::Client& redis) {
  std::string input;  // bytes read but not yet handled
  for (;;) {
    asio::error_code ec;
    const std::size_t n = co_await asio::async_read_until(
        socket, asio::dynamic_buffer(input, 4096), '\n', asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;  // the client hung up between requests (or sent a line over 4 KiB)
    std::string key = input.substr(0, n - 1);
    input.erase(0, n);
    if (!key.empty() && key.back() == '\r') key.pop_back();  // telnet's line ends
    // Whichever finishes first wins; the other is cancelled. If the client hangs up while the
    // request waits, the wait completes with asio::error::operation_aborted and the library
    // gives back whatever it may have won or queued for.
    std::variant<std::string, std::monostate> done =
        co_await(handle(redis, key) || hang_up(socket, input));
    if (done.index() == 1) {
      std::printf("service: the client asking for '%s' hung up; its wait was cancelled\n",
                  key.c_str());
      co_return;
    }
    co_await asio::async_write(socket, asio::buffer(std::get<0>(done)), use_awaitable);
  }
}

awaitable<void> listen(tcp::acceptor& acceptor, const redlock::Client& redis) {
  for (;;) {
    tcp::socket socket = co_await acceptor.async_accept(use_awaitable);
    asio::co_spawn(acceptor.get_executor(), session(std::move(socket), redis), asio::detached);
  }
}

// --self-test: a client that sends `key` and prints the answer, or hangs up after `patience`.
awaitable<void> client(tcp::endpoint service, std::string key,
                       std::chrono::milliseconds patience = 10s) {
  tcp::socket socket(co_await asio::this_coro::executor);
  co_await socket.async_connect(service, use_awaitable);
  co_await asio::async_write(socket, asio::buffer(key + "\n"), use_awaitable);
  std::string answer;
  asio::steady_timer give_up(socket.get_executor(), patience);
  auto got =
      co_await(asio::async_read_until(socket, asio::dynamic_buffer(answer), '\n', use_awaitable) ||
               give_up.async_wait(use_awaitable));
  if (got.index() == 1) {
    std::printf("client: no answer for '%s' after %lld ms; hanging up\n", key.c_str(),
                static_cast<long long>(patience.count()));
  } else {
    std::printf("client: %s", answer.c_str());
  }
}

// --self-test: three clients at once on one key, served one after another; then, while another
// holder keeps the key, one client hangs up mid-wait and one waits its whole second: BUSY.
awaitable<void> self_test(tcp::endpoint service, const redlock::Client& redis) {
  co_await(client(service, "report") && client(service, "report") && client(service, "report"));
  redlock::Lock other(redis, "examples:async_service:report");  // another process, say
  redlock::Hold held = co_await redlock::async_acquire(other, use_awaitable);
  co_await(client(service, "report", 300ms) && client(service, "report"));
  co_await redlock::async_release(held, use_awaitable);
  co_await client(service, "report");
  // A cancelled wait leaves nothing behind: no lock key, no entry in the fair queue.
  const std::string key = "examples:async_service:report";
  const redlock::Reply left =
      redis.command({"EXISTS", key, "{" + key + "}:waiters", "{" + key + "}:waiters:info"});
  std::printf("lock keys and queue entries left on the server: %lld\n",
              static_cast<long long>(left.integer()));
  if (left.integer() != 0) throw std::runtime_error("a cancelled wait left something behind");
}

int run(const redlock::Endpoint& endpoint, std::uint64_t port, bool self_test_mode) {
  const redlock::Client redis(endpoint);
  asio::io_context io;
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"),
                              static_cast<std::uint16_t>(self_test_mode ? 0 : port)});
  asio::co_spawn(io, listen(acceptor, redis), asio::detached);
  int status = 0;
  asio::signal_set stop(io, SIGINT, SIGTERM);  // Ctrl-C ends the service
  stop.async_wait([&](const asio::error_code&, int) { io.stop(); });
  if (self_test_mode) {
    asio::co_spawn(io, self_test(acceptor.local_endpoint(), redis), [&](std::exception_ptr e) {
      try {
        if (e) std::rethrow_exception(e);
      } catch (const std::exception& failed) {  // a client could not connect, say
        std::fprintf(stderr, "self-test: %s\n", failed.what());
        status = 1;
      }
      io.stop();
    });
  } else {
    std::printf(
        "serving on 127.0.0.1:%llu, locks on %s; try: echo report | nc -q1 127.0.0.1 %llu\n",
        static_cast<unsigned long long>(port), endpoint.address().c_str(),
        static_cast<unsigned long long>(port));
  }
  io.run();
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  bool self_test_mode = false;
  for (int i = 1; i < argc; ++i) self_test_mode |= std::string(argv[i]) == "--self-test";
  return example::main_with(argc, argv, "--port", 7878,
                            [&](const redlock::Endpoint& endpoint, std::uint64_t port) {
                              return run(endpoint, port, self_test_mode);
                            });
}
