// src/lock/engine_backend.cpp: TEMPORARY: LeaseEngine as a LeaseBackend (see engine_backend.hpp).
#include "lock/engine_backend.hpp"

#include "core/engine.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {
namespace {

class EngineBackend final : public LeaseBackend {
 public:
  explicit EngineBackend(std::shared_ptr<LeaseEngine> engine) : engine_(std::move(engine)) {}

  const std::string& key() const noexcept override { return engine_->key(); }
  std::size_t size() const noexcept override { return engine_->nodes().size(); }
  std::size_t quorum() const noexcept override { return engine_->quorum(); }
  std::chrono::milliseconds ttl() const noexcept override { return engine_->ttl(); }
  bool fair() const noexcept override { return engine_->fair(); }

  AcquireResult acquire(const AcquireRequest& request) override {
    return engine_->acquire(*request.token, request.attempt == Attempt::contended,
                            request.queue == Queue::join, request.seq);
  }
  AcquireResult handed_over(std::uint64_t fence, SteadyClock::time_point sent) const override {
    return engine_->handed_over(fence, sent);
  }
  ExtendResult extend(const std::string& token, std::chrono::milliseconds ttl) override {
    ExtendResult result = engine_->extend(token, ttl);
    result.reason =
        size() > 1 && result.confirmed > 0 ? LostReason::no_quorum : LostReason::refused;
    return result;
  }
  ReleaseResult release(const std::string& token, Announce announce) override {
    ReleaseResult result = engine_->release(token, nullptr, announce == Announce::waiters);
    // Refusals ("not ours") leave fewer than a quorum that may still hold it: lost. A node
    // that did not answer is unknown, not a loss.
    result.quorum_kept = size() - result.refused >= quorum();
    result.reason = size() > 1 ? LostReason::no_quorum : LostReason::refused;
    return result;
  }

  bool watch_live() const noexcept override { return release_watch_live(*engine_); }
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline,
                                      std::string token_sha1) override {
    return make_release_watch(*engine_, deadline, std::move(token_sha1));
  }

  const std::shared_ptr<LeaseEngine>& engine() const noexcept { return engine_; }

 private:
  std::shared_ptr<LeaseEngine> engine_;
};

}  // namespace

std::shared_ptr<LeaseBackend> make_lease_backend(std::vector<std::shared_ptr<ClientImpl>> nodes,
                                                 std::string key, const LockOptions& options) {
  return std::make_shared<EngineBackend>(
      std::make_shared<LeaseEngine>(std::move(nodes), std::move(key), options));
}

std::shared_ptr<LeaseEngine> engine_of(const LeaseBackend& backend) noexcept {
  return static_cast<const EngineBackend&>(backend).engine();
}

}  // namespace detail
}  // namespace redlock
