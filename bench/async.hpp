// bench/async.hpp: what the files of section 13 (the async API, <redlock/asio.hpp>) share. The
// section is described at the top of async.cpp. These files are C++20 (coroutines) and are built
// only with the redlock::asio target.
#ifndef REDLOCK_BENCH_ASYNC_HPP
#define REDLOCK_BENCH_ASYNC_HPP

// <redlock/asio.hpp> first: it configures asio's coroutine support for clang with libstdc++.
#include <redlock/asio.hpp>

#include <hiredis/hiredis.h>  // redisContext

#include <asio/executor_work_guard.hpp>  // executor_work_guard
#include <asio/io_context.hpp>           // io_context
#include <asio/post.hpp>                 // post

#include <cstdint>    // std::int64_t
#include <exception>  // std::exception_ptr
#include <future>     // std::promise
#include <string>     // std::string
#include <thread>     // std::thread

#include "bench.hpp"   // Config, Report
#include "common.hpp"  // Json, Goals

namespace bench::async {

// An io_context run by one thread of its own (a work guard keeps run() going while idle) until
// the object ends; the destructor lets the handlers already queued finish, then joins.
class IoThread {
 public:
  IoThread();
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;
  asio::io_context& io() { return io_; }

 private:
  asio::io_context io_{1};  // one thread runs it
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
};

// Runs `f` on the io_context's thread and waits until it ran.
template <class F>
void on_io_thread(asio::io_context& io, F&& f) {
  std::promise<void> done;
  asio::post(io, [&] {
    f();
    done.set_value();
  });
  done.get_future().wait();
}

// True if `e` holds asio's operation_aborted (a cancelled operation's error, as the library and
// asio's own timers report it).
bool aborted(const std::exception_ptr& e) noexcept;

// Bytes of heap in use in the whole process: mallinfo2() over every malloc arena, mmapped blocks
// included (so the library's own thread's allocations, hiredis's buffers and coroutine frames
// all count).
std::int64_t heap_in_use() noexcept;

// User + system CPU of the whole process (getrusage RUSAGE_SELF), nanoseconds.
std::int64_t process_rusage_ns() noexcept;

// Keys of a prefix on a server, as the cancellation goals count them: lock keys, and entries of
// the fair queues (the lists `{k}:waiters` and the hashes `{k}:waiters:info`).
struct LeftOver {
  long long keys{0};
  long long queue_entries{0};
};
LeftOver left_over(redisContext* c, const std::string& prefix);

// The parts of the section (async_waiters.cpp). Each prints its figures and its goals (through
// `goals`), and adds its JSON to `out`; a failed measurement goes to report.errors.
void waiters_part(const Config& config, Json& out, Goals& goals, Report& report);
void cancellation_part(const Config& config, Json& out, Goals& goals, Report& report);

}  // namespace bench::async

#endif  // REDLOCK_BENCH_ASYNC_HPP
