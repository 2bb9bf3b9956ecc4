// src/election/redis_board.cpp: the leader board on Redis (one Client or a quorum). The lease is
// the lock engine's, on election_key(name) with fencing; the board is one more key in
// its slot, `<lock key>:id`, holding "<fence> <token> <id>" of the last claim. A claim writes it
// only while the lock key holds the claimant's token and announces on the lock's release
// channel; leader() is one script that answers only while the lock key holds the recorded
// token, so an expired or released leader (key gone) or a grant not yet claimed is never
// reported. The record has no expiry, like the fence counter beside it: one small key per name.
#include "election/redis_board.hpp"

#include <algorithm>
#include <charconv>
#include <exception>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <redlock/errors.hpp>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "io/pool.hpp"
#include "protocol/scripts.hpp"
#include "util/key_slot.hpp"

namespace redlock {
namespace detail {
namespace {

// KEYS[1] lock key, KEYS[2] leader record; ARGV[1] token, ARGV[2] channel, ARGV[3] the SPUBLISH
// flag, ARGV[4] the record. Returns 1 if claimed.
const Script& claim_script() {
  static const Script script(REDLOCK_PUBLISH_LUA
                             R"(if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[2], ARGV[4])
publish(ARGV[2], 'leader')
return 1)");
  return script;
}

// KEYS[1] lock key, KEYS[2] leader record. Returns nil, or {fence, id, pttl} of the leader.
const Script& read_script() {
  static const Script script(R"(local pttl = redis.call('pttl', KEYS[1])
if pttl <= 0 then return false end
local record = redis.call('get', KEYS[2])
if not record then return false end
local a = string.find(record, ' ', 1, true)
local b = a and string.find(record, ' ', a + 1, true)
if not b or string.sub(record, a + 1, b - 1) ~= redis.call('get', KEYS[1]) then return false end
return {string.sub(record, 1, a - 1), string.sub(record, b + 1), pttl})");
  return script;
}

std::uint64_t to_u64(const std::string& text) {
  std::uint64_t value = 0;
  const auto end = text.data() + text.size();
  if (std::from_chars(text.data(), end, value).ptr != end) {
    throw ProtocolError("redlock: a leader record with a fence that is not a number: " + text);
  }
  return value;
}

Sighting decode(const Reply& reply) {
  Sighting seen;
  if (reply.type() != Reply::Type::array) return seen;
  const auto& e = reply.elements();
  if (e.size() != 3) throw ProtocolError("redlock: an unexpected reply to the leader script");
  seen.leader = Leader{e[1].str(), to_u64(e[0].str())};
  seen.expires_in = std::chrono::milliseconds(e[2].integer());
  return seen;
}

}  // namespace

RedisBoard::RedisBoard(std::vector<Client> nodes, std::shared_ptr<LeaseEngine> engine)
    : nodes_(std::move(nodes)),
      engine_(std::move(engine)),
      record_(helper_key(engine_->key(), ":id")) {}

// Runs `each` on every node (one at a time); a node's failure is kept. Throws when fewer than
// a quorum answered: the first failure (QuorumUnavailableError on a quorum).
template <class Each>
void RedisBoard::on_nodes(Each&& each) const {
  std::exception_ptr failure;
  std::size_t answered = 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    try {
      each(i);
      ++answered;
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  const std::size_t quorum = quorum_of(nodes_.size());
  if (answered >= quorum) return;
  if (nodes_.size() == 1) std::rethrow_exception(failure);
  throw QuorumUnavailableError("redlock: fewer than " + std::to_string(quorum) + " of " +
                               std::to_string(nodes_.size()) + " nodes answered for " +
                               engine_->key());
}

bool RedisBoard::claim(const std::string& token, std::uint64_t fence, const std::string& id) {
  const std::string record = std::to_string(fence) + ' ' + token + ' ' + id;
  std::size_t confirmed = 0;
  on_nodes([&](std::size_t i) {
    const bool sharded = Access::client(nodes_[i])->pubsub() == PubSub::sharded;
    const Reply reply = nodes_[i].eval(claim_script(), {engine_->key(), record_},
                                       {token, engine_->channel(), sharded ? "1" : "0", record});
    if (reply.integer() == 1) ++confirmed;
  });
  return confirmed >= quorum_of(nodes_.size());
}

// On a quorum, the leader is the one a majority of nodes names (the same term and id); its
// lease ends at the earliest of theirs.
Sighting RedisBoard::read(Look) {
  std::vector<Sighting> seen(nodes_.size());
  on_nodes([&](std::size_t i) {
    seen[i] = decode(nodes_[i].eval(read_script(), {engine_->key(), record_}, {}));
  });
  for (const Sighting& candidate : seen) {
    if (!candidate.leader) continue;
    Sighting agreed = candidate;
    std::size_t votes = 0;
    for (const Sighting& other : seen) {
      if (other.leader != candidate.leader) continue;
      ++votes;
      agreed.expires_in = std::min(agreed.expires_in, other.expires_in);
    }
    if (votes >= quorum_of(nodes_.size())) return agreed;
  }
  return Sighting{};
}

std::unique_ptr<ReleaseWatch> RedisBoard::watch(SteadyClock::time_point deadline) {
  return engine_->watch(deadline, std::string());
}

}  // namespace detail
}  // namespace redlock
