// src/lock/async_acquire.hpp: the asynchronous acquire of any HoldOwner (a LockCore, a
// SemaphoreCore) as a task of the library's async thread; redlock/detail/async.hpp's acquires
// are this, for their object's core.
#ifndef REDLOCK_SRC_LOCK_ASYNC_ACQUIRE_HPP
#define REDLOCK_SRC_LOCK_ASYNC_ACQUIRE_HPP

#include <chrono>
#include <memory>
#include <optional>

#include <redlock/detail/async.hpp>

namespace redlock {
namespace detail {

class HoldOwner;

// Starts a handle acquire of `owner`: no deadline without `timeout` (acquire()), else as
// try_acquire_for(*timeout). Never blocks; throws std::bad_alloc or std::system_error (the async
// thread could not start).
std::shared_ptr<AsyncOperation> start_async_acquire(std::shared_ptr<HoldOwner> owner,
                                                    std::optional<std::chrono::nanoseconds> timeout,
                                                    AsyncCompletionPtr completion);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_ASYNC_ACQUIRE_HPP
