// tools/redlock-run/elect.cpp: the election modes (see modes.hpp). --leader asks who leads the
// election KEY, as a redlock::Election that never campaigns sees it. --elect ID is a hot
// standby: it campaigns (Election::campaign(): an error reply ends the run with 69 at once,
// servers that do not answer after --unavailable-timeout), runs the command in its own process
// group while leading (Election::run(), with REDLOCK_TERM, REDLOCK_FENCE and the validity left),
// stops the group when leadership is lost (SIGTERM, then SIGKILL after --grace; the lease guard
// does it even if redlock-run cannot), says why, and campaigns again on a fresh Election. It
// exits when the command exits by itself (with its status, after resigning: the next candidate
// takes over at once), or on a stop signal (forwarded to the command if it runs; 128+N), as
// `etcdctl elect` and `consul lock` do.
#include <poll.h>     // poll: drain
#include <termios.h>  // tcsetpgrp
#include <unistd.h>   // write, read, getpgrp

#include <atomic>     // std::atomic
#include <cerrno>     // errno
#include <cstdio>     // std::printf
#include <memory>     // std::unique_ptr, std::shared_ptr
#include <mutex>      // std::lock_guard
#include <optional>   // std::optional
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include <redlock/election.hpp>  // Election, Leader
#ifdef REDLOCK_RUN_WITH_POSTGRES
#include <redlock/postgres.hpp>  // postgres::Database, postgres::Election
#endif
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
#include <redlock/zookeeper.hpp>  // zookeeper::Session, zookeeper::Election
#endif

#include "child.hpp"     // launch
#include "common.hpp"    // UsageError, in_our_words, say
#include "holdable.hpp"  // Holdable: what launch() and the signal thread see
#include "modes.hpp"
#include "signals.hpp"     // SignalState, start_passing_on
#include "supervisor.hpp"  // Supervisor

namespace redlock_run {
namespace {

// The id of an observer (--leader): never written anywhere (it does not campaign).
const char kObserverId[] = "redlock-run --leader";

// An Election on the store the options name, with what it refers to (a database or a
// ZooKeeper session) kept alive as long as it.
struct Candidacy {
  std::shared_ptr<void> store;
  std::unique_ptr<redlock::Election> election;
};

Candidacy make_candidacy(const Config& config, const std::vector<redlock::Client>& clients,
                         const std::string& id) {
  redlock::ElectionOptions options;
  options.ttl = config.ttl;
  options.max_unavailable = config.unavailable;
  Candidacy made;
  try {
    if (!config.postgres.empty()) {
#ifdef REDLOCK_RUN_WITH_POSTGRES
      auto db = std::make_shared<redlock::postgres::Database>(config.postgres);
      made.store = db;
      made.election = std::make_unique<redlock::postgres::Election>(*db, config.key, id, options);
#endif
    } else if (!config.zookeeper.empty()) {
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
      auto session = std::make_shared<redlock::zookeeper::Session>(config.zookeeper);
      made.store = session;
      made.election =
          std::make_unique<redlock::zookeeper::Election>(*session, config.key, id, options);
#endif
    } else {
      made.election = std::make_unique<redlock::Election>(clients, config.key, id, options);
    }
  } catch (const std::invalid_argument& e) {
    throw UsageError("--key, --ttl or --elect: " + in_our_words(e.what()));
  }
  if (!made.election) {
    throw UsageError("this redlock-run was built without the store the options name");
  }
  return made;
}

// The candidate as launch() and the signal thread see it: the term is the fence, and a stop
// signal ends the campaign (Election::stop()).
class Candidate final : public Holdable {
 public:
  explicit Candidate(redlock::Election& election) : Holdable("Election"), election_(election) {}
  bool try_lock() override { return election_.try_campaign_for(milliseconds(0)).has_value(); }
  bool try_lock_until(Clock::time_point deadline) override {
    return election_.try_campaign_for(deadline - Clock::now()).has_value();
  }
  void cancel_waits() noexcept override {
    stopping_ = true;
    election_.stop();
  }
  bool release() override { return election_.resign(); }
  std::uint64_t fence() const noexcept override { return election_.term(); }
  milliseconds validity() const noexcept override { return election_.validity(); }
  redlock::LeaseToken lease() const noexcept override { return election_.lease(); }
  std::size_t quorum() const noexcept override { return 1; }
  // A stop signal came (not a loss of leadership).
  bool stopping() const noexcept { return stopping_; }

 private:
  redlock::Election& election_;
  std::atomic<bool> stopping_{false};
};

// Reads whatever is waiting in the pipe `fd`, without blocking.
void drain(int fd) {
  pollfd p{fd, POLLIN, 0};
  unsigned char bytes[64];
  while (::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0) {
    if (::read(fd, bytes, sizeof bytes) <= 0) break;
  }
}

// One term: the command under the Supervisor until it and its group are gone. Returns its
// outcome; `lost` if leadership ended first (the group was stopped).
Outcome lead(const Config& config, Runtime& rt, Candidate& candidate, redlock::StopToken stop,
             std::uint64_t term) {
  if (config.verbose)
    say("leading " + config.key + " as " + config.elect_id + ", term " + std::to_string(term));
  drain(rt.lost_read);  // a loss noticed after the last term's command had ended
  const int lost_write = rt.lost_write;
  const auto over = std::make_shared<std::atomic<bool>>(false);
  const redlock::LeaseToken lease = candidate.lease();
  stop.on_stop([&candidate, lost_write, over, lease] {
    // A stop signal is forwarded by the Supervisor; the end of a term after its command is not
    // a loss. A term that ends with its lease not lost was stepped down from: the store cannot
    // confirm it (a suspended ZooKeeper session).
    if (candidate.stopping() || *over) return;
    const auto byte = lease.lost() ? static_cast<unsigned char>(lease.reason()) : kLostUnconfirmed;
    while (::write(lost_write, &byte, 1) < 0 && errno == EINTR) {
    }
  });
  start_passing_on(*rt.signals);
  const pid_t child = launch(config, rt, candidate);
  if (child < 0) {
    *over = true;
    return Outcome{-child, false};
  }
  Outcome outcome = Supervisor(config, rt, nullptr, &candidate).run(child);
  *over = true;
  if (rt.tty_handed) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
  if (outcome.lost) say("leadership of " + config.key + " lost; campaigning again");
  return outcome;
}

// -v: who leads while this candidate waits (once per campaign).
void report_waiting(redlock::Election& election, const Config& config) {
  std::string who = "nobody leads yet";
  try {
    if (const auto leader = election.leader()) {
      who = "led by " + leader->id + ", term " + std::to_string(leader->term);
    }
  } catch (const redlock::Error& e) {
    who = in_our_words(e.what());
  }
  say("waiting for leadership of " + config.key + " as " + config.elect_id + " (" + who + ")");
}

// Campaigns until this candidate leads. Returns 0 then; else the exit status: 69 at once for an
// error reply (a wrong password, an ACL refusal, a key of the wrong type), 69 after
// --unavailable-timeout of servers that do not answer, 128+N after a stop signal.
int campaign(redlock::Election& election, const Config& config, const Runtime& rt) {
  try {
    if (config.verbose) {
      try {
        if (election.try_campaign_for(milliseconds(0))) return 0;
      } catch (const redlock::CancelledError&) {
        throw;
      } catch (const redlock::Error&) {  // campaign() rides it out, or ends with it
      }
      report_waiting(election, config);
    }
    election.campaign();
    return 0;
  } catch (const redlock::CancelledError&) {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    return 128 + rt.signals->first_stop;
  } catch (const redlock::Error& e) {
    say("cannot campaign for " + config.key + ": " + in_our_words(e.what()));
    return kExitUnavailable;
  }
}

// One candidacy: a campaign, then the terms Election::run() serves until the command exits by
// itself (its status), a stop signal (128+N) or a loss (-1: campaign again, anew).
int candidacy(const Config& config, const std::vector<redlock::Client>& clients, Runtime& rt) {
  const Candidacy made = make_candidacy(config, clients, config.elect_id);
  redlock::Election& election = *made.election;
  Candidate candidate(election);
  {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    if (rt.signals->first_stop != 0) return 128 + rt.signals->first_stop;
    rt.signals->waiting = &candidate;  // a stop signal from now on ends the candidacy
  }
  int status = campaign(election, config, rt);
  if (status == 0) {
    std::optional<int> exited;  // the command's status, once it exited by itself
    election.run([&](redlock::StopToken stop, std::uint64_t term) {
      const Outcome outcome = lead(config, rt, candidate, std::move(stop), term);
      if (!outcome.lost) exited = outcome.status;
      // Either way run() resigns and returns: after a loss the next campaign is ours (its
      // errors end the run), on a fresh Election.
      candidate.cancel_waits();
    });
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    status = exited ? *exited : rt.signals->first_stop != 0 ? 128 + rt.signals->first_stop : -1;
  }
  std::lock_guard<std::mutex> guard(rt.signals->mutex);
  rt.signals->waiting = nullptr;
  return status;
}

}  // namespace

int run_leader(const Config& config, const std::vector<redlock::Client>& clients) {
  const Candidacy observer = make_candidacy(config, clients, kObserverId);
  return print_leader(config, observer.election->leader());
}

int run_elect(const Config& config, const std::vector<redlock::Client>& clients, Runtime& rt) {
  for (;;) {
    const int status = candidacy(config, clients, rt);
    if (status >= 0) return status;
  }
}

}  // namespace redlock_run
