// src/watch/subscriber.hpp: one pub/sub connection per Client, shared by every waiter on every key.
//
// A waiter registers a WakeSlot for a lock's release channel; the subscriber thread SUBSCRIBEs
// on the first waiter of a channel and UNSUBSCRIBEs once it has had no waiter for kLinger (so a
// busy lock is not re-subscribed on every contended call). watch() returns only once the server
// has confirmed the subscription, so an attempt made after it cannot miss a release (no lost
// wake-up). Each release wakes one waiter of the process, the longest waiting (not the whole
// herd); a waiter
// that leaves with an unconsumed wake-up hands it on. After a connection loss the thread
// reconnects, re-subscribes, and wakes every waiter (releases during the gap were not seen).
// Fair mode: a hand-over message names its waiter's token and wakes only that waiter.
// If the server refuses a SUBSCRIBE (NOPERM: an ACL user without channel permission), the
// subscriber logs one warning and subscribes nothing more: waiters then poll at retry_delay.
#ifndef REDLOCK_SRC_SUBSCRIBER_HPP
#define REDLOCK_SRC_SUBSCRIBER_HPP

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace redlock {
namespace detail {

class ClientImpl;

// Where one waiter is told "a release happened". Shared by the subscribers of every node the
// waiter watches (Redlock: any node's notification wakes it).
class WakeSlot {
 public:
  WakeSlot() = default;
  // Fair mode: SHA1 (hex) of the token the waiter queued with; hand-overs naming it are
  // delivered to this slot.
  explicit WakeSlot(std::string token_sha1) : token_sha1_(std::move(token_sha1)) {}

  void notify() noexcept;
  // Fair mode: the server handed the lock to this slot's token ("grant:<seq>:<fence>:<sha1>").
  void grant(std::uint64_t seq, std::uint64_t fence) noexcept;
  // True if notified and not yet consumed by wait_until.
  bool pending() noexcept;
  // Waits until notified or `deadline`; returns true if notified (and consumes it).
  bool wait_until(std::chrono::steady_clock::time_point deadline);
  // Consumes a hand-over, if one arrived: the attempt number it named and the fence it carried.
  bool take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept;
  const std::string& token_sha1() const noexcept { return token_sha1_; }

 private:
  const std::string token_sha1_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool notified_{false};
  bool granted_{false};
  std::uint64_t grant_seq_{0};
  std::uint64_t grant_fence_{0};
};

// A hand-over message ("grant:<seq>:<fence>:<sha1 of token>"), parsed. False if `payload` is
// not one.
bool parse_grant(std::string_view payload, std::uint64_t& seq, std::uint64_t& fence,
                 std::string_view& token_sha1) noexcept;

struct SubscriberStats {
  std::uint64_t messages{0};
  std::uint64_t reconnects{0};
  std::size_t channels{0};
};

class Subscriber {
 public:
  explicit Subscriber(ClientImpl& node);
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Adds `slot` as a waiter on `channel` (subscribing if it is the first). Does not wait.
  void watch(const std::string& channel, WakeSlot* slot);
  // Waits until the server has confirmed the subscription to `channel`, or `deadline`, or the
  // node is known to be down. Returns true if confirmed; false means the waiter relies on its
  // timer (its slot stays registered and may still be woken).
  bool confirmed(const std::string& channel, std::chrono::steady_clock::time_point deadline);
  // True if the server has confirmed a subscription to `channel` that is still current (another
  // waiter has it, or it lingers after one). A hint: it may lapse right after.
  bool subscribed(const std::string& channel) const;
  // Removes the waiter; the last one of a channel unsubscribes it. Never throws.
  void unwatch(const std::string& channel, WakeSlot* slot) noexcept;

  SubscriberStats stats() const;
  // Test hook: closes the current connection as if the server had dropped it.
  void drop_connection_for_test();

 private:
  enum class State { subscribing, subscribed, unsubscribing };
  struct Channel {
    std::vector<WakeSlot*> waiters;  // in arrival order; the first is woken first
    State state{State::subscribing};
    std::chrono::steady_clock::time_point idle_since{};  // when the last waiter left
    bool wake_all_on_confirm{false};  // re-subscribed after a reconnect: releases were missed
  };
  static constexpr std::chrono::milliseconds kLinger{500};
  // Wakes the longest-waiting waiter of `channel` that has no wake-up pending. mutex_ held.
  static void wake_one(Channel& channel) noexcept;
  struct Outgoing {
    bool subscribe;
    std::string channel;
  };

  void run() noexcept;
  // The server answered a SUBSCRIBE with `error`: stop subscribing (waiters poll), drop every
  // channel, log one warning. Takes mutex_.
  void refuse(std::string_view error);
  void enqueue(bool subscribe, const std::string& channel);  // mutex_ held
  void wake_thread() noexcept;

  ClientImpl& node_;
  int event_fd_{-1};
  mutable std::mutex mutex_;
  std::condition_variable confirmed_;
  std::map<std::string, Channel> channels_;  // guarded by mutex_
  std::deque<Outgoing> outgoing_;            // guarded by mutex_
  bool connected_{false};                    // guarded by mutex_
  bool failing_{false};                      // guarded by mutex_: last connect attempt failed
  bool stop_{false};                         // guarded by mutex_
  bool drop_requested_{false};               // guarded by mutex_
  // Guarded by mutex_: the server refused a SUBSCRIBE (an ACL user without channel permission);
  // from then on nothing is subscribed and waiters poll. Kept for the Subscriber's life.
  bool refused_{false};
  SubscriberStats stats_;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_SUBSCRIBER_HPP
