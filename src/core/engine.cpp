// src/core/engine.cpp: acquire / extend / release on N nodes with the quorum rules of quorum.hpp.
#include "core/engine.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "util/log_internal.hpp"

namespace redlock {
namespace detail {
namespace {

const char kReleaseLua[] = R"(if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  return 1 + redis.call('publish', ARGV[2], ARGV[1])
end
return 0)";

// The rollback of a grant: compare-and-delete without announcing it (nobody was told the lock
// was held, so there is nothing to wake waiters for).
const char kUndoLua[] = R"(if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0)";

const char kExtendLua[] = R"(if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0)";

// A repeat of the very same attempt (a pooled connection that died after the server ran it is
// retried once) finds the key already holding its token: that is the grant, re-armed, with the
// counter's current value, which is this hold's fence (nothing else increments it meanwhile).
const char kAcquireFencedLua[] = R"(if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('incr', KEYS[2])}
end
if redis.call('type', KEYS[1]).ok ~= 'string' then
  return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
end
return {0, redis.call('pttl', KEYS[1])})";

const char kRaiseFenceLua[] = R"(if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local current = tonumber(redis.call('get', KEYS[2]) or '0')
if current < tonumber(ARGV[2]) then redis.call('set', KEYS[2], ARGV[2]) end
return 1)";

// Fair mode. Server time, not client time, decides whether a queued waiter is still alive (every
// client then judges by one clock). Dead waiters ahead of the caller are dropped from the queue.
const char kFairAcquireLua[] = R"(if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = redis.call('get', KEYS[1])
local function fence(incr)
  if ARGV[6] ~= '1' then return 0 end
  if incr then redis.call('incr', KEYS[4]) end
  return tonumber(redis.call('get', KEYS[4]) or '0')
end
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('lrem', KEYS[2], 0, ARGV[1])
  redis.call('hdel', KEYS[3], ARGV[1])
  return {1, fence(false)}
end
local head = redis.call('lindex', KEYS[2], 0)
while head and head ~= ARGV[1] do
  local info = redis.call('hget', KEYS[3], head)
  local alive = info and tonumber(string.match(info, '^(%d+):'))
  if alive and alive >= now then break end
  redis.call('lpop', KEYS[2])
  redis.call('hdel', KEYS[3], head)
  head = redis.call('lindex', KEYS[2], 0)
end
if not holder and (not head or head == ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if head then redis.call('lpop', KEYS[2]) end
  redis.call('hdel', KEYS[3], ARGV[1])
  return {1, fence(true)}
end
if ARGV[3] == '1' then
  local alive = tonumber(ARGV[4])
  -- Concatenated, never %s: Lua 5.1's format cuts a string at its first NUL (keys are binary).
  local info = string.format('%.0f', now + alive) .. ':' .. ARGV[2] .. ':' .. ARGV[5] .. ':' ..
    ARGV[6] .. ':' .. ARGV[7]
  if redis.call('hset', KEYS[3], ARGV[1], info) == 1 then
    redis.call('lrem', KEYS[2], 0, ARGV[1])
    redis.call('rpush', KEYS[2], ARGV[1])
  end
  -- One expiry for both keys (so they never outlive each other): outlasts every live place.
  local keep = math.max(2 * alive, redis.call('pttl', KEYS[2]), redis.call('pttl', KEYS[3]))
  redis.call('pexpire', KEYS[2], keep)
  redis.call('pexpire', KEYS[3], keep)
end
local pttl = -2
if holder then pttl = redis.call('pttl', KEYS[1]) end
return {0, pttl})";

const char kFairReleaseLua[] = R"(if redis.replicate_commands then redis.replicate_commands() end
redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('hdel', KEYS[3], ARGV[1])
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local waiter = redis.call('lpop', KEYS[2])
  if not waiter then break end
  local info = redis.call('hget', KEYS[3], waiter)
  redis.call('hdel', KEYS[3], waiter)
  if info then
    local alive, ttl, seq, fenced, channel = string.match(info, '^(%d+):(%d+):(%d+):([01]):(.+)$')
    if alive and tonumber(alive) >= now then
      redis.call('set', KEYS[1], waiter, 'PX', ttl)
      local fence = '0'
      if fenced == '1' then
        redis.call('incr', KEYS[4])
        fence = redis.call('get', KEYS[4])
      end
      redis.call('publish', channel, 'grant:' .. seq .. ':' .. fence .. ':' .. redis.sha1hex(waiter))
      return 1
    end
  end
end
redis.call('del', KEYS[1])
return 1 + redis.call('publish', ARGV[2], ARGV[1]))";

// Picks the exception to throw when no node gave a usable answer: a server error reply explains
// more than a transport failure.
std::exception_ptr pick_failure(const PerNode<std::exception_ptr>& errors,
                                const PerNode<bool>& is_server) {
  std::exception_ptr first;
  for (std::size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    if (is_server[i]) return errors[i];
    if (!first) first = errors[i];
  }
  return first;
}

// The failure of an attempt that fewer than a quorum of nodes answered: a server error reply if
// there was one; for one node its transport error; for several a QuorumUnavailableError naming
// every node that failed and why.
std::exception_ptr unavailable(const std::vector<std::shared_ptr<ClientImpl>>& nodes,
                               const PerNode<std::exception_ptr>& errors,
                               const PerNode<bool>& is_server) {
  if (nodes.size() == 1 || std::find(is_server.begin(), is_server.end(), true) != is_server.end()) {
    return pick_failure(errors, is_server);
  }
  std::string why;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!errors[i]) continue;
    ++failed;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const std::exception& e) {
      why += fmt::format("; {}: {}", nodes[i]->address(), e.what());
    }
  }
  return std::make_exception_ptr(QuorumUnavailableError(
      fmt::format("redlock: only {} of {} servers answered, fewer than the quorum of {}{}",
                  nodes.size() - failed, nodes.size(), quorum_of(nodes.size()), why)));
}

}  // namespace

AcquireReply read_acquire_reply(const redisReply* reply, const redisReply* pttl, bool scripted,
                                bool with_get, std::string_view token) noexcept {
  AcquireReply out;
  using Problem = AcquireReply::Problem;
  if (reply == nullptr) {
    out.problem = Problem::unexpected;
    return out;
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    out.problem = !scripted && text(reply).rfind("ERR syntax error", 0) == 0
                      ? Problem::syntax_error
                      : Problem::server_error;
    return out;
  }
  if (scripted) {
    // {1, fence} or {0, pttl}; a fence is a counter value (0: the script issued none).
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 || reply->element == nullptr ||
        reply->element[0] == nullptr || reply->element[1] == nullptr ||
        reply->element[0]->type != REDIS_REPLY_INTEGER ||
        reply->element[1]->type != REDIS_REPLY_INTEGER) {
      out.problem = Problem::unexpected;
      return out;
    }
    const long long flag = reply->element[0]->integer;
    const long long value = reply->element[1]->integer;
    if (flag == 1 && value >= 0) {
      out.answer = Answer::granted;
      out.fence = static_cast<std::uint64_t>(value);
    } else if (flag == 0) {
      out.answer = Answer::refused;
      out.holder_pttl = value;
    } else {
      out.problem = Problem::unexpected;
    }
    return out;
  }
  // SET NX PX [GET]: with GET, nil means it set the key (granted) and a string is the current
  // holder's token (ours only if an earlier send of this very attempt got through); without GET,
  // OK means granted and nil refused.
  switch (reply->type) {
    case REDIS_REPLY_NIL:
      out.answer = with_get ? Answer::granted : Answer::refused;
      break;
    case REDIS_REPLY_STATUS:
      if (text(reply) != "OK") {
        out.problem = Problem::unexpected;
        return out;
      }
      out.answer = Answer::granted;
      break;
    case REDIS_REPLY_STRING:
      out.answer = with_get && text(reply) == token ? Answer::granted : Answer::refused;
      break;
    default:
      out.problem = Problem::unexpected;
      return out;
  }
  if (out.answer == Answer::refused && pttl != nullptr && pttl->type == REDIS_REPLY_INTEGER) {
    out.holder_pttl = pttl->integer;
  }
  return out;
}

const Scripts& Scripts::get() {
  // Deliberately never destroyed: locks with static storage duration (and the watchdog's
  // threads) may still release or renew while the program exits.
  static const Scripts& scripts =
      *new Scripts{Script(kReleaseLua),    Script(kExtendLua), Script(kAcquireFencedLua),
                   Script(kRaiseFenceLua), Script(kUndoLua),   Script(kFairAcquireLua),
                   Script(kFairReleaseLua)};
  return scripts;
}

LeaseEngine::LeaseEngine(std::vector<std::shared_ptr<ClientImpl>> nodes, std::string key,
                         const LockOptions& options)
    : nodes_(std::move(nodes)),
      key_(std::move(key)),
      ttl_(options.ttl),
      drift_factor_(options.clock_drift_factor),
      fencing_(options.fencing),
      fair_(options.fair) {
  if (nodes_.empty()) throw std::invalid_argument("redlock: instances must not be empty");
  if (fair_ && nodes_.size() > 1) {
    throw std::invalid_argument(
        "redlock: options.fair is supported by a single-instance Lock only (a queue on several "
        "independent servers cannot agree on an order)");
  }
  // Several nodes: none may be another Client for a server already in the list (identity()
  // asks the server for its run_id; a single-instance Lock connects nothing here).
  std::map<std::string, std::size_t> identities;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i]) throw std::invalid_argument("redlock: instances contains an empty Client");
    if (nodes_.size() == 1) break;
    const auto [at, fresh] = identities.try_emplace(nodes_[i]->identity(), i);
    if (!fresh) {
      throw std::invalid_argument(fmt::format(
          "redlock: instances[{}] ({}) and instances[{}] ({}) are the same Redis server; each "
          "server may count only once towards the quorum",
          at->second, nodes_[at->second]->address(), i, nodes_[i]->address()));
    }
  }
  if (key_.empty()) throw std::invalid_argument("redlock: key must not be empty");
  if (key_.size() > kMaxKeyBytes) {
    throw std::invalid_argument(fmt::format("redlock: key is {} bytes; the maximum is {} bytes",
                                            key_.size(), kMaxKeyBytes));
  }
  if (ttl_.count() <= 0) {
    throw std::invalid_argument(
        fmt::format("redlock: options.ttl must be > 0 ms (got {} ms)", ttl_.count()));
  }
  if (ttl_ > kMaxTtl) {
    throw std::invalid_argument(fmt::format(
        "redlock: options.ttl is too large ({} ms; the maximum is 200 years)", ttl_.count()));
  }
  if (options.max_unavailable.count() < 0 || options.max_unavailable > kMaxTtl) {
    throw std::invalid_argument(fmt::format(
        "redlock: options.max_unavailable must be >= 0 ms and at most 200 years (got {} ms)",
        options.max_unavailable.count()));
  }
  if (options.retry_delay.count() <= 0 || options.retry_delay > kMaxTtl) {
    throw std::invalid_argument(
        fmt::format("redlock: options.retry_delay must be > 0 ms and at most 200 years (got {} ms)",
                    options.retry_delay.count()));
  }
  if (options.max_hold > kMaxTtl) {
    throw std::invalid_argument("redlock: options.max_hold must be at most 200 years");
  }
  if (!(drift_factor_ >= 0.0 && drift_factor_ < 1.0)) {
    throw std::invalid_argument(fmt::format(
        "redlock: options.clock_drift_factor must be in [0, 1) (got {})", drift_factor_));
  }
  if (drift_of(ttl_, drift_factor_) >= ttl_) {
    throw std::invalid_argument(
        fmt::format("redlock: options.ttl of {} ms leaves no validity after the drift allowance of "
                    "ttl * {} + 2 ms; use a longer ttl",
                    ttl_.count(), drift_factor_));
  }
  if (options.max_hold.count() < 0) {
    throw std::invalid_argument("redlock: options.max_hold must be >= 0 ms");
  }
  fence_key_ = key_ + ":fence";
  channel_ = key_ + ":released";
  ttl_ms_ = std::to_string(ttl_.count());
  grant_channel_ = channel_ + ":" + nodes_[0]->waiter_id();
  queue_key_ = key_ + ":queue";
  queue_info_key_ = key_ + ":queue:info";
  // A waiter refreshes its place at least every 1.5 * retry_delay (the longest jittered wait).
  queue_alive_ =
      std::min(kMaxTtl, std::max(options.retry_delay * 5, std::chrono::milliseconds(250)));
  queue_alive_ms_ = std::to_string(queue_alive_.count());
}

AcquireResult LeaseEngine::handed_over(std::uint64_t fence, SteadyClock::time_point sent) const {
  const Decision d = decide(1, 1, ttl_, drift_factor_, sent, SteadyClock::now());
  AcquireResult result;
  result.granted = 1;
  result.held = d.held;
  result.valid_until = d.valid_until;
  result.fence = d.held ? fence : 0;
  return result;
}

AcquireResult LeaseEngine::acquire(const std::string& token, bool want_pttl, bool enqueue,
                                   std::uint64_t seq) {
  const Scripts& scripts = Scripts::get();
  const std::size_t n = nodes_.size();
  const bool scripted = fencing_ || fair_;
  PerNode<NodeBatch> batches(n);
  PerNode<FixedCommand<14>> commands(n);
  FixedCommand<2> pttl;
  pttl.arg("PTTL").arg(key_);
  // Plain SET NX (Redis < 7) refuses a key of another type silently; a GET after it says WRONGTYPE.
  FixedCommand<2> get;
  get.arg("GET").arg(key_);
  // EVAL, not EVALSHA: nobody reads this reply, so a NOSCRIPT could not be retried. In fair mode
  // the undo also leaves the queue and hands a late grant on to the next waiter.
  FixedCommand<9> undo;
  if (fair_) {
    fair_keys(undo.arg("EVAL").arg(kFairReleaseLua)).arg(token).arg(channel_);
  } else {
    undo.arg("EVAL").arg(kUndoLua).arg("1").arg(key_).arg(token);
  }
  const std::string seq_text = std::to_string(seq);
  for (std::size_t i = 0; i < n; ++i) {
    FixedCommand<14>& c = commands[i];
    if (fair_) {
      c.script = &scripts.fair_acquire;
      fair_keys(c.arg("EVALSHA").arg(scripts.fair_acquire.sha1()));
      c.arg(token).arg(ttl_ms_).arg(enqueue ? "1" : "0");
      c.arg(queue_alive_ms_).arg(seq_text).arg(fencing_ ? "1" : "0").arg(grant_channel_);
    } else if (fencing_) {
      c.script = &scripts.acquire_fenced;
      c.arg("EVALSHA").arg(scripts.acquire_fenced.sha1()).arg("2").arg(key_).arg(fence_key_);
      c.arg(token).arg(ttl_ms_);
    } else {
      c.arg("SET").arg(key_).arg(token).arg("NX").arg("PX").arg(ttl_ms_);
      if (nodes_[i]->set_nx_get.load(std::memory_order_relaxed)) c.arg("GET");
    }
    batches[i].node = nodes_[i].get();
    batches[i].commands.push_back(c.view());
    if (!scripted && c.argc != 7) batches[i].commands.push_back(get.view());
    if (want_pttl && !scripted) batches[i].commands.push_back(pttl.view());
    // A node too slow to answer in time does not count; undo whatever it does later, in order.
    batches[i].on_timeout.push_back(undo.view());
  }
  // Done as soon as a quorum granted (or can no longer grant); stragglers get a short grace.
  EarlyFinish early;
  early.needed = quorum();
  const auto granted = [&](std::size_t i, const redisReply* reply) {
    const bool with_get = !scripted && batches[i].commands[0].argc == 7;
    return read_acquire_reply(reply, nullptr, scripted, with_get, token).answer == Answer::granted;
  };
  early.succeed_when(granted);
  const auto started = SteadyClock::now();
  execute(batches.data(), n, &early, SkipPolicy::skip_backed_off);

  AcquireResult result;
  PerNode<Answer> answers(n, Answer::failed);
  PerNode<std::exception_ptr> errors(n);
  PerNode<bool> is_server(n, false);
  PerNode<std::uint64_t> fences(n, 0);
  bool old_server = false;
  auto note_pttl = [&](long long pttl) {
    if (pttl < 0) return;
    const std::chrono::milliseconds value(pttl);
    if (result.holder_pttl.count() < 0 || value < result.holder_pttl) result.holder_pttl = value;
  };
  for (std::size_t i = 0; i < n; ++i) {
    NodeBatch& b = batches[i];
    if (b.error) {
      errors[i] = b.error;
      continue;
    }
    const bool with_get = !scripted && b.commands[0].argc == 7;
    const redisReply* pttl_reply = want_pttl && !scripted ? b.replies.back().get() : nullptr;
    AcquireReply a = read_acquire_reply(b.replies[0].get(), pttl_reply, scripted, with_get, token);
    const redisReply* failed_reply = b.replies[0].get();
    if (!scripted && !with_get && a.answer == Answer::refused && is_error(b.replies[1].get())) {
      a = AcquireReply{};  // the GET after a refusing plain SET NX: WRONGTYPE (or another error)
      a.problem = AcquireReply::Problem::server_error;
      failed_reply = b.replies[1].get();
    }
    if (fencing_ && a.answer == Answer::granted && a.fence == 0) {
      a.problem = AcquireReply::Problem::unexpected;  // a fenced grant always carries a fence
    }
    switch (a.problem) {
      case AcquireReply::Problem::none:
        answers[i] = a.answer;
        fences[i] = a.fence;
        if (a.answer == Answer::refused) note_pttl(a.holder_pttl);
        break;
      case AcquireReply::Problem::syntax_error:
        // Redis < 7.0: SET NX GET unsupported; plain SET NX from now on. Every attempt that sent
        // GET retries, not only the first to notice (others were in flight meanwhile).
        if (with_get) {
          nodes_[i]->set_nx_get.store(false);
          old_server = true;
        }
        [[fallthrough]];
      case AcquireReply::Problem::server_error:
        errors[i] = server_error(nodes_[i]->address(),
                                 scripted ? "the acquire script" : "SET NX PX", text(failed_reply));
        is_server[i] = true;
        break;
      case AcquireReply::Problem::unexpected:
        errors[i] = std::make_exception_ptr(ProtocolError(
            fmt::format("redlock: unexpected reply to {} from {}",
                        scripted ? "the acquire script" : "SET NX PX", nodes_[i]->address())));
        break;
    }
  }
  for (Answer a : answers) result.granted += a == Answer::granted ? 1 : 0;
  Decision decision = decide(n, result.granted, ttl_, drift_factor_, started, SteadyClock::now());

  // Redlock fencing: the token is max+1 over the granting nodes' counters (each INCRed), written
  // back to them, so any later majority intersects one node whose counter is already >= ours.
  if (decision.held && fencing_) {
    std::uint64_t fence = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (answers[i] == Answer::granted) fence = std::max(fence, fences[i]);
    }
    if (n > 1) {
      const std::string fence_text = std::to_string(fence);
      PerNode<NodeBatch> raise;
      PerNode<FixedCommand<8>> raise_commands(n);
      PerNode<std::size_t> who;
      for (std::size_t i = 0; i < n; ++i) {
        if (answers[i] != Answer::granted) continue;
        FixedCommand<8>& c = raise_commands[i];
        c.script = &scripts.raise_fence;
        c.arg("EVALSHA").arg(scripts.raise_fence.sha1()).arg("2").arg(key_).arg(fence_key_);
        c.arg(token).arg(fence_text);
        NodeBatch b;
        b.node = nodes_[i].get();
        b.commands.push_back(c.view());
        raise.push_back(std::move(b));
        who.push_back(i);
      }
      EarlyFinish confirmed_by;
      confirmed_by.needed = std::min(quorum(), raise.size());
      const auto raised = [](std::size_t, const redisReply* reply) {
        return reply != nullptr && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
      };
      confirmed_by.succeed_when(raised);
      execute(raise.data(), raise.size(), &confirmed_by);
      std::size_t confirmed = 0;
      for (auto& b : raise) {
        if (!b.error && b.replies[0]->type == REDIS_REPLY_INTEGER && b.replies[0]->integer == 1) {
          ++confirmed;
        }
      }
      decision = decide(n, confirmed, ttl_, drift_factor_, started, SteadyClock::now());
    }
    result.fence = fence;
  }

  if (decision.held) {
    result.held = true;
    result.valid_until = decision.valid_until;
    return result;
  }
  // Not held: undo every grant, and also try nodes that did not answer (a late SET may still land
  // there); nodes that cleanly refused cannot hold our token.
  // Timed-out nodes already got the undo on their own connection (see on_timeout).
  PerNode<bool> undo_on(n, false);
  bool rollback = false;
  for (std::size_t i = 0; i < n; ++i) {
    bool timed_out = false;
    if (errors[i] && !is_server[i]) {
      try {
        std::rethrow_exception(errors[i]);
      } catch (const TimeoutError&) {
        timed_out = true;
      } catch (...) {
      }
    }
    // A retried plain SET NX may have run twice: its refusal then can be our own first grant.
    // A script or SET ... GET recognises our own grant, so its refusal is a real one (and in
    // fair mode a rollback would give up the waiter's place and a hand-over on its way).
    const bool blind = !scripted && batches[i].commands[0].argc != 7;
    undo_on[i] = answers[i] == Answer::granted || (errors[i] && !timed_out) ||
                 (answers[i] == Answer::refused && batches[i].retried && blind);
    rollback = rollback || undo_on[i];
    // Fair mode: a timed-out node got fair_release on its abandoned connection (on_timeout).
    result.left_queue = fair_ && (result.left_queue || undo_on[i] || timed_out);
  }
  if (rollback) {
    try {
      release(token, undo_on.data(), /*announce=*/false);
    } catch (...) {  // best effort; the grants expire by ttl anyway
    }
  }
  std::size_t answered = 0;
  for (Answer a : answers) answered += a != Answer::failed ? 1 : 0;
  if (answered == 0 && old_server) {
    return acquire(token, want_pttl, enqueue, seq);  // once more, with plain SET NX
  }
  // Unreachable: a transport failure of the node's own; a node cut short once the outcome was
  // certain (early finish), or one that answered with an error reply, was reachable.
  std::size_t unreachable = 0;
  for (std::size_t i = 0; i < n; ++i) {
    unreachable += errors[i] && !is_server[i] && !batches[i].abandoned ? 1 : 0;
  }
  if (answered == 0 || n - unreachable < quorum()) {
    result.failure = unavailable(nodes_, errors, is_server);
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      if (!errors[i]) continue;
      try {
        std::rethrow_exception(errors[i]);
      } catch (const std::exception& e) {
        logf(LogLevel::debug, "redlock: acquire of {} on {}: {}", key_, nodes_[i]->address(),
             e.what());
      }
    }
  }
  result.fence = 0;
  return result;
}

ExtendResult LeaseEngine::extend(const std::string& token, std::chrono::milliseconds ttl) {
  const std::size_t n = nodes_.size();
  const std::string ttl_ms = std::to_string(ttl.count());
  PerNode<NodeBatch> batches(n);
  PerNode<FixedCommand<6>> commands(n);
  for (std::size_t i = 0; i < n; ++i) {
    commands[i] = extend_command(token, ttl_ms);
    batches[i].node = nodes_[i].get();
    batches[i].commands.push_back(commands[i].view());
  }
  EarlyFinish early;
  early.needed = quorum();
  const auto confirmed = [](std::size_t, const redisReply* reply) {
    return extend_confirmed(reply);
  };
  early.succeed_when(confirmed);
  const auto started = SteadyClock::now();
  execute(batches.data(), n, &early);
  ExtendResult result;
  PerNode<std::exception_ptr> errors(n);
  PerNode<bool> is_server(n, false);
  std::size_t answered = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (batches[i].error) {
      errors[i] = batches[i].error;
      continue;
    }
    const redisReply* r = batches[i].replies[0].get();
    if (is_error(r)) {
      errors[i] = server_error(nodes_[i]->address(), "the extend script", text(r));
      is_server[i] = true;
      continue;
    }
    ++answered;
    if (extend_confirmed(r)) ++result.confirmed;
  }
  const Decision d = decide(n, result.confirmed, ttl, drift_factor_, started, SteadyClock::now());
  result.held = d.held;
  result.valid_until = d.valid_until;
  if (answered == 0) result.failure = pick_failure(errors, is_server);
  return result;
}

ReleaseResult LeaseEngine::release(const std::string& token, const bool* only, bool announce) {
  const Scripts& scripts = Scripts::get();
  PerNode<NodeBatch> batches;
  batches.reserve(nodes_.size());
  FixedCommand<9> command;
  if (fair_) {  // always announced: leaving the queue hands a late grant on
    command.script = &scripts.fair_release;
    fair_keys(command.arg("EVALSHA").arg(scripts.fair_release.sha1())).arg(token).arg(channel_);
  } else {
    const Script& script = announce ? scripts.release : scripts.undo;
    command.script = &script;
    command.arg("EVALSHA").arg(script.sha1()).arg("1").arg(key_).arg(token);
    if (announce) command.arg(channel_);
  }
  PerNode<std::size_t> index;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (only != nullptr && !only[i]) continue;
    batches.emplace_back();
    batches.back().node = nodes_[i].get();
    batches.back().commands.push_back(command.view());
    index.push_back(i);
  }
  const std::size_t n = batches.size();
  // The release is on the wire to every node; once a quorum confirmed, a silent node is only
  // given a short grace (it still runs the release if it ever reads it).
  EarlyFinish early;
  early.needed = std::min(quorum(), n);
  const auto released = [](std::size_t, const redisReply* reply) {
    return reply != nullptr && reply->type == REDIS_REPLY_INTEGER && reply->integer >= 1;
  };
  early.succeed_when(released);
  execute(batches.data(), n, &early);
  ReleaseResult result;
  PerNode<std::exception_ptr> errors(n);
  PerNode<bool> is_server(n, false);
  std::size_t answered = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = index[k];
    if (batches[k].error) {
      errors[k] = batches[k].error;
      continue;
    }
    const redisReply* r = batches[k].replies[0].get();
    if (is_error(r)) {
      errors[k] = server_error(nodes_[i]->address(), "the release script", text(r));
      is_server[k] = true;
      continue;
    }
    ++answered;
    // A resent release that says "not ours" may have followed our own first send: unknown.
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 0 && !batches[k].retried) ++result.refused;
    if (r->type == REDIS_REPLY_INTEGER && r->integer >= 1) {
      ++result.released;
      result.listeners = std::max(
          result.listeners, static_cast<std::size_t>(std::min<long long>(r->integer - 1, 1 << 20)));
    }
  }
  if (answered == 0) result.failure = pick_failure(errors, is_server);
  return result;
}

FixedCommand<6> LeaseEngine::extend_command(const std::string& token,
                                            const std::string& ttl_ms) const {
  const Scripts& scripts = Scripts::get();
  FixedCommand<6> c;
  c.script = &scripts.extend;
  c.arg("EVALSHA").arg(scripts.extend.sha1()).arg("1").arg(key_).arg(token).arg(ttl_ms);
  return c;
}

bool LeaseEngine::extend_confirmed(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
}

}  // namespace detail
}  // namespace redlock
