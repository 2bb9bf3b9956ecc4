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
std::atomic<bool> g_enabled{false};

}  // namespace

void set_log_handler(LogHandler handler) noexcept {
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
  g_enabled.store(static_cast<bool>(g_handler), std::memory_order_release);
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

bool log_enabled() noexcept { return g_enabled.load(std::memory_order_acquire); }

void log_message(LogLevel level, std::string_view message) noexcept {
  std::shared_ptr<const LogHandler> handler;
  {
    std::lock_guard<std::mutex> guard(g_mutex);
    handler = g_handler;
  }
  if (!handler) return;
  try {
    (*handler)(level, message);
  } catch (...) {  // a throwing handler must not take a destructor or the watchdog down
  }
}

}  // namespace detail
}  // namespace redlock
