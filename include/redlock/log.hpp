// redlock/log.hpp: where redlock reports what it cannot throw.
//
// A destructor that fails to release, a reconnect, a lease lost in the background: none of these
// can be thrown to the caller, so they go to one process-wide handler. The default is silent.
//
//   redlock::set_log_handler(
//       [](redlock::LogLevel, std::string_view message) { std::cerr << message << '\n'; },
//       redlock::LogLevel::warn);
//
// Messages never contain passwords. The handler may be called from any thread, including the
// watchdog's; it must not throw (an exception from it is swallowed) and should be quick.
#ifndef REDLOCK_LOG_HPP
#define REDLOCK_LOG_HPP

#include <functional>   // std::function
#include <string_view>  // std::string_view

namespace redlock {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

using LogHandler = std::function<void(LogLevel level, std::string_view message)>;

// Installs `handler` for the whole process (an empty function restores the silent default).
// Messages below `min_level` are neither formatted nor passed to it: a handler that keeps only
// warnings should say so here, or every lease renewal formats a debug message for nothing.
// Returns nothing; throws nothing. Thread-safe: may be called while other threads log; calls
// already in progress finish with the old handler.
void set_log_handler(LogHandler handler, LogLevel min_level = LogLevel::debug) noexcept;

// Short lowercase name of a level ("debug", "info", "warn", "error"). Thread-safe.
const char* to_string(LogLevel level) noexcept;

}  // namespace redlock

#endif  // REDLOCK_LOG_HPP
