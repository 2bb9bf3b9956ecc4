// tools/redlock-run/common.hpp: what every part of redlock-run shares: the exit statuses, the
// message helpers (stderr lines, library messages in our words, no credentials) and durations.
//
//   say("waiting for " + key);                        // "redlock-run: waiting for KEY"
//   throw UsageError("--ttl 1x is not a duration");   // exit 64 and "Try 'redlock-run --help'"
#ifndef REDLOCK_RUN_COMMON_HPP
#define REDLOCK_RUN_COMMON_HPP

#include <chrono>       // std::chrono::steady_clock, milliseconds
#include <cstddef>      // std::size_t
#include <stdexcept>    // std::runtime_error
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace redlock_run {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Exit statuses (sysexits.h values, spelled out so that the help text is the one reference).
constexpr int kExitNotHeld = 1;          // --status: the key is free
constexpr int kExitUsage = 64;           // EX_USAGE
constexpr int kExitUnavailable = 69;     // EX_UNAVAILABLE
constexpr int kExitLost = 70;            // EX_SOFTWARE
constexpr int kExitOsError = 71;         // EX_OSERR
constexpr int kExitBusy = 75;            // EX_TEMPFAIL
constexpr int kExitNotExecutable = 126;  // as in shells, env and timeout
constexpr int kExitNotFound = 127;       // as in shells

// A bad command line: the message names the flag the user typed and what to do.
class UsageError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Writes "redlock-run: <line>\n" to stderr in one call (stdio locks the stream, so lines from the
// library's threads do not interleave with ours).
void say(const std::string& line);

// Replaces the user-info part of anything that looks like a URI ("scheme://user:pw@host") with
// "***". For messages we do not compose ourselves (the library's), which may quote a URI.
std::string scrub_credentials(std::string text);

// A library message in the words of this tool's command line: no C++ names, no credentials.
std::string in_our_words(std::string text);

// `text` as a JSON string, quotes included ("a\"b"), control characters escaped (\n, \u0001).
std::string json_string(std::string_view text);

// `text` as one word of a line: unchanged if it is non-empty and has no white space, control
// character, quote or backslash; else as json_string() ("pod 7", "a\nb", "\u0001"). The same
// text always gives the same word.
std::string quoted_word(std::string_view text);

// --limit `ours` on `key` where the held permits use `theirs`: what to do about it.
std::string limit_mismatch(const std::string& key, std::size_t ours, std::size_t theirs);

// "SIGTERM", or "signal N" for one without a name.
std::string signal_name(int signo);

// Parses a duration (duration.hpp: "250ms", "0.5s", "1m30s", a bare number of seconds). Throws
// UsageError naming `flag`.
milliseconds parse_duration(std::string_view flag, std::string_view text);

// "300ms", "30s", "2m", "1h": the largest unit that divides it evenly.
std::string format_duration(milliseconds d);

}  // namespace redlock_run

#endif  // REDLOCK_RUN_COMMON_HPP
