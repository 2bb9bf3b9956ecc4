// src/lock/rwlock.cpp: the public ReadWriteLock: two LockCores (lock/lock_core.hpp), one over the
// writer's lease and one over a reader's (core/rw_lease.hpp), each driven through a LockBase so
// that waiting, re-entrancy, renewal and loss are a Lock's; and the downgrade between them.
#include <redlock/rwlock.hpp>

#include <stdexcept>
#include <vector>

#include <redlock/lock.hpp>

#include "api/access.hpp"
#include "core/rw_lease.hpp"
#include "lock/lock_core.hpp"
#include "lock/rw_sides.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {

RwSides::RwSides(std::shared_ptr<RwWriterLease> writer_lease,
                 std::shared_ptr<RwReaderLease> reader_lease, const LockOptions& options)
    : RwSides(std::shared_ptr<LeaseBackend>(writer_lease),
              std::shared_ptr<LeaseBackend>(reader_lease), options) {
  writer_lease_ = std::move(writer_lease);
  reader_lease_ = std::move(reader_lease);
}

RwSides::RwSides(std::shared_ptr<LeaseBackend> writer_backend,
                 std::shared_ptr<LeaseBackend> reader_backend, const LockOptions& options)
    : writer_core_(std::make_shared<LockCore>(std::move(writer_backend), options)),
      reader_core_(std::make_shared<LockCore>(std::move(reader_backend), options)),
      writer(writer_core_),
      reader(reader_core_) {}

// The writer's hold ends without touching its key (renewal stopped, the release a no-op), then
// the reader's attempt converts the key into its entry in one script: no gap, and nobody else
// can take the key meanwhile (it still holds the writer's token).
bool RwSides::downgrade() {
  if (!writer_lease_) {
    throw std::logic_error("redlock: downgrade() of " + key() + " is not supported by this store");
  }
  const auto hold = writer_core_->ownership().hold_of_caller();
  if (!hold || !writer_core_->ownership().owns()) {
    throw std::logic_error("redlock: downgrade() of " + key() +
                           " by a thread that does not hold its writer side");
  }
  if (reader_core_->ownership().hold_of_caller()) {
    throw std::logic_error("redlock: downgrade() of " + key() +
                           " by a thread that holds its reader side already");
  }
  if (reader_core_->ownership().hold()) return false;  // another thread of ours reads
  const std::string token = hold->token();
  writer_lease_->downgrade_started(token);
  try {
    writer.release();
  } catch (...) {
    writer_lease_->downgrade_ended();
    throw;
  }
  if (!writer_lease_->downgrade_released()) {  // only an inner level ended: restore it
    writer.try_lock();
    writer_lease_->downgrade_ended();
    throw std::logic_error("redlock: downgrade() of " + key() +
                           " from a re-entered writer hold; unlock() the inner levels first");
  }
  writer_lease_->downgrade_ended();
  reader_lease_->arm_downgrade(token);
  bool held = false;
  try {
    held = reader.try_lock();
  } catch (...) {
    reader_lease_->disarm_downgrade();
    give_back(token);
    throw;
  }
  reader_lease_->disarm_downgrade();
  if (!held) give_back(token);
  return held;
}

// A downgrade that did not convert the writer's key: release it for real (announced).
void RwSides::give_back(const std::string& token) noexcept {
  try {
    writer_lease_->release(token, Announce::waiters);
  } catch (const std::exception& e) {
    logf(LogLevel::warn, "redlock: release of {} after a failed downgrade: {}", key(), e.what());
  } catch (...) {
  }
}

}  // namespace detail

namespace {

std::unique_ptr<detail::RwSides> redis_sides(const std::vector<Client>& clients, std::string key,
                                             const LockOptions& options) {
  std::vector<std::shared_ptr<detail::ClientImpl>> nodes;
  for (const Client& client : clients) nodes.push_back(detail::Access::client(client));
  auto shared = std::make_shared<detail::RwShared>(nodes, std::move(key), options);
  return std::make_unique<detail::RwSides>(
      std::make_shared<detail::RwWriterLease>(nodes, shared, options),
      std::make_shared<detail::RwReaderLease>(nodes, shared, options), options);
}

}  // namespace

ReadWriteLock::ReadWriteLock(Client client, std::string key, LockOptions options)
    : sides_(redis_sides({std::move(client)}, std::move(key), options)) {}

ReadWriteLock::ReadWriteLock(std::vector<Client> instances, std::string key, LockOptions options)
    : sides_(instances.empty() ? throw std::invalid_argument("redlock: instances must not be empty")
                               : redis_sides(instances, std::move(key), options)) {}

ReadWriteLock::ReadWriteLock(std::unique_ptr<detail::RwSides> sides) noexcept
    : sides_(std::move(sides)) {}

ReadWriteLock::~ReadWriteLock() = default;

void ReadWriteLock::lock() { sides_->writer.lock(); }
bool ReadWriteLock::try_lock() { return sides_->writer.try_lock(); }
bool ReadWriteLock::try_lock_for_ns(std::chrono::nanoseconds timeout) {
  return sides_->writer.try_lock_for(timeout);
}
void ReadWriteLock::unlock() noexcept { sides_->writer.unlock(); }
bool ReadWriteLock::release() { return sides_->writer.release(); }
bool ReadWriteLock::extend() { return sides_->writer.extend(); }
bool ReadWriteLock::owns_lock() const noexcept { return sides_->writer.owns_lock(); }
std::chrono::milliseconds ReadWriteLock::validity() const noexcept {
  return sides_->writer.validity();
}
std::uint64_t ReadWriteLock::fence() const noexcept { return sides_->writer.fence(); }
LeaseToken ReadWriteLock::lease() const noexcept { return sides_->writer.lease(); }
bool ReadWriteLock::downgrade() { return sides_->downgrade(); }

void ReadWriteLock::lock_shared() { sides_->reader.lock(); }
bool ReadWriteLock::try_lock_shared() { return sides_->reader.try_lock(); }
bool ReadWriteLock::try_lock_shared_for_ns(std::chrono::nanoseconds timeout) {
  return sides_->reader.try_lock_for(timeout);
}
void ReadWriteLock::unlock_shared() noexcept { sides_->reader.unlock(); }
bool ReadWriteLock::release_shared() { return sides_->reader.release(); }
bool ReadWriteLock::extend_shared() { return sides_->reader.extend(); }
bool ReadWriteLock::owns_shared() const noexcept { return sides_->reader.owns_lock(); }
std::chrono::milliseconds ReadWriteLock::validity_shared() const noexcept {
  return sides_->reader.validity();
}
LeaseToken ReadWriteLock::lease_shared() const noexcept { return sides_->reader.lease(); }
std::uint64_t ReadWriteLock::fence_shared() const noexcept { return sides_->reader.fence(); }

void ReadWriteLock::cancel_waits() noexcept {
  sides_->writer.cancel_waits();
  sides_->reader.cancel_waits();
}
const std::string& ReadWriteLock::key() const noexcept { return sides_->key(); }
const LockOptions& ReadWriteLock::options() const noexcept { return sides_->writer.options(); }

}  // namespace redlock
