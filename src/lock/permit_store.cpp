// src/lock/permit_store.cpp: a Semaphore's permits on its Redis server (see permit_store.hpp).
#include "lock/permit_store.hpp"

#include <string_view>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "io/connection.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {
namespace {

// KEYS[1..n] the slot keys, KEYS[n+1] the fence counter; ARGV[1] token, ARGV[2] ttl ms, ARGV[3]
// "1" with fencing. Takes the first free slot (SET PX). A repeat of the same attempt (a retried
// connection) finds its token and re-arms that slot; it gets a fresh fence, so no two holds ever
// share one. Returns {slot, fence (0 without fencing)} or {0, smallest pttl of the slots (-1:
// none expires)}. GET on a slot holding another type fails the script with WRONGTYPE.
const char kAcquireLua[] = R"(local n = #KEYS - 1
local free = 0
local pttl = -1
local function fence()
  if ARGV[3] ~= '1' then return 0 end
  return redis.call('incr', KEYS[n + 1])
end
for i = 1, n do
  local holder = redis.call('get', KEYS[i])
  if holder == ARGV[1] then
    redis.call('pexpire', KEYS[i], ARGV[2])
    return {i, fence()}
  end
  if not holder then
    if free == 0 then free = i end
  else
    local left = redis.call('pttl', KEYS[i])
    if left >= 0 and (pttl < 0 or left < pttl) then pttl = left end
  end
end
if free == 0 then return {0, pttl} end
redis.call('set', KEYS[free], ARGV[1], 'PX', ARGV[2])
return {free, fence()})";

// The rollback of an attempt whose outcome is unknown (timed out, connection lost): KEYS the
// slot keys; ARGV[1] token, ARGV[2] release channel. Deletes the slot holding the token, if any,
// and announces it.
const char kUndoLua[] = R"(for i = 1, #KEYS do
  if redis.call('get', KEYS[i]) == ARGV[1] then
    redis.call('del', KEYS[i])
    return 1 + redis.call('publish', ARGV[2], ARGV[1])
  end
end
return 0)";

// Never destroyed, like Scripts::get(): semaphores with static storage may still use them.
const Script& acquire_script() {
  static const Script& script = *new Script(kAcquireLua);
  return script;
}
const Script& undo_script() {
  static const Script& script = *new Script(kUndoLua);
  return script;
}

SlotReply read_slot_reply(const redisReply* r, std::size_t limit, const std::string& address) {
  if (r != nullptr && r->type == REDIS_REPLY_ERROR) {
    std::rethrow_exception(server_error(address, "the semaphore acquire script", text(r)));
  }
  const bool shape = r != nullptr && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                     r->element[0]->type == REDIS_REPLY_INTEGER &&
                     r->element[1]->type == REDIS_REPLY_INTEGER;
  const long long slot = shape ? r->element[0]->integer : -1;
  const long long value = shape ? r->element[1]->integer : -1;
  if (slot < 0 || static_cast<unsigned long long>(slot) > limit || (slot > 0 && value < 0)) {
    throw ProtocolError(
        fmt::format("redlock: unexpected reply to the semaphore acquire script from {}", address));
  }
  SlotReply out;
  out.slot = static_cast<std::size_t>(slot);
  if (slot > 0) {
    out.fence = static_cast<std::uint64_t>(value);
  } else {
    out.holder_pttl = std::chrono::milliseconds(value);
  }
  return out;
}

// argv storage for one command with a variable number of arguments.
struct Argv {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  Argv& arg(std::string_view value) {
    argv.push_back(value.data());
    lens.push_back(value.size());
    return *this;
  }
  CommandView view(const Script* script = nullptr) const {
    return CommandView{static_cast<int>(argv.size()), argv.data(), lens.data(), script};
  }
};

}  // namespace

PermitStore::PermitStore(Client client, const std::string& key, std::size_t limit,
                         const LockOptions& options)
    : client_(std::move(client)), key_(key), options_(options) {
  permit_keys_.reserve(limit);
  for (std::size_t i = 1; i <= limit; ++i)
    permit_keys_.push_back(key_ + ":permit:" + std::to_string(i));
  fence_key_ = key_ + ":permit:fence";
  channel_ = key_ + ":permit:released";
  ttl_ms_ = std::to_string(options_.ttl.count());
  engines_.resize(limit);
  engine_for(1);  // validates the options as a Lock's engine does
}

std::shared_ptr<LeaseEngine> PermitStore::engine_for(std::size_t slot) {
  std::shared_ptr<LeaseEngine>& engine = engines_[slot - 1];
  if (!engine) {
    LockOptions slot_options = options_;
    slot_options.fencing = false;
    engine = std::make_shared<LeaseEngine>(
        std::vector<std::shared_ptr<ClientImpl>>{Access::client(client_)}, permit_keys_[slot - 1],
        slot_options);
  }
  return engine;
}

const std::shared_ptr<ClientImpl>& PermitStore::node() const noexcept {
  return Access::client(client_);
}

SlotReply PermitStore::acquire(const std::string& token) {
  const Script& script = acquire_script();
  const std::string numkeys = std::to_string(permit_keys_.size() + 1);
  Argv command;
  command.arg("EVALSHA").arg(script.sha1()).arg(numkeys);
  for (const auto& k : permit_keys_) command.arg(k);
  command.arg(fence_key_).arg(token).arg(ttl_ms_).arg(options_.fencing ? "1" : "0");
  // A server too slow to answer may still run it: the rollback follows on the same connection.
  Argv rollback;
  rollback.arg("EVAL").arg(kUndoLua).arg(std::to_string(permit_keys_.size()));
  for (const auto& k : permit_keys_) rollback.arg(k);
  rollback.arg(token).arg(channel_);
  NodeBatch batch;
  batch.node = Access::client(client_).get();
  batch.commands.push_back(command.view(&script));
  batch.on_timeout.push_back(rollback.view());
  execute(&batch, 1);
  if (batch.error) {
    bool timed_out = false;
    try {
      std::rethrow_exception(batch.error);
    } catch (const TimeoutError&) {
      timed_out = true;
    } catch (...) {
    }
    if (!timed_out) undo(token);  // the request may have run before the connection died
    std::rethrow_exception(batch.error);
  }
  return read_slot_reply(batch.replies[0].get(), permit_keys_.size(),
                         Access::client(client_)->address());
}

void PermitStore::undo(const std::string& token) noexcept {
  try {
    std::vector<std::string_view> keys(permit_keys_.begin(), permit_keys_.end());
    client_.eval(undo_script(), keys, {token, channel_});
  } catch (const std::exception& e) {
    logf(LogLevel::debug, "redlock: rollback of an attempt on {}: {}", key_, e.what());
  } catch (...) {
  }
}

long long PermitStore::release(std::size_t slot, const std::string& token) {
  const Reply r = client_.eval(Scripts::get().release, {permit_keys_[slot - 1]}, {token, channel_});
  return r.type() == Reply::Type::integer ? r.integer() : 0;
}

}  // namespace detail
}  // namespace redlock
