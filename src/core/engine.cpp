// src/core/engine.cpp: the lease engine's acquire and release on N nodes (build, execute, tally,
// decide); extend is extend-many's one-lease case (core/extend.cpp).
#include "core/engine.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "core/extend.hpp"
#include "core/tally.hpp"
#include "protocol/features.hpp"
#include "protocol/permits.hpp"  // build_permit_release
#include "protocol/replies.hpp"
#include "util/log_internal.hpp"
#include "watch/release_watch.hpp"

namespace redlock {
namespace detail {

namespace {

const char* acquire_operation(AcquireDialect dialect) noexcept {
  return dialect == AcquireDialect::script ? "the acquire script" : "SET NX PX";
}

}  // namespace

// One acquire attempt: what was sent to each node, and what each node said.
struct LeaseEngine::Round {
  Round(const AcquireRequest& r, std::size_t n)
      : request(r),
        token(*r.token),
        // A polling waiter's place carries its claim window where a grant's number would be.
        seq_text(std::to_string(r.polls.count() > 0 ? std::uint64_t(r.polls.count()) : r.seq)),
        batches(n),
        commands(n),
        dialects(n, AcquireDialect::script),
        tally(n),
        answers(n, Answer::failed),
        fences(n, 0) {}

  const AcquireRequest& request;
  const std::string& token;
  const std::string seq_text;
  PerNode<NodeBatch> batches;
  PerNode<AcquireCommand> commands;
  PerNode<AcquireDialect> dialects;  // what each node was sent
  KeyCommand pttl;
  KeyCommand get;
  KeyCommand queued;       // fair mode's first attempt: EXISTS on the queue, after the SET
  bool fast_fair{false};   // fair mode's first attempt is the plain SET NX of the default mode
  bool quiet{false};       // ... without the queue check (LeaseEngine::quiet_)
  ReleaseCommand undo[2];  // by PubSub: how the node announces (fair mode's undo may hand over)
  ReleaseCommand plain_undo[2];  // fair mode, the nodes that do not order the waiters
  bool vetoed{false};            // fair mode: the orderer refused (its queue is ahead)
  Tally tally;
  PerNode<Answer> answers;
  PerNode<std::uint64_t> fences;
  bool old_server{false};  // a node refused SET ... GET as a syntax error
  SteadyClock::time_point started;

  bool want_pttl(std::size_t i) const noexcept {
    return request.attempt == Attempt::contended && dialects[i] != AcquireDialect::script;
  }
  // Where the queue's EXISTS reply is in node i's batch (fast_fair only).
  std::size_t queued_at(std::size_t i) const noexcept {
    return dialects[i] == AcquireDialect::set_nx ? 2 : 1;
  }
};

void LeaseEngine::build(Round& a) const {
  build_key_command(a.pttl, "PTTL", keys_.key);
  // Plain SET NX (Redis < 7) refuses a key of another type silently; a GET after it says WRONGTYPE.
  build_key_command(a.get, "GET", keys_.key);
  // EVAL, not EVALSHA: nobody reads this reply, so a NOSCRIPT could not be retried. In fair mode
  // the undo also leaves the queue and hands a late grant on to the next waiter.
  for (const PubSub pubsub : {PubSub::classic, PubSub::sharded}) {
    build_release(a.undo[static_cast<int>(pubsub)], keys_, a.token,
                  fair_ ? ReleaseScript::fair_release : ReleaseScript::undo, Send::eval, pubsub);
    if (fair_ && nodes_.size() > 1) {
      build_release(a.plain_undo[static_cast<int>(pubsub)], keys_, a.token, ReleaseScript::undo,
                    Send::eval, pubsub);
    }
  }
  FairAttempt fair{ttl_ms_,
                   a.request.queue == Queue::join ? "1" : "0",
                   "0",
                   a.seq_text,
                   fencing_ ? "1" : "0",
                   a.request.polls.count() > 0 ? std::string_view("") : keys_.grant_channel};
  // Fair mode, a first attempt that does not queue: the default mode's SET NX, and EXISTS on the
  // queue in the same round trip (read_node gives back a grant that jumped a queue).
  a.quiet = quiet_attempt(a.request);
  a.fast_fair = !a.quiet && fair_ && nodes_.size() == 1 && !fencing_ &&
                a.request.attempt == Attempt::first && a.request.queue == Queue::none;
  if (a.fast_fair) build_key_command(a.queued, "EXISTS", keys_.queue);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    AcquireCommand& c = a.commands[i];
    if (orders(i) && !a.fast_fair && !a.quiet) {
      fair.spublish = publish_flag(nodes_[i]->pubsub());
      build_fair_acquire(c, keys_, a.token, fair);
    } else if (fencing_) {
      build_acquire_fenced(c, keys_, a.token, ttl_ms_);
    } else {
      a.dialects[i] = set_dialect(*nodes_[i]);
      build_set_nx(c, keys_, a.token, ttl_ms_, a.dialects[i]);
    }
    NodeBatch& b = a.batches[i];
    b.node = nodes_[i].get();
    b.commands.push_back(c.view());
    if (a.dialects[i] == AcquireDialect::set_nx) b.commands.push_back(a.get.view());
    if (a.want_pttl(i)) b.commands.push_back(a.pttl.view());
    if (a.fast_fair) b.commands.push_back(a.queued.view());
    // Endpoint::wait_replicas: the replicas' acknowledgement, in the same round trip.
    if (const CommandView* wait = nodes_[i]->replica_wait()) b.commands.push_back(*wait);
    // A node too slow to answer in time does not count; undo whatever it does later, in order.
    const ReleaseCommand* undo = fair_ && !orders(i) ? a.plain_undo : a.undo;
    b.on_timeout.push_back(undo[static_cast<int>(nodes_[i]->pubsub())].view());
  }
}

void LeaseEngine::read_node(Round& a, std::size_t i, AcquireResult& result) const {
  const NodeBatch& b = a.batches[i];
  const AcquireDialect dialect = a.dialects[i];
  const bool waits = nodes_[i]->replica_wait() != nullptr;
  const std::size_t before_wait = b.replies.size() - (waits ? 1 : 0);
  const redisReply* pttl = a.want_pttl(i) ? b.replies[before_wait - 1].get() : nullptr;
  AcquireReply r = read_acquire_reply(b.replies[0].get(), pttl, dialect, a.token);
  const redisReply* failed_reply = b.replies[0].get();
  if (dialect == AcquireDialect::set_nx && r.answer == Answer::refused &&
      is_error_reply(b.replies[1].get())) {
    r = AcquireReply{};  // the GET after a refusing plain SET NX: WRONGTYPE (or another error)
    r.problem = AcquireReply::Problem::server_error;
    failed_reply = b.replies[1].get();
  }
  if (fencing_ && r.answer == Answer::granted && r.fence == 0) {
    r.problem = AcquireReply::Problem::unexpected;  // a fenced grant always carries a fence
  }
  switch (r.problem) {
    case AcquireReply::Problem::none:
      // A grant too few replicas acknowledged is a failure of this node, and rolled back.
      if (r.answer == Answer::granted && waits &&
          !a.tally.replicas_acknowledged(i, *nodes_[i], b.replies.back().get())) {
        return;
      }
      if (queue_check_vetoes(a, i, r.answer)) return;
      if (orders(i) && nodes_.size() > 1 && r.answer == Answer::refused) a.vetoed = true;
      a.answers[i] = r.answer;
      a.fences[i] = r.fence;
      a.tally.answered(r.answer == Answer::granted);
      if (r.answer == Answer::refused && r.position != 0) result.watcher = r.position;
      if (r.answer == Answer::refused && r.holder_pttl >= 0) {
        const std::chrono::milliseconds value(r.holder_pttl);
        if (result.holder_pttl.count() < 0 || value < result.holder_pttl)
          result.holder_pttl = value;
      }
      return;
    case AcquireReply::Problem::syntax_error:
      // Redis < 7.0: SET NX GET unsupported; plain SET NX from now on. Every attempt that sent
      // GET retries, not only the first to notice (others were in flight meanwhile).
      if (dialect == AcquireDialect::set_nx_get) {
        learned_no_set_get(*nodes_[i]);
        a.old_server = true;
      }
      [[fallthrough]];
    case AcquireReply::Problem::server_error:
      a.tally.server_error(i, *nodes_[i], acquire_operation(dialect), error_text(failed_reply));
      return;
    case AcquireReply::Problem::unexpected:
      a.tally.failed(i, std::make_exception_ptr(ProtocolError(
                            fmt::format("redlock: unexpected reply to {} from {}",
                                        acquire_operation(dialect), nodes_[i]->address()))));
      return;
  }
}

// Fair mode's plain first attempt: true if its queue check settles node i instead of the grant.
// A failed check (an ACL without EXISTS) is this node's error; a grant that jumped a live queue
// is not counted. Either way roll_back() undoes the grant (the queue's head gets the lock).
bool LeaseEngine::queue_check_vetoes(Round& a, std::size_t i, Answer answer) const {
  if (!a.fast_fair) return false;
  const redisReply* exists = a.batches[i].replies[a.queued_at(i)].get();
  if (is_error_reply(exists)) {
    a.tally.server_error(i, *nodes_[i], "EXISTS (fair mode's check of the queue)",
                         error_text(exists));
    return true;
  }
  if (answer != Answer::granted || !jumped_queue(a, i)) return false;
  a.answers[i] = Answer::granted;
  a.tally.answered(false);
  return true;
}

// Fair mode's plain first attempt was granted while waiters queue (the holder's lease ended
// unannounced, or a waiter queued between the two commands): not held, and undone by the fair
// release, which hands the lock to the head of the queue. A missing or odd EXISTS reply counts
// as a queue.
bool LeaseEngine::jumped_queue(const Round& a, std::size_t i) const noexcept {
  if (!a.fast_fair) return false;
  const NodeBatch& b = a.batches[i];
  const std::size_t at = a.queued_at(i);
  return at >= b.replies.size() || !none_exist(b.replies[at].get());
}

// Fair mode over several nodes: the orderer granted, no node failed, and the rest refused.
bool LeaseEngine::kept_turn(const Round& a, std::size_t i) const noexcept {
  if (!orders(i) || nodes_.size() == 1 || a.answers[i] != Answer::granted ||
      a.request.queue != Queue::join) {  // a try_lock() does not wait for its turn
    return false;
  }
  for (std::size_t k = 0; k < nodes_.size(); ++k) {
    if (k != i && a.answers[k] != Answer::refused) return false;
  }
  return true;
}

void LeaseEngine::read(Round& a, AcquireResult& result) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (a.batches[i].error) {
      a.tally.failed(i, a.batches[i].error);
    } else {
      read_node(a, i, result);
    }
  }
  result.granted = a.tally.yes();
}

bool LeaseEngine::quiet_attempt(const AcquireRequest& request) const noexcept {
  return quiet_capable_ && request.attempt == Attempt::first && request.queue == Queue::none &&
         quiet_.load(std::memory_order_relaxed);
}

// A grant with no queue (the fast attempt's EXISTS found none) or a quiet one may make the
// engine quiet at its release; anything else (a refusal, a contended attempt) ends quiet.
void LeaseEngine::learn_from_attempt(const Round& a, bool held) {
  if (!quiet_capable_) return;
  const bool clear = (a.fast_fair || a.quiet) && held;
  if (!clear) quiet_.store(false, std::memory_order_relaxed);
  clear_grant_.store(clear, std::memory_order_relaxed);
}

// Quiet from now on if such a grant was released with nobody listening (a waiter of another
// process is subscribed to the release channel); anything else ends quiet. A release that handed
// the key over also answers 1: the next plain attempt is then refused by the grantee, which ends
// quiet.
void LeaseEngine::learn_from_release(const ReleaseResult& result) {
  if (!quiet_capable_) return;
  const bool clear_grant = clear_grant_.exchange(false, std::memory_order_relaxed);
  const bool nobody = result.released == 1 && result.listeners == 0 && !result.failure;
  quiet_.store(clear_grant && nobody, std::memory_order_relaxed);
}

// Redlock fencing: the token is max+1 over the granting nodes' counters (each INCRed), written
// back to them, so any later majority intersects one node whose counter is already >= ours.
std::uint64_t LeaseEngine::raise_fence(const Round& a, Decision& decision) {
  const std::size_t n = nodes_.size();
  std::uint64_t fence = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (a.answers[i] == Answer::granted) fence = std::max(fence, a.fences[i]);
  }
  if (n == 1) return fence;
  const std::string fence_text = std::to_string(fence);
  PerNode<NodeBatch> raise;
  PerNode<RaiseFenceCommand> commands(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (a.answers[i] != Answer::granted) continue;
    build_raise_fence(commands[i], keys_, a.token, fence_text);
    raise.emplace_back();
    raise.back().node = nodes_[i].get();
    raise.back().commands.push_back(commands[i].view());
  }
  EarlyFinish confirmed_by;
  confirmed_by.needed = std::min(quorum(), raise.size());
  const auto raised = [](std::size_t, const redisReply* reply) { return confirmed(reply); };
  confirmed_by.succeed_when(raised);
  execute(raise.data(), raise.size(), &confirmed_by);
  std::size_t raised_on = 0;
  for (const auto& b : raise) raised_on += !b.error && confirmed(b.replies[0].get()) ? 1 : 0;
  decision = decide(n, raised_on, ttl_, drift_factor_, a.started, SteadyClock::now());
  return fence;
}

// Not held: undo every grant, and also try nodes that did not answer (a late SET may still land
// there); nodes that cleanly refused cannot hold our token.
// Timed-out nodes already got the undo on their own connection (see on_timeout).
void LeaseEngine::roll_back(const Round& a, AcquireResult& result) {
  const std::size_t n = nodes_.size();
  PerNode<bool> undo_on(n, false);
  bool rollback = false;
  for (std::size_t i = 0; i < n; ++i) {
    const std::exception_ptr& error = a.tally.error(i);
    const bool late = error && !a.tally.server_failed(i) && is_timeout(error);
    // A retried plain SET NX may have run twice: its refusal then can be our own first grant.
    // A script or SET ... GET recognises our own grant, so its refusal is a real one (and in
    // fair mode a rollback would give up the waiter's place and a hand-over on its way).
    const bool blind = a.dialects[i] == AcquireDialect::set_nx;
    undo_on[i] = a.answers[i] == Answer::granted || (error && !late) ||
                 (a.answers[i] == Answer::refused && a.batches[i].retried && blind);
    rollback = rollback || undo_on[i];
    // Fair mode over several nodes: the orderer granted our turn (a hand-over, or the head's
    // advance) and only the others refused (a newcomer's grants, rolled back after its veto):
    // the turn is kept and the attempt made again at once (AcquireResult::watcher).
    if (kept_turn(a, i)) undo_on[i] = false;
    // Fair mode: a timed-out orderer got fair_release on its abandoned connection (on_timeout).
    if (orders(i)) result.left_queue = undo_on[i] || late;
  }
  if (!rollback) return;
  try {
    result.undo_owed = release_on(a.token, undo_on.data(), Announce::quietly).owed;
  } catch (...) {  // best effort; the grants expire by ttl anyway
  }
}

// Unreachable: a transport failure of the node's own; a node cut short once the outcome was
// certain (early finish), or one that answered with an error reply, was reachable.
void LeaseEngine::report(const Round& a, AcquireResult& result) const {
  const std::size_t n = nodes_.size();
  std::size_t unreachable = 0;
  for (std::size_t i = 0; i < n; ++i) {
    unreachable += a.tally.error(i) && !a.tally.server_failed(i) && !a.batches[i].abandoned ? 1 : 0;
  }
  if (a.tally.answers() == 0 || n - unreachable < quorum()) {
    result.failure = a.tally.unavailable(nodes_);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!a.tally.error(i)) continue;
    try {
      std::rethrow_exception(a.tally.error(i));
    } catch (const std::exception& e) {
      logf(LogLevel::debug, "redlock: acquire of {} on {}: {}", keys_.key, nodes_[i]->address(),
           e.what());
    }
  }
}

AcquireResult LeaseEngine::acquire(const AcquireRequest& request) {
  const std::size_t n = nodes_.size();
  Round a(request, n);
  build(a);
  // Done as soon as a quorum granted (or can no longer grant); stragglers get a short grace.
  EarlyFinish early;
  early.needed = quorum();
  if (fair_ && n > 1) early.required = orderer_;  // its refusal is a veto: wait for it
  const auto granted = [&a](std::size_t i, const redisReply* reply) {
    return read_acquire_reply(reply, nullptr, a.dialects[i], a.token).answer == Answer::granted;
  };
  early.succeed_when(granted);
  a.started = SteadyClock::now();
  execute(a.batches.data(), n, &early, SkipPolicy::skip_backed_off);

  AcquireResult result;
  read(a, result);
  Decision decision = decide(n, result.granted, ttl_, drift_factor_, a.started, SteadyClock::now());
  // A queue is ahead of us on the orderer, or the orderer was cut short once the others had
  // answered (its answer decides; a silent orderer goes into back-off and is skipped, and the
  // plain quorum decides then).
  if (a.vetoed || (fair_ && n > 1 && a.batches[orderer_].abandoned)) decision.held = false;
  if (decision.held && fencing_) result.fence = raise_fence(a, decision);
  learn_from_attempt(a, decision.held);
  if (decision.held) {
    const bool skipped = std::any_of(a.batches.begin(), a.batches.end(),
                                     [](const NodeBatch& b) { return b.skipped; });
    if (skipped || has_unsent_.load(std::memory_order_relaxed)) remember_unsent(a, skipped);
    result.held = true;
    result.valid_until = decision.valid_until;
    return result;
  }
  roll_back(a, result);
  if (a.tally.answers() == 0 && a.old_server) return acquire(request);  // with plain SET NX
  if (kept_turn(a, orderer_)) {
    result.watcher = 1;  // our turn on the orderer: try the others again after a few ms
    result.holder_pttl = std::chrono::milliseconds(2);
  }
  report(a, result);
  result.fence = 0;
  return result;
}

AcquireResult LeaseEngine::handed_over(std::uint64_t fence, SteadyClock::time_point sent) const {
  // Over several nodes a hand-over is the orderer's alone: the attempt it wakes takes the rest.
  if (nodes_.size() > 1) return AcquireResult{};
  const Decision d = decide(1, 1, ttl_, drift_factor_, sent, SteadyClock::now());
  AcquireResult result;
  result.granted = 1;
  result.held = d.held;
  result.valid_until = d.valid_until;
  result.fence = d.held ? fence : 0;
  return result;
}

ExtendResult LeaseEngine::extend(const std::string& token, std::chrono::milliseconds ttl) {
  const std::string ttl_ms = std::to_string(ttl.count());
  ExtendItem item;
  item.engine = this;
  item.token = &token;
  item.ttl = ttl;
  item.ttl_ms = &ttl_ms;
  extend_leases(&item, 1, Finish::at_quorum);
  return item.result;
}

SteadyClock::time_point LeaseEngine::extend_floor(SteadyClock::time_point start,
                                                  std::chrono::milliseconds ttl) const noexcept {
  return start + std::chrono::nanoseconds(ttl) - drift_of(ttl, drift_factor_);
}

const void* LeaseEngine::batch_group() const noexcept {
  static const char group = 0;  // every engine: extend_leases() batches by server
  return &group;
}

std::size_t LeaseEngine::extend_many(RenewItem* items, std::size_t count) {
  // The watchdog's thread calls this once a batch: its scratch keeps its capacity.
  thread_local std::vector<ExtendItem> leases;
  leases.clear();
  leases.resize(count);
  for (std::size_t k = 0; k < count; ++k) {
    const auto& engine = static_cast<const LeaseEngine&>(*items[k].backend);
    leases[k].engine = &engine;
    leases[k].token = items[k].token;
    leases[k].ttl = engine.ttl_;
    leases[k].ttl_ms = &engine.ttl_ms_;
  }
  const std::size_t round_trips = extend_leases(leases.data(), count, Finish::every_node);
  for (std::size_t k = 0; k < count; ++k) {
    items[k].result = std::move(leases[k].result);
    items[k].refused = leases[k].refused;
  }
  return round_trips;
}

ReleaseResult LeaseEngine::release(const std::string& token, Announce announce) {
  PerNode<bool> reached;
  if (has_unsent_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> guard(unsent_mutex_);
    if (unsent_.token == token) {
      for (const bool unsent : unsent_.nodes) reached.push_back(!unsent);
      unsent_.token.clear();
      has_unsent_.store(false, std::memory_order_release);
    }
  }
  return release_on(token, reached.empty() ? nullptr : reached.data(), announce);
}

ReleaseResult LeaseEngine::retry_release(const std::string& token, const std::vector<char>& owed) {
  const PerNode<bool> only = owed_nodes(nodes_.size(), owed);
  return release_on(token, only.data(), Announce::waiters);
}

// Records the grant's skipped nodes, or (none skipped) forgets an older grant's record.
void LeaseEngine::remember_unsent(const Round& a, bool skipped) {
  std::lock_guard<std::mutex> guard(unsent_mutex_);
  unsent_.token = skipped ? a.token : std::string();
  unsent_.nodes.clear();
  for (std::size_t i = 0; skipped && i < nodes_.size(); ++i) {
    unsent_.nodes.push_back(a.batches[i].skipped);
  }
  has_unsent_.store(skipped, std::memory_order_release);
}

ReleaseResult LeaseEngine::release_on(const std::string& token, const bool* only,
                                      Announce announce) {
  // Fair mode always runs fair_release on the orderer: leaving the queue hands on; the other
  // nodes only compare-and-delete (the orderer's grant wakes the next waiter, nobody else). One
  // command for each way a node announces (PUBLISH, or SPUBLISH on a cluster).
  ReleaseCommand commands[2];
  ReleaseCommand others[2];
  for (const PubSub pubsub : {PubSub::classic, PubSub::sharded}) {
    build_release(commands[static_cast<int>(pubsub)], keys_, token,
                  fair_                           ? ReleaseScript::fair_release
                  : announce == Announce::waiters ? ReleaseScript::release
                                                  : ReleaseScript::undo,
                  Send::evalsha, pubsub);
    if (fair_) {
      build_release(others[static_cast<int>(pubsub)], keys_, token, ReleaseScript::undo,
                    Send::evalsha, pubsub);
    }
  }
  // A Semaphore's permit (one node) passes every slot key: its watchers hear the earliest end.
  VarCommand with_peers[2];
  if (fair_ && peers_) {
    for (const PubSub pubsub : {PubSub::classic, PubSub::sharded}) {
      build_permit_release(with_peers[static_cast<int>(pubsub)], keys_, *peers_, token, pubsub);
    }
  }
  PerNode<NodeBatch> batches;
  batches.reserve(nodes_.size());
  PerNode<std::size_t> index;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (only != nullptr && !only[i]) continue;
    batches.emplace_back();
    batches.back().node = nodes_[i].get();
    const ReleaseCommand* chosen = fair_ && !orders(i) ? others : commands;
    const int kind = static_cast<int>(nodes_[i]->pubsub());
    batches.back().commands.push_back(peers_ && orders(i) ? with_peers[kind].view()
                                                          : chosen[kind].view());
    index.push_back(i);
  }
  const std::size_t n = batches.size();
  // The release is on the wire to every node; once a quorum confirmed, a silent node is only
  // given a short grace (it still runs the release if it ever reads it).
  EarlyFinish early;
  early.needed = std::min(quorum(), n);
  const auto released = [](std::size_t, const redisReply* reply) {
    return read_release_reply(reply).kind == ReleaseReply::Kind::released;
  };
  early.succeed_when(released);
  execute(batches.data(), n, &early);
  return read_releases(batches, index);
}

// The release replies of `batches` (batch k went to node index[k]): the tally, the listeners
// the release reached, whether the quorum was kept and why not.
ReleaseResult LeaseEngine::read_releases(const PerNode<NodeBatch>& batches,
                                         const PerNode<std::size_t>& index) {
  const std::size_t n = batches.size();
  ReleaseResult result;
  Tally tally(n);
  for (std::size_t k = 0; k < n; ++k) {
    if (batches[k].error) {
      tally.failed(k, batches[k].error);
      note_owed(result.owed, nodes_.size(), index[k], batches[k]);
      continue;
    }
    const redisReply* r = batches[k].replies[0].get();
    if (is_error_reply(r)) {
      tally.server_error(k, *nodes_[index[k]], "the release script", error_text(r));
      continue;
    }
    const ReleaseReply reply = read_release_reply(r);
    tally.answered(reply.kind == ReleaseReply::Kind::released);
    // A resent release that says "not ours" may have followed our own first send: unknown.
    if (reply.kind == ReleaseReply::Kind::refused && !batches[k].retried) tally.refused();
    result.listeners = std::max(result.listeners,
                                waiting_listeners(*nodes_[index[k]], channel(), reply.listeners));
  }
  result.released = tally.yes();
  result.refused = tally.refusals();
  result.failure = tally.failure_if_silent();
  // A node that did not answer is unknown, not a loss.
  result.quorum_kept = !refusals_lose_quorum(nodes_.size(), result.refused);
  result.reason = refusal_reason(nodes_.size());
  learn_from_release(result);
  return result;
}

bool LeaseEngine::watch_live() const noexcept { return release_watch_live(*this); }

std::unique_ptr<ReleaseWatch> LeaseEngine::watch(SteadyClock::time_point deadline,
                                                 std::string token_sha1) {
  return make_release_watch(*this, deadline, std::move(token_sha1));
}

}  // namespace detail
}  // namespace redlock
