// tests/torture/fault_windows.cpp: see fault_windows.hpp.
#include "fault_windows.hpp"

#include <fstream>  // std::ifstream
#include <limits>   // std::numeric_limits
#include <sstream>  // std::istringstream, std::ostringstream
#include <utility>  // std::pair

namespace redlock::torture {

namespace {

bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::char_traits<char>::length(prefix), prefix) == 0;
}

std::string word(const std::string& s, int n) {
  std::istringstream in(s);
  std::string w;
  for (int i = 0; i <= n; ++i) {
    if (!(in >> w)) return {};
  }
  return w;
}

// What a line does to the windows: opens one of a kind, closes the oldest open one of a kind,
// happens at once, or nothing.
struct Event {
  enum class Kind { open, close, instant, none } kind{Kind::none};
  std::string key;
};

Event classify(const std::string& text) {
  using K = Event::Kind;
  if (starts_with(text, "healing ") || text.find("(failed, will retry)") != std::string::npos) {
    return {K::none, {}};
  }
  if (starts_with(text, "inject ")) return {K::open, word(text, 1)};
  if (starts_with(text, "heal ")) return {K::close, word(text, 1)};
  if (starts_with(text, "client_pause") || starts_with(text, "client_partition")) {
    return {K::open, word(text, 0)};
  }
  if (starts_with(text, "SIGSTOP of")) return {K::open, "stop"};
  if (starts_with(text, "SIGCONT of")) return {K::close, "stop"};
  if (starts_with(text, "kill -9 of")) return {K::open, "kill"};
  if (starts_with(text, "restarted ")) return {K::close, "kill"};
  return {K::instant, {}};
}

}  // namespace

std::vector<FaultWindow> parse_fault_windows(const std::string& log_text) {
  constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  std::vector<FaultWindow> windows;
  std::vector<std::pair<std::string, std::size_t>> open;  // (key, index in windows), oldest first
  std::istringstream lines(log_text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    long long t = 0;
    if (!(in >> t)) continue;
    std::string text;
    std::getline(in >> std::ws, text);
    const Event e = classify(text);
    switch (e.kind) {
      case Event::Kind::open:
        open.emplace_back(e.key, windows.size());
        windows.push_back(FaultWindow{t, kNever, text});
        break;
      case Event::Kind::close:
        for (auto it = open.begin(); it != open.end(); ++it) {
          if (it->first != e.key) continue;
          windows[it->second].end = t;
          open.erase(it);
          break;
        }
        break;
      case Event::Kind::instant:
        windows.push_back(FaultWindow{t, t, text});
        break;
      case Event::Kind::none:
        break;
    }
  }
  return windows;
}

std::vector<FaultWindow> read_fault_windows(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return parse_fault_windows(text.str());
}

bool fault_in(const std::vector<FaultWindow>& windows, std::int64_t from, std::int64_t to) {
  for (const FaultWindow& w : windows) {
    if (w.start <= to && w.end >= from) return true;
  }
  return false;
}

}  // namespace redlock::torture
