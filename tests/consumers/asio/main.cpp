// tests/consumers/asio/main.cpp: the program the consumer tests of the asio component build, as a
// user would, against redlock::asio found one way or another (find_package(redlock COMPONENTS
// asio), add_subdirectory, FetchContent, pkg-config redlock-asio).
//
//   consumer_asio redis://127.0.0.1:PORT
//
// On one io_context: acquires a lock with a callback (run on the io_context's thread), sees a
// second Lock contend, releases it asynchronously, and receives the redlock::Error of an
// unreachable server as the callback's exception_ptr. Exit status 0 and one line on stdout when
// all of that worked; 1 otherwise.
#include <chrono>     // std::chrono::milliseconds
#include <cstdio>     // std::printf, std::fprintf
#include <exception>  // std::exception_ptr, std::rethrow_exception
#include <optional>   // std::optional
#include <thread>     // std::this_thread::get_id

#include <asio/bind_executor.hpp>  // bind_executor
#include <asio/io_context.hpp>     // io_context
#include <redlock/asio.hpp>        // async_acquire, async_release, async_try_acquire_for
#include <redlock/redlock.hpp>     // Client, Endpoint, Lock, errors

namespace {

// The outcome of the callbacks, checked once io_context::run() returns.
struct Seen {
  bool held = false;             // the Hold held, on the io_context's thread
  bool contended = false;        // a second Lock's try_lock() failed meanwhile
  bool released = false;         // async_release completed with true
  bool error_delivered = false;  // the unreachable server's redlock::Error came as exception_ptr
};

bool is_redlock_error(const std::exception_ptr& error) {
  if (!error) return false;
  try {
    std::rethrow_exception(error);
  } catch (const redlock::Error&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_asio redis://127.0.0.1:PORT\n");
    return 2;
  }
  try {
    redlock::Client client(redlock::Endpoint::parse(argv[1]));
    redlock::Client unreachable(redlock::Endpoint::parse("redis://127.0.0.1:1"));
    redlock::Lock lock(client, "consumer:asio");
    redlock::Lock other(client, "consumer:asio");
    redlock::Lock nowhere(unreachable, "consumer:asio");
    asio::io_context io;
    const auto io_thread = std::this_thread::get_id();
    Seen seen;
    redlock::async_acquire(
        lock, asio::bind_executor(io, [&](std::exception_ptr error, redlock::Hold hold) {
          seen.held = !error && hold.holds() && std::this_thread::get_id() == io_thread;
          seen.contended = !other.try_lock();
          redlock::async_release(hold, asio::bind_executor(io, [&](std::exception_ptr e, bool ok) {
                                   seen.released = !e && ok;
                                 }));
        }));
    redlock::async_try_acquire_for(
        nowhere, std::chrono::milliseconds(100),
        asio::bind_executor(io, [&](std::exception_ptr error, std::optional<redlock::Hold>) {
          seen.error_delivered = is_redlock_error(error);
        }));
    io.run();  // returns once every operation has completed: each counts as work on io
    if (!(seen.held && seen.contended && seen.released && seen.error_delivered)) {
      std::fprintf(stderr, "consumer_asio: held %d, contended %d, released %d, error %d\n",
                   seen.held, seen.contended, seen.released, seen.error_delivered);
      return 1;
    }
    std::printf("consumer_asio: redlock %s: acquired, contended and released on %s through asio\n",
                REDLOCK_VERSION_STRING, argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_asio: %s\n", e.what());
    return 1;
  }
}
