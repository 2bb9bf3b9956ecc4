// src/watch/subscriber_replies.cpp: what the subscriber's connection brings back: replies to
// SUBSCRIBE and UNSUBSCRIBE, refusals, and the messages that wake waiters or hand them the lock.
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <redlock/errors.hpp>

#include "io/wire.hpp"
#include "watch/subscriber.hpp"

namespace redlock {
namespace detail {

void Subscriber::read_replies(Connection& connection) {
  const IoResult result = read_some(connection);
  if (result.error == IoError::again) return;
  if (result.error != IoError::none) {
    std::rethrow_exception(transport_error(result, link_.address, "read from", connection.timeout));
  }
  heard();
  for (;;) {
    ReplyPtr reply;
    const Decoded decoded = connection.in.next(reply);
    if (decoded == Decoded::need_more) return;
    if (decoded == Decoded::malformed)
      std::rethrow_exception(protocol_error(connection, link_.address));
    handle_reply(*reply);
  }
}

namespace {

// A sharded subscription's error that says the channel's slot is not served here (now).
bool served_elsewhere(std::string_view error) noexcept {
  for (std::string_view prefix : {"MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN"}) {
    if (error.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// The answer to PING: a "pong" message in subscribed mode (RESP2), PONG outside it.
bool is_pong(const redisReply& reply) noexcept {
  if (reply.type == REDIS_REPLY_STATUS) return text(&reply) == "PONG";
  return reply.type == REDIS_REPLY_ARRAY && reply.elements == 2 && text(reply.element[0]) == "pong";
}

// "ssubscribe", "sunsubscribe", "smessage" as their classic names; empty for anything else.
std::string_view unsharded(std::string_view kind) noexcept {
  if (kind == "ssubscribe" || kind == "sunsubscribe" || kind == "smessage") return kind.substr(1);
  return {};
}

}  // namespace

void Subscriber::handle_reply(const redisReply& reply) {
  if (is_pong(reply)) {
    on_pong();
    return;
  }
  if (reply.type == REDIS_REPLY_ERROR) {
    handle_error(text(&reply));
    return;
  }
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements < 3) return;
  const bool sharded = link_.pubsub == PubSub::sharded;
  const std::string_view kind =
      sharded ? unsharded(text(reply.element[0])) : text(reply.element[0]);
  const std::string channel(text(reply.element[1]));
  // The answer to what we sent, or (sharded) the server dropping a channel whose slot moved.
  bool asked = false;
  if ((kind == "subscribe" || kind == "unsubscribe") && !sent_.empty()) {
    const Outgoing& front = sent_.front();
    asked = !sharded ||
            (front.channel == channel && (front.op == Op::subscribe) == (kind == "subscribe"));
    if (asked) sent_.pop_front();
  }
  std::lock_guard<std::mutex> guard(mutex_);
  auto it = channels_.find(channel);
  if (kind == "message") ++stats_.messages;
  if (it == channels_.end()) return;
  if (kind == "message") {
    on_message(it->second, text(reply.element[2]));
  } else if (kind == "subscribe") {
    on_subscribe(it->first, it->second);
  } else if (kind == "unsubscribe") {
    if (asked) {
      on_unsubscribe(it);
    } else {
      orphan(it);
    }
  }
}

void Subscriber::handle_error(std::string_view error) {
  // The answer to the oldest command without one (e.g. NOPERM from an ACL user without channel
  // permissions; sharded, MOVED for a channel whose slot has moved).
  if (sent_.empty()) return;
  const Outgoing out = std::move(sent_.front());
  sent_.pop_front();
  if (out.op == Op::ping) return;  // refused, but answered: the server is there
  if (link_.pubsub == PubSub::sharded && served_elsewhere(error)) {
    std::lock_guard<std::mutex> guard(mutex_);
    const auto it = channels_.find(out.channel);
    if (it != channels_.end()) orphan(it);
    return;
  }
  if (out.op == Op::subscribe) refuse(error);
}

void Subscriber::on_pong() {
  if (sent_.empty() || sent_.front().op != Op::ping) {
    throw ProtocolError(fmt::format(
        "redlock: {} answered a PING sent after a command still unanswered (replies lost)",
        link_.address));
  }
  sent_.pop_front();
}

void Subscriber::orphan(Channels::iterator it) noexcept {
  for (WakeSlot* slot : it->second.waiters) slot->relocate();
  registrations_ -= it->second.waiters.size();
  channels_.erase(it);  // an Idle entry naming it is skipped when due
  confirmed_.notify_all();
}

void Subscriber::orphan_all() noexcept {
  if (link_.pubsub != PubSub::sharded || channels_.empty()) return;
  while (!channels_.empty()) orphan(channels_.begin());
  outgoing_.clear();
  idle_.clear();
}

void Subscriber::on_message(Channel& channel, std::string_view payload) {
  std::uint64_t seq = 0;
  std::uint64_t fence = 0;
  std::string_view named;                          // SHA1 of the waiter's token
  if (parse_notice(payload, seq, fence, named)) {  // (position, pttl): for one waiter only
    for (WakeSlot* slot : channel.waiters) slot->offer_notice(named, seq, fence);
    return;
  }
  if (!parse_grant(payload, seq, fence, named)) {
    wake_one(channel);
    return;
  }
  // A hand-over is for one waiter only (possibly in another process): nobody else here could
  // take the lock, so nobody else is woken.
  for (WakeSlot* slot : channel.waiters) slot->offer_grant(named, seq, fence);
}

void Subscriber::on_subscribe(const std::string& name, Channel& channel) {
  channel.state = State::subscribed;
  if (channel.waiters.empty()) became_idle(name, channel, Contended::no);
  if (channel.wake_all_on_confirm) {
    channel.wake_all_on_confirm = false;
    for (WakeSlot* slot : channel.waiters) slot->notify();
  }
  confirmed_.notify_all();
}

void Subscriber::on_unsubscribe(Channels::iterator it) {
  if (it->second.waiters.empty()) {
    channels_.erase(it);
  } else {
    it->second.state = State::subscribing;
    enqueue(Op::subscribe, it->first);
  }
}

}  // namespace detail
}  // namespace redlock
