// src/lock/rw_sides.hpp: what a ReadWriteLock object is, on any store: two LockCores, one over
// the writer's lease and one over a reader's, each driven through a LockBase (so waiting,
// re-entrancy, renewal and loss are a Lock's), and the downgrade between them where the store
// can convert a writer's hold (Redis: core/rw_lease.hpp).
#ifndef REDLOCK_SRC_LOCK_RW_SIDES_HPP
#define REDLOCK_SRC_LOCK_RW_SIDES_HPP

#include <memory>
#include <string>

#include <redlock/lock.hpp>
#include <redlock/options.hpp>

#include "core/backend.hpp"

namespace redlock {
namespace detail {

class LockCore;
class RwWriterLease;
class RwReaderLease;

// One side of the lock, with a Lock's members.
class RwSide final : public LockBase {
 public:
  explicit RwSide(std::shared_ptr<LockCore> core) : LockBase(std::move(core)) {}
};

class RwSides {
 public:
  // Redis: the leases convert a writer's hold into a reader's (downgrade()).
  RwSides(std::shared_ptr<RwWriterLease> writer, std::shared_ptr<RwReaderLease> reader,
          const LockOptions& options);
  // Another store: `writer` and `reader` are its leases (the same key, already validated);
  // downgrade() throws std::logic_error.
  RwSides(std::shared_ptr<LeaseBackend> writer, std::shared_ptr<LeaseBackend> reader,
          const LockOptions& options);

  // See ReadWriteLock::downgrade().
  bool downgrade();
  const std::string& key() const noexcept { return writer.key(); }

 private:
  void give_back(const std::string& token) noexcept;

  std::shared_ptr<RwWriterLease> writer_lease_;  // null: no downgrade
  std::shared_ptr<RwReaderLease> reader_lease_;
  std::shared_ptr<LockCore> writer_core_;
  std::shared_ptr<LockCore> reader_core_;

 public:
  RwSide writer;
  RwSide reader;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOCK_RW_SIDES_HPP
