// tools/redlock-run/status.cpp: --status (see modes.hpp).
#include <cstdint>  // std::int64_t
#include <cstdio>   // std::printf
#include <string>   // std::string

#include "modes.hpp"

namespace redlock_run {

int run_status(const Config& config, const std::vector<redlock::Client>& clients) {
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
      const std::string ttl =
          pttl < 0 ? "no ttl" : "ttl " + format_duration(milliseconds(pttl)) + " left";
      std::printf("%s: held, %s, by %s\n", prefix.c_str(), ttl.c_str(), who.c_str());
    } catch (const redlock::Error& e) {
      say(prefix + ": " + in_our_words(e.what()));
    }
  }
  const std::size_t quorum = clients.size() / 2 + 1;
  if (answered < quorum) return kExitUnavailable;
  return held >= quorum ? 0 : kExitNotHeld;
}

}  // namespace redlock_run
