// tools/redlock-run/status.cpp: --status (see modes.hpp): a plain lock or Redlock (the key's ttl
// and <key>:holder on each server), or a semaphore's permits (--limit N, or the limit stored with
// them).
#include <cstddef>  // std::size_t
#include <cstdint>  // std::int64_t
#include <cstdio>   // std::printf
#include <string>   // std::string

#include <redlock/version.hpp>  // REDLOCK_KEY_LAYOUT

#include "modes.hpp"

namespace redlock_run {
namespace {

// The name of a helper key of `key` in key layout 3 (docs/operations.md, "Key layout"):
// "{KEY}SUFFIX", or "KEYSUFFIX" when the key has a hash tag of its own. The library keeps this
// naming internal; the layout number is its public contract, so a new layout stops the build here.
std::string helper_key(const std::string& key, const std::string& suffix) {
  static_assert(REDLOCK_KEY_LAYOUT == 3, "name the helper keys of the new key layout");
  const std::size_t open = key.find('{');
  const std::size_t close = open == std::string::npos ? open : key.find('}', open + 1);
  const bool tagged = close != std::string::npos && close > open + 1;
  return (tagged ? key : "{" + key + "}") + suffix;
}

std::string ttl_text(std::int64_t pttl) {
  return pttl < 0 ? "no ttl" : "ttl " + format_duration(milliseconds(pttl)) + " left";
}

// A plain lock or Redlock: one line per server. 0 if held on a quorum, 1 if not, 69 if too few
// answer.
int show_lock(const Config& config, const std::vector<redlock::Client>& clients) {
  const std::string holder_key = config.key + ":holder";
  std::size_t held = 0;
  std::size_t answered = 0;
  for (const auto& client : clients) {
    const std::string prefix =
        (clients.size() > 1 ? client.endpoint().address() + ": " : std::string()) + config.key;
    try {
      const auto replies = client.pipeline({{"PTTL", config.key}, {"GET", holder_key}});
      ++answered;
      const std::int64_t pttl = replies.at(0).integer();
      if (replies.at(0).is_error() || pttl == -2) {
        std::printf("%s: not held\n", prefix.c_str());
        continue;
      }
      ++held;
      const std::string who = replies.at(1).is_nil() || replies.at(1).is_error()
                                  ? "unknown holder"
                                  : replies.at(1).str();
      std::printf("%s: held, %s, by %s\n", prefix.c_str(), ttl_text(pttl).c_str(), who.c_str());
    } catch (const redlock::Error& e) {
      say(prefix + ": " + in_our_words(e.what()));
    }
  }
  const std::size_t quorum = clients.size() / 2 + 1;
  if (answered < quorum) return kExitUnavailable;
  return held >= quorum ? 0 : kExitNotHeld;
}

// A semaphore of `limit` permits: a summary line, then one line per held permit. 0 if any permit
// is held, 1 if none. Throws redlock::Error.
int show_semaphore(const Config& config, const redlock::Client& client, std::size_t limit) {
  std::vector<std::string> slots;
  for (std::size_t i = 1; i <= limit; ++i) {
    slots.push_back(helper_key(config.key, ":permit:" + std::to_string(i)));
  }
  std::vector<std::vector<std::string_view>> commands;
  for (const auto& slot : slots) commands.push_back({"PTTL", slot});
  const auto replies = client.pipeline(commands);
  std::size_t held = 0;
  std::string lines;
  for (std::size_t i = 0; i < limit; ++i) {
    const std::int64_t pttl = replies.at(i).is_error() ? -2 : replies.at(i).integer();
    if (pttl == -2) continue;
    ++held;
    lines += config.key + ": permit " + std::to_string(i + 1) + " held, " + ttl_text(pttl) + "\n";
  }
  std::printf("%s: semaphore, limit %zu: %zu of %zu permits held\n%s", config.key.c_str(), limit,
              held, limit, lines.c_str());
  return held > 0 ? 0 : kExitNotHeld;
}

// The limit stored with the permits of `config.key` (0: none), and whether the key itself exists
// (a plain lock then). Throws redlock::Error.
std::size_t stored_limit(const Config& config, const redlock::Client& client, bool& plain) {
  const auto replies =
      client.pipeline({{"GET", helper_key(config.key, ":permit:limit")}, {"PTTL", config.key}});
  plain = !replies.at(1).is_error() && replies.at(1).integer() != -2;
  const auto& limit = replies.at(0);
  if (limit.is_nil() || limit.is_error()) return 0;
  const std::string text = limit.str();
  const bool digits = !text.empty() && text.size() <= 5 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  return digits ? std::stoul(text) : 0;
}

}  // namespace

int run_status(const Config& config, const std::vector<redlock::Client>& clients) {
  if (clients.size() != 1) return show_lock(config, clients);  // a Redlock: no semaphores
  try {
    bool plain = false;
    const std::size_t stored = stored_limit(config, clients.front(), plain);
    if (config.limit > 0 && stored > 0 && stored != config.limit) {
      say(limit_mismatch(config.key, config.limit, stored));
      return kExitUsage;
    }
    if (config.limit > 0) return show_semaphore(config, clients.front(), config.limit);
    if (stored > 0 && !plain) return show_semaphore(config, clients.front(), stored);
  } catch (const redlock::Error& e) {
    say(config.key + ": " + in_our_words(e.what()));
    return kExitUnavailable;
  }
  return show_lock(config, clients);
}

}  // namespace redlock_run
