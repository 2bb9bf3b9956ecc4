// bench/common.hpp: what every section of redlock-bench shares: clocks, percentiles, a counter of
// C++ allocations per thread, a small ordered JSON value, goals printed as PASS or MISS, and a
// plain-text table.
//
//   const std::int64_t t0 = bench::now_ns();            // CLOCK_MONOTONIC, comparable across
//   ...                                                 // processes of one machine
//   bench::Summary s = bench::summarize(samples_ns);    // p50 / p99 / max
//   bench::Json row = bench::Json::object();
//   row.set("p50_us", s.p50_ns / 1e3);
#ifndef REDLOCK_BENCH_COMMON_HPP
#define REDLOCK_BENCH_COMMON_HPP

#include <cstddef>     // std::size_t
#include <cstdint>     // std::int64_t, std::uint64_t
#include <functional>  // std::function
#include <ostream>     // std::ostream
#include <string>      // std::string
#include <utility>     // std::move
#include <vector>      // std::vector

namespace bench {

// CLOCK_MONOTONIC in nanoseconds (what std::chrono::steady_clock reads on Linux).
std::int64_t now_ns() noexcept;
// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), nanoseconds.
std::int64_t thread_cpu_ns() noexcept;
// User and system CPU time of the calling thread (getrusage RUSAGE_THREAD), nanoseconds. The
// kernel splits the total by sampling, so the split is approximate; the sum is exact enough.
struct CpuSplit {
  std::int64_t user_ns{0};
  std::int64_t system_ns{0};
};
CpuSplit thread_cpu_split() noexcept;
// CPU time of the whole process, all threads (CLOCK_PROCESS_CPUTIME_ID), nanoseconds.
std::int64_t process_cpu_ns() noexcept;

// Ids of this process's threads right now (/proc/self/task).
std::vector<int> thread_ids();
// CPU time of thread `tid` of this process, read from outside it (/proc/self/task/<tid>/schedstat,
// nanoseconds); -1 if it cannot be read. For threads the benchmark does not own (the watchdog's).
std::int64_t task_cpu_ns(int tid);

// operator new calls made by the calling thread since it started. The benchmark replaces the
// global operator new with malloc plus a thread-local increment; hiredis allocates with malloc
// directly, so this counts the C++ allocations of the library (and of the benchmark's own code,
// which allocates nothing inside its timed loops once their vectors have grown).
std::uint64_t thread_allocations() noexcept;

struct Summary {
  std::size_t count{0};
  double p50_ns{0};
  double p99_ns{0};
  double max_ns{0};
  double mean_ns{0};
};
// Nearest-rank percentiles of `samples` (taken by value: it is sorted).
Summary summarize(std::vector<std::int64_t> samples);
// Median of `values` (0 if empty).
double median(std::vector<double> values);
// a / b, or 0 when b is 0.
double ratio(double a, double b) noexcept;

// One variant's figures over a timed run on the calling thread.
struct Timed {
  double cycles_per_s{0};
  double cpu_ns{0};  // calling thread's CPU per cycle
  double p50_ns{0};  // median cycle
};

// Runs `cycle` for `seconds` on this thread (after a warm-up). Throws std::runtime_error if a
// cycle returns false (an uncontended attempt that did not get its lock).
Timed timed(double seconds, const std::function<bool()>& cycle);

// Median over `rounds` rounds of each variant, the variants interleaved (rotating order), each
// run for `seconds`.
std::vector<Timed> interleaved(int rounds, double seconds,
                               const std::vector<std::function<bool()>>& cycles);

// One uncontended cycle of `lock` (any Lockable with try_lock): try_lock() then unlock(); false
// if the attempt was refused. `lock` must outlive the function.
template <class L>
std::function<bool()> cycle_of(L& lock) {
  return [&lock] {
    if (!lock.try_lock()) return false;
    lock.unlock();
    return true;
  };
}

// A JSON value that keeps the order members were added in. Numbers that are not finite are
// written as null.
class Json {
 public:
  Json() = default;  // null
  Json(bool value);  // NOLINT(google-explicit-constructor): JSON values convert implicitly
  Json(int value);
  Json(long value);
  Json(long long value);
  Json(unsigned value);
  Json(unsigned long value);
  Json(unsigned long long value);
  Json(double value);
  Json(const char* value);
  Json(std::string value);

  static Json object();
  static Json array();

  // Adds (or replaces) a member of an object. Returns *this.
  Json& set(const std::string& key, Json value);
  // Appends to an array. Returns *this.
  Json& push(Json value);

  void write(std::ostream& out, int indent = 0) const;

 private:
  enum class Kind { null, boolean, integer, unsigned_integer, number, string, array, object };
  Kind kind_{Kind::null};
  bool boolean_{false};
  long long integer_{0};
  unsigned long long unsigned_{0};
  double number_{0};
  std::string string_;
  std::vector<std::string> keys_;  // object member names, parallel to items_
  std::vector<Json> items_;        // array elements or object member values
};

// One Timed as a JSON object: cycles_per_s, p50_us, cpu_us_per_cycle.
Json timed_json(const Timed& t);

// Goals as printed ("    what: shown -> PASS" or MISS) and as JSON (an array of {goal, value,
// met}).
class Goals {
 public:
  void verdict(const std::string& what, double value, const std::string& shown, bool met);
  Json take() { return std::move(list_); }

 private:
  Json list_ = Json::array();
};

// Left-aligned first column, right-aligned others, columns as wide as their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Number formatting for table cells: 3 significant-ish digits ("12.3", "1,234", "0.412").
std::string num(double value);
// "0.87x"
std::string times(double value);

}  // namespace bench

#endif  // REDLOCK_BENCH_COMMON_HPP
