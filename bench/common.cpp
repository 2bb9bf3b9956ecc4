// bench/common.cpp: clocks, percentiles, the allocation counter, Json and Table.
#include "common.hpp"

#include <dirent.h>        // opendir, readdir
#include <sys/resource.h>  // getrusage, RUSAGE_THREAD
#include <time.h>          // clock_gettime

#include <algorithm>  // std::sort, std::max
#include <cmath>      // std::isfinite, std::fabs
#include <cstdio>     // std::snprintf
#include <cstdlib>    // std::malloc, std::free, std::atoi
#include <fstream>    // std::ifstream
#include <iostream>   // std::cout
#include <new>        // std::bad_alloc
#include <stdexcept>  // std::runtime_error
#include <utility>    // std::move

namespace bench {
namespace {

thread_local std::uint64_t t_allocations = 0;

std::int64_t read_clock(clockid_t id) noexcept {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void write_string(std::ostream& out, const std::string& s) {
  out << '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out << "\\\"";
        break;
      case '\\':
        out << "\\\\";
        break;
      case '\n':
        out << "\\n";
        break;
      case '\t':
        out << "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out << buf;
        } else {
          out << c;
        }
    }
  }
  out << '"';
}

}  // namespace

std::int64_t now_ns() noexcept { return read_clock(CLOCK_MONOTONIC); }
std::int64_t thread_cpu_ns() noexcept { return read_clock(CLOCK_THREAD_CPUTIME_ID); }
CpuSplit thread_cpu_split() noexcept {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  auto ns = [](const timeval& tv) {
    return static_cast<std::int64_t>(tv.tv_sec) * 1'000'000'000 + tv.tv_usec * 1'000;
  };
  return CpuSplit{ns(usage.ru_utime), ns(usage.ru_stime)};
}

std::int64_t process_cpu_ns() noexcept { return read_clock(CLOCK_PROCESS_CPUTIME_ID); }
std::uint64_t thread_allocations() noexcept { return t_allocations; }

std::vector<int> thread_ids() {
  std::vector<int> out;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') out.push_back(std::atoi(entry->d_name));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

std::int64_t task_cpu_ns(int tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  long long on_cpu = -1;
  if (!(in >> on_cpu)) return -1;
  return on_cpu;
}

Summary summarize(std::vector<std::int64_t> samples) {
  Summary s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double q) {
    // Nearest rank: the smallest sample with at least q of the samples at or below it.
    auto i = static_cast<std::size_t>(q * static_cast<double>(samples.size()) + 0.999999);
    i = std::max<std::size_t>(i, 1);
    return static_cast<double>(samples[std::min(i, samples.size()) - 1]);
  };
  s.p50_ns = rank(0.50);
  s.p99_ns = rank(0.99);
  s.max_ns = static_cast<double>(samples.back());
  double sum = 0;
  for (const std::int64_t v : samples) sum += static_cast<double>(v);
  s.mean_ns = sum / static_cast<double>(samples.size());
  return s;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double ratio(double a, double b) noexcept { return b == 0 ? 0 : a / b; }

// ---- Json ------------------------------------------------------------------------------------

Json::Json(bool value) : kind_(Kind::boolean), boolean_(value) {}
Json::Json(int value) : kind_(Kind::integer), integer_(value) {}
Json::Json(long value) : kind_(Kind::integer), integer_(value) {}
Json::Json(long long value) : kind_(Kind::integer), integer_(value) {}
Json::Json(unsigned value) : kind_(Kind::unsigned_integer), unsigned_(value) {}
Json::Json(unsigned long value) : kind_(Kind::unsigned_integer), unsigned_(value) {}
Json::Json(unsigned long long value) : kind_(Kind::unsigned_integer), unsigned_(value) {}
Json::Json(double value) : kind_(Kind::number), number_(value) {}
Json::Json(const char* value) : kind_(Kind::string), string_(value) {}
Json::Json(std::string value) : kind_(Kind::string), string_(std::move(value)) {}

Json Json::object() {
  Json j;
  j.kind_ = Kind::object;
  return j;
}

Json Json::array() {
  Json j;
  j.kind_ = Kind::array;
  return j;
}

Json& Json::set(const std::string& key, Json value) {
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) {
      items_[i] = std::move(value);
      return *this;
    }
  }
  keys_.push_back(key);
  items_.push_back(std::move(value));
  return *this;
}

Json& Json::push(Json value) {
  items_.push_back(std::move(value));
  return *this;
}

void Json::write(std::ostream& out, int indent) const {
  const std::string pad(static_cast<std::size_t>(indent + 2), ' ');
  const std::string end_pad(static_cast<std::size_t>(indent), ' ');
  switch (kind_) {
    case Kind::null:
      out << "null";
      return;
    case Kind::boolean:
      out << (boolean_ ? "true" : "false");
      return;
    case Kind::integer:
      out << integer_;
      return;
    case Kind::unsigned_integer:
      out << unsigned_;
      return;
    case Kind::number: {
      if (!std::isfinite(number_)) {
        out << "null";
        return;
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", number_);
      out << buf;
      return;
    }
    case Kind::string:
      write_string(out, string_);
      return;
    case Kind::array:
    case Kind::object: {
      const bool object = kind_ == Kind::object;
      if (items_.empty()) {
        out << (object ? "{}" : "[]");
        return;
      }
      out << (object ? "{\n" : "[\n");
      for (std::size_t i = 0; i < items_.size(); ++i) {
        out << pad;
        if (object) {
          write_string(out, keys_[i]);
          out << ": ";
        }
        items_[i].write(out, indent + 2);
        out << (i + 1 < items_.size() ? ",\n" : "\n");
      }
      out << end_pad << (object ? '}' : ']');
      return;
    }
  }
}

void Goals::verdict(const std::string& what, double value, const std::string& shown, bool met) {
  std::cout << "    " << what << ": " << shown << " -> " << (met ? "PASS" : "MISS") << "\n";
  list_.push(Json::object().set("goal", what).set("value", value).set("met", met));
}

// ---- Table -----------------------------------------------------------------------------------

void Table::print(std::ostream& out) const {
  std::vector<std::size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], cells[i].size());
    }
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (std::size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < cells.size() ? cells[i] : "";
      const std::string fill(width[i] - cell.size(), ' ');
      if (i > 0) text += "  ";
      text += i == 0 ? cell + fill : fill + cell;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out << "  " << text << '\n';
  };
  line(header_);
  std::size_t total = 0;
  for (const std::size_t w : width) total += w + 2;
  out << "  " << std::string(total - 2, '-') << '\n';
  for (const auto& r : rows_) line(r);
}

std::string num(double value) {
  char buf[48];
  const double a = std::fabs(value);
  if (!std::isfinite(value)) return "-";
  if (a >= 100000) {
    // Thousands separators for big counts: 123,456.
    const auto whole = static_cast<long long>(value + (value < 0 ? -0.5 : 0.5));
    std::string digits = std::to_string(whole < 0 ? -whole : whole);
    std::string grouped;
    for (std::size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
      grouped += digits[i];
    }
    return (whole < 0 ? "-" : "") + grouped;
  }
  if (a >= 100) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
  } else if (a >= 10) {
    std::snprintf(buf, sizeof buf, "%.1f", value);
  } else if (a >= 1 || a == 0) {
    std::snprintf(buf, sizeof buf, "%.2f", value);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f", value);
  }
  return buf;
}

std::string times(double value) {
  if (!std::isfinite(value) || value == 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", value);
  return buf;
}

Timed timed(double seconds, const std::function<bool()>& cycle) {
  for (int i = 0; i < 20; ++i) cycle();
  std::vector<std::int64_t> samples;
  samples.reserve(std::size_t{1} << 16);
  const std::int64_t t0 = now_ns();
  const std::int64_t c0 = thread_cpu_ns();
  const auto end = t0 + static_cast<std::int64_t>(seconds * 1e9);
  std::int64_t t = t0;
  while (t < end) {
    if (!cycle()) throw std::runtime_error("an uncontended attempt did not get its lock");
    const std::int64_t after = now_ns();
    samples.push_back(after - t);
    t = after;
  }
  const double count = static_cast<double>(samples.size());
  const double cpu = static_cast<double>(thread_cpu_ns() - c0) / count;
  return Timed{count * 1e9 / static_cast<double>(t - t0), cpu,
               summarize(std::move(samples)).p50_ns};
}

std::vector<Timed> interleaved(int rounds, double seconds,
                               const std::vector<std::function<bool()>>& cycles) {
  std::vector<std::vector<double>> rate(cycles.size()), cpu(cycles.size()), p50(cycles.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < cycles.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(round)) % cycles.size();
      const Timed t = timed(seconds, cycles[i]);
      rate[i].push_back(t.cycles_per_s);
      cpu[i].push_back(t.cpu_ns);
      p50[i].push_back(t.p50_ns);
    }
  }
  std::vector<Timed> out;
  for (std::size_t i = 0; i < cycles.size(); ++i) {
    out.push_back({median(rate[i]), median(cpu[i]), median(p50[i])});
  }
  return out;
}

Json timed_json(const Timed& t) {
  Json row = Json::object();
  row.set("cycles_per_s", t.cycles_per_s);
  row.set("p50_us", t.p50_ns / 1e3);
  row.set("cpu_us_per_cycle", t.cpu_ns / 1e3);
  return row;
}

}  // namespace bench

// ---- Allocation counter ----------------------------------------------------------------------
// Replaces the global (non-aligned) operator new/delete. The aligned forms keep the standard
// library's own pair, which is self-consistent.

void* operator new(std::size_t size) {
  ++bench::t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}

void* operator new[](std::size_t size) { return ::operator new(size); }

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*size*/) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t /*size*/) noexcept { std::free(p); }
