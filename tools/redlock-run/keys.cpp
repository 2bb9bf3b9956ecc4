// tools/redlock-run/keys.cpp: reading the library's helper keys (see keys.hpp).
#include "keys.hpp"

#include <algorithm>  // std::count_if
#include <string_view>

#include <redlock/version.hpp>  // REDLOCK_KEY_LAYOUT

namespace redlock_run {

// The library keeps this naming internal; the layout number is its public contract, so a new
// layout stops the build here.
std::string helper_key(const std::string& key, const std::string& suffix) {
  static_assert(REDLOCK_KEY_LAYOUT == 3, "name the helper keys of the new key layout");
  const std::size_t open = key.find('{');
  const std::size_t close = open == std::string::npos ? open : key.find('}', open + 1);
  const bool tagged = close != std::string::npos && close > open + 1;
  return (tagged ? key : "{" + key + "}") + suffix;
}

std::size_t stored_limit(const redlock::Client& client, const std::string& key) {
  const std::string limit_key = helper_key(key, ":permit:limit");
  const auto limit = client.command({"GET", limit_key});
  if (limit.is_nil() || limit.is_error()) return 0;
  const std::string text = limit.str();
  const bool digits = !text.empty() && text.size() <= 5 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  return digits ? std::stoul(text) : 0;
}

std::vector<std::int64_t> permit_ttls(const redlock::Client& client, const std::string& key,
                                      std::size_t limit) {
  std::vector<std::string> slots;
  for (std::size_t i = 1; i <= limit; ++i) {
    slots.push_back(helper_key(key, ":permit:" + std::to_string(i)));
  }
  std::vector<std::vector<std::string_view>> commands;
  for (const auto& slot : slots) commands.push_back({"PTTL", slot});
  const auto replies = client.pipeline(commands);
  std::vector<std::int64_t> ttls;
  for (std::size_t i = 0; i < limit; ++i) {
    ttls.push_back(replies.at(i).is_error() ? -2 : replies.at(i).integer());
  }
  return ttls;
}

std::size_t count_held(const std::vector<std::int64_t>& ttls) {
  return static_cast<std::size_t>(
      std::count_if(ttls.begin(), ttls.end(), [](std::int64_t pttl) { return pttl != -2; }));
}

std::size_t live_readers(const redlock::Client& client, const std::string& key) {
  // The readers' set is scored by each lease's end on the server's clock (ms); ended leases may
  // linger until the next script purges them, so count only the live ones.
  static const redlock::Script kCount(
      "local t = redis.call('time')\n"
      "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
      "return redis.call('zcount', KEYS[1], '(' .. now, '+inf')");
  const std::string readers = helper_key(key, ":readers");
  const auto reply = client.eval(kCount, {readers}, {});
  return reply.is_error() ? 0 : static_cast<std::size_t>(reply.integer());
}

}  // namespace redlock_run
