// tools/redlock-run/options.hpp: redlock-run's command line: the options as a Config, read and
// checked by parse_command_line(), and the --help and --version texts.
//
//   Config config;
//   if (const auto status = parse_command_line(argc, argv, config)) return *status;  // --help
//   // config.mode, config.key, config.uris, config.command... are checked and converted.
//
// Every bad option is a UsageError (exit 64) naming the flag as the user typed it.
#ifndef REDLOCK_RUN_OPTIONS_HPP
#define REDLOCK_RUN_OPTIONS_HPP

#include <cstddef>   // std::size_t
#include <optional>  // std::optional
#include <string>    // std::string
#include <vector>    // std::vector

#include "common.hpp"  // milliseconds, kExitBusy

namespace redlock_run {

// What to do once the options are read: run a command under the lock, hold it until stdin
// closes, show who holds it, show the leader of the election KEY, or stand by to run the command
// whenever elected (see modes.hpp).
enum class Mode { run, hold, status, leader, elect };

// How --status and --leader print: lines for people, or one JSON object for scripts.
enum class Format { text, json };

struct Config {
  std::vector<std::string> uris;
  std::string postgres;         // --postgres URI: the lock is a row in that database instead
  std::string zookeeper;        // --zookeeper URI: a ZooKeeper lock instead of Redis
  bool password_inline{false};  // a --redis URI on the command line carries a password
  std::string key;
  std::vector<std::string> more_keys;  // a repeated --key: a MultiLock over key + these
  milliseconds ttl{30'000};
  std::optional<milliseconds> wait;  // nullopt: forever
  bool no_wait{false};
  int conflict_exit{kExitBusy};
  milliseconds grace{10'000};
  milliseconds unavailable{10'000};  // LockOptions::max_unavailable
  bool fencing{false};
  bool fair{false};
  bool quiet{false};
  bool verbose{false};
  Mode mode{Mode::run};
  std::string elect_id;   // --elect ID: this candidate's id
  std::size_t limit{0};   // --limit N: a semaphore of N permits; 0: a plain lock
  bool shared{false};     // --shared: the read side of a ReadWriteLock on KEY
  bool exclusive{false};  // --exclusive: its write side (a waiting writer holds new readers back)
  Format format{Format::text};  // --format: of --status and --leader
  std::string metrics;          // --metrics PATH: Prometheus text, written at start and at exit
  std::vector<std::string> command;
};

// Parses argv into `config`. Returns nullopt to go on, or the exit status (0 after --help or
// --version, which print their text on stdout). Throws UsageError.
std::optional<int> parse_command_line(int argc, char** argv, Config& config);

// Whether the command gets REDLOCK_FENCE: with --fencing, and always with --postgres and
// --zookeeper (their holds always come with a fence).
bool exports_fence(const Config& config);

// The --help text (help.cpp).
void print_help();
// The --version text (help.cpp).
void print_version();

}  // namespace redlock_run

#endif  // REDLOCK_RUN_OPTIONS_HPP
