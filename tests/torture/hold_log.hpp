// tests/torture/hold_log.hpp: the hold log, written by workers and read back by the checker.
//
// One file per worker process in the run directory (worker-<p>.log), one line per event, each
// line written with a single write(2) on an O_APPEND descriptor, so the lines of the threads of
// a process never interleave and a line is on disk (in the page cache) the moment it happened: a
// worker that dies mid-hold leaves an "acq" line without its "end" line, which the checker
// reports. Lines are "<event> key=value ...":
//
//   start p=0 pid=4242 threads=4
//   acq   p=0 t=1 n=17 fence=123 t_acq=<ns> deadline=<ns> validity_ms=988
//   write p=0 t=1 n=17 result=applied t_read=<ns> t_write_end=<ns> value=41
//   end   p=0 t=1 n=17 kind=released t_rel=<ns> t_rel_end=<ns> deadline=<ns>
//   errsample p=0 count=12 msg=acquire: redlock: 127.0.0.1:4242 did not answer ...
//   stats p=0 attempts=900 acquired=850 contended=40 err_timeout=10 ...
//   observe p=0 reads=5000 partial=0
//
// The primitives (primitive_worker.cpp) add fields: "acq" of a ReadWriteLock's hold has
// side=w|r and t_req=<ns> (when the acquire call started); a MultiLock's (or a plain Lock's, in
// that mode) keys=<bit mask of kMultiKeys>; an Election term's "end" has t_stop=<ns> (when the
// library stopped its worker, 0 if it did not) and t_unled=<ns> (when is_leader() was first seen
// false, 0 if never). "observe" is the MultiLock observer's tally: one-MGET reads of every key,
// and how many showed a set partly held.
//
// With --liveness every acquire call of a lock thread is also recorded: "try" the moment it
// starts (the controller reads these to find the oldest waiters), "wait" when it returned:
//
//   try   p=0 t=1 t_try=<ns>
//   wait  p=0 t=1 t_try=<ns> t_end=<ns> result=acquired|contended|error
//
// ("errsample": a few distinct error messages per process with counts; msg runs to the end of
// the line.)
// All times are CLOCK_MONOTONIC nanoseconds (common.hpp). In "acq", deadline = t_acq +
// validity(), both taken right after try_lock_for() returned true. In "end", deadline is the
// latest validity deadline the holder observed during the hold (differs from the first one only
// with --auto-renew). A hold is identified by (p, t, n).
#ifndef REDLOCK_TESTS_TORTURE_HOLD_LOG_HPP
#define REDLOCK_TESTS_TORTURE_HOLD_LOG_HPP

#include <cstdint>  // std::int64_t, std::uint64_t
#include <map>      // std::map
#include <string>   // std::string
#include <vector>   // std::vector

namespace redlock::torture {

// How the fenced write of a hold went.
enum class WriteResult { none, applied, rejected, write_error, read_error };
// How a hold ended: released = release() returned true; lost = release() returned false (the
// library told the holder its lease was gone); error = release() threw; killed = the holder's
// process was killed (-9) by the controller mid-hold (t_rel = when it was dead for sure).
enum class EndKind { none, released, lost, error, killed };

const char* to_string(WriteResult r) noexcept;
const char* to_string(EndKind k) noexcept;

// One hold as reconstructed from its lines.
struct Hold {
  int process{0};
  int thread{0};
  std::int64_t seq{0};
  bool has_acq{false};
  std::uint64_t fence{0};
  std::int64_t t_acq{0};
  std::int64_t deadline{0};  // from "acq"
  std::int64_t validity_ms{0};
  WriteResult write{WriteResult::none};
  std::int64_t t_read{0};
  std::int64_t t_write_end{0};
  std::int64_t value{0};
  EndKind end{EndKind::none};
  std::int64_t t_rel{0};
  std::int64_t t_rel_end{0};
  std::int64_t deadline_final{0};  // from "end"
  bool shared{false};              // rwlock: a reader's hold (side=r)
  std::int64_t keys{0};            // multilock: the keys held (bit mask); 0: the one lock
  std::int64_t t_req{0};           // rwlock: when the acquire call started
  std::int64_t t_stop{0};          // election: when the library stopped the worker (0: never)
  std::int64_t t_unled{0};         // election: when is_leader() was first seen false (0: never)

  // The window in which the library promised exclusivity, as far as the holder could see:
  // [t_acq, min(latest deadline, release start)]. Empty when end <= start.
  std::int64_t window_start() const noexcept { return t_acq; }
  std::int64_t window_end() const noexcept;
  bool window_empty() const noexcept { return window_end() <= window_start(); }
  // "p0/t1/#17 fence=123"
  std::string name() const;
};

// The "stats" line of one worker process.
struct WorkerStats {
  int process{0};
  bool present{false};
  std::int64_t pid{0};
  std::int64_t attempts{0};   // try_lock_for() calls
  std::int64_t acquired{0};   // ... that returned true
  std::int64_t contended{0};  // ... that returned false (bound reached)
  std::int64_t err_timeout{0};
  std::int64_t err_connection{0};
  std::int64_t err_server{0};
  std::int64_t err_protocol{0};
  std::int64_t err_other{0};
  std::int64_t errors() const noexcept {
    return err_timeout + err_connection + err_server + err_protocol + err_other;
  }
};

// One acquire call (--liveness): [t_try, t_end], and how it ended.
struct Wait {
  int process{0};
  int thread{0};
  std::int64_t t_try{0};
  std::int64_t t_end{0};
  enum class Result { acquired, contended, error } result{Result::acquired};
};

// Appends lines to a worker's log. Thread-safe (one write(2) per line, O_APPEND).
class HoldLogWriter {
 public:
  // Opens (creates) path for appending. Throws std::system_error if it cannot.
  explicit HoldLogWriter(const std::string& path);
  ~HoldLogWriter();
  HoldLogWriter(const HoldLogWriter&) = delete;
  HoldLogWriter& operator=(const HoldLogWriter&) = delete;

  // Writes `line` plus '\n' in one write(2). Never throws (a failed write shows up in the checker
  // as a missing record, which fails the run).
  void write_line(const std::string& line) noexcept;

 private:
  int fd_{-1};
};

// Everything the logs of one run say.
struct LogContents {
  std::vector<Hold> holds;                            // ordered by (process, thread, seq)
  std::map<int, WorkerStats> stats;                   // by process
  std::vector<int> started;                           // processes with a "start" line
  std::map<std::string, std::int64_t> error_samples;  // message -> count, over all processes
  std::int64_t observer_reads{0};                     // multilock: the observers' one-MGET reads
  std::int64_t partial_sets{0};                       // ... that showed a set partly held
  std::vector<Wait> waits;                            // --liveness: every ended acquire call
  std::int64_t malformed_lines{0};
  std::int64_t duplicate_records{0};  // an event seen twice for one hold
  std::vector<std::string> problems;  // first few malformed lines, for the report
};

// Parses the given log files. Throws std::runtime_error if a file cannot be read.
LogContents read_logs(const std::vector<std::string>& paths);
// Parses log text (one file's contents) into `out`. Exposed for the self-test.
void parse_log_text(const std::string& text, LogContents& out);
// Sorts out.holds by (process, thread, seq). Call after the last parse_log_text.
void finish_log_contents(LogContents& out);

}  // namespace redlock::torture

#endif  // REDLOCK_TESTS_TORTURE_HOLD_LOG_HPP
