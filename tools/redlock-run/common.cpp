// tools/redlock-run/common.cpp: messages and durations (see common.hpp).
#include "common.hpp"

#include <algorithm>  // std::none_of
#include <cctype>     // std::isspace, std::iscntrl
#include <cstdint>    // std::int64_t
#include <cstdio>     // std::fputs
#include <cstring>    // sigabbrev_np
#include <utility>    // std::pair

#include "duration.hpp"  // redlock_examples::parse_duration: the syntax shared with the demo

namespace redlock_run {

void say(const std::string& line) {
  const std::string text = "redlock-run: " + line + "\n";
  std::fputs(text.c_str(), stderr);
}

std::string scrub_credentials(std::string text) {
  std::size_t from = 0;
  for (;;) {
    const std::size_t scheme = text.find("://", from);
    if (scheme == std::string::npos) return text;
    const std::size_t start = scheme + 3;
    std::size_t end = text.find_first_of(" \t\n\"'", start);
    if (end == std::string::npos) end = text.size();
    const std::size_t at = text.rfind('@', end - 1);
    if (at != std::string::npos && at >= start && end > start) {
      text.replace(start, at - start, "***");
      from = start + 4;
    } else {
      from = start;
    }
  }
}

std::string in_our_words(std::string text) {
  static const std::pair<std::string_view, std::string_view> kPhrases[] = {
      {"redlock: ", ""},
      {"check Endpoint::username and Endpoint::password",
       "check the user and password in the server URI (--redis, --redis-file or REDLOCK_REDIS)"},
      {"Endpoint::database", "the /db part of the URI"},
      {"; further failures are logged at debug", ""},
  };
  for (const auto& [from, to] : kPhrases) {
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
      text.replace(at, from.size(), to);
      at += to.size();
    }
  }
  return scrub_credentials(std::move(text));
}

std::string json_string(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string json = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      json += '\\';
      json += c;
    } else if (c == '\n') {
      json += "\\n";
    } else if (c == '\t') {
      json += "\\t";
    } else if (byte < 0x20 || byte == 0x7f) {
      json += "\\u00";
      json += kHex[byte >> 4];
      json += kHex[byte & 0xf];
    } else {
      json += c;  // UTF-8 passes through
    }
  }
  return json + "\"";
}

std::string quoted_word(std::string_view text) {
  const bool plain = !text.empty() && std::none_of(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return std::isspace(byte) != 0 || std::iscntrl(byte) != 0 || c == '"' || c == '\\' || c == '\'';
  });
  return plain ? std::string(text) : json_string(text);
}

std::string limit_mismatch(const std::string& key, std::size_t ours, std::size_t theirs) {
  return "--limit " + std::to_string(ours) + " does not match the limit " + std::to_string(theirs) +
         " that the holders of " + key +
         " use; every user of a semaphore key must give the same --limit (it can change only "
         "while no permit is held): give --limit " +
         std::to_string(theirs);
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

milliseconds parse_duration(std::string_view flag, std::string_view text) {
  const auto d = redlock_examples::parse_duration(text);
  if (!d) {
    throw UsageError(std::string(flag) + " '" + std::string(text) +
                     "' is not a duration (at most 1000000h); use " +
                     redlock_examples::kDurationHelp);
  }
  return *d;
}

std::string format_duration(milliseconds d) {
  const std::int64_t ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms != 0 && ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace redlock_run
