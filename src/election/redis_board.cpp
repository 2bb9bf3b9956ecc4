// src/election/redis_board.cpp: the leader board on Redis (one Client or a quorum). The lease is
// the lock engine's, on election_key(name) with fencing; the board is one more key in
// its slot, `<lock key>:id`, holding "<fence> <token> <id>" of the last claim. A claim writes it
// only while the lock key holds the claimant's token and announces on the lock's release
// channel; leader() is one MGET of both keys, an observer's read one script (it also needs the
// lease's time left): each names a leader only while the lock key holds the recorded token, so
// an expired or released leader (key gone) or a grant not yet claimed is never reported. The record
// has no expiry, like the fence counter beside it: one small key per name. On a quorum both scripts
// go to every node at once through the fan-out executor (io/executor), with the early finish of a
// Redlock attempt: done once a quorum settles the outcome, the other nodes given the executor's
// grace.
#include "election/redis_board.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <string_view>
#include <utility>

#include <redlock/errors.hpp>

#include "core/engine.hpp"
#include "core/tally.hpp"
#include "io/executor.hpp"
#include "io/pool.hpp"
#include "protocol/commands.hpp"
#include "protocol/scripts.hpp"
#include "util/key_slot.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {
namespace {

// KEYS[1] lock key, KEYS[2] leader record; ARGV[1] token, ARGV[2] channel, ARGV[3] the SPUBLISH
// flag, ARGV[4] the record. Returns 1 if claimed. Safe to run twice (Resend::allowed).
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

// EVALSHA sha 2 key record, and at most four arguments.
using BoardCommand = Command<9>;

std::uint64_t to_u64(const std::string& text) {
  std::uint64_t value = 0;
  const auto end = text.data() + text.size();
  if (std::from_chars(text.data(), end, value).ptr != end) {
    throw ProtocolError("redlock: a leader record with a fence that is not a number: " + text);
  }
  return value;
}

// Look::once reads the board with `MGET <lock key> <record>`: one plain command, atomic on the
// server, so as exact as the script (an expired lock key reads as nil) at the cost of a GET.
// The record's fence and id, if the lock key holds the record's token; views into `reply`.
struct RecordView {
  std::string_view fence;
  std::string_view id;
};
std::optional<RecordView> matching_record(const redisReply* reply) noexcept {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) return {};
  const redisReply* holder = reply->element[0];
  const redisReply* record = reply->element[1];
  if (holder->type != REDIS_REPLY_STRING || record->type != REDIS_REPLY_STRING) return {};
  const std::string_view text(record->str, record->len);
  const auto a = text.find(' ');
  const auto b = a == std::string_view::npos ? a : text.find(' ', a + 1);
  if (b == std::string_view::npos) return {};
  if (text.substr(a + 1, b - a - 1) != std::string_view(holder->str, holder->len)) return {};
  return RecordView{text.substr(0, a), text.substr(b + 1)};
}

// The leader an MGET reply names, or none; no lease time (-1). Throws ProtocolError for a
// fence that is not a number, as decode() does.
Sighting decode_pair(const redisReply* reply) {
  Sighting seen;
  if (const auto record = matching_record(reply)) {
    seen.leader = Leader{std::string(record->id), to_u64(std::string(record->fence))};
  }
  return seen;
}

bool names_by_record(const redisReply* reply) { return matching_record(reply).has_value(); }
bool names_by_script(const redisReply* reply) {
  return reply != nullptr && reply->type == REDIS_REPLY_ARRAY;
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

// Sends commands[i] to node i of `engine`, every node at once. With `early`, finishes once `yes`
// replies from a quorum, or "no" replies from so many that a quorum of `yes` is impossible,
// settle it; the other nodes get the executor's grace, as in a Redlock attempt. Without, waits
// for every node (each bounded by its command timeout). Returns each node's reply (null where
// the node failed or answered an error); `cut` (if given) is set to how many nodes the grace
// cut. Throws when fewer than a quorum answered (a node cut by the grace was reachable): for
// one node its own failure, else QuorumUnavailableError (or a node's error reply to
// `operation`).
enum class Settle { early, at_all };
PerNode<ReplyPtr> fan_out(const LeaseEngine& engine, const PerNode<BoardCommand>& commands,
                          bool (*yes)(const redisReply*), std::string_view operation,
                          Settle settle = Settle::early, std::size_t* cut_out = nullptr) {
  const auto& nodes = engine.nodes();
  const std::size_t n = nodes.size();
  PerNode<NodeBatch> batches(n);
  for (std::size_t i = 0; i < n; ++i) {
    batches[i].node = nodes[i].get();
    batches[i].commands.push_back(commands[i].view());
  }
  EarlyFinish early;
  early.needed = quorum_of(n);
  const auto settles = [yes](std::size_t, const redisReply* reply) { return yes(reply); };
  early.succeed_when(settles);
  execute(batches.data(), n, settle == Settle::early ? &early : nullptr);
  Tally tally(n);
  std::size_t cut = 0;
  PerNode<ReplyPtr> replies(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (batches[i].error) {
      tally.failed(i, batches[i].error);
      cut += batches[i].abandoned ? 1 : 0;
    } else if (is_error_reply(batches[i].replies[0].get())) {
      tally.server_error(i, *nodes[i], operation, error_text(batches[i].replies[0].get()));
    } else {
      tally.answered(yes(batches[i].replies[0].get()));
      replies[i] = std::move(batches[i].replies[0]);
    }
  }
  if (tally.answers() + cut < quorum_of(n)) std::rethrow_exception(tally.unavailable(nodes));
  if (cut_out != nullptr) *cut_out = cut;
  return replies;
}

}  // namespace

RedisBoard::RedisBoard(std::shared_ptr<LeaseEngine> engine)
    : engine_(std::move(engine)), record_(helper_key(engine_->key(), ":id")) {}

bool RedisBoard::claim(const std::string& token, std::uint64_t fence, const std::string& id) {
  const std::string record = std::to_string(fence) + ' ' + token + ' ' + id;
  const auto& nodes = engine_->nodes();
  PerNode<BoardCommand> commands(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    commands[i]
        .evalsha(claim_script())
        .arg("2")
        .arg(engine_->key())
        .arg(record_)
        .arg(token)
        .arg(engine_->channel())
        .arg(publish_flag(nodes[i]->pubsub()))
        .arg(record);
  }
  const PerNode<ReplyPtr> replies = fan_out(*engine_, commands, confirmed, "the leader claim");
  const auto claimed = std::count_if(replies.begin(), replies.end(),
                                     [](const ReplyPtr& reply) { return confirmed(reply.get()); });
  return static_cast<std::size_t>(claimed) >= quorum_of(nodes.size());
}

namespace {

// The leader a majority of `replies` names (the same term and id), its lease ending at the
// earliest of theirs; none if no leader has a majority. `best` is set to the most votes any
// leader had.
Sighting majority_leader(const PerNode<ReplyPtr>& replies, Look look, std::size_t& best) {
  const std::size_t n = replies.size();
  PerNode<Sighting> seen(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!replies[i]) continue;
    seen[i] =
        look == Look::once ? decode_pair(replies[i].get()) : decode(to_reply(replies[i].get()));
  }
  best = 0;
  for (const Sighting& candidate : seen) {
    if (!candidate.leader) continue;
    Sighting agreed = candidate;
    std::size_t votes = 0;
    for (const Sighting& other : seen) {
      if (other.leader != candidate.leader) continue;
      ++votes;
      agreed.expires_in = std::min(agreed.expires_in, other.expires_in);
    }
    best = std::max(best, votes);
    if (votes >= quorum_of(n)) return agreed;
  }
  return Sighting{};
}

}  // namespace

// leader() (Look::once) reads with MGET (decode_pair); an observer (Look::watch) also needs the
// lease's time left, which only the script gives. A user whose ACL lacks +mget (docs/operations.md
// did not list it before) is answered NOPERM once; from then on this board reads with the script.
Sighting RedisBoard::read(Look look) {
  if (look == Look::once && !mget_refused_.load(std::memory_order_relaxed)) {
    try {
      return read_with(Look::once);
    } catch (const Error& e) {
      if (std::string_view(e.what()).find("NOPERM") == std::string_view::npos) throw;
      mget_refused_.store(true, std::memory_order_relaxed);
      logf(LogLevel::info, "redlock: leader() of {} reads with a script: MGET was refused ({})",
           engine_->key(), e.what());
    }
  }
  return read_with(Look::watch);
}

// On a quorum, the leader is the one a majority of nodes names. The read is settled early once
// a quorum named a leader (usually the same one) or enough nodes named none that no leader can
// have a quorum. When the first answers name different leaders (a hand-over under way) and the
// nodes the grace cut could make a majority for one of them, every node is asked again and
// waited for: one more round trip, only while leaders change.
Sighting RedisBoard::read_with(Look look) {
  const std::size_t n = engine_->nodes().size();
  PerNode<BoardCommand> commands(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (look == Look::once) {
      commands[i].arg("MGET").arg(engine_->key()).arg(record_);
    } else {
      commands[i].evalsha(read_script()).arg("2").arg(engine_->key()).arg(record_);
    }
  }
  // A leader named (by the script: an array; by MGET: a record that the lock key's token matches).
  bool (*const names_leader)(const redisReply*) =
      look == Look::once ? names_by_record : names_by_script;
  std::size_t cut = 0;
  std::size_t best = 0;
  const Sighting first = majority_leader(
      fan_out(*engine_, commands, names_leader, "the leader read", Settle::early, &cut), look,
      best);
  if (first.leader || best == 0 || best + cut < quorum_of(n)) return first;
  return majority_leader(
      fan_out(*engine_, commands, names_leader, "the leader read", Settle::at_all), look, best);
}

std::unique_ptr<ReleaseWatch> RedisBoard::watch(SteadyClock::time_point deadline) {
  return engine_->watch(deadline, std::string());
}

}  // namespace detail
}  // namespace redlock
