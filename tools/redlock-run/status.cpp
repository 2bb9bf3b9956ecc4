// tools/redlock-run/status.cpp: --status and the printing of --leader (see modes.hpp): a plain
// lock or Redlock (the key's ttl and <key>:holder on each server, or the number of readers of a
// ReadWriteLock holding it), a semaphore's permits (--limit N, or the limit stored with them),
// or the leader and term of an election; as lines (--format text) or one JSON object.
#include <cstddef>    // std::size_t
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::printf, std::fputs
#include <optional>   // std::optional
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string

#include <redlock/election.hpp>  // Election, Leader: an election's leader

#include "keys.hpp"  // helper_key, stored_limit, permit_ttls, live_readers
#include "modes.hpp"

namespace redlock_run {
namespace {

// The id of an observer: never written anywhere (it does not campaign).
const char kObserverId[] = "redlock-run --status";

std::string ttl_text(std::int64_t pttl) {
  return pttl < 0 ? "no ttl" : "ttl " + format_duration(milliseconds(pttl)) + " left";
}

std::string json_ttl(std::int64_t pttl) { return pttl < 0 ? "null" : std::to_string(pttl); }

// What one server says of a plain lock or Redlock on the key.
struct ServerView {
  std::string address;
  std::optional<std::string> error;  // it did not answer
  std::int64_t pttl{-2};             // -2: not held
  std::optional<std::string> holder;
  std::size_t readers{0};  // the key is held by the readers of a ReadWriteLock
};

ServerView look(const Config& config, const redlock::Client& client) {
  ServerView view;
  view.address = client.endpoint().address();
  try {
    const auto replies = client.pipeline(
        {{"PTTL", config.key}, {"GET", config.key + ":holder"}, {"GET", config.key}});
    view.pttl = replies.at(0).is_error() ? -2 : replies.at(0).integer();
    if (view.pttl == -2) return view;
    if (!replies.at(1).is_nil() && !replies.at(1).is_error()) view.holder = replies.at(1).str();
    if (!replies.at(2).is_error() && replies.at(2).str() == kReadersHold) {
      view.readers = live_readers(client, config.key);
    }
  } catch (const redlock::Error& e) {
    view.error = in_our_words(e.what());
  }
  return view;
}

void print_text(const Config& config, const ServerView& view, bool several) {
  const std::string prefix = (several ? view.address + ": " : std::string()) + config.key;
  if (view.error) {
    say(prefix + ": " + *view.error);
  } else if (view.pttl == -2) {
    std::printf("%s: not held\n", prefix.c_str());
  } else if (view.readers > 0) {
    std::printf("%s: held by %zu reader%s (--shared), %s\n", prefix.c_str(), view.readers,
                view.readers == 1 ? "" : "s", ttl_text(view.pttl).c_str());
  } else {
    std::printf("%s: held, %s, by %s\n", prefix.c_str(), ttl_text(view.pttl).c_str(),
                view.holder ? view.holder->c_str() : "unknown holder");
  }
}

std::string json_of(const ServerView& view) {
  std::string json = "{\"server\":" + json_string(view.address);
  if (view.error) return json + ",\"error\":" + json_string(*view.error) + "}";
  json += ",\"held\":" + std::string(view.pttl == -2 ? "false" : "true");
  if (view.pttl == -2) return json + "}";
  return json + ",\"ttl_ms\":" + json_ttl(view.pttl) +
         ",\"holder\":" + (view.holder ? json_string(*view.holder) : "null") +
         ",\"readers\":" + std::to_string(view.readers) + "}";
}

// A plain lock or Redlock: one line per server. 0 if held on a quorum, 1 if not, 69 if too few
// answer.
int show_lock(const Config& config, const std::vector<redlock::Client>& clients) {
  std::size_t held = 0;
  std::size_t answered = 0;
  std::string servers;
  for (const auto& client : clients) {
    const ServerView view = look(config, client);
    answered += view.error ? 0 : 1;
    held += !view.error && view.pttl != -2 ? 1 : 0;
    if (config.format == Format::text) print_text(config, view, clients.size() > 1);
    servers += (servers.empty() ? "" : ",") + json_of(view);
  }
  const std::size_t quorum = clients.size() / 2 + 1;
  if (config.format == Format::json) {
    std::printf("{\"key\":%s,\"kind\":\"lock\",\"held\":%s,\"servers\":[%s]}\n",
                json_string(config.key).c_str(), held >= quorum ? "true" : "false",
                servers.c_str());
  }
  if (answered < quorum) return kExitUnavailable;
  return held >= quorum ? 0 : kExitNotHeld;
}

// A semaphore of `limit` permits: a summary line, then one line per held permit. 0 if any permit
// is held, 1 if none. Throws redlock::Error.
int show_semaphore(const Config& config, const redlock::Client& client, std::size_t limit) {
  const auto ttls = permit_ttls(client, config.key, limit);
  const std::size_t held = count_held(ttls);
  std::string lines;
  std::string permits;
  for (std::size_t i = 0; i < limit; ++i) {
    if (ttls[i] == -2) continue;
    lines +=
        config.key + ": permit " + std::to_string(i + 1) + " held, " + ttl_text(ttls[i]) + "\n";
    permits += (permits.empty() ? "" : ",") + std::string("{\"permit\":") + std::to_string(i + 1) +
               ",\"ttl_ms\":" + json_ttl(ttls[i]) + "}";
  }
  if (config.format == Format::json) {
    std::printf(
        "{\"key\":%s,\"kind\":\"semaphore\",\"held\":%s,\"limit\":%zu,\"permits_held\":%zu,"
        "\"permits\":[%s]}\n",
        json_string(config.key).c_str(), held > 0 ? "true" : "false", limit, held, permits.c_str());
  } else {
    std::printf("%s: semaphore, limit %zu: %zu of %zu permits held\n%s", config.key.c_str(), limit,
                held, limit, lines.c_str());
  }
  return held > 0 ? 0 : kExitNotHeld;
}

// A semaphore's permits, if the key is one (the limit given, or the one stored with its permits,
// while the key itself is not held as a plain lock). nullopt if it is not. Throws redlock::Error.
std::optional<int> show_if_semaphore(const Config& config, const redlock::Client& client) {
  const std::size_t stored = stored_limit(client, config.key);
  if (config.limit > 0 && stored > 0 && stored != config.limit) {
    say(limit_mismatch(config.key, config.limit, stored));
    return kExitUsage;
  }
  if (config.limit > 0) return show_semaphore(config, client, config.limit);
  const auto pttl = client.command({"PTTL", config.key});
  const bool plain = !pttl.is_error() && pttl.integer() != -2;
  if (stored > 0 && !plain) return show_semaphore(config, client, stored);
  return std::nullopt;
}

// The leader and term of the election KEY.
void show_election(const Config& config, const redlock::Leader& leader) {
  const std::string term = std::to_string(leader.term);
  if (config.format == Format::json) {
    std::printf("{\"key\":%s,\"kind\":\"election\",\"held\":true,\"leader\":%s,\"term\":%s}\n",
                json_string(config.key).c_str(), json_string(leader.id).c_str(), term.c_str());
  } else {
    std::printf("%s: election, leader %s, term %s\n", config.key.c_str(),
                quoted_word(leader.id).c_str(), term.c_str());
  }
}

// The leader of the election KEY, if there is one. nullopt also if the servers cannot tell (too
// few answer: show_lock() then says which). Never throws (but std::bad_alloc).
std::optional<redlock::Leader> election_leader(const Config& config,
                                               const std::vector<redlock::Client>& clients) {
  try {
    redlock::Election observer(clients, config.key, kObserverId);
    return observer.leader();
  } catch (const redlock::Error&) {
  } catch (const std::invalid_argument&) {  // a server named twice: show_lock() shows both
  }
  return std::nullopt;
}

}  // namespace

int print_leader(const Config& config, const std::optional<redlock::Leader>& leader) {
  if (config.format == Format::json) {
    std::printf("{\"key\":%s,\"leader\":%s,\"term\":%s}\n", json_string(config.key).c_str(),
                leader ? json_string(leader->id).c_str() : "null",
                leader ? std::to_string(leader->term).c_str() : "null");
  } else if (leader) {
    std::printf("%s %llu\n", quoted_word(leader->id).c_str(),
                static_cast<unsigned long long>(leader->term));
  }
  if (!leader && !config.quiet) say("nobody leads " + config.key);
  return leader ? 0 : kExitNotHeld;
}

int run_status(const Config& config, const std::vector<redlock::Client>& clients) {
  if (clients.size() == 1) {
    try {
      if (const auto status = show_if_semaphore(config, clients.front())) return *status;
    } catch (const redlock::Error& e) {
      say(config.key + ": " + in_our_words(e.what()));
      return kExitUnavailable;
    }
  }
  if (config.limit == 0) {
    if (const auto leader = election_leader(config, clients)) {
      show_election(config, *leader);
      return 0;
    }
  }
  return show_lock(config, clients);
}

}  // namespace redlock_run
