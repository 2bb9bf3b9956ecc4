// tools/redlock-run/duration.hpp: the duration syntax of redlock-run and redlock-demo, in one
// place.
//
//   parse_duration("1m30s") == 90'000ms;  parse_duration("0.5") == 500ms;  parse_duration("2 s")
//   == nullopt.
//
// A duration is one or more <number>[.<fraction>]<unit> steps (units ms, s, m, h: "250ms",
// "0.5s", "1m30s"), or a bare number of seconds ("10", "0.5"), as flock(1) takes. Rounded to
// whole milliseconds; at most 1,000,000 hours.
#ifndef REDLOCK_EXAMPLES_DURATION_HPP
#define REDLOCK_EXAMPLES_DURATION_HPP

#include <chrono>       // std::chrono::milliseconds
#include <cstdint>      // std::int64_t
#include <optional>     // std::optional
#include <string>       // std::string, std::stod
#include <string_view>  // std::string_view
#include <utility>      // std::pair

namespace redlock_examples {

// For messages: what a duration looks like.
inline constexpr const char kDurationHelp[] =
    "e.g. 250ms, 0.5s, 30s, 1m30s or 2h (a bare number is seconds)";

// The largest duration accepted (about 114 years): far from overflowing now() + duration.
inline constexpr std::int64_t kMaxDurationMs = std::int64_t{1'000'000} * 3'600'000;

namespace detail {

// One step at `at`, in microseconds; advances `at`. nullopt if the text there is not one. A
// missing unit means seconds, and is valid only for the whole text.
inline std::optional<double> duration_step(std::string_view text, std::size_t& at) {
  const std::size_t begin = at;
  while (at < text.size() && ((text[at] >= '0' && text[at] <= '9') || text[at] == '.')) ++at;
  const std::string number(text.substr(begin, at - begin));
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
    return std::nullopt;
  }
  const double value = std::stod(number);
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"ms", 1e3}, {"s", 1e6}, {"m", 60e6}, {"h", 3600e6}};
  for (const auto& [unit, scale] : kUnits) {
    if (text.substr(at, unit.size()) == unit && (unit != "m" || text.substr(at, 2) != "ms")) {
      at += unit.size();
      return value * scale;
    }
  }
  if (at == text.size() && begin == 0) return value * 1e6;
  return std::nullopt;
}

}  // namespace detail

// Parses a duration (see the top of the file). Returns nullopt if `text` is not one or is
// longer than kMaxDurationMs. Never throws (except std::bad_alloc).
inline std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  double micros = 0;
  std::size_t at = 0;
  do {
    const auto step = detail::duration_step(text, at);
    if (!step) return std::nullopt;
    micros += *step;
  } while (at < text.size());
  if (micros / 1e3 > static_cast<double>(kMaxDurationMs)) return std::nullopt;
  return std::chrono::milliseconds(static_cast<std::int64_t>(micros / 1e3 + 0.5));
}

}  // namespace redlock_examples

#endif  // REDLOCK_EXAMPLES_DURATION_HPP
