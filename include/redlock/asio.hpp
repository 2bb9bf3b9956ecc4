// redlock/asio.hpp: asynchronous acquire, release and extend for asio (standalone asio 1.22 or
// later), with any completion token: a callback, asio::use_future, asio::use_awaitable (C++20),
// asio::deferred (asio::experimental::deferred before asio 1.24). Link the CMake target
// redlock::asio (pkg-config: redlock-asio); this is the only redlock header that includes asio.
//
//   asio::awaitable<void> handle(redlock::Lock& lock) {      // C++20
//     redlock::Hold hold = co_await redlock::async_acquire(lock, asio::use_awaitable);
//     co_await serve(hold.fence());
//   }                                                        // released, without blocking
//
//   redlock::async_try_acquire_for(lock, std::chrono::seconds(2),
//       asio::bind_executor(io.get_executor(),
//                           [](std::exception_ptr error, std::optional<redlock::Hold> hold) {
//                             if (error) { /* a redlock::Error, or operation_aborted */ }
//                             else if (!hold) { /* timed out: contention is not an error */ }
//                           }));
//
// Every operation is driven by the library's own async thread: no thread waits or blocks for it,
// an io_context's threads included. Each completes exactly once, never inside the initiating
// call:
// - with the handler's signature `void(std::exception_ptr, T)`: the exception_ptr is null on
//   success, or holds the exception the blocking call would have thrown (redlock::Error and its
//   subclasses, std::invalid_argument), or std::system_error (asio::system_error)
//   with asio::error::operation_aborted after cancellation; T is then value-initialized (an empty
//   Hold, std::nullopt, false). use_future and use_awaitable rethrow that exception.
// - on the handler's associated executor: posted (asio::post) to one with an execution context
//   (an io_context's, a strand), so it never runs inside a library thread nor inside the call
//   that completed it (a cancellation). A plain callback (asio::system_executor, the default)
//   runs on the library's callback thread, in completion order: one that blocks, even on a
//   redlock operation, holds up the plain callbacks behind it (an auto_renew Hold queued over
//   one ttl is given up: LostReason::undelivered), never an operation. Never let one throw: that
//   ends the process. use_future's handler runs on the completing thread (the async thread):
//   it sets its promise, and asio::use_future(f) also calls f there, so keep f short. The
//   handler's associated allocator serves the per-operation state, which must stay usable until
//   the operation ends; outstanding work is counted on that executor while it is in flight.
// - cancellation through the handler's associated cancellation slot (asio::bind_cancellation_slot,
//   or awaitable operators' `||` with a timer). Terminal and partial cancellation work at every
//   stage: an acquire not yet granted completes with operation_aborted, and what it may have won
//   or queued for on the servers is given back in the background. Total cancellation (no side
//   effect anyone could see) is honoured only before the acquire sent its first attempt (while
//   it waits in this process's queue for the object); later it is ignored, since a grant or a
//   queue place may already be visible on the server. A release or an extend, or an acquire
//   already granted, completes as it would have. Emit the signal on the handler's executor, as
//   for any asio operation.
// - when the execution context of the handler's executor (an io_context) is shut down or
//   destroyed with operations in flight: their handlers are destroyed without being invoked, the
//   operations are cancelled, and a Hold granted meanwhile is released in the background. No
//   lease is leaked.
#ifndef REDLOCK_ASIO_HPP
#define REDLOCK_ASIO_HPP

#include <chrono>        // std::chrono durations
#include <exception>     // std::exception_ptr, std::make_exception_ptr
#include <memory>        // std::shared_ptr, std::weak_ptr, std::allocate_shared
#include <mutex>         // std::mutex, std::recursive_mutex
#include <optional>      // std::optional
#include <system_error>  // std::system_error
#include <type_traits>   // std::decay_t, std::is_same
#include <utility>       // std::move, std::forward

// asio 1.22 looks for clang's coroutines in libc++ only (<experimental/coroutine>), so clang with
// libstdc++ (Debian's) would have no use_awaitable in C++20. Said here when asio's configuration
// was not read yet; else it is the includer's.
#if defined(__clang__) && defined(__cpp_impl_coroutine) && !defined(ASIO_DETAIL_CONFIG_HPP) && \
    !defined(ASIO_HAS_CO_AWAIT) && !defined(ASIO_DISABLE_CO_AWAIT)
#if __cpp_impl_coroutine >= 201902L && __has_include(<coroutine>) && \
    !__has_include(<experimental/coroutine>)
#define ASIO_HAS_CO_AWAIT 1
#define ASIO_HAS_STD_COROUTINE 1
#endif
#endif

#include <asio/associated_allocator.hpp>          // get_associated_allocator
#include <asio/associated_cancellation_slot.hpp>  // get_associated_cancellation_slot
#include <asio/associated_executor.hpp>           // get_associated_executor
#include <asio/async_result.hpp>                  // async_initiate, ASIO_COMPLETION_TOKEN_FOR
#include <asio/cancellation_type.hpp>             // cancellation_type
#include <asio/dispatch.hpp>                      // dispatch
#include <asio/error.hpp>                         // error::operation_aborted
#include <asio/execution.hpp>                     // execution::context, outstanding_work
#include <asio/execution_context.hpp>             // execution_context::service, use_service
#include <asio/executor_work_guard.hpp>           // executor_work_guard
#include <asio/post.hpp>                          // post
#include <asio/prefer.hpp>                        // prefer
#include <asio/query.hpp>                         // query
#include <asio/system_error.hpp>                  // system_error
#include <asio/system_executor.hpp>               // system_executor

#include <redlock/detail/async.hpp>   // detail::async_*, AsyncCompletion, AsyncResult
#include <redlock/detail/chrono.hpp>  // saturating_ns
#include <redlock/hold.hpp>           // Hold
#include <redlock/lock.hpp>           // LockBase
#include <redlock/semaphore.hpp>      // Semaphore

namespace redlock {
namespace detail {

class AsioOpBase;

// The operations in flight whose handlers run on one execution context. Its shutdown destroys
// their handlers without invoking them and cancels the operations; the library ends them later,
// and their completions then do nothing. Thread-safe. Its mutex is taken last: nothing else is
// locked while it is held.
class AsioRegistry {
 public:
  // Adds `op`; false if the context was already shut down (the caller drops the handler).
  bool add(AsioOpBase& op);
  // Removes `op` if it is still listed (its destructor). Never throws.
  void remove(AsioOpBase& op) noexcept;
  // Drops every listed operation, and every one added later. Never throws.
  void shutdown() noexcept;

 private:
  std::mutex mutex_;
  AsioOpBase* first_{nullptr};  // a doubly linked list through AsioOpBase::prev_/next_
  bool shut_down_{false};
};

// The asio service that owns a context's AsioRegistry: asio calls shutdown() when the context is
// shut down or destroyed, before it destroys the handlers still queued on it.
class AsioRegistryService : public asio::execution_context::service {
 public:
  using key_type = AsioRegistryService;
  static inline asio::execution_context::id id;  // for builds with ASIO_NO_TYPEID

  explicit AsioRegistryService(asio::execution_context& context)
      : asio::execution_context::service(context), registry_(std::make_shared<AsioRegistry>()) {}
  const std::shared_ptr<AsioRegistry>& registry() const noexcept { return registry_; }

 private:
  void shutdown() override { registry_->shutdown(); }

  std::shared_ptr<AsioRegistry> registry_;  // shared: an operation may outlive the context
};

// What every operation's wrapper shares, whatever its handler: the library's reference to it,
// the AsyncOperation to cancel, and its registry entry. Allocated with std::allocate_shared and
// the handler's allocator; the library's AsyncCompletionPtr owns one reference (self_), dropped
// in destroy().
class AsioOpBase : public AsyncCompletion, public std::enable_shared_from_this<AsioOpBase> {
 public:
  AsioOpBase() = default;
  AsioOpBase(const AsioOpBase&) = delete;
  AsioOpBase& operator=(const AsioOpBase&) = delete;

  // Asks the library to end the operation (AsyncOperation::cancel(), or with `only_unsent`
  // cancel_unsent()), now if it was started, else as soon as it is. Any thread; never throws.
  void cancel(bool only_unsent = false) noexcept {
    std::shared_ptr<AsyncOperation> op;
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      cancel_requested_ = true;
      if (!only_unsent) cancel_sent_too_ = true;
      op = op_;
    }
    if (op) signal_cancel(*op, only_unsent);
  }

  // Destroys the handler and the work guard without invoking the handler, and cancels the
  // operation: its completion will do nothing. Never throws.
  virtual void drop() noexcept = 0;

  // Lists the operation in `registry` (null: untracked); if that context is already shut down,
  // drops the handler at once.
  void track(std::shared_ptr<AsioRegistry> registry) {
    if (!registry) return;
    registry_ = std::move(registry);
    if (!registry_->add(*this)) drop();
  }

  // Starts the operation with `start(AsyncCompletionPtr)` (a detail::async_* call) and keeps it
  // for cancel(). Throws what `start` throws (std::bad_alloc); the handler is then not invoked.
  template <typename Start>
  void start(Start&& start) {
    self_ = shared_from_this();
    std::shared_ptr<AsyncOperation> op = std::forward<Start>(start)(AsyncCompletionPtr(this));
    bool cancelled = false;
    bool only_unsent = false;
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      if (!finished_) op_ = op;  // (it may have completed already, on the library's thread)
      cancelled = cancel_requested_ && !finished_;
      only_unsent = !cancel_sent_too_;
    }
    if (cancelled) signal_cancel(*op, only_unsent);
  }

  void destroy() noexcept override {
    std::shared_ptr<AsioOpBase> last = std::move(self_);  // may free this object on return
  }

 protected:
  ~AsioOpBase() {
    if (registry_) registry_->remove(*this);
  }

  // Guards the derived handler and work guard, and the fields below. Recursive: a handler run
  // inline under it (use_future's, or a plain callback's when no memory was left to queue it)
  // may shut a context down (drop()).
  std::recursive_mutex mutex_;
  bool dropped_{false};

  // At completion, under mutex_: the operation is no longer cancellable. Returns the reference to
  // it, for the caller to release after mutex_ (its end may end this object).
  std::shared_ptr<AsyncOperation> finish() noexcept {
    finished_ = true;
    return std::move(op_);
  }

 private:
  friend class AsioRegistry;

  static void signal_cancel(AsyncOperation& op, bool only_unsent) noexcept {
    if (only_unsent) {
      op.cancel_unsent();
    } else {
      op.cancel();
    }
  }

  std::shared_ptr<AsioOpBase> self_;  // the library's reference, until destroy()
  // Set once started, until completion: a strong reference, so that cancel() works whether or not
  // the library keeps its own (the cycle through the library's AsyncCompletionPtr ends there).
  std::shared_ptr<AsyncOperation> op_;
  bool cancel_requested_{false};            // cancel() came before start() returned
  bool cancel_sent_too_{false};             // ... and not only a total cancellation
  bool finished_{false};                    // complete() was called
  std::shared_ptr<AsioRegistry> registry_;  // null: untracked (system_executor)
  AsioOpBase* prev_{nullptr};               // the registry's list, under its mutex
  AsioOpBase* next_{nullptr};
  bool listed_{false};
};

inline bool AsioRegistry::add(AsioOpBase& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shut_down_) return false;
  op.next_ = first_;
  if (first_) first_->prev_ = &op;
  first_ = &op;
  op.listed_ = true;
  return true;
}

inline void AsioRegistry::remove(AsioOpBase& op) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!op.listed_) return;
  (op.prev_ ? op.prev_->next_ : first_) = op.next_;
  if (op.next_) op.next_->prev_ = op.prev_;
  op.prev_ = op.next_ = nullptr;
  op.listed_ = false;
}

inline void AsioRegistry::shutdown() noexcept {
  for (;;) {  // one at a time, without holding mutex_ while a handler is destroyed
    std::shared_ptr<AsioOpBase> op;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shut_down_ = true;
      if (!first_) return;
      AsioOpBase& next = *first_;
      first_ = next.next_;
      if (first_) first_->prev_ = nullptr;
      next.prev_ = next.next_ = nullptr;
      next.listed_ = false;
      op = next.weak_from_this().lock();  // null: being destroyed (it waits for mutex_)
    }
    if (op) op->drop();
  }
}

// The execution context of an executor: a standard executor's execution::context property, or
// a Networking TS executor's context().
template <typename Executor>
asio::execution_context& asio_context_of(const Executor& executor) {
  if constexpr (asio::execution::is_executor<Executor>::value) {
    return asio::query(executor, asio::execution::context);
  } else {
    return executor.context();
  }
}

// asio::system_executor, whatever its properties: a plain callback's executor.
template <typename Executor>
struct AsioIsSystemExecutor : std::false_type {};
template <typename Blocking, typename Relationship, typename Allocator>
struct AsioIsSystemExecutor<asio::basic_system_executor<Blocking, Relationship, Allocator>>
    : std::true_type {};

// Whether the executor belongs to an execution context whose handlers redlock tracks and posts
// to: not asio::system_executor (the default executor; its context lives until the process
// exits, and posting to it from a library thread at exit races with its destruction; its
// handlers go to the library's callback thread), nor an executor without a context
// (use_future's).
template <typename Executor>
constexpr bool asio_has_context() {
  if constexpr (AsioIsSystemExecutor<Executor>::value) {
    return false;
  } else if constexpr (asio::execution::is_executor<Executor>::value) {
    return asio::can_query<const Executor&, asio::execution::context_t>::value;
  } else {
    return true;
  }
}

// The registry of the handler's execution context; none without one (asio_has_context()).
template <typename Executor>
std::shared_ptr<AsioRegistry> asio_registry_for(const Executor& executor) {
  if constexpr (!asio_has_context<Executor>()) {
    return nullptr;
  } else {
    return asio::use_service<AsioRegistryService>(asio_context_of(executor)).registry();
  }
}

// An executor with outstanding work counted on it for as long as this object lives: the
// outstanding_work.tracked property of a standard executor, a work guard for a Networking TS one.
template <typename Executor, bool = asio::execution::is_executor<Executor>::value>
class AsioTrackedExecutor {
 public:
  explicit AsioTrackedExecutor(const Executor& executor)
      : executor_(asio::prefer(executor, asio::execution::outstanding_work.tracked)) {}
  const auto& get() const noexcept { return executor_; }

 private:
  std::decay_t<decltype(asio::prefer(std::declval<const Executor&>(),
                                     asio::execution::outstanding_work.tracked))>
      executor_;
};
template <typename Executor>
class AsioTrackedExecutor<Executor, false> {
 public:
  explicit AsioTrackedExecutor(const Executor& executor) : guard_(executor) {}
  Executor get() const noexcept { return guard_.get_executor(); }

 private:
  asio::executor_work_guard<Executor> guard_;
};

// How an AsyncResult becomes the handler's second argument, for each signature.
// deliver() is called right before the handler runs (detail::hold_delivered).
struct AsioHoldResult {  // void(std::exception_ptr, Hold): async_acquire
  using type = Hold;
  static Hold take(AsyncResult& result) { return result.hold ? std::move(*result.hold) : Hold(); }
  static void deliver(const Hold& hold) noexcept { hold_delivered(hold); }
};
struct AsioOptionalHoldResult {  // void(std::exception_ptr, std::optional<Hold>): the timed form
  using type = std::optional<Hold>;
  static std::optional<Hold> take(AsyncResult& result) { return std::move(result.hold); }
  static void deliver(const std::optional<Hold>& hold) noexcept {
    if (hold) hold_delivered(*hold);
  }
};
struct AsioBoolResult {  // void(std::exception_ptr, bool): async_release, async_extend
  using type = bool;
  static bool take(AsyncResult& result) { return result.value; }
  static void deliver(bool) noexcept {}
};

// The function posted or dispatched to the handler's executor: clears the cancellation slot
// (asio's rule: before the handler runs, which may reuse it), then calls the handler. Carries
// the handler's allocator, which asio uses for its own state.
template <typename Handler, typename Result>
struct AsioInvoker {
  using allocator_type = asio::associated_allocator_t<Handler>;
  allocator_type get_allocator() const noexcept { return asio::get_associated_allocator(handler); }

  void operator()() {
    auto slot = asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) slot.clear();
    Result::deliver(value);
    std::move(handler)(std::move(error), std::move(value));
  }

  Handler handler;
  std::exception_ptr error;
  typename Result::type value;
};

// The cancellation slot's handler: the weak reference lets the operation end while the slot
// stays installed (a dropped handler's slot is never cleared).
struct AsioCancelSlotHandler {
  void operator()(asio::cancellation_type type) const {
    constexpr auto any_stage = asio::cancellation_type::terminal | asio::cancellation_type::partial;
    const bool anywhere = (type & any_stage) != asio::cancellation_type::none;
    if (!anywhere && (type & asio::cancellation_type::total) == asio::cancellation_type::none) {
      return;
    }
    if (auto alive = op.lock()) alive->cancel(/*only_unsent=*/!anywhere);
  }
  std::weak_ptr<AsioOpBase> op;
};

// One operation's wrapper for a Handler of signature void(std::exception_ptr, Result::type).
template <typename Handler, typename Result>
class AsioOp final : public AsioOpBase {
 public:
  using Executor = asio::associated_executor_t<Handler>;

  AsioOp(Handler handler, const Executor& executor)
      : handler_(std::move(handler)), work_(std::in_place, executor) {}

  // Hooks the handler's cancellation slot, if connected, to cancel().
  void connect_slot() {
    auto slot = asio::get_associated_cancellation_slot(*handler_);
    if (slot.is_connected())
      slot.template emplace<AsioCancelSlotHandler>(
          AsioCancelSlotHandler{std::weak_ptr<AsioOpBase>(shared_from_this())});
  }

  // On the library's async thread. mutex_ stays held while the handler is handed to its executor,
  // so that a context shut down concurrently (drop(), under mutex_) is either seen here or
  // waits until the handler is queued on it, to be destroyed by the context itself.
  void complete(AsyncResult&& result) noexcept override {
    std::shared_ptr<AsyncOperation> ended;  // released after mutex_, declared before the guard
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    ended = finish();
    if (dropped_ || !handler_) return;  // dropped: a Hold in `result` is released by the library
    std::exception_ptr error = std::move(result.error);
    if (!error && result.cancelled) {
      error = std::make_exception_ptr(
          asio::system_error(asio::error::make_error_code(asio::error::operation_aborted)));
    }
    typename Result::type value{};
    if (!error) value = Result::take(result);
    AsioTrackedExecutor<Executor> work = std::move(*work_);
    work_.reset();
    AsioInvoker<Handler, Result> invoker{std::move(*handler_), std::move(error), std::move(value)};
    if constexpr (asio_has_context<Executor>()) {
      asio::post(work.get(), std::move(invoker));  // never inline in a cancel() on its thread
    } else if constexpr (AsioIsSystemExecutor<Executor>::value) {
      try {
        if (auto* callback = AsyncCallbackFor<decltype(invoker)>::make(invoker)) {
          post_callback(callback);
        } else {
          std::move(invoker)();  // no memory: run it here, inline as asio::dispatch would
        }
      } catch (...) {  // the handler's move constructor threw: it cannot run
      }
    } else {
      asio::dispatch(work.get(), std::move(invoker));  // use_future's (see the header's comment)
    }
    handler_.reset();
  }

  void drop() noexcept override {
    std::optional<Handler> handler;
    std::optional<AsioTrackedExecutor<Executor>> work;
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      dropped_ = true;
      if (handler_) handler.emplace(std::move(*handler_));  // emplace: handlers need not be
      if (work_) work.emplace(std::move(*work_));           // assignable (lambdas)
      handler_.reset();
      work_.reset();
    }
    handler.reset();  // outside mutex_: destroying a coroutine frame may end other operations
    work.reset();
    cancel();
  }

 private:
  std::optional<Handler> handler_;  // empty once handed to the executor or dropped
  std::optional<AsioTrackedExecutor<Executor>> work_;
};

// Starts one operation for `handler`: its wrapper allocated with the handler's allocator, hooked
// to its cancellation slot, listed with its context, then started by `start`.
template <typename Result, typename Handler, typename Start>
void asio_launch(Handler&& handler, Start&& start) {
  using Op = AsioOp<std::decay_t<Handler>, Result>;
  const auto allocator = asio::get_associated_allocator(handler);
  const auto executor = asio::get_associated_executor(handler);
  std::shared_ptr<Op> op =
      std::allocate_shared<Op>(allocator, std::forward<Handler>(handler), executor);
  op->connect_slot();  // first: once listed, a shutdown may drop the handler at any time
  op->track(asio_registry_for(executor));
  op->start(std::forward<Start>(start));
}

// The initiation of every operation: Start is what calls the library (below), Result what the
// handler receives.
template <typename Result>
struct AsioInitiation {
  template <typename Handler, typename Start>
  void operator()(Handler&& handler, Start&& start) const {
    asio_launch<Result>(std::forward<Handler>(handler), std::forward<Start>(start));
  }
};

// async_initiate for one operation: the handler's signature comes from Result.
template <typename Result, typename CompletionToken, typename Start>
auto asio_initiate(CompletionToken& token, Start&& start) {
  return asio::async_initiate<CompletionToken, void(std::exception_ptr, typename Result::type)>(
      AsioInitiation<Result>(), token, std::forward<Start>(start));
}

template <typename Target>  // LockBase or Semaphore
struct AsioStartAcquire {
  std::shared_ptr<AsyncOperation> operator()(AsyncCompletionPtr completion) {
    return detail::async_acquire(*target, timeout, std::move(completion));
  }
  Target* target;
  std::optional<std::chrono::nanoseconds> timeout;  // nullopt: no deadline
};
struct AsioStartRelease {
  std::shared_ptr<AsyncOperation> operator()(AsyncCompletionPtr completion) {
    return detail::async_release(std::move(hold), std::move(completion));
  }
  Hold hold;
};
struct AsioStartExtend {
  std::shared_ptr<AsyncOperation> operator()(AsyncCompletionPtr completion) {
    return detail::async_extend(*hold, ttl, std::move(completion));
  }
  const Hold* hold;
  std::chrono::milliseconds ttl;  // 0: the lock's own ttl
};

}  // namespace detail

// Waits, without blocking any thread, until `lock` (a Lock, a Redlock, or an optional backend's
// lock) is held by a Hold, as LockBase::acquire(). Completes with void(std::exception_ptr, Hold):
// the Hold, or the exception acquire() would throw (ConnectionError, TimeoutError or
// QuorumUnavailableError once max_unavailable has passed, ServerError at once, CancelledError
// after cancel_waits()), or
// operation_aborted when cancelled (nothing is left held or queued on the servers). Handle and
// thread acquires of one object queue together, first come, first served (one started by the
// thread that owns the object's thread hold waits for its unlock(): it blocks nothing). `lock` must
// stay alive until the operation is initiated (for asio::deferred: until it is launched), not until
// it ends. Thread-safe, as acquire().
template <ASIO_COMPLETION_TOKEN_FOR(void(std::exception_ptr, Hold)) CompletionToken>
auto async_acquire(LockBase& lock, CompletionToken&& token) {
  return detail::asio_initiate<detail::AsioHoldResult>(
      token, detail::AsioStartAcquire<LockBase>{&lock, std::nullopt});
}

// async_acquire() that gives up after `timeout` (steady clock; any std::chrono::duration,
// clamped, so hours::max() waits forever), as LockBase::try_acquire_for(). Completes with
// void(std::exception_ptr, std::optional<Hold>): the Hold, or std::nullopt on contention at the
// deadline or after cancel_waits() (never an error), or the exception try_acquire_for() would
// throw, or operation_aborted when cancelled. A zero or negative timeout makes one attempt. Never
// leaves a grant behind when it gives up. Otherwise as async_acquire().
template <class Rep, class Period,
          ASIO_COMPLETION_TOKEN_FOR(void(std::exception_ptr, std::optional<Hold>)) CompletionToken>
auto async_try_acquire_for(LockBase& lock, const std::chrono::duration<Rep, Period>& timeout,
                           CompletionToken&& token) {
  return detail::asio_initiate<detail::AsioOptionalHoldResult>(
      token, detail::AsioStartAcquire<LockBase>{&lock, detail::saturating_ns(timeout)});
}

// Waits, without blocking any thread, for one permit of `semaphore`, held by a Hold, as
// Semaphore::acquire_hold(). Completes with void(std::exception_ptr, Hold), with the errors of
// acquire_hold() (LimitMismatchError among them) or operation_aborted, as async_acquire() does
// for a lock. Thread-safe.
template <ASIO_COMPLETION_TOKEN_FOR(void(std::exception_ptr, Hold)) CompletionToken>
auto async_acquire(Semaphore& semaphore, CompletionToken&& token) {
  return detail::asio_initiate<detail::AsioHoldResult>(
      token, detail::AsioStartAcquire<Semaphore>{&semaphore, std::nullopt});
}

// async_acquire(semaphore) that gives up after `timeout`, as Semaphore::try_acquire_hold_for():
// void(std::exception_ptr, std::optional<Hold>), std::nullopt when no permit became free by
// then. Never leaves a taken slot behind when it gives up. Otherwise as async_try_acquire_for().
template <class Rep, class Period,
          ASIO_COMPLETION_TOKEN_FOR(void(std::exception_ptr, std::optional<Hold>)) CompletionToken>
auto async_try_acquire_for(Semaphore& semaphore, const std::chrono::duration<Rep, Period>& timeout,
                           CompletionToken&& token) {
  return detail::asio_initiate<detail::AsioOptionalHoldResult>(
      token, detail::AsioStartAcquire<Semaphore>{&semaphore, detail::saturating_ns(timeout)});
}

// Releases what `hold` holds, as Hold::release(), without blocking any thread. `hold` is moved
// from by this call (it holds nothing afterwards, for asio::deferred too: the deferred operation
// owns the lease, and destroying it unlaunched releases in the background). Completes with
// void(std::exception_ptr, bool): true if the lease was still ours when released, false if it
// had been lost or `hold` held nothing; or Error if no node could be reached (the lease then
// expires by its ttl). Cancellation does not stop a release: it completes as it would have.
// Not to be called concurrently with another call on the same Hold.
template <ASIO_COMPLETION_TOKEN_FOR(void(std::exception_ptr, bool)) CompletionToken>
auto async_release(Hold& hold, CompletionToken&& token) {
  return detail::asio_initiate<detail::AsioBoolResult>(token,
                                                       detail::AsioStartRelease{std::move(hold)});
}

// Resets the lease of `hold` to `ttl` (milliseconds) from now, as Hold::extend(ttl), without
// blocking any thread; a ttl of 0 means the lock's own options().ttl, as Hold::extend().
// Completes with void(std::exception_ptr, bool): true if renewed, false if `hold` holds nothing,
// ended meanwhile, or its lease was already lost (then marked lost and on_lost told); or
// std::invalid_argument for a ttl not longer than the drift allowance or over 200 years, or Error
// if no node could be reached. Cancellation does not stop an extend. `hold` must stay alive until
// the operation is initiated (for asio::deferred: launched). Thread-safe, as Hold::extend().
template <ASIO_COMPLETION_TOKEN_FOR(void(std::exception_ptr, bool)) CompletionToken>
auto async_extend(Hold& hold, std::chrono::milliseconds ttl, CompletionToken&& token) {
  return detail::asio_initiate<detail::AsioBoolResult>(token, detail::AsioStartExtend{&hold, ttl});
}

}  // namespace redlock

#endif  // REDLOCK_ASIO_HPP
