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
  bool take_notice(unsigned& position, std::chrono::milliseconds& pttl) noexcept override {
    return slot_.take_notice(position, pttl);
  }
  void spend_release_wake() noexcept override { slot_.spend_release_wake(); }
  void queued_behind_watchers() noexcept override { slot_.deafen(); }
  void wake() noexcept override { slot_.notify(); }
  void give_up() noexcept override { slot_.give_up(); }
  void retoken(std::string token_sha1) noexcept override { slot_.retoken(std::move(token_sha1)); }
  bool set_waker(Waker* waker) noexcept override {
    slot_.set_waker(waker);
    return true;
  }
  bool poll(SteadyClock::time_point /*until*/) override { return slot_.take(); }

 protected:
  WakeSlot slot_;
};

// Subscribes the slot on every node, each through the subscriber that hears the channels there
// (ClientImpl::subscriber(channel): through a cluster, the slot owner's sharded one). A sharded
// subscription that is lost (the slot moved, the master failed: WakeSlot::relocate) is made
// again by the waiter's next wait_until, where the map says the slot lives now; at most once per
// kRelocatePace, so a cluster still electing a new master is not asked in a tight loop.
//
// A refreshed map that still names the node which dropped the channels is stale: that node heard
// of the change first (a master demoted by CLUSTER FAILOVER unsubscribes its sharded clients,
// then, as a replica of its shard, accepts SSUBSCRIBE again), while the node asked for the map
// may not have yet. Such a node is skipped and the map refreshed again at the next pace, for at
// most kStaleRounds rounds (the waiter relies on its timer meanwhile); then the map is believed.
// A node whose subscriber cannot be reached is retried the same way.
class SubscriptionWatch final : public SlotWatch {
 public:
  SubscriptionWatch(const std::vector<std::shared_ptr<ClientImpl>>& nodes,
                    const WatchChannels& channels, SteadyClock::time_point caller_deadline,
                    std::string token_sha1)
      : SlotWatch(std::move(token_sha1)), channels_(channels) {
    nodes_.reserve(nodes.size());
    for (const auto& node : nodes) nodes_.push_back(node.get());
    subscribe_all(caller_deadline);
  }
  ~SubscriptionWatch() override { unsubscribe_all(); }
  SubscriptionWatch(const SubscriptionWatch&) = delete;
  SubscriptionWatch& operator=(const SubscriptionWatch&) = delete;

  bool wait_until(SteadyClock::time_point until) override {
    if (relocated_now(until)) return true;
    until = due(until);
    if (!slot_.must_relocate() && !retry_ && watched_.size() == 1) {
      // Alone in this process, the waiter reads the subscription itself (no thread hop).
      const std::size_t more = channels_.more_releases ? channels_.more_releases->size() : 0;
      const std::size_t registrations = (channels_.grant.empty() ? 1 : 2) + more;
      if (auto woken = watched_.front()->wait_lent(slot_, registrations, until)) return *woken;
    }
    return slot_.wait_until(until);
  }
  SteadyClock::time_point due(SteadyClock::time_point until) noexcept override {
    if (!retry_ && !slot_.must_relocate()) return until;
    return std::min(until, next_relocation_);  // back to relocate once the pace allows
  }
  bool poll(SteadyClock::time_point until) override { return relocated_now(until) || slot_.take(); }
  bool take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept override {
    if (slot_.take_grant(seq, fence)) return true;
    if (channels_.grant.empty() || watched_.size() != 1) return false;
    // Read what reached a connection this waiter was lent, e.g. during its last attempt.
    watched_.front()->drain_returned(slot_);
    return slot_.take_grant(seq, fence);
  }
  bool behind_others() const noexcept override {
    if (watched_.empty()) return false;
    for (const Subscriber* s : watched_) {
      if (!s->waiting_before(channels_.release, &slot_)) return false;
    }
    return true;
  }

 private:
  static constexpr std::chrono::milliseconds kRelocatePace{250};
  static constexpr int kStaleRounds = 12;  // 3 s of kRelocatePace

  // A lost subscription is made again if the pace allows: true then (releases while it moved
  // were missed, so the caller tries again now).
  bool relocated_now(SteadyClock::time_point until) {
    if (!slot_.must_relocate() && !retry_) return false;
    const auto now = SteadyClock::now();
    if (now < next_relocation_) return false;
    next_relocation_ = now + kRelocatePace;
    slot_.relocated();
    relocate(until);
    return true;
  }

  // Subscribes again where the refreshed maps say, avoiding the subscribers that dropped the
  // slot (see the class comment).
  void relocate(SteadyClock::time_point until) {
    if (!retry_) avoid_.clear();
    for (const Subscriber* s : watched_) {
      if (!s->watches(channels_.release, &slot_)) avoid_.push_back(s);
    }
    retry_ = false;
    unsubscribe_all();
    for (ClientImpl* node : nodes_) node->subscription_moved();
    subscribe_all(until);
    if (retry_) {
      ++stale_rounds_;
    } else {
      stale_rounds_ = 0;
    }
  }

  // Registration goes to all nodes first, then the confirmations are awaited together.
  void subscribe_all(SteadyClock::time_point caller_deadline) {
    watched_.clear();
    std::chrono::milliseconds limit{0};
    for (ClientImpl* node : nodes_) {
      Subscriber* const subscriber = subscribe(*node);
      if (subscriber == nullptr) continue;
      watched_.push_back(subscriber);
      limit = std::max(limit, node->endpoint().connect_timeout + node->endpoint().command_timeout);
    }
    const auto deadline = std::min(SteadyClock::now() + limit, caller_deadline);
    // The attempt that follows must come after the subscriptions are live (no lost wake-up); a
    // node that does not confirm in time leaves this waiter to its timer there.
    for (Subscriber* s : watched_) {
      each_channel([&](const std::string& c, Subscriber::Hearing) { s->confirmed(c, deadline); });
    }
  }
  void unsubscribe_all() noexcept {
    for (Subscriber* s : watched_) {
      each_channel([&](const std::string& c, Subscriber::Hearing) { s->unwatch(c, &slot_); });
    }
    watched_.clear();
  }
  // Registers the slot on `node`'s channels; null (nothing left registered) if it cannot, or if
  // the map is taken for stale (retry_ is then set).
  Subscriber* subscribe(ClientImpl& node) noexcept {
    Subscriber* subscriber = nullptr;
    const bool may_retry = stale_rounds_ < kStaleRounds;
    try {
      subscriber = &node.subscriber(channels_.release);  // the grant channel shares its slot
      if (may_retry && std::find(avoid_.begin(), avoid_.end(), subscriber) != avoid_.end()) {
        retry_ = true;
        return nullptr;
      }
      each_channel([&](const std::string& c, Subscriber::Hearing hearing) {
        subscriber->watch(c, &slot_, hearing);
      });
      return subscriber;
    } catch (const std::exception& e) {
      // Whatever was registered must not outlive this slot.
      if (subscriber != nullptr) {
        each_channel(
            [&](const std::string& c, Subscriber::Hearing) { subscriber->unwatch(c, &slot_); });
      }
      logf(LogLevel::debug, "redlock: cannot subscribe for {}: {}", channels_.key, e.what());
    } catch (...) {
    }
    retry_ = retry_ || (may_retry && node.router() != nullptr);  // a map can change
    return nullptr;
  }
  // f(channel, hearing) for every channel of the watch.
  template <class F>
  void each_channel(F&& f) const {
    using Hearing = Subscriber::Hearing;
    f(channels_.release, Hearing::primary);
    if (!channels_.grant.empty()) f(channels_.grant, Hearing::primary);
    if (channels_.more_releases == nullptr) return;
    const Hearing more = channels_.more_secondary ? Hearing::secondary : Hearing::primary;
    for (const std::string& c : *channels_.more_releases) f(c, more);
  }

  const WatchChannels channels_;
  std::vector<ClientImpl*> nodes_;
  std::vector<Subscriber*> watched_;  // the subscribers the slot is registered with now
  SteadyClock::time_point next_relocation_{};
  std::vector<const Subscriber*> avoid_;  // dropped the slot since the last good relocation
  bool retry_{false};                     // relocate again at the next pace
  int stale_rounds_{0};                   // relocations in a row that set retry_
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
      const Subscriber* s = node->started_subscriber(engine.channel());
      if (s == nullptr || !s->subscribed(engine.channel())) return false;
      if (!grant.empty() && !s->subscribed(grant)) return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

bool release_watch_live(const ClientImpl& node, const WatchChannels& channels) noexcept {
  try {
    const Subscriber* s = node.started_subscriber(channels.release);
    if (s == nullptr || !s->subscribed(channels.release)) return false;
    if (!channels.grant.empty() && !s->subscribed(channels.grant)) return false;
    if (channels.more_releases == nullptr) return true;
    for (const std::string& c : *channels.more_releases) {
      if (!s->subscribed(c)) return false;
    }
    return true;
  } catch (...) {
    return false;
  }
}

std::size_t waiting_listeners(const ClientImpl& node, const std::string& channel,
                              std::size_t heard) noexcept {
  const Subscriber* own = node.started_subscriber(channel);
  if (heard == 0 || own == nullptr || !own->lingering(channel)) return heard;
  return heard - 1;
}

std::unique_ptr<ReleaseWatch> make_timer_watch() { return std::make_unique<SlotWatch>(); }

}  // namespace detail
}  // namespace redlock
