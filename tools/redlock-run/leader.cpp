// tools/redlock-run/leader.cpp: the --leader mode (see modes.hpp): who leads the election KEY, as
// a redlock::Election that never campaigns sees it, on the store the options name.
#include <cstdio>     // std::printf
#include <memory>     // std::unique_ptr
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

#include "common.hpp"  // UsageError, in_our_words
#include "modes.hpp"

namespace redlock_run {
namespace {

// The id of an observer: never written anywhere (it does not campaign).
const char kObserverId[] = "redlock-run --leader";

std::optional<redlock::Leader> ask(const Config& config,
                                   const std::vector<redlock::Client>& clients) {
  redlock::ElectionOptions options;
  options.ttl = config.ttl;
  if (!config.postgres.empty()) {
#ifdef REDLOCK_RUN_WITH_POSTGRES
    redlock::postgres::Database db(config.postgres);
    return redlock::postgres::Election(db, config.key, kObserverId, options).leader();
#endif
  } else if (!config.zookeeper.empty()) {
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
    redlock::zookeeper::Session session(config.zookeeper);
    return redlock::zookeeper::Election(session, config.key, kObserverId, options).leader();
#endif
  } else {
    return redlock::Election(clients, config.key, kObserverId, options).leader();
  }
  throw UsageError("this redlock-run was built without the store the options name");
}

}  // namespace

int run_leader(const Config& config, const std::vector<redlock::Client>& clients) {
  std::optional<redlock::Leader> leader;
  try {
    leader = ask(config, clients);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--key: " + in_our_words(e.what()));
  }
  if (!leader) {
    if (!config.quiet) say("nobody leads " + config.key);
    return 1;
  }
  std::printf("%s %llu\n", leader->id.c_str(), static_cast<unsigned long long>(leader->term));
  return 0;
}

}  // namespace redlock_run
