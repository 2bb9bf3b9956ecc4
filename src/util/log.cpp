// src/util/log.cpp: the process-wide log hook.
#include <atomic>
#include <memory>
#include <mutex>

#include "util/log_internal.hpp"

namespace redlock {
namespace {

// The handler lives behind a shared_ptr so a call in progress keeps the old one alive while
// another thread installs a new one.
std::mutex g_mutex;
std::shared_ptr<const LogHandler> g_handler;  // guarded by g_mutex
// The least level passed on, or kSilent without a handler: callers test it before formatting.
constexpr int kSilent = static_cast<int>(LogLevel::error) + 1;
std::atomic<int> g_min_level{kSilent};

}  // namespace

void set_log_handler(LogHandler handler, LogLevel min_level) noexcept {
  std::shared_ptr<const LogHandler> next;
  if (handler) {
    try {
      next = std::make_shared<const LogHandler>(std::move(handler));
    } catch (...) {
      return;  // out of memory: keep the old handler
    }
  }
  std::lock_guard<std::mutex> guard(g_mutex);
  g_handler = std::move(next);
  g_min_level.store(g_handler ? static_cast<int>(min_level) : kSilent, std::memory_order_release);
}

const char* to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warn:
      return "warn";
    case LogLevel::error:
      return "error";
  }
  return "unknown";
}

namespace detail {

bool log_enabled(LogLevel level) noexcept {
  return static_cast<int>(level) >= g_min_level.load(std::memory_order_acquire);
}

void log_message(LogLevel level, std::string_view message) noexcept {
  std::shared_ptr<const LogHandler> handler;
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    handler = g_handler;
  }
  if (!handler || !log_enabled(level)) return;
  try {
    (*handler)(level, message);
  } catch (...) {  // a throwing handler must not take a destructor or the watchdog down
  }
}

}  // namespace detail
}  // namespace redlock
