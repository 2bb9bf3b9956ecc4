// src/watch/subscriber.hpp: one pub/sub connection per Client, shared by every waiter on every key.
//
// A waiter registers a WakeSlot for a lock's release channel; the subscriber thread SUBSCRIBEs
// on the first waiter of a channel and UNSUBSCRIBEs once it has had no waiter for kLinger (so a
// busy lock is not re-subscribed on every contended call). watch() returns only once the server
// has confirmed the subscription, so an attempt made after it cannot miss a release (no lost
// wake-up). Each release wakes one waiter of the process, the longest waiting (not the whole
// herd); a waiter that leaves with an unconsumed wake-up hands it on, and so does one that
// leaves without holding after it consumed one (WakeSlot::give_up: the lock may be free for the
// next waiter, e.g. a writer's marker refuses only readers). After a connection loss the
// thread reconnects, re-subscribes, and wakes every waiter (releases during the gap were not
// seen).
// Fair mode: a hand-over message names its waiter's token and wakes only that waiter.
// A lone waiter of the process may read the connection itself (wait_lent, subscriber_lend.cpp):
// its wake-up then needs no hop from this thread to the waiting one.
// The work per message, watch and unwatch does not grow with the number of channels: channels
// are hashed, and those left without a waiter wait in a queue ordered by when they became idle
// (kLinger is the same for all), so the thread looks only at the ones that are due.
// If the server refuses a SUBSCRIBE (NOPERM: an ACL user without channel permission), the
// subscriber logs one warning and subscribes nothing more: waiters then poll at retry_delay.
// Sharded (a Redis Cluster master: SSUBSCRIBE, SUNSUBSCRIBE, smessage): the subscriber hears the
// channels of the slots its master owns. When a channel stops being served there (the server
// unsubscribes it when its slot moves away, or answers MOVED/ASK/CLUSTERDOWN/TRYAGAIN, or the
// connection is lost or cannot be made: the master may have failed), the channel is dropped and
// each of its waiters is told to subscribe again where the slot lives now (WakeSlot::relocate);
// the subscriber does not reconnect for it.
// Through Sentinel the connection follows the master: when the link says the connection was
// made under a master's answer that has since been forgotten (a failover's events, a command
// connection's failure or READONLY reply), the thread closes it (taking it back from a
// borrower first), reconnects to the master now, re-subscribes every channel and wakes every
// waiter once that is confirmed, as after a lost connection. A former master stays a master
// until the sentinels demote it: kept, the connection would hear none of the releases.
// Health (issue 41): a connection can die without a word, e.g. the server drops its socket (its
// tcp-keepalive) behind a partition that later heals: the client's side stays open and hears
// nothing, and its waiters' releases go to nobody. So once the server has sent nothing for
// kPingAfter (2 s) the thread sends PING (answered in subscribed mode by a "pong" message), and
// a connection that brings no byte back within kPingAnswer (2 s) of it is lost: closed,
// reconnected, every channel re-subscribed and every waiter woken once that is confirmed, as
// above. A dead peer is noticed at most kPingAfter + kPingAnswer (4 s) after the last byte it
// sent, at once if it answers the PING with a reset. An idle connection costs one PING per 2 s;
// one that hears messages, none. A lent connection is recalled for the PING. The socket also
// has TCP keepalive (kKeepAlive*: the kernel's own net, and what keeps middleboxes' state).
#ifndef REDLOCK_SRC_SUBSCRIBER_HPP
#define REDLOCK_SRC_SUBSCRIBER_HPP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "io/command.hpp"  // PubSub

struct redisReply;

namespace redlock {
namespace detail {

struct Connection;
class Waker;

// Where one waiter is told "a release happened". Shared by the subscribers of every node the
// waiter watches (Redlock: any node's notification wakes it).
class WakeSlot {
 public:
  WakeSlot() = default;
  // Fair mode: SHA1 (hex) of the token the waiter queued with; hand-overs naming it are
  // delivered to this slot.
  explicit WakeSlot(std::string token_sha1) : token_sha1_(std::move(token_sha1)) {}

  void notify() noexcept;
  // Fair mode: the server handed the lock to the token whose SHA1 is `named`
  // ("grant:<seq>:<fence>:<sha1>"); kept if that is this slot's token. Any thread.
  void offer_grant(std::string_view named, std::uint64_t seq, std::uint64_t fence) noexcept;
  // Fair mode: the server told the token whose SHA1 is `named` that it is at `position` (1 the
  // head, 2 the next) of the queue and that the holder's lease ends in `pttl_ms`
  // ("head:<position>:<pttl>:<sha1>"); kept if that is this slot's token. Ends a wait (ready())
  // without counting as a wake-up (wait_until and take() return false for it). Any thread.
  void offer_notice(std::string_view named, std::uint64_t position, std::uint64_t pttl_ms) noexcept;
  // Consumes a notice, if one arrived. Any thread.
  bool take_notice(unsigned& position, std::chrono::milliseconds& pttl) noexcept;
  // True if a wake-up, a hand-over or a notice waits to be consumed. Any thread.
  bool ready() noexcept;
  // Fair mode: the waiter queues with another token from now on (SHA1 hex); a hand-over to the
  // old one that was not taken yet is dropped. Any thread.
  void retoken(std::string token_sha1) noexcept;
  // Sharded pub/sub: the subscription this slot relied on is gone (its slot moved, its master
  // failed); wakes the waiter, who must subscribe again where the channel lives now. Any thread.
  void relocate() noexcept;
  // True once relocate() was called, until relocated(). Any thread.
  bool must_relocate() noexcept;
  // The waiter has subscribed again and attempts at once: the flag and a pending wake-up are
  // cleared. Any thread.
  void relocated() noexcept;
  // A plain wake-up still pending is spent (an attempt about to be sent covers it); one that
  // came with a hand-over or a relocation is kept. Any thread.
  void spend_release_wake() noexcept;
  // Fair mode, a waiter queued behind the watchers (ReleaseWatch::queued_behind_watchers): a
  // pending plain wake-up is spent and offer_release() refuses, until a notice, a relocation
  // or a new token. Any thread.
  void deafen() noexcept;
  // A release was announced on a channel this slot watches: notify()s it and returns true,
  // unless the slot is deaf to releases (false: the caller offers it to another waiter). Any
  // thread.
  bool offer_release() noexcept;
  // True if notified and not yet consumed by wait_until.
  bool pending() noexcept;
  // Waits until notified or `deadline`; returns true if notified (and consumes it).
  bool wait_until(std::chrono::steady_clock::time_point deadline);
  // True once wait_until has been called: the waiter met contention (a watch that was free,
  // made before an attempt that succeeded at once, never waits).
  bool waited() noexcept;
  // Like wait_until with a deadline already past: counts as having waited, and returns (and
  // consumes) a pending wake-up. Never throws. Any thread.
  bool take() noexcept;
  // The waiter leaves without holding: a release wake-up it consumed (wait_until, take) is
  // pending again, so that unwatching passes it on (Subscriber::unwatch). Never throws. Any
  // thread.
  void give_up() noexcept;
  // While the waiter reads its subscriber's connection itself (Subscriber::wait_lent): an event
  // fd that notify(), a kept offer_grant() and relocate() also write, to end that read's poll;
  // -1 for none. Never throws. Any thread.
  void interrupt_with(int event_fd) noexcept;
  // Consumes a hand-over, if one arrived: the attempt number it named and the fence it carried.
  bool take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept;
  // The async driver's waker (null: none): told, under this slot's lock, whenever wait_until
  // would end; at once if a wake-up or a notice is pending. Any thread.
  void set_waker(Waker* waker) noexcept;

 private:
  std::string token_sha1_;  // guarded by mutex_
  std::mutex mutex_;
  std::condition_variable cv_;
  bool notified_{false};
  bool waited_{false};
  bool granted_{false};
  bool noticed_{false};
  bool relocate_{false};
  bool deaf_{false};      // queued behind the watchers: plain release announcements are not for it
  bool released_{false};  // the pending wake-up came with offer_release()
  bool heard_{false};     // a wake-up from offer_release() was consumed (give_up passes it on)
  unsigned notice_position_{0};
  std::uint64_t notice_pttl_{0};
  std::uint64_t grant_seq_{0};
  std::uint64_t grant_fence_{0};
  int interrupt_fd_{-1};   // guarded by mutex_; written (under it) when notified
  Waker* waker_{nullptr};  // guarded by mutex_; woken (under it) when notified

  void interrupt() noexcept;  // mutex_ held
  bool consume() noexcept;    // mutex_ held: returns and clears the pending wake-up
};

// A hand-over message ("grant:<seq>:<fence>:<sha1 of token>"), parsed. False if `payload` is
// not one.
bool parse_grant(std::string_view payload, std::uint64_t& seq, std::uint64_t& fence,
                 std::string_view& token_sha1) noexcept;
// A watcher's notice ("head:<position>:<pttl ms>:<sha1 of token>"), parsed. False if `payload`
// is not one.
bool parse_notice(std::string_view payload, std::uint64_t& position, std::uint64_t& pttl_ms,
                  std::string_view& token_sha1) noexcept;

struct SubscriberStats {
  std::uint64_t messages{0};
  std::uint64_t reconnects{0};
  std::uint64_t idle_closes{0};  // connections closed after idle_close() without a channel
  std::uint64_t loans{0};        // times a lone waiter was lent the connection (wait_lent)
  std::size_t channels{0};
};

// How long a subscriber keeps its connection without any channel before closing it (30 s; the
// next watch() reconnects). Thread-safe.
std::chrono::milliseconds idle_close();
// Test hook: sets idle_close() for subscribers from now on. Thread-safe.
void set_idle_close_for_test(std::chrono::milliseconds after);

// How the subscriber reaches its server: given by the pool that owns it (no back-reference).
struct SubscriberLink {
  std::string address;  // "host:port" or "unix:/path", for messages
  // Opens a connection with the handshake done. Throws redlock::Error.
  std::function<std::unique_ptr<Connection>()> connect;
  // Told why a connect failed (the node's health log). Must not throw.
  std::function<void(std::string_view why)> unreachable;
  // SUBSCRIBE or SSUBSCRIBE (a cluster's master: see the file comment).
  PubSub pubsub{PubSub::classic};
  // Whether `connection` still reaches the server meant (through Sentinel: it was made under
  // the master's current answer). Null: always. Called under the subscriber's mutex: must be
  // quick and must not throw.
  std::function<bool(const Connection&)> current;
  // Registers a callback for news that a connection may no longer be current (through
  // Sentinel: ClientImpl::follow_master); returns the registration (dropping it ends the
  // calls, waiting for one under way), null for none. Null: there is never such news.
  std::function<std::shared_ptr<void>(std::function<void()>)> follow;
};

class Subscriber {
 public:
  explicit Subscriber(SubscriberLink link);
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // How a waiter hears a channel: for its own lock (primary), or also for another lock's sake
  // (secondary: a ReadWriteLock reader on the writers' channel, for a plain Lock's release). A
  // release's one wake-up goes to the first primary waiter, and to a secondary one only when no
  // primary waiter is left to take it.
  enum class Hearing { primary, secondary };
  // Adds `slot` as a waiter on `channel` (subscribing if it is the first). Does not wait.
  void watch(const std::string& channel, WakeSlot* slot, Hearing hearing = Hearing::primary);
  // Waits until the server has confirmed the subscription to `channel`, or `deadline`, or the
  // node is known to be down. Returns true if confirmed; false means the waiter relies on its
  // timer (its slot stays registered and may still be woken).
  bool confirmed(const std::string& channel, std::chrono::steady_clock::time_point deadline);
  // True if the server has confirmed a subscription to `channel` that is still current (another
  // waiter has it, or it lingers after one). A hint: it may lapse right after.
  bool subscribed(const std::string& channel) const;
  // True if the server may count this subscriber among `channel`'s subscribers while no waiter
  // of this process is registered on it (the subscription lingers after its last waiter). A
  // release then heard by one subscriber was heard by nobody who waits. A hint, like
  // subscribed(). Never throws.
  bool lingering(const std::string& channel) const noexcept;
  // True if another waiter registered on `channel` before `slot` (a release wakes it first).
  // Never throws.
  bool waiting_before(const std::string& channel, const WakeSlot* slot) const noexcept;
  // True if `slot` is registered on `channel` (false once the server dropped the channel:
  // sharded, its slot is served elsewhere). Never throws.
  bool watches(const std::string& channel, const WakeSlot* slot) const noexcept;
  // Removes the waiter; the last one of a channel unsubscribes it. Never throws.
  void unwatch(const std::string& channel, WakeSlot* slot) noexcept;

  // A lone waiter reads the connection itself: its wake-up then needs no hop from the
  // subscriber thread to the waiting thread. If `slot` is the only waiter here (registered on
  // `registrations` channels), the connection is up with nothing in flight, and pub/sub is
  // classic, the thread lends the connection and parks; this waits like
  // slot.wait_until(until) and returns whether it was woken. The connection is given back
  // before it returns, and earlier on a recall (a watch, unwatch or stop that needs the thread
  // writes the event fd) or a read error (the thread then reconnects). Returns nullopt, at once
  // or after the thread declined or recalled, if the caller must go on waiting on the slot.
  // Only the thread that waits on `slot` may call it. Never throws.
  std::optional<bool> wait_lent(WakeSlot& slot, std::size_t registrations,
                                std::chrono::steady_clock::time_point until) noexcept;
  // The waiter whose slot this is, with the connection returned by its last wait_lent (the
  // thread still parked), reads what arrived since: a fair waiter at its deadline, so that a
  // hand-over sent in time is not missed. Does nothing otherwise. Never throws.
  void drain_returned(WakeSlot& slot) noexcept;
  // The longest message kept of a borrower's failed read (truncated, never allocated).
  static constexpr std::size_t kReasonSize = 160;
  // Health (see the file comment): a PING after this long without a byte from the server...
  static constexpr std::chrono::milliseconds kPingAfter{2000};
  // ...and the connection lost if no byte comes back within this long of it.
  static constexpr std::chrono::milliseconds kPingAnswer{2000};
  // TCP keepalive: the first probe after this long idle, then one per interval; the kernel
  // fails the connection after kKeepAliveProbes unanswered ones (16 s of silence).
  static constexpr std::chrono::seconds kKeepAliveIdle{10};
  static constexpr std::chrono::seconds kKeepAliveInterval{2};
  static constexpr int kKeepAliveProbes = 3;

  SubscriberStats stats() const;
  // Test hook: closes the current connection as if the server had dropped it.
  void drop_connection_for_test();

 private:
  enum class State { subscribing, subscribed, unsubscribing };
  struct Channel {
    // In arrival order, the primary waiters first, then the `secondaries` (Hearing); the first
    // is woken first.
    std::vector<WakeSlot*> waiters;
    std::size_t secondaries{0};
    State state{State::subscribing};
    // When the channel was created, or a waiter that had to wait left it: the linger counts
    // from here once the last waiter has left (a thread alone that only watched, as a lingering
    // subscription lets it do for free, does not keep the subscription alive).
    std::chrono::steady_clock::time_point idle_since{std::chrono::steady_clock::now()};
    bool wake_all_on_confirm{false};  // re-subscribed after a reconnect: releases were missed
  };
  using Channels = std::unordered_map<std::string, Channel>;
  // A channel that was left without a waiter at `since` (stale once it has a waiter again or
  // became idle later: its Channel::idle_since then differs).
  struct Idle {
    std::string channel;
    std::chrono::steady_clock::time_point since;
  };
  static constexpr std::chrono::milliseconds kLinger{500};
  // Wakes the longest-waiting waiter of `channel` that has no wake-up pending. mutex_ held.
  static void wake_one(Channel& channel) noexcept;
  enum class Op : unsigned char { subscribe, unsubscribe, ping };
  struct Outgoing {
    Op op;
    std::string channel;
  };

  // The thread: (re)connects, sends what is queued, schedules unsubscribes, reads what arrives.
  void run() noexcept;
  // Handles stop and drop requests and lends the connection (parked until it is given back);
  // false once the thread must end. Takes mutex_.
  bool obey(std::unique_ptr<Connection>& connection);
  // Lending (wait_lent). The thread answers a request (mutex_ held):
  void answer_lend(Connection* connection);
  // The thread waits until the loan ends, recalling it when an unsubscribe falls due, a command
  // is queued or it must stop. Returns true if the borrower's read failed (lent_reason_ says
  // why).
  bool park_while_lent(std::unique_lock<std::mutex>& lock);
  // Pops the due entries of idle_ that no longer ask for an unsubscribe. mutex_ held.
  void drop_stale_idle(std::chrono::steady_clock::time_point now) noexcept;
  // The borrower asks the thread for the connection (only if `ask`: when it is returned, no
  // asking is needed); null if it is not lent. Takes mutex_.
  Connection* borrow(WakeSlot& slot, std::size_t registrations,
                     std::chrono::steady_clock::time_point until, bool ask) noexcept;
  // True if the thread must have the connection back: a command to send, an unsubscribe due,
  // stop, drop, news(), or another waiter (registrations_ differ from the borrower's). mutex_ held.
  bool thread_needed(std::chrono::steady_clock::time_point now) noexcept;
  // thread_needed but for other waiters: a command, an unsubscribe or a PING due, stop, drop, or
  // news() to look at. mutex_ held.
  bool thread_work_due(std::chrono::steady_clock::time_point now) noexcept;
  bool recall_needed() noexcept;  // thread_needed, taking mutex_
  // The borrower reads what arrived; null, or why the read failed (in `reason`, or a literal).
  const char* read_lent(Connection& connection, WakeSlot& slot,
                        char (&reason)[kReasonSize]) noexcept;
  // The borrower ends the loan; `failure` non-null: reading failed, the thread reconnects.
  // Unless the thread is needed now, it stays parked (Lend::returned) and is resumed by
  // whatever needs it, or lends again at once. mutex_ held.
  void give_back(WakeSlot& slot, const char* failure) noexcept;
  // The thread goes on with its loop. mutex_ held.
  void resume_thread() noexcept;
  // A new connection with every channel re-subscribed, or null after a failed attempt (having
  // waited `backoff`, which then doubles up to 1 s). Takes mutex_.
  std::unique_ptr<Connection> reconnect(std::chrono::milliseconds& backoff);
  void resubscribe_all();  // mutex_ held
  // Writes what watch()/unwatch() queued, in order. Throws redlock::Error.
  void send_outgoing(Connection& connection);
  // Queues UNSUBSCRIBE for channels without a waiter for kLinger (looking only at the idle queue's
  // due entries); returns how long to sleep (ms) until the next one is due (0: some were queued).
  // Takes mutex_.
  int schedule_unsubscribes();
  // Sleeps until the connection (if any) or the event fd is readable, or `timeout_ms` (-1: no
  // limit). True if the connection is. Throws ConnectionError if poll fails.
  bool wait_readable(const Connection* connection, int timeout_ms);
  bool has_channels() const;  // takes mutex_
  // Health: sends a PING after kPingAfter without a byte read; returns `timeout_ms` lowered to
  // when the thread must look again (0: read what has come first). Throws TimeoutError when no
  // byte came within kPingAnswer of a PING, redlock::Error if the write fails. Thread only.
  int probe(Connection& connection, int timeout_ms);
  // A byte was read from the connection (by the thread or a borrower). Any thread.
  void heard() noexcept;
  // When the connection is due a PING (kPingAfter after the last byte read). Any thread.
  std::chrono::steady_clock::time_point ping_due() const noexcept;
  // The answer to a PING ("pong", or PONG outside subscribed mode). Throws ProtocolError if a
  // PING is not the oldest command awaiting its answer (replies were lost). Thread only.
  void on_pong();
  // Closes the connection once no channel, command or reply has been pending for
  // idle_close(); returns `timeout_ms` lowered to when that is due (-1 stays "no limit" while
  // channels exist). Takes mutex_.
  int close_if_idle(std::unique_ptr<Connection>& connection, int timeout_ms);
  // Reads what arrived and handles every complete reply. Throws redlock::Error.
  void read_replies(Connection& connection);
  void handle_reply(const redisReply& reply);
  // An error reply: answers the oldest command sent (a refusal, or when sharded a redirection,
  // which drops its channel). Takes mutex_.
  void handle_error(std::string_view error);
  // Sharded: `channel` is served elsewhere now; drops it and tells its waiters to relocate.
  // mutex_ held.
  void orphan(Channels::iterator it) noexcept;
  // Sharded: every channel (the connection is gone). mutex_ held.
  void orphan_all() noexcept;
  void on_message(Channel& channel, std::string_view payload);   // mutex_ held
  void on_subscribe(const std::string& name, Channel& channel);  // mutex_ held
  // mutex_ held; may erase the entry.
  void on_unsubscribe(Channels::iterator it);
  // `channel` has just lost its last waiter, or was confirmed without one: queues its
  // unsubscribe for kLinger after idle_since, which moves to now if the waiter that left had
  // to wait (Contended::yes). mutex_ held.
  enum class Contended : unsigned char { no, yes };
  void became_idle(const std::string& name, Channel& channel, Contended contended);
  void lost(std::unique_ptr<Connection>& connection, const char* why) noexcept;
  // The link's news (SubscriberLink::follow): the thread looks whether its connection is still
  // current, taking it back from a borrower first. Any thread; takes mutex_.
  void news() noexcept;
  bool current(const Connection& connection) const noexcept;  // SubscriberLink::current
  // The server answered a SUBSCRIBE with `error`: stop subscribing (waiters poll), drop every
  // channel, log one warning. Takes mutex_.
  void refuse(std::string_view error);
  void enqueue(Op op, const std::string& channel);  // mutex_ held
  // unwatch() without the loan: true if the thread must be woken to schedule an unsubscribe.
  // mutex_ held.
  bool remove_waiter(const std::string& channel, WakeSlot* slot) noexcept;
  // Writes the event fd, and wakes the thread if it is parked after a loan.
  void wake_thread() noexcept;
  void signal_event_fd() noexcept;  // the event fd alone

  const SubscriberLink link_;
  std::deque<Outgoing> sent_;  // thread only: sent, not yet confirmed, in order
  // Health: when the thread last sent a PING (thread only), and the steady clock's count when
  // a byte was last read from the connection (by the thread or a borrower).
  std::optional<std::chrono::steady_clock::time_point> ping_sent_;
  std::atomic<std::chrono::steady_clock::rep> heard_{0};
  int event_fd_{-1};
  mutable std::mutex mutex_;
  std::condition_variable confirmed_;
  Channels channels_;              // guarded by mutex_
  std::deque<Idle> idle_;          // guarded by mutex_: oldest first
  std::deque<Outgoing> outgoing_;  // guarded by mutex_
  bool connected_{false};          // guarded by mutex_
  bool failing_{false};            // guarded by mutex_: last connect attempt failed
  bool stop_{false};               // guarded by mutex_
  bool drop_requested_{false};     // guarded by mutex_
  bool moved_{false};              // guarded by mutex_: news() since the thread last looked
  std::optional<std::chrono::steady_clock::time_point> empty_since_;  // no channel since; mutex_
  // Guarded by mutex_: the server refused a SUBSCRIBE (an ACL user without channel permission);
  // from then on nothing is subscribed and waiters poll. Kept for the Subscriber's life.
  bool refused_{false};
  SubscriberStats stats_;  // guarded by mutex_
  // Lending (wait_lent), guarded by mutex_. While lent the thread is parked and the borrower
  // alone uses the connection and what the thread alone uses otherwise (sent_).
  // returned: the borrower gave the connection back between two of its waits, and the thread
  // stays parked until something needs it (resume_thread) or the borrower waits again.
  enum class Lend : unsigned char { none, requested, lent, returned };
  Lend lend_{Lend::none};
  const WakeSlot* borrower_{nullptr};
  std::size_t borrower_registrations_{0};
  Connection* lent_{nullptr};
  bool lent_broken_{false};          // the borrower's read failed
  char lent_reason_[kReasonSize]{};  // why
  std::size_t registrations_{0};     // (channel, waiter) pairs in channels_
  std::condition_variable lend_cv_;  // lend_ changed
  std::shared_ptr<void> following_;  // SubscriberLink::follow's registration
  std::thread thread_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_SUBSCRIBER_HPP
