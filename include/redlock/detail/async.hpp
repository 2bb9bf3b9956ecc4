// redlock/detail/async.hpp: the C++17 door of asynchronous operations, with no asio in sight.
// <redlock/asio.hpp> (the redlock::asio target) builds its completion tokens on it; nothing
// else should use it directly, and it may change between releases.
//
// An operation is started here and ends with exactly one call of its AsyncCompletion: on the
// library's async thread (lock/async_driver), or for a cancelled acquire on the thread that
// called cancel(), inside that call (which may be inside the start call, when the asio layer
// forwards a cancel that came first). The asio layer posts the handler to an executor with an
// execution context, so it never runs there; a plain callback's to the library's callback thread
// (post_callback); use_future's, which only sets its promise, is dispatched.
// No thread blocks for an operation that waits: a waiting acquire is a state in the async
// thread's loop, woken by the release it hears or by its timer.
#ifndef REDLOCK_DETAIL_ASYNC_HPP
#define REDLOCK_DETAIL_ASYNC_HPP

#include <chrono>     // std::chrono::nanoseconds
#include <exception>  // std::exception_ptr
#include <memory>     // std::unique_ptr, std::shared_ptr, std::allocator_traits
#include <new>        // placement new
#include <optional>   // std::optional
#include <utility>    // std::move

#include <redlock/hold.hpp>  // Hold

namespace redlock {

class LockBase;
class Semaphore;

namespace detail {

// What an operation ended with. `error` set: it failed (a redlock::Error type, as the blocking
// call throws; std::system_error(operation_aborted) is the asio layer's, not this one's). Else
// an acquire has `hold` (empty optional: the timed form gave up, or it was cancelled; see
// AsyncResult::cancelled), and release and extend have `value`.
struct AsyncResult {
  std::exception_ptr error;
  std::optional<Hold> hold;
  bool value{false};
  bool cancelled{false};  // ended by AsyncOperation::cancel(); `hold` is empty then
};

// The receiver of one operation's result. complete() is called exactly once (see above); then
// destroy() (the operation's end), also from that thread or from whichever thread drops the last
// reference. destroy() instead of a virtual destructor, so the asio layer frees the object with its
// handler's allocator.
class AsyncCompletion {
 public:
  virtual void complete(AsyncResult&& result) noexcept = 0;
  virtual void destroy() noexcept = 0;

 protected:
  ~AsyncCompletion() = default;
};

struct AsyncCompletionDeleter {
  void operator()(AsyncCompletion* c) const noexcept {
    if (c) c->destroy();
  }
};
using AsyncCompletionPtr = std::unique_ptr<AsyncCompletion, AsyncCompletionDeleter>;

// An operation in progress, for cancelling it. Thread-safe; never throws.
class AsyncOperation {
 public:
  virtual ~AsyncOperation() = default;
  // Asks the operation to end now. An acquire not yet completed completes at once with
  // AsyncResult::cancelled, inside this call; what it may have won or queued for on the
  // servers is given back afterwards by the async thread (the queue's leave, or the release of a
  // grant that crossed the cancel, in the background). A completed acquire, a release or an
  // extend is not affected: cancel() is then a no-op. Idempotent.
  virtual void cancel() noexcept = 0;
  // cancel(), if the operation has sent nothing to a server yet (asio's total cancellation: it
  // must leave no side effect that anyone could see); else a no-op, and the operation completes
  // as it would have. An acquire sends its first attempt once it is through this process's local
  // queue of the object; a release or an extend is never cancelled. Idempotent.
  virtual void cancel_unsent() noexcept = 0;
};

// Starts acquiring `lock` for a Hold (LockBase::acquire(), or try_acquire_for(timeout) when
// `timeout` is set: std::nullopt means no deadline). `lock` must outlive the call only; the
// operation keeps its shared state. Never blocks; throws std::bad_alloc only.
std::shared_ptr<AsyncOperation> async_acquire(LockBase& lock,
                                              std::optional<std::chrono::nanoseconds> timeout,
                                              AsyncCompletionPtr completion);
// The same for one permit of `semaphore` (Semaphore::acquire_hold / try_acquire_hold_for).
std::shared_ptr<AsyncOperation> async_acquire(Semaphore& semaphore,
                                              std::optional<std::chrono::nanoseconds> timeout,
                                              AsyncCompletionPtr completion);
// Releases what `hold` held (Hold::release(): `value` as its result); `hold` is moved into the
// operation, so the caller's Hold holds nothing from the start. Never blocks.
std::shared_ptr<AsyncOperation> async_release(Hold&& hold, AsyncCompletionPtr completion);
// Extends `hold` by `ttl` (Hold::extend(ttl); a ttl of 0: Hold::extend(), the lock's own ttl:
// `value` as its result). The operation shares the hold's state: if the Hold ends meanwhile, the
// extend reports false. Never blocks.
std::shared_ptr<AsyncOperation> async_extend(const Hold& hold, std::chrono::milliseconds ttl,
                                             AsyncCompletionPtr completion);
// An acquire's Hold (AsyncResult::hold) has reached whoever uses it: the handler is about to
// run. Until then, with auto_renew, the watchdog renews the grant for one ttl only and then gives
// it up (LostReason::undelivered), so a completion stuck in a stopped io_context cannot keep the
// lock for ever. A Hold of nothing, or one already delivered: a no-op. Any thread; never throws.
void hold_delivered(const Hold& hold) noexcept;

// A completion handler to run later, on the library's callback thread (post_callback): what the
// asio layer does with a plain callback's (asio::system_executor's) handler, so that a callback
// that blocks holds up other plain callbacks at most, never an operation.
class AsyncCallback {
 public:
  // Frees this object, then runs the handler (its memory is given back before it runs). Called
  // once, on the callback thread; never throws (a handler that throws ends the process, as on
  // any thread). A callback still queued when the process exits is neither run nor freed.
  virtual void run() noexcept = 0;

 protected:
  ~AsyncCallback() = default;
};

// An AsyncCallback that calls `Invoker` (a callable with get_allocator(), the asio layer's): this
// block comes from that allocator and is given back before the invoker runs. (The operation's
// own state, from the same allocator, may still be freed on the async thread after the handler
// started: issue 43's defect 5.)
template <typename Invoker>
class AsyncCallbackFor final : public AsyncCallback {
 public:
  // Null when no memory could be allocated; `invoker` is then untouched. Throws what the
  // invoker's move constructor throws (the block is freed; `invoker` may be moved from).
  static AsyncCallbackFor* make(Invoker& invoker) {
    Alloc alloc(invoker.get_allocator());
    AsyncCallbackFor* callback = nullptr;
    try {
      callback = std::allocator_traits<Alloc>::allocate(alloc, 1);
    } catch (...) {
      return nullptr;
    }
    try {
      return ::new (static_cast<void*>(callback)) AsyncCallbackFor(std::move(invoker));
    } catch (...) {
      std::allocator_traits<Alloc>::deallocate(alloc, callback, 1);
      throw;
    }
  }

  void run() noexcept override {
    Alloc alloc(invoker_.get_allocator());  // taken before the invoker is moved from
    Invoker invoker = std::move(invoker_);
    free(alloc);
    std::move(invoker)();
  }

 private:
  using Alloc = typename std::allocator_traits<
      typename Invoker::allocator_type>::template rebind_alloc<AsyncCallbackFor>;

  explicit AsyncCallbackFor(Invoker&& invoker) : invoker_(std::move(invoker)) {}
  ~AsyncCallbackFor() = default;

  void free(Alloc alloc) noexcept {
    this->~AsyncCallbackFor();
    std::allocator_traits<Alloc>::deallocate(alloc, this, 1);
  }

  Invoker invoker_;
};

// Runs `callback` (never null) on the library's callback thread ("redlock-cb"), after the
// callbacks posted before it: one thread, started when a callback is posted and ended when none
// has come for 200 ms, which no operation waits for. Without a thread (none could be started),
// runs it inline, on the calling thread. Any thread; never throws.
void post_callback(AsyncCallback* callback) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_DETAIL_ASYNC_HPP
