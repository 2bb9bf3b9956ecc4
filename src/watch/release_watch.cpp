// src/watch/release_watch.cpp: the Redis ReleaseWatch over each node's Subscriber, and the
// timer-only watch of polling waits.
#include "watch/release_watch.hpp"

#include <algorithm>
#include <chrono>
#include <exception>

#include "core/engine.hpp"
#include "io/connection.hpp"
#include "util/log_internal.hpp"
#include "watch/subscriber.hpp"

namespace redlock {
namespace detail {
namespace {

// A ReleaseWatch on a WakeSlot only: woken by its timer, by wake(), or by whoever else was given
// the slot (the subscribers of SubscriptionWatch).
class SlotWatch : public ReleaseWatch {
 public:
  explicit SlotWatch(std::string token_sha1 = {}) : slot_(std::move(token_sha1)) {}
  bool wait_until(SteadyClock::time_point until) override { return slot_.wait_until(until); }
  bool take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept override {
    return slot_.take_grant(seq, fence);
  }
  void wake() noexcept override { slot_.notify(); }
  void retoken(std::string token_sha1) noexcept override { slot_.retoken(std::move(token_sha1)); }

 protected:
  WakeSlot slot_;
};

class SubscriptionWatch final : public SlotWatch {
 public:
  SubscriptionWatch(const std::vector<std::shared_ptr<ClientImpl>>& nodes,
                    const WatchChannels& channels, SteadyClock::time_point caller_deadline,
                    std::string token_sha1)
      : SlotWatch(std::move(token_sha1)), channels_(channels) {
    watched_.reserve(nodes.size());
    std::chrono::milliseconds limit{0};
    for (const auto& node : nodes) {
      if (!subscribe(*node)) continue;
      watched_.push_back(node.get());
      limit = std::max(limit, node->endpoint().connect_timeout + node->endpoint().command_timeout);
    }
    const auto deadline = std::min(SteadyClock::now() + limit, caller_deadline);
    // The attempt that follows must come after the subscriptions are live (no lost wake-up); a
    // node that does not confirm in time leaves this waiter to its timer there.
    for (ClientImpl* node : watched_) {
      each_channel([&](const std::string& c) { node->subscriber().confirmed(c, deadline); });
    }
  }
  ~SubscriptionWatch() override {
    for (ClientImpl* node : watched_) {
      each_channel([&](const std::string& c) { node->subscriber().unwatch(c, &slot_); });
    }
  }
  SubscriptionWatch(const SubscriptionWatch&) = delete;
  SubscriptionWatch& operator=(const SubscriptionWatch&) = delete;
  bool behind_others() const noexcept override {
    if (watched_.empty()) return false;
    for (const ClientImpl* node : watched_) {
      const Subscriber* s = node->started_subscriber();
      if (s == nullptr || !s->waiting_before(channels_.release, &slot_)) return false;
    }
    return true;
  }

 private:
  // Registers the slot on `node`'s channels; false (nothing left registered) if it cannot.
  bool subscribe(ClientImpl& node) noexcept {
    Subscriber* subscriber = nullptr;
    try {
      subscriber = &node.subscriber();
      each_channel([&](const std::string& c) { subscriber->watch(c, &slot_); });
      return true;
    } catch (const std::exception& e) {
      // Whatever was registered must not outlive this slot.
      if (subscriber != nullptr) {
        each_channel([&](const std::string& c) { subscriber->unwatch(c, &slot_); });
      }
      logf(LogLevel::debug, "redlock: cannot subscribe for {}: {}", channels_.key, e.what());
    } catch (...) {
    }
    return false;
  }
  template <class F>
  void each_channel(F&& f) const {
    f(channels_.release);
    if (!channels_.grant.empty()) f(channels_.grant);
  }

  const WatchChannels channels_;
  std::vector<ClientImpl*> watched_;
};

const std::string& grant_channel_of(const LeaseEngine& engine) noexcept {
  static const std::string none;
  return engine.fair() ? engine.grant_channel() : none;
}

}  // namespace

std::unique_ptr<ReleaseWatch> make_release_watch(
    const std::vector<std::shared_ptr<ClientImpl>>& nodes, const WatchChannels& channels,
    SteadyClock::time_point deadline, std::string token_sha1) {
  return std::make_unique<SubscriptionWatch>(nodes, channels, deadline, std::move(token_sha1));
}

std::unique_ptr<ReleaseWatch> make_release_watch(const LeaseEngine& engine,
                                                 SteadyClock::time_point deadline,
                                                 std::string token_sha1) {
  const WatchChannels channels{engine.channel(), grant_channel_of(engine), engine.key()};
  return make_release_watch(engine.nodes(), channels, deadline, std::move(token_sha1));
}

bool release_watch_live(const LeaseEngine& engine) noexcept {
  try {
    const std::string& grant = grant_channel_of(engine);
    for (const auto& node : engine.nodes()) {
      const Subscriber* s = node->started_subscriber();
      if (s == nullptr || !s->subscribed(engine.channel())) return false;
      if (!grant.empty() && !s->subscribed(grant)) return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

std::size_t waiting_listeners(const ClientImpl& node, const std::string& channel,
                              std::size_t heard) noexcept {
  const Subscriber* own = node.started_subscriber();
  if (heard == 0 || own == nullptr || !own->lingering(channel)) return heard;
  return heard - 1;
}

std::unique_ptr<ReleaseWatch> make_timer_watch() { return std::make_unique<SlotWatch>(); }

}  // namespace detail
}  // namespace redlock
