// src/protocol/commands.cpp: the builders of the library's commands (see commands.hpp).
#include "protocol/commands.hpp"

namespace redlock {
namespace detail {
namespace {

// Appends the fair scripts' numkeys and KEYS (lock, queue, queue info, fence counter).
template <int N>
Command<N>& fair_keys(Command<N>& c, const LockKeys& keys) noexcept {
  return c.arg("4").arg(keys.key).arg(keys.queue).arg(keys.queue_info).arg(keys.fence);
}

}  // namespace

std::string_view publish_flag(PubSub pubsub) noexcept {
  return pubsub == PubSub::sharded ? "1" : "0";
}

void build_set_nx(AcquireCommand& c, const LockKeys& keys, std::string_view token,
                  std::string_view ttl_ms, AcquireDialect dialect) noexcept {
  c.arg("SET").arg(keys.key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
  if (dialect == AcquireDialect::set_nx_get) c.arg("GET");
}

void build_acquire_fenced(AcquireCommand& c, const LockKeys& keys, std::string_view token,
                          std::string_view ttl_ms) noexcept {
  c.evalsha(Scripts::get().acquire_fenced).arg("2").arg(keys.key).arg(keys.fence);
  c.arg(token).arg(ttl_ms);
}

void build_fair_acquire(AcquireCommand& c, const LockKeys& keys, std::string_view token,
                        const FairAttempt& attempt) noexcept {
  fair_keys(c.evalsha(Scripts::get().fair_acquire), keys);
  c.arg(token).arg(attempt.ttl_ms).arg(attempt.spublish).arg(attempt.join).arg(attempt.seq);
  c.arg(attempt.fenced).arg(attempt.grant_channel);
}

void build_release(ReleaseCommand& c, const LockKeys& keys, std::string_view token,
                   ReleaseScript script, Send send, PubSub pubsub) noexcept {
  const Scripts& scripts = Scripts::get();
  const Script& chosen = script == ReleaseScript::fair_release ? scripts.fair_release
                         : script == ReleaseScript::release    ? scripts.release
                                                               : scripts.undo;
  if (send == Send::eval) {
    c.arg("EVAL").arg(chosen.body());
  } else {
    c.evalsha(chosen);
  }
  if (script == ReleaseScript::fair_release) {
    fair_keys(c, keys).arg(token).arg(keys.channel).arg(publish_flag(pubsub));
    return;
  }
  c.arg("1").arg(keys.key).arg(token);
  if (script == ReleaseScript::release) c.arg(keys.channel).arg(publish_flag(pubsub));
}

void build_extend(ExtendCommand& c, std::string_view key, std::string_view token,
                  std::string_view ttl_ms) noexcept {
  c.evalsha(Scripts::get().extend).arg("1").arg(key).arg(token).arg(ttl_ms);
}

void build_raise_fence(RaiseFenceCommand& c, const LockKeys& keys, std::string_view token,
                       std::string_view fence) noexcept {
  c.evalsha(Scripts::get().raise_fence).arg("2").arg(keys.key).arg(keys.fence);
  c.arg(token).arg(fence);
}

void build_key_command(KeyCommand& c, std::string_view verb, std::string_view key) noexcept {
  c.arg(verb).arg(key);
}

}  // namespace detail
}  // namespace redlock
