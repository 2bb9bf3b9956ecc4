// tests/torture/common.cpp: see common.hpp.
#include "common.hpp"

#include <time.h>  // clock_gettime, CLOCK_MONOTONIC

#include <cctype>  // std::isdigit
#include <cstdio>  // std::snprintf
#include <limits>  // std::numeric_limits

namespace redlock::torture {

std::int64_t mono_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::optional<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  std::size_t i = 0;
  std::int64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0) {
    if (value > std::numeric_limits<std::int64_t>::max() / 10 - 10) return std::nullopt;
    value = value * 10 + (text[i] - '0');
    ++i;
  }
  if (i == 0) return std::nullopt;
  const std::string_view unit = text.substr(i);
  std::int64_t ms_per_unit = 0;
  if (unit == "ms") {
    ms_per_unit = 1;
  } else if (unit.empty() || unit == "s") {
    ms_per_unit = 1000;
  } else if (unit == "m" || unit == "min") {
    ms_per_unit = 60'000;
  } else if (unit == "h") {
    ms_per_unit = 3'600'000;
  } else {
    return std::nullopt;
  }
  constexpr std::int64_t kDayMs = 24 * 3'600'000LL;
  if (value > kDayMs / ms_per_unit) return std::nullopt;
  return std::chrono::milliseconds(value * ms_per_unit);
}

std::string format_duration(std::chrono::nanoseconds d) {
  const std::int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

const char* to_string(Mode mode) noexcept {
  switch (mode) {
    case Mode::lock:
      return "lock";
    case Mode::sentinel:
      return "sentinel";
    case Mode::cluster:
      return "cluster";
    case Mode::postgres:
      return "postgres";
    case Mode::postgres_session:
      return "postgres-session";
    case Mode::zookeeper:
      return "zookeeper";
    case Mode::redlock:
      break;
  }
  return "redlock";
}

const char* to_string(Unsafe unsafe) noexcept {
  switch (unsafe) {
    case Unsafe::none:
      return "none";
    case Unsafe::clock:
      return "clock";
    case Unsafe::restart:
      return "restart";
  }
  return "none";
}

const char* to_string(Primitive primitive) noexcept {
  switch (primitive) {
    case Primitive::rwlock:
      return "rwlock";
    case Primitive::multilock:
      return "multilock";
    case Primitive::election:
      return "election";
    case Primitive::lock:
      break;
  }
  return "lock";
}

std::optional<Primitive> parse_primitive(std::string_view text) {
  if (text == "lock") return Primitive::lock;
  if (text == "rwlock") return Primitive::rwlock;
  if (text == "multilock") return Primitive::multilock;
  if (text == "election") return Primitive::election;
  return std::nullopt;
}

std::optional<Mode> parse_mode(std::string_view text) {
  if (text == "redlock") return Mode::redlock;
  if (text == "lock") return Mode::lock;
  if (text == "sentinel") return Mode::sentinel;
  if (text == "postgres") return Mode::postgres;
  if (text == "postgres-session") return Mode::postgres_session;
  if (text == "zookeeper") return Mode::zookeeper;
  if (text == "cluster") return Mode::cluster;
  return std::nullopt;
}

std::optional<Unsafe> parse_unsafe(std::string_view text) {
  if (text == "none") return Unsafe::none;
  if (text == "clock") return Unsafe::clock;
  if (text == "restart") return Unsafe::restart;
  return std::nullopt;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace redlock::torture
