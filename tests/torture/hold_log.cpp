// tests/torture/hold_log.cpp: see hold_log.hpp.
#include "hold_log.hpp"

#include <fcntl.h>   // open
#include <unistd.h>  // write, close

#include <algorithm>      // std::min, std::sort
#include <cerrno>         // errno
#include <charconv>       // std::from_chars
#include <fstream>        // std::ifstream
#include <iterator>       // std::istreambuf_iterator
#include <sstream>        // std::istringstream
#include <stdexcept>      // std::runtime_error
#include <string_view>    // std::string_view
#include <system_error>   // std::system_error
#include <tuple>          // std::tie
#include <unordered_map>  // std::unordered_map

namespace redlock::torture {

const char* to_string(WriteResult r) noexcept {
  switch (r) {
    case WriteResult::none:
      return "none";
    case WriteResult::applied:
      return "applied";
    case WriteResult::rejected:
      return "rejected";
    case WriteResult::write_error:
      return "write_error";
    case WriteResult::read_error:
      return "read_error";
  }
  return "none";
}

const char* to_string(EndKind k) noexcept {
  switch (k) {
    case EndKind::none:
      return "none";
    case EndKind::released:
      return "released";
    case EndKind::lost:
      return "lost";
    case EndKind::killed:
      return "killed";
    case EndKind::error:
      return "error";
  }
  return "none";
}

std::int64_t Hold::window_end() const noexcept {
  std::int64_t end = std::max(deadline, deadline_final);
  if (this->end != EndKind::none) end = std::min(end, t_rel);
  return end;
}

std::string Hold::name() const {
  return "p" + std::to_string(process) + "/t" + std::to_string(thread) + "/#" +
         std::to_string(seq) + " fence=" + std::to_string(fence);
}

// ---------------------------------------------------------------------------------------------
// Writer

HoldLogWriter::HoldLogWriter(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "open " + path);
}

HoldLogWriter::~HoldLogWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void HoldLogWriter::write_line(const std::string& line) noexcept {
  std::string buffer;
  try {
    buffer.reserve(line.size() + 1);
    buffer = line;
    buffer.push_back('\n');
  } catch (...) {
    return;
  }
  // A regular file takes the whole line in one write unless the disk is full.
  std::size_t done = 0;
  while (done < buffer.size()) {
    const ssize_t n = ::write(fd_, buffer.data() + done, buffer.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<std::size_t>(n);
  }
}

// ---------------------------------------------------------------------------------------------
// Parser

namespace {

bool to_int(std::string_view s, std::int64_t& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool to_uint(std::string_view s, std::uint64_t& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// key=value fields of one line.
class Fields {
 public:
  explicit Fields(std::string_view rest) {
    while (!rest.empty()) {
      const std::size_t space = rest.find(' ');
      const std::string_view word = rest.substr(0, space);
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
      if (word.empty()) continue;
      const std::size_t eq = word.find('=');
      if (eq == std::string_view::npos) {
        ok_ = false;
        continue;
      }
      map_[std::string(word.substr(0, eq))] = std::string(word.substr(eq + 1));
    }
  }
  bool ok() const { return ok_; }
  bool get(const char* key, std::int64_t& out) {
    auto it = map_.find(key);
    if (it == map_.end() || !to_int(it->second, out)) return ok_ = false;
    return true;
  }
  bool get(const char* key, int& out) {
    std::int64_t v = 0;
    if (!get(key, v)) return false;
    out = static_cast<int>(v);
    return true;
  }
  bool get(const char* key, std::uint64_t& out) {
    auto it = map_.find(key);
    if (it == map_.end() || !to_uint(it->second, out)) return ok_ = false;
    return true;
  }
  bool get(const char* key, std::string& out) {
    auto it = map_.find(key);
    if (it == map_.end()) return ok_ = false;
    out = it->second;
    return true;
  }
  bool has(const char* key) const { return map_.count(key) != 0; }
  // Optional integer: 0 when absent.
  std::int64_t opt(const char* key) {
    auto it = map_.find(key);
    std::int64_t v = 0;
    if (it != map_.end() && !to_int(it->second, v)) ok_ = false;
    return v;
  }

 private:
  std::unordered_map<std::string, std::string> map_;
  bool ok_{true};
};

struct HoldKey {
  int p;
  int t;
  std::int64_t n;
  bool operator<(const HoldKey& o) const { return std::tie(p, t, n) < std::tie(o.p, o.t, o.n); }
};

void note_problem(LogContents& out, const std::string& line) {
  ++out.malformed_lines;
  if (out.problems.size() < 5) out.problems.push_back(line.substr(0, 200));
}

// A "wait" record into out.waits. Returns false if malformed.
bool parse_wait(Fields& f, LogContents& out) {
  Wait w;
  std::string result;
  if (!f.get("p", w.process) || !f.get("t", w.thread) || !f.get("t_try", w.t_try) ||
      !f.get("t_end", w.t_end) || !f.get("result", result)) {
    return false;
  }
  if (result == "acquired") {
    w.result = Wait::Result::acquired;
  } else if (result == "contended") {
    w.result = Wait::Result::contended;
  } else if (result == "error") {
    w.result = Wait::Result::error;
  } else {
    return false;
  }
  out.waits.push_back(w);
  return true;
}

}  // namespace

void parse_log_text(const std::string& text, LogContents& out) {
  // Holds already parsed from earlier files keep their index; look them up by key.
  std::map<HoldKey, std::size_t> index;
  for (std::size_t i = 0; i < out.holds.size(); ++i) {
    const Hold& h = out.holds[i];
    index[{h.process, h.thread, h.seq}] = i;
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    const std::string event = line.substr(0, space);
    Fields f(space == std::string::npos ? std::string_view()
                                        : std::string_view(line).substr(space + 1));
    if (event == "start") {
      int p = 0;
      if (!f.get("p", p)) {
        note_problem(out, line);
        continue;
      }
      out.started.push_back(p);
      continue;
    }
    if (event == "errsample") {
      const std::size_t at = line.find(" msg=");
      Fields head(std::string_view(line).substr(
          space + 1, at == std::string::npos ? std::string_view::npos : at - space - 1));
      const std::int64_t count = head.opt("count");
      if (at == std::string::npos || !head.ok()) {
        note_problem(out, line);
        continue;
      }
      out.error_samples[line.substr(at + 5)] += count;
      continue;
    }
    if (event == "stats") {
      WorkerStats s;
      s.present = true;
      f.get("p", s.process);
      f.get("pid", s.pid);
      f.get("attempts", s.attempts);
      f.get("acquired", s.acquired);
      f.get("contended", s.contended);
      s.err_timeout = f.opt("err_timeout");
      s.err_connection = f.opt("err_connection");
      s.err_server = f.opt("err_server");
      s.err_protocol = f.opt("err_protocol");
      s.err_other = f.opt("err_other");
      if (!f.ok()) {
        note_problem(out, line);
        continue;
      }
      out.stats[s.process] = s;
      continue;
    }
    if (event == "observe") {
      out.observer_reads += f.opt("reads");
      out.partial_sets += f.opt("partial");
      if (!f.ok()) note_problem(out, line);
      continue;
    }
    if (event == "try") continue;  // for the controller; its "wait" record follows
    if (event == "wait") {
      if (!parse_wait(f, out)) note_problem(out, line);
      continue;
    }
    if (event != "acq" && event != "write" && event != "end") {
      note_problem(out, line);
      continue;
    }
    HoldKey key{};
    if (!f.get("p", key.p) || !f.get("t", key.t) || !f.get("n", key.n)) {
      note_problem(out, line);
      continue;
    }
    auto it = index.find(key);
    if (it == index.end()) {
      Hold h;
      h.process = key.p;
      h.thread = key.t;
      h.seq = key.n;
      out.holds.push_back(h);
      it = index.emplace(key, out.holds.size() - 1).first;
    }
    Hold& h = out.holds[it->second];
    if (event == "acq") {
      if (h.has_acq) ++out.duplicate_records;
      f.get("fence", h.fence);
      f.get("t_acq", h.t_acq);
      f.get("deadline", h.deadline);
      f.get("validity_ms", h.validity_ms);
      std::string side;
      if (f.has("side")) f.get("side", side);
      h.shared = side == "r";
      h.keys = f.opt("keys");
      h.t_req = f.opt("t_req");
      if (!f.ok()) {
        note_problem(out, line);
        continue;
      }
      h.has_acq = true;
    } else if (event == "write") {
      if (h.write != WriteResult::none) ++out.duplicate_records;
      std::string result;
      f.get("result", result);
      h.t_read = f.opt("t_read");
      h.t_write_end = f.opt("t_write_end");
      h.value = f.opt("value");
      if (result == "applied") {
        h.write = WriteResult::applied;
      } else if (result == "rejected") {
        h.write = WriteResult::rejected;
      } else if (result == "write_error") {
        h.write = WriteResult::write_error;
      } else if (result == "read_error") {
        h.write = WriteResult::read_error;
      } else {
        note_problem(out, line);
        continue;
      }
      if (!f.ok()) note_problem(out, line);
    } else {
      if (h.end != EndKind::none) ++out.duplicate_records;
      std::string kind;
      f.get("kind", kind);
      f.get("t_rel", h.t_rel);
      f.get("t_rel_end", h.t_rel_end);
      f.get("deadline", h.deadline_final);
      h.t_stop = f.opt("t_stop");
      h.t_unled = f.opt("t_unled");
      if (!f.ok()) {
        note_problem(out, line);
        continue;
      }
      if (kind == "released") {
        h.end = EndKind::released;
      } else if (kind == "lost") {
        h.end = EndKind::lost;
      } else if (kind == "error") {
        h.end = EndKind::error;
      } else {
        note_problem(out, line);
      }
    }
  }
}

void finish_log_contents(LogContents& out) {
  std::sort(out.holds.begin(), out.holds.end(), [](const Hold& a, const Hold& b) {
    return std::tie(a.process, a.thread, a.seq) < std::tie(b.process, b.thread, b.seq);
  });
  std::sort(out.started.begin(), out.started.end());
}

LogContents read_logs(const std::vector<std::string>& paths) {
  LogContents out;
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read hold log " + path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    parse_log_text(text, out);
  }
  finish_log_contents(out);
  return out;
}

}  // namespace redlock::torture
