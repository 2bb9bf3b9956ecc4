// tools/redlock-run/options.cpp: reading and checking the command line (see options.hpp): each
// option as typed (Raw), then the checks that need several options together (finish_config).
#include "options.hpp"

#include <algorithm>    // std::min, std::all_of
#include <cctype>       // std::isalnum, std::isspace
#include <cerrno>       // errno
#include <cstdlib>      // std::getenv
#include <cstring>      // std::strerror
#include <fstream>      // std::ifstream: --redis-file
#include <stdexcept>    // std::invalid_argument
#include <string_view>  // std::string_view
#include <utility>      // std::pair

#include <redlock/redlock.hpp>  // Endpoint, Semaphore::kMaxLimit
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
#include <redlock/zookeeper.hpp>  // zookeeper::Session: --zookeeper URIs are parsed at once
#endif

namespace redlock_run {
namespace {

// The shortest usable --ttl: the library subtracts a drift allowance (1% + 2 ms) from every
// lease and renews at ttl/3, so a shorter lease would be mostly allowance and round trips.
constexpr milliseconds kMinTtl{100};

// Checks one server URI; `source` says where the user gave it (for the message).
void check_uri(const std::string& uri, const std::string& source) {
  try {
    redlock::Endpoint::parse(uri);
  } catch (const std::invalid_argument& e) {
    throw UsageError(source + ": " + in_our_words(e.what()));
  }
}

// --zookeeper URI: parsed now (a Session connects nothing until used), so a bad one is a usage
// error (64).
void check_zookeeper_uri(const std::string& uri) {
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
  try {
    redlock::zookeeper::Session session(uri);
  } catch (const std::invalid_argument& e) {
    throw UsageError("--zookeeper: " + in_our_words(e.what()));
  }
#else
  (void)uri;
  throw UsageError("--zookeeper: this redlock-run was built without ZooKeeper support");
#endif
}

// --elect ID: printable, without white space, so that --leader's "ID TERM" line splits at its
// one space (a script reads it with `read -r id term`).
void check_candidate_id(const std::string& id) {
  for (const char c : id) {
    const auto byte = static_cast<unsigned char>(c);
    if (std::isspace(byte) != 0 || std::iscntrl(byte) != 0) {
      throw UsageError("--elect '" + id +
                       "': a candidate's id has no spaces, tabs, newlines or control characters "
                       "(--leader prints it as the first word of its line)");
    }
  }
}

// Whether `text` starts with "scheme://" (letters, digits, '+', '-', '.').
bool starts_uri(std::string_view text) {
  const std::size_t sep = text.find("://");
  if (sep == 0 || sep == std::string_view::npos) return false;
  return std::all_of(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(sep), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '-' || c == '.';
  });
}

// URIs separated by white space, or by commas where the next one starts with a scheme (a
// redis-sentinel:// URI lists its sentinels with commas).
std::vector<std::string> split_uris(std::string_view text) {
  std::vector<std::string> uris;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = std::min(text.find_first_of(" \t\n", at), text.size());
    for (std::size_t comma = text.find(',', at); comma < end; comma = text.find(',', comma + 1)) {
      if (starts_uri(text.substr(comma + 1)) || comma + 1 == end) {
        end = comma;
        break;
      }
    }
    if (end > at) uris.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return uris;
}

// A line of a --redis-file without its comment: from a '#' at the start or after white space
// (a '#' inside a URI is a Sentinel service name).
std::string_view without_comment(std::string_view line) {
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])) != 0)) {
      return line.substr(0, i);
    }
  }
  return line;
}

std::vector<std::string> read_redis_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--redis-file " + path + ": " + std::strerror(errno));
  std::vector<std::string> uris;
  std::string line;
  while (std::getline(in, line)) {
    const auto words = split_uris(without_comment(line));
    uris.insert(uris.end(), words.begin(), words.end());
  }
  for (const auto& uri : uris) check_uri(uri, "--redis-file " + path);
  if (uris.empty()) throw UsageError("--redis-file " + path + " names no server");
  return uris;
}

// The options as typed: `flag` is the spelling the user used, `value` its argument if it takes one.
struct Raw {
  std::vector<std::string> redis;
  std::optional<std::string> postgres;
  std::vector<std::string> redis_files;
  std::optional<std::string> zookeeper;
  std::string ttl{"30s"};
  std::string grace{"10s"};
  std::string unavailable{"10s"};
  std::optional<std::string> limit;
  std::optional<std::string> wait;  // with the spelling used
  std::string wait_flag;
  std::optional<std::string> conflict_exit;
  bool key_given{false};
  // Every option given, as (canonical name, spelling typed), in order: for the checks of options
  // that cannot be combined, whose messages name the flags as the user typed them.
  std::vector<std::pair<std::string_view, std::string>> given;
};

// A pseudo option: --key given more than once (a MultiLock).
constexpr std::string_view kRepeatedKey = "--key --key";

// The spelling the user typed for the option `name` (canonical), or nullptr if not given.
const std::string* typed(const Raw& raw, std::string_view name) {
  for (const auto& [canonical, spelling] : raw.given) {
    if (canonical == name) return &spelling;
  }
  return nullptr;
}

// Options that take a value, each spelling mapped to one canonical name.
const std::pair<std::string_view, std::string_view> kValueOptions[] = {
    {"--redis", "--redis"},
    {"--redis-file", "--redis-file"},
    {"--postgres", "--postgres"},
    {"--zookeeper", "--zookeeper"},
    {"--key", "--key"},
    {"--ttl", "--ttl"},
    {"--elect", "--elect"},
    {"--wait", "--wait"},
    {"-w", "--wait"},
    {"--timeout", "--wait"},
    {"--grace", "--grace"},
    {"--unavailable-timeout", "--unavailable-timeout"},
    {"--limit", "--limit"},
    {"--format", "--format"},
    {"--metrics", "--metrics"},
    {"--conflict-exit-code", "-E"},
    {"-E", "-E"}};

std::optional<std::string_view> value_option(std::string_view flag) {
  for (const auto& [spelling, name] : kValueOptions) {
    if (flag == spelling) return name;
  }
  return std::nullopt;
}

// --key KEY: the first is the lock; a repeated --key adds one to a MultiLock (all or none).
void take_key(const std::string& value, Raw& raw, Config& config) {
  if (value.empty()) throw UsageError("--key needs the name of the lock, got ''");
  if (value == config.key || std::find(config.more_keys.begin(), config.more_keys.end(), value) !=
                                 config.more_keys.end()) {
    throw UsageError("--key '" + value + "' is given twice; give each key once");
  }
  if (raw.key_given) {
    config.more_keys.push_back(value);
    raw.given.emplace_back(kRepeatedKey, "a repeated --key");
  } else {
    config.key = value;
  }
  raw.key_given = true;
}

void take_value(std::string_view name, const std::string& flag, const std::string& value, Raw& raw,
                Config& config) {
  raw.given.emplace_back(name, flag);
  if (name == "--redis") {
    check_uri(value, "--redis");
    if (redlock::Endpoint::parse(value).password.size() > 0) config.password_inline = true;
    raw.redis.push_back(value);
  } else if (name == "--redis-file") {
    raw.redis_files.push_back(value);
  } else if (name == "--postgres") {
    if (raw.postgres) throw UsageError("--postgres is given twice; give one database");
    if (value.empty()) throw UsageError("--postgres needs a database URI, got ''");
    const auto at = value.find('@');
    const auto scheme = value.find("://");
    if (at != std::string::npos && scheme != std::string::npos &&
        value.find(':', scheme + 3) < at) {
      config.password_inline = true;
    }
    raw.postgres = value;
  } else if (name == "--zookeeper") {
    if (raw.zookeeper) throw UsageError("--zookeeper is given twice; give one URI");
    check_zookeeper_uri(value);
    raw.zookeeper = value;
  } else if (name == "--key") {
    take_key(value, raw, config);
  } else if (name == "--ttl") {
    raw.ttl = value;
  } else if (name == "--elect") {
    if (value.empty()) throw UsageError("--elect needs this candidate's id, got ''");
    if (config.mode == Mode::elect) throw UsageError("--elect is given twice; give one id");
    check_candidate_id(value);
    config.mode = Mode::elect;
    config.elect_id = value;
  } else if (name == "--wait") {
    raw.wait = value;
    raw.wait_flag = flag;
  } else if (name == "--grace") {
    raw.grace = value;
  } else if (name == "--unavailable-timeout") {
    raw.unavailable = value;
  } else if (name == "--limit") {
    raw.limit = value;
  } else if (name == "--format") {
    if (value != "text" && value != "json") {
      throw UsageError("--format '" + value + "' is not a format: give text or json");
    }
    config.format = value == "json" ? Format::json : Format::text;
  } else if (name == "--metrics") {
    config.metrics = value;
  } else {
    raw.conflict_exit = value;
  }
}

// Flags without a value. Returns false if `flag` is not one.
bool take_flag(const std::string& flag, Raw& raw, Config& config) {
  if (flag == "-n" || flag == "--no-wait") {
    raw.given.emplace_back("--no-wait", flag);
    config.no_wait = true;
  } else if (flag == "--fencing") {
    raw.given.emplace_back("--fencing", flag);
    config.fencing = true;
  } else if (flag == "--fair") {
    raw.given.emplace_back("--fair", flag);
    config.fair = true;
  } else if (flag == "--shared") {
    raw.given.emplace_back("--shared", flag);
    config.shared = true;
  } else if (flag == "--exclusive") {
    raw.given.emplace_back("--exclusive", flag);
    config.exclusive = true;
  } else if (flag == "-q" || flag == "--quiet") {
    config.quiet = true;
  } else if (flag == "-v" || flag == "--verbose") {
    config.verbose = true;
  } else if (flag == "--hold" || flag == "--status" || flag == "--leader") {
    raw.given.emplace_back(flag == "--hold"     ? "--hold"
                           : flag == "--status" ? "--status"
                                                : "--leader",
                           flag);
    // The mode is set here for the last of them; check_combinations() refuses several.
    config.mode = flag == "--hold" ? Mode::hold : flag == "--status" ? Mode::status : Mode::leader;
  } else {
    return false;
  }
  return true;
}

// --limit N: 1 to 10,000 holders at once, one server, no --fair.
std::size_t parse_limit(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 5 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoul(text) < 1 || std::stoul(text) > redlock::Semaphore::kMaxLimit) {
    throw UsageError("--limit '" + text + "' is not a number of holders (1 to " +
                     std::to_string(redlock::Semaphore::kMaxLimit) + ")");
  }
  return std::stoul(text);
}

int parse_exit_code(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 3 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(text) > 255) {
    throw UsageError("-E/--conflict-exit-code '" + text + "' is not an exit status (0 to 255)");
  }
  return std::stoi(text);
}

// Where the servers come from: --redis and --redis-file, else REDLOCK_REDIS.
std::vector<std::string> server_uris(const Raw& raw) {
  std::vector<std::string> uris = raw.redis;
  for (const auto& path : raw.redis_files) {
    const auto more = read_redis_file(path);
    uris.insert(uris.end(), more.begin(), more.end());
  }
  if (!uris.empty()) return uris;
  const char* env = std::getenv("REDLOCK_REDIS");
  uris = split_uris(env != nullptr ? env : "");
  for (const auto& uri : uris) check_uri(uri, "REDLOCK_REDIS");
  if (uris.empty()) {
    throw UsageError("no Redis server: give --redis URI, --redis-file PATH or set REDLOCK_REDIS");
  }
  return uris;
}

// --postgres: one database, none of the Redis-only options.
void finish_postgres(const Raw& raw, Config& config) {
  if (!raw.redis.empty() || !raw.redis_files.empty()) {
    throw UsageError(
        "--postgres and --redis/--redis-file cannot be combined: the lock lives in "
        "one store; give one of them");
  }
#ifndef REDLOCK_RUN_WITH_POSTGRES
  throw UsageError(
      "--postgres: this redlock-run was built without PostgreSQL support "
      "(REDLOCK_WITH_POSTGRES=OFF)");
#endif
  const char* redis_only = config.mode == Mode::status ? "--status"
                           : raw.limit                 ? "--limit"
                                                       : nullptr;
  if (redis_only != nullptr) {
    throw UsageError(std::string(redis_only) + " works with Redis only; drop it or --postgres");
  }
  config.postgres = *raw.postgres;
}

// --zookeeper: alone as the store, and neither --limit nor --status (Redis features). The fence
// comes with every ZooKeeper hold, so it is always exported.
void finish_zookeeper(const Raw& raw, Config& config) {
  if (!raw.redis.empty() || !raw.redis_files.empty()) {
    throw UsageError("--zookeeper and --redis/--redis-file name two stores; give one");
  }
  if (raw.limit) throw UsageError("--limit works with Redis only; drop it or --zookeeper");
  if (config.mode == Mode::status) {
    throw UsageError("--status shows Redis locks only; drop it or --zookeeper");
  }
  config.zookeeper = *raw.zookeeper;
  config.fencing = true;
}

// Options that cannot be given together (canonical names), the one list of them: the modes
// exclude each other; an election (--elect, --leader) and --status are of one key and hold no
// lock of a kind (--shared, --exclusive, --limit, --fair) nor wait for one (--wait, --no-wait,
// -E); the kinds of lock exclude each other. A combination not refused here is documented.
constexpr std::pair<std::string_view, std::string_view> kConflicts[] = {
    {"--elect", "--hold"},       {"--elect", "--status"},
    {"--elect", "--leader"},     {"--hold", "--status"},
    {"--hold", "--leader"},      {"--status", "--leader"},
    {"--elect", "--shared"},     {"--elect", "--exclusive"},
    {"--elect", "--limit"},      {"--elect", "--fair"},
    {"--elect", "--wait"},       {"--elect", "--no-wait"},
    {"--elect", "-E"},           {"--elect", kRepeatedKey},
    {"--leader", "--shared"},    {"--leader", "--exclusive"},
    {"--leader", "--limit"},     {"--leader", "--fair"},
    {"--leader", "--wait"},      {"--leader", "--no-wait"},
    {"--leader", "-E"},          {"--leader", "--fencing"},
    {"--leader", kRepeatedKey},  {"--status", "--shared"},
    {"--status", "--exclusive"}, {"--status", "--fair"},
    {"--status", "--wait"},      {"--status", "--no-wait"},
    {"--status", "-E"},          {"--status", "--fencing"},
    {"--status", kRepeatedKey},  {"--shared", "--exclusive"},
    {"--shared", "--limit"},     {"--shared", "--fair"},
    {"--shared", kRepeatedKey},  {"--exclusive", "--limit"},
    {"--exclusive", "--fair"},   {"--exclusive", kRepeatedKey},
    {"--limit", "--fair"},       {"--limit", kRepeatedKey},
    {"--fair", kRepeatedKey},    {"--wait", "--no-wait"},
};

// Refuses two options of kConflicts, and --format outside --status and --leader, naming both
// flags as typed. Throws UsageError.
void check_combinations(const Raw& raw, const Config& config) {
  for (const auto& [a, b] : kConflicts) {
    const std::string* first = typed(raw, a);
    const std::string* second = typed(raw, b);
    if (first != nullptr && second != nullptr) {
      throw UsageError(*first + " and " + *second + " cannot be combined; drop one of them");
    }
  }
  if (const std::string* format = typed(raw, "--format");
      format != nullptr && config.mode != Mode::status && config.mode != Mode::leader) {
    throw UsageError(*format + " works with --status and --leader only; drop it");
  }
}

// Checks what needs several options together, and converts the values.
void finish_config(const Raw& raw, Config& config) {
  if (!raw.key_given) throw UsageError("--key KEY is required");
  check_combinations(raw, config);
  if (raw.postgres && raw.zookeeper) {
    throw UsageError("--postgres and --zookeeper name two stores; give one");
  }
  if (raw.postgres) {
    finish_postgres(raw, config);
  } else if (raw.zookeeper) {
    finish_zookeeper(raw, config);
  } else {
    config.uris = server_uris(raw);
  }
  config.ttl = parse_duration("--ttl", raw.ttl);
  if (config.ttl < kMinTtl) {
    throw UsageError("--ttl " + raw.ttl + " is too short: the clock-drift allowance and the " +
                     "renewals need at least " + format_duration(kMinTtl));
  }
  config.grace = parse_duration("--grace", raw.grace);
  config.unavailable = parse_duration("--unavailable-timeout", raw.unavailable);
  if (raw.limit) config.limit = parse_limit(*raw.limit);
  if (raw.wait) config.wait = parse_duration(raw.wait_flag, *raw.wait);
  if (raw.conflict_exit) config.conflict_exit = parse_exit_code(*raw.conflict_exit);
  if (config.fair && config.uris.size() > 1) {
    throw UsageError(
        "--fair works with one server only (a queue on several could not agree on "
        "an order); drop --fair or give one --redis");
  }
  const char* side = config.shared ? "--shared" : config.exclusive ? "--exclusive" : nullptr;
  if (side != nullptr && !config.postgres.empty()) {
    throw UsageError(std::string(side) + " and --postgres cannot be combined; drop one");
  }
  if (side != nullptr && config.fencing && config.uris.size() > 1) {
    throw UsageError(std::string(side) +
                     " and --fencing work together with one server only (no fence is agreed "
                     "across servers); drop --fencing or give one --redis");
  }
  if (!config.more_keys.empty() && config.uris.size() != 1) {
    throw UsageError(
        "a repeated --key (a MultiLock: every key or none) works with one --redis server only");
  }
  if (config.limit > 0 && config.uris.size() > 1) {
    throw UsageError(
        "--limit works with one server only (a semaphore is not a Redlock); drop "
        "--limit or give one --redis");
  }
  if (config.mode == Mode::elect) config.fencing = true;  // the term is REDLOCK_FENCE
  const bool has_command = !config.command.empty();
  if ((config.mode == Mode::run || config.mode == Mode::elect) && !has_command) {
    throw UsageError(
        "no command to run: add it after the options (or use --hold, --status or --leader)");
  }
  if (config.mode != Mode::run && config.mode != Mode::elect && has_command) {
    const char* mode = config.mode == Mode::hold     ? "--hold"
                       : config.mode == Mode::status ? "--status"
                                                     : "--leader";
    throw UsageError(std::string(mode) + " takes no command, but got '" + config.command.front() +
                     "'");
  }
}

}  // namespace

bool exports_fence(const Config& config) { return config.fencing || !config.postgres.empty(); }

std::optional<int> parse_command_line(int argc, char** argv, Config& config) {
  Raw raw;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the command's first word
    if (arg == "-h" || arg == "--help") {
      print_help();
      return 0;
    }
    if (arg == "--version") {
      print_version();
      return 0;
    }
    std::optional<std::string> inline_value;
    if (const std::size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg.resize(eq);
    }
    if (const auto name = value_option(arg)) {
      if (!inline_value && i + 1 >= argc) throw UsageError(arg + " needs a value");
      take_value(*name, arg, inline_value ? *inline_value : argv[++i], raw, config);
    } else if (inline_value || !take_flag(arg, raw, config)) {
      throw UsageError("unknown option " + scrub_credentials(arg) +
                       " (to run a command that starts with '-', put -- before it)");
    }
  }
  config.command.assign(argv + i, argv + argc);
  finish_config(raw, config);
  return std::nullopt;
}

}  // namespace redlock_run
