// tools/redlock-run/redlock_run.cpp: redlock-run, flock(1) for a fleet (like `etcdctl lock` and
// `consul lock`): runs a command while holding a Redis lock, and stops the command if the lock is
// lost.
//
//   # Nightly report on whichever host gets there first; the others exit 75 at once:
//   REDLOCK_REDIS=redis://:secret@10.0.0.5:6379 redlock-run --key reports:nightly -n
//               -- ./nightly-report --since yesterday
//   # Redlock over three independent servers (quorum 2), waiting up to two minutes:
//   redlock-run --redis redis://r1 --redis redis://r2 --redis redis://r3
//               --key deploy:web --wait 2m --fencing -- ./deploy.sh
//
// What it does, in order:
//  1. Takes the lock: one server is a redlock::Lock, several are a redlock::Redlock (quorum
//     N/2+1). Servers come from --redis (repeatable), --redis-file, or REDLOCK_REDIS; with
//     --zookeeper URI it is a redlock::zookeeper::Lock instead (the session is the lease, the
//     fence is the holder znode's czxid and always exported). The lease
//     (--ttl, default 30s) is renewed in the background about every ttl/3, so the command may run
//     for longer than the ttl, while a crashed host frees the lock after at most one ttl. By
//     default it waits for the lock forever (like flock); --wait D gives up after D, --no-wait
//     after one attempt. A wait is ONE library call (try_lock_until): a fair waiter keeps its
//     place in the queue for the whole wait. A signal during the wait is taken by a dedicated
//     thread, which cancels the wait (cancel_waits()).
//  2. Runs the command in its own process group (fork + setpgid + execvp; stdin/stdout/stderr,
//     the working directory and every descriptor redlock-run was started with are inherited; on a
//     terminal the group becomes the foreground group) with REDLOCK_KEY, REDLOCK_TTL_MS,
//     REDLOCK_VALIDITY_MS and, with --fencing, REDLOCK_FENCE in its environment. A side key
//     <key>:holder with the same ttl records host, pid and command for --status.
//  3. Forwards every terminating signal (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
//     SIGALRM, ...) to the command's process group. All but SIGUSR1/SIGUSR2 are stop requests:
//     if the group is still there after --grace, it gets SIGKILL.
//  4. If the lease is lost while the command runs, sends SIGTERM to the group, and SIGKILL after
//     --grace. redlock-run is a child subreaper, so it sees the whole group end.
//  5. When the command has exited, stops what it left running in its group (SIGTERM, SIGKILL
//     after --grace), releases the lock only once the group is gone, and exits with the
//     command's status.
//
// Exit statuses: see kFooter (the --help text) below; it is the one reference.
//
// Signal safety. Before any thread exists, the handled signals (and SIGTTOU, for tcsetpgrp) are
// blocked; every thread the library starts later inherits the mask. One thread reads them with
// sigwaitinfo() and writes the signal number to a pipe; the watchdog's on_lost callback writes
// one byte to another pipe. The main loop poll()s both: no work happens in signal context at all.
// SIGPIPE is ignored (hiredis writes to sockets a server may have closed) and restored for the
// command. The child, between fork and exec, makes only async-signal-safe calls. Descriptors the
// library opened are closed in the child, so the command never holds a Redis connection.
//
// Passwords in URIs are never printed: servers are named by Endpoint::address(), and library
// messages are scrubbed of URI credentials.
#include <dirent.h>     // opendir, readdir: the descriptors inherited at start
#include <fcntl.h>      // O_CLOEXEC, O_NONBLOCK
#include <poll.h>       // poll
#include <sys/prctl.h>  // prctl(PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER)
#include <sys/wait.h>   // waitpid
#include <termios.h>    // tcgetpgrp, tcsetpgrp
#include <unistd.h>     // fork, execvpe, pipe2, close_range, gethostname

#include <algorithm>    // std::sort, std::min, std::all_of
#include <cctype>       // std::isalnum, std::isspace
#include <cerrno>       // errno
#include <chrono>       // std::chrono
#include <csignal>      // sigprocmask, sigaction, kill (POSIX, declared by <signal.h>)
#include <cstdint>      // std::int64_t, std::uint64_t
#include <cstdio>       // std::fputs
#include <cstdlib>      // std::getenv
#include <cstring>      // std::strerror, strsignal
#include <exception>    // std::exception
#include <fstream>      // std::ifstream: --redis-file
#include <future>       // std::async: pinging Redlock nodes in parallel
#include <memory>       // std::unique_ptr: what this run holds
#include <mutex>        // std::mutex: the signal thread's view of the wait
#include <optional>     // std::optional
#include <stdexcept>    // std::invalid_argument, std::runtime_error
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <thread>       // std::thread: the signal thread
#include <type_traits>  // std::is_same_v
#include <utility>      // std::forward
#include <vector>       // std::vector

#include <redlock/redlock.hpp>  // Client, Endpoint, Lock, Redlock, errors, set_log_handler
#ifdef REDLOCK_RUN_WITH_POSTGRES
#include <redlock/postgres.hpp>  // --postgres
#endif
#include <redlock/version.hpp>  // REDLOCK_VERSION_STRING
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
#include <redlock/zookeeper.hpp>  // zookeeper::Session, zookeeper::Lock (--zookeeper)
#endif

#include "duration.hpp"  // redlock_examples::parse_duration: the syntax shared with the demo
#include "metrics/prometheus_observer.hpp"  // PrometheusObserver (examples/metrics/)

namespace {

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

// The shortest usable --ttl: the library subtracts a drift allowance (1% + 2 ms) from every
// lease and renews at ttl/3, so a shorter lease would be mostly allowance and round trips.
constexpr milliseconds kMinTtl{100};

using redlock_examples::kDurationHelp;

// ---- Messages --------------------------------------------------------------------------------

// Writes "redlock-run: <line>\n" to stderr in one call (stdio locks the stream, so lines from the
// library's threads do not interleave with ours).
void say(const std::string& line) {
  const std::string text = "redlock-run: " + line + "\n";
  std::fputs(text.c_str(), stderr);
}

// A bad command line: the message names the flag the user typed and what to do.
class UsageError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Replaces the user-info part of anything that looks like a URI ("scheme://user:pw@host") with
// "***". For messages we do not compose ourselves (the library's), which may quote a URI.
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

// A library message in the words of this tool's command line: no C++ names, no credentials.
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

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

// ---- Durations -------------------------------------------------------------------------------

// Parses a duration (duration.hpp: "250ms", "0.5s", "1m30s", a bare number of
// seconds). Throws UsageError naming `flag`.
milliseconds parse_duration(std::string_view flag, std::string_view text) {
  const auto d = redlock_examples::parse_duration(text);
  if (!d) {
    throw UsageError(std::string(flag) + " '" + std::string(text) +
                     "' is not a duration (at most 1000000h); use " + kDurationHelp);
  }
  return *d;
}

// "300ms", "30s", "2m", "1h": the largest unit that divides it evenly.
std::string format_duration(milliseconds d) {
  const std::int64_t ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms != 0 && ms % 1'000 == 0) return std::to_string(ms / 1'000) + "s";
  return std::to_string(ms) + "ms";
}

// ---- Configuration ---------------------------------------------------------------------------

// What to do once the options are read.
enum class Mode { run, hold, status };

struct Config {
  std::vector<std::string> uris;
  std::string postgres;         // --postgres URI: the lock is a row in that database instead
  std::string zookeeper;        // --zookeeper URI: a ZooKeeper lock instead of Redis
  bool password_inline{false};  // a --redis URI on the command line carries a password
  std::string key;
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
  std::size_t limit{0};  // --limit N: a semaphore of N permits; 0: a plain lock
  std::string metrics;   // --metrics PATH: Prometheus text, written at start and at exit
  std::vector<std::string> command;
};

const char kUsage[] = R"(Usage: redlock-run [OPTIONS] [--] COMMAND [ARGS...]
       redlock-run [OPTIONS] --hold
       redlock-run [OPTIONS] --status

Run a command while holding a Redis lock: flock(1) for a fleet.

Servers (one is a plain lock; several form a Redlock, held when N/2+1 of them grant it):
  --redis URI           redis://[user[:password]@]host[:port][/db][?command_timeout=ms
                        &connect_timeout=ms], rediss://... (TLS, verified; ?cacert=FILE,
                        &cert=FILE&key=FILE, &sni=NAME, &insecure=1),
                        unix:///path/to/sock, or through Sentinel
                        redis-sentinel://[:password@]s1[:port],s2[,...][?sentinel_password=
                        PW]#SERVICE (rediss-sentinel:// for TLS), or a Redis Cluster
                        redis-cluster://[user[:password]@]h1[:port],h2[,...]
                        (rediss-cluster:// for TLS); any of them takes
                        ?wait_replicas=N&wait_timeout=ms. Repeat for a Redlock.
  --redis-file PATH     Read server URIs from PATH, one a line (# after a space starts a
                        comment).
                        Without --redis and --redis-file: the REDLOCK_REDIS environment
                        variable (URIs separated by spaces or commas). Prefer these two for
                        a password: a URI on the command line shows in ps (we warn).
  --postgres URI        Hold the lock in PostgreSQL instead of Redis: a lease row in the table
                        redlock_leases (created if missing) of the database at URI,
                        postgresql://[user@]host[:port]/db[?...] (libpq's URI or key=value
                        string; PGPASSWORD and ~/.pgpass keep a password out of ps). --fair
                        queues in arrival order. Not with --redis, --redis-file, --status
                        or --limit. The fence (REDLOCK_FENCE) is always given: it comes
                        from a sequence.
  --zookeeper URI       Lock on ZooKeeper instead: zookeeper://host:port[,host:port...]
                        [/chroot][?session_timeout=ms]. The session is the lease (--ttl is
                        not used); waiters are served in order; the fence (the holder
                        znode's czxid) is always exported. Not with --redis, --limit,
                        --status.
Lock:
  --key KEY             Name of the lock (the Redis key); the command gets REDLOCK_KEY.
                        Also used: {KEY}:fence (--fencing), KEY:holder (host, pid and command
                        of the holder, for --status) and, with --fair, {KEY}:queue*.
  --ttl DURATION        Lease on the server (default 30s, at least 100ms), renewed about
                        every ttl/3. If this host dies, the lock frees itself within a ttl.
  -w, --wait DURATION   Give up after this long if the lock is held elsewhere (exit 75).
                        Alias: --timeout. Default: wait forever.
  -n, --no-wait         One attempt: exit 75 at once if the lock is held elsewhere.
  --unavailable-timeout DURATION
                        How long a wait rides out servers that do not answer (a quorum of
                        them, for several) before exit 69 (default 10s; 0: at once).
  -E, --conflict-exit-code N
                        Exit N (0-255) instead of 75 when the lock is held elsewhere.
  --fencing             Issue a fencing token (a counter in {KEY}:fence that grows with every
                        hold); the command gets it as REDLOCK_FENCE.
  --fair                First come, first served among waiters (one server only).
  --limit N             A semaphore: at most N commands hold KEY at once, each with its own
                        lease, fence and renewal (one server only; not with --fair).
                        Uses {KEY}:permit:1..N, {KEY}:permit:fence and {KEY}:permit:released.
Command:
  --grace DURATION      After a lost lease or a forwarded stop signal, how long the command's
                        process group has between SIGTERM (or the signal) and SIGKILL
                        (default 10s).
  --hold                No command: print "held KEY fence N" on stdout once the lock is
                        held, and hold it until stdin closes (exit 0) or a signal.
  --status              Show whether KEY is held, its remaining ttl and its holder; exit 0
                        if held, 1 if not.
Output:
  -v, --verbose         Say on stderr when waiting, acquired (fence, validity), renewals
                        missed, lost.
  -q, --quiet           No message when the lock is held elsewhere (the exit status says
                        it). Errors and a lost lease are always reported.
  --metrics PATH        Write lock metrics in Prometheus text format (acquires, wait time,
                        renewals and their lateness, losses, node health) to PATH, at start
                        and at exit, atomically (for node_exporter's textfile collector).
  -h, --help            This text.   --version   The version.

Our options end at the first word that is not one of them, or at --.
)";

const char kFooter[] = R"(
Exit status:
  N        the command's exit status
  128+N    the command was killed by signal N (or redlock-run got signal N while waiting)
  0        --hold: stdin closed; --status: the key is held
  1        --status: the key is not held
  64       usage error: bad option, duration, URI or key
  69       unavailable: a server could not be reached or answered with an error (e.g. a
           wrong password), or a Redlock could not reach a quorum of servers
  70       the lease was lost while the command ran
  71       the command could not be started (fork or pipe failed)
  75       the lock is held elsewhere (--no-wait, or --wait expired); see -E
  126      the command is not executable
  127      the command was not found

The command runs in its own process group. A lost lease or a forwarded signal (SIGHUP,
SIGINT, SIGQUIT, SIGTERM, SIGALRM, ...; SIGUSR1 and SIGUSR2 are only passed on) reaches the
whole group; what is still running --grace later gets SIGKILL. When the command exits,
processes it left in its group get SIGTERM (SIGKILL after --grace). The lock is released
only once the whole group is gone. A process that leaves the group (setsid) is not tracked.
A wait rides out servers that do not answer, and ends with 69 if they still do not when
--wait or --unavailable-timeout runs out.

The command's environment: REDLOCK_KEY=<key>, REDLOCK_TTL_MS=<ttl>,
REDLOCK_VALIDITY_MS=<validity left when it started> and, with --fencing, REDLOCK_FENCE=<n>.
Durations: 250ms, 0.5s, 30s, 1m30s, 2h; a bare number is seconds.

Examples:
  REDLOCK_REDIS=redis://:secret@10.0.0.5:6379 redlock-run --key reports:nightly -n \
      -- ./nightly-report --since yesterday
  redlock-run --redis redis://r1 --redis redis://r2 --redis redis://r3 --key deploy:web \
      --wait 2m --fencing -- sh -c './deploy.sh --fence "$REDLOCK_FENCE"'
)";

// ---- Command line ----------------------------------------------------------------------------

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

// Splits REDLOCK_REDIS ("uri uri" or "uri,uri") into URIs.
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
};

// Options that take a value, each spelling mapped to one canonical name.
const std::pair<std::string_view, std::string_view> kValueOptions[] = {
    {"--redis", "--redis"},
    {"--redis-file", "--redis-file"},
    {"--postgres", "--postgres"},
    {"--zookeeper", "--zookeeper"},
    {"--key", "--key"},
    {"--ttl", "--ttl"},
    {"--wait", "--wait"},
    {"-w", "--wait"},
    {"--timeout", "--wait"},
    {"--grace", "--grace"},
    {"--unavailable-timeout", "--unavailable-timeout"},
    {"--limit", "--limit"},
    {"--metrics", "--metrics"},
    {"--conflict-exit-code", "-E"},
    {"-E", "-E"}};

std::optional<std::string_view> value_option(std::string_view flag) {
  for (const auto& [spelling, name] : kValueOptions) {
    if (flag == spelling) return name;
  }
  return std::nullopt;
}

void take_value(std::string_view name, const std::string& flag, const std::string& value, Raw& raw,
                Config& config) {
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
    config.key = value;
    raw.key_given = true;
  } else if (name == "--ttl") {
    raw.ttl = value;
  } else if (name == "--wait") {
    raw.wait = value;
    raw.wait_flag = flag;
  } else if (name == "--grace") {
    raw.grace = value;
  } else if (name == "--unavailable-timeout") {
    raw.unavailable = value;
  } else if (name == "--limit") {
    raw.limit = value;
  } else if (name == "--metrics") {
    config.metrics = value;
  } else {
    raw.conflict_exit = value;
  }
}

// Flags without a value. Returns false if `flag` is not one.
bool take_flag(std::string_view flag, Config& config) {
  if (flag == "-n" || flag == "--no-wait") {
    config.no_wait = true;
  } else if (flag == "--fencing") {
    config.fencing = true;
  } else if (flag == "--fair") {
    config.fair = true;
  } else if (flag == "-q" || flag == "--quiet") {
    config.quiet = true;
  } else if (flag == "-v" || flag == "--verbose") {
    config.verbose = true;
  } else if (flag == "--hold") {
    config.mode = Mode::hold;
  } else if (flag == "--status") {
    config.mode = Mode::status;
  } else {
    return false;
  }
  return true;
}

// --limit N: 1 to 10,000 holders at once, one server, no --fair, no --status.
std::size_t parse_limit(const std::string& text, const Config& config) {
  const bool digits = !text.empty() && text.size() <= 5 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoul(text) < 1 || std::stoul(text) > redlock::Semaphore::kMaxLimit) {
    throw UsageError("--limit '" + text + "' is not a number of holders (1 to " +
                     std::to_string(redlock::Semaphore::kMaxLimit) + ")");
  }
  if (config.fair) throw UsageError("--limit and --fair cannot be combined; drop one");
  if (config.mode == Mode::status) {
    throw UsageError("--status shows plain locks only; drop --limit");
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

// Checks what needs several options together, and converts the values.
void finish_config(const Raw& raw, Config& config) {
  if (!raw.key_given || config.key.empty()) throw UsageError("--key KEY is required");
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
  if (raw.limit) config.limit = parse_limit(*raw.limit, config);
  if (raw.wait) config.wait = parse_duration(raw.wait_flag, *raw.wait);
  if (raw.wait && config.no_wait) {
    throw UsageError(raw.wait_flag + " and -n/--no-wait contradict each other; give one");
  }
  if (raw.conflict_exit) config.conflict_exit = parse_exit_code(*raw.conflict_exit);
  if (config.fair && config.uris.size() > 1) {
    throw UsageError(
        "--fair works with one server only (a queue on several could not agree on "
        "an order); drop --fair or give one --redis");
  }
  if (config.limit > 0 && config.uris.size() > 1) {
    throw UsageError(
        "--limit works with one server only (a semaphore is not a Redlock); drop "
        "--limit or give one --redis");
  }
  const bool has_command = !config.command.empty();
  if (config.mode == Mode::run && !has_command) {
    throw UsageError("no command to run: add it after the options (or use --hold or --status)");
  }
  if (config.mode != Mode::run && has_command) {
    throw UsageError(std::string(config.mode == Mode::hold ? "--hold" : "--status") +
                     " takes no command, but got '" + config.command.front() + "'");
  }
}

// Parses argv into `config`. Returns nullopt to go on, or the exit status (0 after --help).
// Throws UsageError.
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
      std::fputs(kUsage, stdout);
      std::fputs(kFooter, stdout);
      return 0;
    }
    if (arg == "--version") {
      std::fputs(REDLOCK_VERSION_STRING "\n", stdout);
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
    } else if (inline_value || !take_flag(arg, config)) {
      throw UsageError("unknown option " + scrub_credentials(arg) +
                       " (to run a command that starts with '-', put -- before it)");
    }
  }
  config.command.assign(argv + i, argv + argc);
  finish_config(raw, config);
  return std::nullopt;
}

// ---- Process plumbing ------------------------------------------------------------------------

// Open descriptors, sorted, from /proc/self/fd. Empty if /proc is not mounted.
std::vector<int> open_descriptors() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const int fd = std::stoi(entry->d_name);
    if (fd != own) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

// What the child needs between fork and exec, prepared before fork (no allocation after it).
struct ChildPlan {
  std::vector<std::string> args;
  std::vector<std::string> env;
  std::vector<char*> argv;
  std::vector<char*> envp;
  std::vector<int> keep;        // descriptors >= 3 to keep open (inherited at start), sorted
  std::vector<int> close_list;  // fallback for kernels without close_range: open now, not kept
  sigset_t mask{};              // signal mask to restore
  struct sigaction sigpipe {};  // SIGPIPE disposition to restore
  pid_t parent{0};
  int report_fd{-1};  // write end of the exec-error pipe (close-on-exec)
  int tty_fd{-1};     // >= 0: make the command's group the foreground group of this terminal
};

void finish_plan(ChildPlan& plan) {
  // The exec-error pipe must survive until exec (which closes it: it is close-on-exec).
  plan.keep.insert(std::upper_bound(plan.keep.begin(), plan.keep.end(), plan.report_fd),
                   plan.report_fd);
  for (auto& a : plan.args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  for (auto& e : plan.env) plan.envp.push_back(e.data());
  plan.envp.push_back(nullptr);
  for (const int fd : open_descriptors()) {
    if (fd > STDERR_FILENO && !std::binary_search(plan.keep.begin(), plan.keep.end(), fd)) {
      plan.close_list.push_back(fd);
    }
  }
}

// Child side of fork(): only async-signal-safe calls from here to exec.
[[noreturn]] void exec_child(const ChildPlan& plan) noexcept {
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != plan.parent) ::_exit(kExitNotFound);  // redlock-run died already
  ::setpgid(0, 0);  // its own process group: lease loss and signals reach all of it
  if (plan.tty_fd >= 0) ::tcsetpgrp(plan.tty_fd, ::getpid());  // SIGTTOU is still blocked
  ::sigaction(SIGPIPE, &plan.sigpipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  // Close what the library opened (Redis sockets), keep what we were started with.
  unsigned int low = STDERR_FILENO + 1;
  bool ranges_ok = true;
  for (const int fd : plan.keep) {
    const auto keep = static_cast<unsigned int>(fd);
    if (keep > low && ::close_range(low, keep - 1, 0) != 0) ranges_ok = false;
    low = keep + 1;
  }
  if (::close_range(low, ~0U, 0) != 0) ranges_ok = false;
  if (!ranges_ok) {
    for (const int fd : plan.close_list) ::close(fd);
  }
  ::execvpe(plan.argv[0], plan.argv.data(), plan.envp.data());
  const int error = errno;
  ssize_t written;
  do {
    written = ::write(plan.report_fd, &error, sizeof error);
  } while (written < 0 && errno == EINTR);
  ::_exit(kExitNotFound);
}

// Forks and execs. Returns the child's pid, or -1 with `exec_error` set (errno of the failed
// exec; the child has been reaped) or `fork_error` set.
pid_t start_child(ChildPlan& plan, int& exec_error, std::string& fork_error) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    fork_error = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  plan.report_fd = report[1];
  finish_plan(plan);
  const pid_t pid = ::fork();
  if (pid == 0) exec_child(plan);
  const int fork_errno = errno;
  if (pid > 0) ::setpgid(pid, pid);  // also here: no signal may find it still in our group
  ::close(report[1]);
  if (pid < 0) {
    ::close(report[0]);
    fork_error = std::string("fork: ") + std::strerror(fork_errno);
    return -1;
  }
  // EOF: exec succeeded (the write end was close-on-exec). Otherwise the child sent errno.
  int error = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &error, sizeof error);
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof error)) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    exec_error = error;
    return -1;
  }
  return pid;
}

// Shell convention: the exit code, or 128 + the signal that killed it.
int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return kExitOsError;
}

// ---- Signals ---------------------------------------------------------------------------------

// Every signal whose default action ends a process and that someone may send on purpose. The
// synchronous ones (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS) are crashes, and
// SIGKILL cannot be caught. SIGPIPE is ignored (see the top of the file).
sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (const int s : {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
                      SIGPROF, SIGXCPU, SIGXFSZ, SIGIO, SIGPWR, SIGSTKFLT}) {
    sigaddset(&set, s);
  }
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) sigaddset(&set, s);
  return set;
}

// SIGUSR1 and SIGUSR2 are passed on only (they often mean "reload" or "report"); every other
// forwarded signal asks the command to stop, and --grace later the group gets SIGKILL.
bool asks_to_stop(int signo) { return signo != SIGUSR1 && signo != SIGUSR2; }

// What this run holds: a Lock (one server), a Redlock (several) or a Semaphore permit
// (--limit N), behind one interface so that the wait, the hold and the release are written once.
class Holdable {
 public:
  virtual ~Holdable() = default;
  virtual bool try_lock() = 0;
  virtual bool try_lock_until(Clock::time_point deadline) = 0;
  // Makes the wait in progress (and any later one) give up at once; a fair waiter leaves the
  // queue. Called from the signal thread.
  virtual void cancel_waits() noexcept = 0;
  virtual bool release() = 0;
  virtual std::uint64_t fence() const noexcept = 0;
  virtual milliseconds validity() const noexcept = 0;
  virtual redlock::LeaseToken lease() const noexcept = 0;
  virtual std::size_t quorum() const noexcept = 0;
};

template <class L>
class HoldableOf final : public Holdable {
 public:
  template <class... Args>
  explicit HoldableOf(Args&&... args) : lock_(std::forward<Args>(args)...) {}
  bool try_lock() override { return lock_.try_lock(); }
  bool try_lock_until(Clock::time_point deadline) override {
    return lock_.try_lock_until(deadline);
  }
  void cancel_waits() noexcept override { lock_.cancel_waits(); }
  bool release() override { return lock_.release(); }
  std::uint64_t fence() const noexcept override { return lock_.fence(); }
  milliseconds validity() const noexcept override { return lock_.validity(); }
  redlock::LeaseToken lease() const noexcept override { return lock_.lease(); }
  std::size_t quorum() const noexcept override {
    if constexpr (std::is_same_v<L, redlock::Semaphore>) {
      return 1;
    } else {
      return lock_.quorum();
    }
  }

 private:
  L lock_;
};

// One thread takes every handled signal (sigwaitinfo: no signal handlers at all). It reports
// each on a pipe to the main loop and, while a wait for the lock is in progress, cancels it.
// Shared with that thread and never destroyed: the thread is detached and runs until exit.
struct SignalState {
  std::mutex mutex;
  Holdable* waiting{nullptr};  // set while a wait is in progress
  int first_stop{0};           // the first stop signal seen while waiting
  int write_fd{-1};
};

void signal_loop(SignalState* state, sigset_t set) {
  for (;;) {
    siginfo_t info;
    const int signo = ::sigwaitinfo(&set, &info);
    if (signo < 0) continue;
    const auto byte = static_cast<unsigned char>(signo);
    while (::write(state->write_fd, &byte, 1) < 0 && errno == EINTR) {
    }
    if (signo == SIGCHLD) continue;
    std::lock_guard<std::mutex> guard(state->mutex);
    if (state->first_stop == 0) state->first_stop = signo;
    if (state->waiting != nullptr) state->waiting->cancel_waits();
  }
}

// ---- The run ---------------------------------------------------------------------------------

struct Runtime {
  SignalState* signals{nullptr};
  int signal_read{-1};  // one byte (a signal number) per signal
  int lost_read{-1};    // one byte (a LostReason) per lost lease
  int lost_write{-1};   // never closed: on_lost may run on the watchdog's thread at any time
  sigset_t original_mask{};
  struct sigaction original_sigpipe {};
  std::vector<int> inherited;  // descriptors >= 3 open at start
  bool tty_handed{false};      // the command's group was made the terminal's foreground group
};

// Reads one byte per queued event from a non-blocking pipe; calls `each` for each.
template <typename Each>
void drain(int fd, Each each) {
  unsigned char byte = 0;
  while (::read(fd, &byte, 1) == 1) each(byte);
}

enum class Acquire { held, busy, interrupted };

// The servers that do not answer a PING, named by address (pinged in parallel).
std::vector<std::string> silent_servers(const std::vector<redlock::Client>& clients) {
  std::vector<std::future<std::string>> pings;
  for (const auto& client : clients) {
    pings.push_back(std::async(std::launch::async, [&client]() -> std::string {
      try {
        client.ping();
        return {};
      } catch (const redlock::Error& e) {
        return client.endpoint().address() + ": " + in_our_words(e.what());
      }
    }));
  }
  std::vector<std::string> silent;
  for (auto& ping : pings) {
    if (auto why = ping.get(); !why.empty()) silent.push_back(std::move(why));
  }
  return silent;
}

std::string join(const std::vector<std::string>& parts) {
  std::string text;
  for (const auto& part : parts) text += (text.empty() ? "" : "; ") + part;
  return text;
}

// One wait for the lock: a single library call for the whole wait (a fair waiter keeps its
// place), cancelled by the signal thread if a stop signal comes.
Acquire acquire(Holdable& lock, const Config& config, const Runtime& rt, int& signo) {
  if (config.no_wait) return lock.try_lock() ? Acquire::held : Acquire::busy;
  if (config.verbose) {
    try {
      if (lock.try_lock()) return Acquire::held;
    } catch (const redlock::Error& e) {  // unreachable now: the wait below rides it out
      say("waiting: " + in_our_words(e.what()));
    }
    say("waiting for " + config.key +
        (config.wait ? " (at most " + format_duration(*config.wait) + ")" : std::string()));
  }
  {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    signo = rt.signals->first_stop;
    if (signo != 0) return Acquire::interrupted;
    rt.signals->waiting = &lock;
  }
  const auto deadline = config.wait ? Clock::now() + *config.wait : Clock::time_point::max();
  bool got = false;
  try {
    got = lock.try_lock_until(deadline);
  } catch (...) {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    rt.signals->waiting = nullptr;
    throw;
  }
  std::lock_guard<std::mutex> guard(rt.signals->mutex);
  rt.signals->waiting = nullptr;
  signo = rt.signals->first_stop;
  if (signo != 0 && !got) return Acquire::interrupted;
  return got ? Acquire::held : Acquire::busy;
}

// After a failed attempt: exit status and message for contention or, if a Redlock could not
// reach a quorum because servers do not answer, unavailability.
int report_not_acquired(const std::vector<redlock::Client>& clients, const Config& config,
                        std::size_t quorum) {
  if (clients.size() > 1) {
    const auto silent = silent_servers(clients);
    if (clients.size() - silent.size() < quorum) {
      say(config.key + " is unavailable: only " + std::to_string(clients.size() - silent.size()) +
          " of " + std::to_string(clients.size()) + " servers answer, " + std::to_string(quorum) +
          " are needed (" + join(silent) + ")");
      return kExitUnavailable;
    }
  }
  if (!config.quiet) {
    const std::string when = config.no_wait ? std::string("--no-wait")
                                            : "gave up after " + format_duration(*config.wait);
    say(config.key + " is held elsewhere (" + when + ")");
  }
  return config.conflict_exit;
}

// A Redlock that works with some servers down says so once.
void warn_if_degraded(const std::vector<redlock::Client>& clients, const Config& config) {
  if (clients.size() < 2 || config.quiet) return;
  const auto silent = silent_servers(clients);
  if (silent.empty()) return;
  say("warning: " + std::to_string(silent.size()) + " of " + std::to_string(clients.size()) +
      " servers do not answer (" + join(silent) + "); " + config.key +
      " is held on the others, and one more failure would make it unavailable");
}

// ---- The holder's identity (<key>:holder) ----------------------------------------------------

// "host=H pid=P command=C": who holds the lock, for --status. The lock's token stays random;
// this side key has the lease's ttl, is refreshed with it, and is deleted on release (each only
// while it still carries our text, so a later holder's entry is never touched).
class HolderRecord {
 public:
  HolderRecord(const std::vector<redlock::Client>& clients, const Config& config)
      : clients_(clients), key_(config.key + ":holder"), ttl_(std::to_string(config.ttl.count())) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    text_ = "host=" + std::string(host) + " pid=" + std::to_string(::getpid()) + " command=";
    for (const auto& word : config.command)
      text_ += word + (&word == &config.command.back() ? "" : " ");
    if (config.command.empty()) text_ += "(--hold)";
  }

  void write() const { each({"SET", key_, text_, "PX", ttl_}); }
  void refresh() const { each_script(kRefresh); }
  void erase() const { each_script(kErase); }

 private:
  // Best effort on every server: --status is informational, the lock does not depend on it.
  void each(const std::vector<std::string_view>& argv) const {
    for (const auto& client : clients_) {
      try {
        client.command(argv);
      } catch (const std::exception&) {
      }
    }
  }
  void each_script(const redlock::Script& script) const {
    for (const auto& client : clients_) {
      try {
        client.eval(script, {key_}, {text_, ttl_});
      } catch (const std::exception&) {
      }
    }
  }

  inline static const redlock::Script kRefresh{
      "if redis.call('GET', KEYS[1]) == ARGV[1] then "
      "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"};
  inline static const redlock::Script kErase{
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
      "return 0"};

  const std::vector<redlock::Client>& clients_;
  std::string key_;
  std::string ttl_;
  std::string text_;
};

// --status: one line per server. Returns 0 if held on a quorum, 1 if not, 69 if too few answer.
int show_status(const std::vector<redlock::Client>& clients, const Config& config) {
  const std::string holder_key = config.key + ":holder";
  std::size_t held = 0;
  std::size_t answered = 0;
  for (const auto& client : clients) {
    const std::string prefix =
        (clients.size() > 1 ? client.endpoint().address() + ": " : std::string()) + config.key;
    try {
      const auto replies = client.pipeline({{"PTTL", config.key}, {"GET", holder_key}});
      ++answered;
      const std::int64_t pttl = replies.at(0).integer();
      if (replies.at(0).is_error() || pttl == -2) {
        std::printf("%s: not held\n", prefix.c_str());
        continue;
      }
      ++held;
      const std::string who = replies.at(1).is_nil() || replies.at(1).is_error()
                                  ? "unknown holder"
                                  : replies.at(1).str();
      const std::string ttl =
          pttl < 0 ? "no ttl" : "ttl " + format_duration(milliseconds(pttl)) + " left";
      std::printf("%s: held, %s, by %s\n", prefix.c_str(), ttl.c_str(), who.c_str());
    } catch (const redlock::Error& e) {
      say(prefix + ": " + in_our_words(e.what()));
    }
  }
  const std::size_t quorum = clients.size() / 2 + 1;
  if (answered < quorum) return kExitUnavailable;
  return held >= quorum ? 0 : kExitNotHeld;
}

// ---- Supervising the command's process group --------------------------------------------------

struct Outcome {
  int status{0};
  bool lost{false};
};

// The command's process group (or, with --hold, stdin) from start to finish.
class Supervisor {
 public:
  // `holder`: the --status record to refresh with the lease, or null (--limit).
  Supervisor(const Config& config, const Runtime& rt, const HolderRecord* holder)
      : config_(config), rt_(rt), holder_(holder) {}

  // Runs until the group `child` leads is gone (child <= 0: --hold, until stdin closes or a
  // stop signal). Never throws.
  Outcome run(pid_t child) {
    child_ = child;
    next_refresh_ = Clock::now() + config_.ttl / 3;
    while (!finished()) {
      poll_once();
      if (kill_at_ != kNever && Clock::now() >= kill_at_) kill_group();
    }
    return out_;
  }

 private:
  static constexpr Clock::time_point kNever = Clock::time_point::max();

  bool holding_only() const { return child_ <= 0; }

  // Reaps every child (a subreaper also gets the group's orphans). True once the group is gone.
  bool finished() {
    if (holding_only()) return done_;
    int wait_status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &wait_status, WNOHANG)) > 0) {
      if (pid == child_) {
        out_.status = shell_status(wait_status);
        child_done_ = true;
      }
    }
    if (!child_done_) return false;
    if (::kill(-child_, 0) != 0 && errno == ESRCH) return true;
    if (kill_at_ == kNever && !killed_) {
      last_signal_ = "SIGTERM";
      say("the command exited; stopping what it left running in its process group (SIGTERM, "
          "SIGKILL after --grace " +
          format_duration(config_.grace) + ")");
      signal_group(SIGTERM);
    }
    return false;
  }

  void signal_group(int signo) {
    if (!holding_only()) ::kill(-child_, signo);
    if (asks_to_stop(signo) && kill_at_ == kNever && !killed_)
      kill_at_ = Clock::now() + config_.grace;
  }

  void kill_group() {
    kill_at_ = kNever;
    killed_ = true;
    if (holding_only()) return;
    if (::kill(-child_, 0) == 0) {
      say("process group " + std::to_string(child_) + " still running " +
          format_duration(config_.grace) + " after " + last_signal_ + "; sending SIGKILL");
      ::kill(-child_, SIGKILL);
    }
  }

  void poll_once() {
    const auto wake = std::min(kill_at_, next_refresh_);
    const auto left = std::chrono::ceil<milliseconds>(wake - Clock::now()).count();
    const int timeout = static_cast<int>(std::clamp<std::int64_t>(left, 0, 1'000));
    pollfd fds[3] = {{rt_.signal_read, POLLIN, 0},
                     {rt_.lost_read, POLLIN, 0},
                     {holding_only() ? STDIN_FILENO : -1, POLLIN, 0}};
    if (::poll(fds, 3, timeout) < 0 && errno != EINTR) {
      const timespec pause{0, 10'000'000};  // only ENOMEM: wait a little rather than spin
      ::nanosleep(&pause, nullptr);
    }
    if ((fds[0].revents & POLLIN) != 0) drain(rt_.signal_read, [this](int s) { on_signal(s); });
    if ((fds[1].revents & POLLIN) != 0) drain(rt_.lost_read, [this](int r) { on_lost(r); });
    if ((fds[2].revents & (POLLIN | POLLHUP)) != 0) on_stdin();
    if (Clock::now() >= next_refresh_ && !out_.lost) {
      if (holder_ != nullptr) holder_->refresh();
      next_refresh_ = Clock::now() + config_.ttl / 3;
    }
  }

  void on_signal(int signo) {
    if (signo == SIGCHLD) return;
    if (holding_only()) {
      if (asks_to_stop(signo)) finish_hold(128 + signo);
      return;
    }
    if (config_.verbose)
      say("forwarding " + signal_name(signo) + " to the command's process group");
    if (asks_to_stop(signo) && last_signal_.empty()) last_signal_ = signal_name(signo);
    signal_group(signo);
  }

  void on_lost(int byte) {
    if (out_.lost) return;
    out_.lost = true;
    const auto reason = static_cast<redlock::LostReason>(byte);
    if (holding_only()) {
      say("lease on " + config_.key + " lost (" + redlock::to_string(reason) + ")");
      finish_hold(kExitLost);
      return;
    }
    say("lease on " + config_.key + " lost (" + redlock::to_string(reason) +
        "); sending SIGTERM to process group " + std::to_string(child_));
    last_signal_ = "SIGTERM";
    signal_group(SIGTERM);
  }

  // --hold: stdin data is read and dropped; end of file ends the hold.
  void on_stdin() {
    char buffer[4096];
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) finish_hold(0);
  }

  void finish_hold(int status) {
    if (done_) return;
    done_ = true;
    if (!out_.lost) out_.status = status;
  }

  const Config& config_;
  const Runtime& rt_;
  const HolderRecord* holder_;
  pid_t child_{-1};
  Outcome out_;
  bool child_done_{false};
  bool done_{false};
  bool killed_{false};
  std::string last_signal_;
  Clock::time_point kill_at_{kNever};
  Clock::time_point next_refresh_{kNever};
};

std::vector<std::string> child_environment(const Config& config, const Holdable& lock) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    // Drop values inherited from an outer redlock-run: they describe another lock.
    if (entry.rfind("REDLOCK_KEY=", 0) == 0 || entry.rfind("REDLOCK_FENCE=", 0) == 0 ||
        entry.rfind("REDLOCK_TTL_MS=", 0) == 0 || entry.rfind("REDLOCK_VALIDITY_MS=", 0) == 0) {
      continue;
    }
    env.emplace_back(entry);
  }
  env.push_back("REDLOCK_KEY=" + config.key);
  env.push_back("REDLOCK_TTL_MS=" + std::to_string(config.ttl.count()));
  env.push_back("REDLOCK_VALIDITY_MS=" + std::to_string(lock.validity().count()));
  if (config.fencing || !config.postgres.empty())
    env.push_back("REDLOCK_FENCE=" + std::to_string(lock.fence()));
  return env;
}

// Releases the lock. Returns true if the lease was still ours, or if that is unknown because no
// server answered (then says so, unless the lease is known to be lost anyway). Never throws.
bool release(Holdable& lock, const Config& config, bool report_failure) {
  try {
    return lock.release();
  } catch (const std::exception& e) {
    if (report_failure) {
      say("could not release " + config.key + " (" + in_our_words(e.what()) +
          "); it expires within " + format_duration(config.ttl));
    }
    return true;
  }
}

// The terminal whose foreground group redlock-run is, if stdin is one: the command's group takes
// its place there (so that it can read the terminal, and Ctrl-C reaches it directly).
int foreground_tty() {
  return ::isatty(STDIN_FILENO) == 1 && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp() ? STDIN_FILENO
                                                                                 : -1;
}

// Starts the command. Returns its pid (the leader of its process group), or -exit status.
pid_t launch(const Config& config, Runtime& rt, const Holdable& lock) {
  ChildPlan plan;
  plan.args = config.command;
  plan.env = child_environment(config, lock);
  plan.keep = rt.inherited;
  plan.mask = rt.original_mask;
  plan.sigpipe = rt.original_sigpipe;
  plan.parent = ::getpid();
  plan.tty_fd = foreground_tty();
  rt.tty_handed = plan.tty_fd >= 0;
  int exec_error = 0;
  std::string fork_error;
  const pid_t child = start_child(plan, exec_error, fork_error);
  if (child > 0) return child;
  const std::string& name = config.command.front();
  if (!fork_error.empty()) {
    say("cannot start " + name + ": " + fork_error);
    return -kExitOsError;
  }
  if (exec_error == ENOENT || exec_error == ENOTDIR) {
    say("cannot run " + name + ": not found (check the name, or PATH)");
    return -kExitNotFound;
  }
  say("cannot run " + name + ": " + std::strerror(exec_error) +
      (exec_error == EACCES ? " (is it executable? chmod +x)" : ""));
  return -kExitNotExecutable;
}

// Holds the lock (acquired) while the command runs, or until stdin closes with --hold.
int hold(const std::vector<redlock::Client>& clients, const Config& config, Runtime& rt,
         Holdable& lock) {
  if (config.verbose) {
    say("acquired " + config.key + " (fence " + std::to_string(lock.fence()) + ", validity " +
        format_duration(lock.validity()) + ")");
  }
  const redlock::LeaseToken lease = lock.lease();
  // With --limit there are several holders: --status shows plain locks only.
  std::optional<HolderRecord> holder;
  if (config.limit == 0 && !clients.empty()) holder.emplace(clients, config);
  if (holder) holder->write();
  pid_t child = 0;
  if (config.mode == Mode::hold) {
    std::printf("held %s fence %llu\n", config.key.c_str(),
                static_cast<unsigned long long>(lock.fence()));
    std::fflush(stdout);  // a script reads this line to know that the lock is held
  }
  if (config.mode == Mode::run) {
    child = launch(config, rt, lock);
    if (child < 0) {
      if (holder) holder->erase();
      release(lock, config, /*report_failure=*/true);
      return -child;
    }
  }
  Outcome outcome = Supervisor(config, rt, holder ? &*holder : nullptr).run(child);
  if (rt.tty_handed) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());  // back to us; SIGTTOU is blocked
  if (!outcome.lost && lease.lost()) {
    // Lost just as the command ended, before on_lost was reported.
    outcome.lost = true;
    say("lease on " + config.key + " lost (" + redlock::to_string(lease.reason()) +
        ") before the command finished");
  }
  if (holder) holder->erase();
  if (!release(lock, config, /*report_failure=*/!outcome.lost) && !outcome.lost) {
    outcome.lost = true;
    say("lease on " + config.key + " lost (expired) before the command finished");
  }
  if (outcome.lost && config.verbose) say("released " + config.key + " after losing it");
  return outcome.lost ? kExitLost : outcome.status;
}

redlock::LockOptions lock_options(const Config& config, const Runtime& rt) {
  redlock::LockOptions options;
  options.ttl = config.ttl;
  options.fencing = config.fencing;
  options.fair = config.fair;
  options.max_unavailable = config.unavailable;
  options.auto_renew = true;
  options.on_lost = [fd = rt.lost_write](const redlock::LostEvent& event) {
    const auto byte = static_cast<unsigned char>(event.reason);
    while (::write(fd, &byte, 1) < 0 && errno == EINTR) {
    }
  };
  return options;
}

int run(const Config& config, Runtime& rt) {
  std::vector<redlock::Client> clients;
  for (const auto& uri : config.uris) clients.emplace_back(redlock::Endpoint::parse(uri));
  if (config.mode == Mode::status) return show_status(clients, config);

  std::unique_ptr<Holdable> held;
  const auto options = lock_options(config, rt);
#ifdef REDLOCK_RUN_WITH_POSTGRES
  std::optional<redlock::postgres::Database> database;  // outlives `held`
#endif
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
  std::optional<redlock::zookeeper::Session> zookeeper;  // outlives `held`
#endif
  try {
    if (!config.postgres.empty()) {
#ifdef REDLOCK_RUN_WITH_POSTGRES
      database.emplace(config.postgres);
      held = std::make_unique<HoldableOf<redlock::postgres::Lock>>(*database, config.key, options);
#endif
    } else if (!config.zookeeper.empty()) {
#ifdef REDLOCK_RUN_WITH_ZOOKEEPER
      zookeeper.emplace(config.zookeeper);
      held =
          std::make_unique<HoldableOf<redlock::zookeeper::Lock>>(*zookeeper, config.key, options);
#endif
    } else if (config.limit > 0) {
      held = std::make_unique<HoldableOf<redlock::Semaphore>>(clients.front(), config.key,
                                                              config.limit, options);
    } else if (clients.size() == 1) {
      held = std::make_unique<HoldableOf<redlock::Lock>>(clients.front(), config.key, options);
    } else {
      held = std::make_unique<HoldableOf<redlock::Redlock>>(clients, config.key, options);
    }
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    if (what.find("already in the list") != std::string::npos) {
      throw UsageError("the same server is given twice (--redis, --redis-file or REDLOCK_REDIS)");
    }
    throw UsageError("--key or --ttl: " + in_our_words(what));
  }
  Holdable& lock = *held;

  int signo = 0;
  Acquire got = Acquire::busy;
  try {
    got = acquire(lock, config, rt, signo);
  } catch (const redlock::Error& e) {
    say("cannot lock " + config.key + ": " + in_our_words(e.what()));
    return kExitUnavailable;
  }
  if (got == Acquire::busy) return report_not_acquired(clients, config, lock.quorum());
  if (got == Acquire::interrupted) {
    if (!config.quiet) say(signal_name(signo) + " while waiting for " + config.key);
    return 128 + signo;
  }
  warn_if_degraded(clients, config);
  {
    std::lock_guard<std::mutex> guard(rt.signals->mutex);
    signo = rt.signals->first_stop;  // one that came with the lock
  }
  if (signo != 0) {
    release(lock, config, /*report_failure=*/true);
    return 128 + signo;
  }
  return hold(clients, config, rt, lock);
}

// --metrics PATH: the process-wide observer, its file written once before `body` (a path that
// cannot be written is a usage error) and again after it, whatever it returns.
template <typename Body>
int with_metrics(const Config& config, Body body) {
  if (config.metrics.empty()) return body();
  auto metrics = std::make_shared<redlock_examples::PrometheusObserver>();
  try {
    metrics->write_file(config.metrics);
  } catch (const std::runtime_error& e) {
    throw UsageError(std::string("--metrics: ") + e.what());
  }
  redlock::set_observer(metrics);
  const int status = body();
  try {
    metrics->write_file(config.metrics);
  } catch (const std::runtime_error& e) {
    say(e.what());
  }
  return status;
}

// Blocks the handled signals in this (the only) thread, so that every thread started later
// inherits the mask, and starts the signal thread.
void setup_signals(Runtime& rt) {
  sigset_t handled = stop_signals();
  sigaddset(&handled, SIGCHLD);
  sigset_t blocked = handled;
  sigaddset(&blocked, SIGTTOU);  // tcsetpgrp from the background must not stop us
  ::sigprocmask(SIG_BLOCK, &blocked, &rt.original_mask);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &rt.original_sigpipe);
}

// Everything main() does; main() only adds the last-resort catch.
int redlock_run(int argc, char** argv) {
  Runtime rt;
  // Before anything opens a descriptor or starts a thread: what we inherited, and the mask.
  for (const int fd : open_descriptors()) {
    if (fd > STDERR_FILENO) rt.inherited.push_back(fd);
  }
  setup_signals(rt);

  Config config;
  try {
    if (const auto status = parse_command_line(argc, argv, config)) return *status;
    if (config.password_inline && !config.quiet) {
      say(config.postgres.empty()
              ? "warning: a password in --redis shows in ps; put the URI in REDLOCK_REDIS or "
                "--redis-file PATH instead"
              : "warning: a password in --postgres shows in ps; use PGPASSWORD or ~/.pgpass "
                "instead");
    }

    int signal_pipe[2];
    int lost_pipe[2];
    if (::pipe2(signal_pipe, O_NONBLOCK | O_CLOEXEC) != 0 ||
        ::pipe2(lost_pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
      say(std::string("cannot set up signal handling: ") + std::strerror(errno));
      return kExitOsError;
    }
    rt.signal_read = signal_pipe[0];
    rt.lost_read = lost_pipe[0];
    rt.lost_write = lost_pipe[1];
    rt.signals = new SignalState;  // never deleted: the detached thread uses it until exit
    rt.signals->write_fd = signal_pipe[1];
    sigset_t handled = stop_signals();
    sigaddset(&handled, SIGCHLD);
    std::thread(signal_loop, rt.signals, handled).detach();
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the command's orphans are ours to wait for

    const bool quiet = config.quiet;
    const bool verbose = config.verbose;
    const auto shown = verbose ? redlock::LogLevel::info : redlock::LogLevel::warn;
    if (!quiet) {
      redlock::set_log_handler(
          [](redlock::LogLevel, std::string_view message) {
            // A lost lease is reported by the Supervisor, with what it does about it.
            const bool ours = message.find(" lost (") != std::string_view::npos;
            if (!ours) say(in_our_words(std::string(message)));
          },
          shown);
    }
    return with_metrics(config, [&] { return run(config, rt); });
  } catch (const UsageError& e) {
    say(e.what());
    std::fputs("Try 'redlock-run --help'.\n", stderr);
    return kExitUsage;
  } catch (const redlock::Error& e) {
    say(in_our_words(e.what()));
    return kExitUnavailable;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return redlock_run(argc, argv);
  } catch (const std::exception& e) {  // out of memory, a thread that could not start, ...
    say(in_our_words(e.what()));
    return kExitOsError;
  } catch (...) {
    return kExitOsError;
  }
}
