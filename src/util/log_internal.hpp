// src/util/log_internal.hpp: formatting front end of the process-wide log hook (fmt stays in src/).
#ifndef REDLOCK_SRC_LOG_INTERNAL_HPP
#define REDLOCK_SRC_LOG_INTERNAL_HPP

#include <string_view>
#include <utility>

#include <fmt/format.h>

#include <redlock/log.hpp>

namespace redlock {
namespace detail {

// True if a handler is installed and takes `level` (lets callers skip formatting when nobody
// listens).
bool log_enabled(LogLevel level) noexcept;
// Passes `message` to the handler; swallows anything it throws.
void log_message(LogLevel level, std::string_view message) noexcept;

template <class... Args>
void logf(LogLevel level, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!log_enabled(level)) return;
  try {
    log_message(level, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {  // formatting failed (bad_alloc): nothing sensible to do in a log path
  }
}

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_LOG_INTERNAL_HPP
