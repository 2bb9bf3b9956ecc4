// tests/torture/client_nemesis.cpp: see client_nemesis.hpp.
#include "client_nemesis.hpp"

#include <signal.h>  // kill, SIGSTOP, SIGCONT

#include <algorithm>  // std::min
#include <fstream>    // std::ifstream
#include <stdexcept>  // std::invalid_argument

#include "common.hpp"  // mono_ns

namespace redlock::torture {

namespace {

constexpr std::int64_t kMs = 1'000'000;

// The URI with the port after "127.0.0.1:" replaced by a new seat proxy's port in front of it.
std::string route_uri(const std::string& uri, ClientSeat& seat) {
  const std::string host = "127.0.0.1:";
  const std::size_t at = uri.find(host);
  if (at == std::string::npos) throw std::invalid_argument("client faults: no port in " + uri);
  const std::size_t from = at + host.size();
  std::size_t to = from;
  while (to < uri.size() && uri[to] >= '0' && uri[to] <= '9') ++to;
  const int port = std::stoi(uri.substr(from, to - from));
  seat.proxies.push_back(std::make_unique<test::FaultProxy>("127.0.0.1", port));
  return uri.substr(0, from) + std::to_string(seat.proxies.back()->port()) + uri.substr(to);
}

}  // namespace

std::vector<std::string> log_tail(const std::string& path, std::size_t bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  const std::streamoff size = in.tellg();
  const std::streamoff from =
      std::max<std::streamoff>(0, size - static_cast<std::streamoff>(bytes));
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  std::vector<std::string> lines;
  std::size_t start = from > 0 ? tail.find('\n') + 1 : 0;  // skip a partial first line
  for (std::size_t nl = tail.find('\n', start); nl != std::string::npos;
       start = nl + 1, nl = tail.find('\n', start)) {
    lines.push_back(tail.substr(start, nl - start));
  }
  return lines;
}

bool log_shows_a_hold(const std::string& path) {
  const std::vector<std::string> lines = log_tail(path, 4096);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->rfind("end ", 0) == 0) return false;
    if (it->rfind("acq ", 0) == 0 || it->rfind("write ", 0) == 0) return true;
  }
  return false;
}

WorkerConfig route_through_own_proxies(const WorkerConfig& base, ClientSeat& seat) {
  if (base.mode == Mode::sentinel || base.mode == Mode::cluster) {
    throw std::invalid_argument("client faults: the client discovers its servers in mode " +
                                std::string(to_string(base.mode)));
  }
  WorkerConfig c = base;
  for (int& port : c.node_ports) {
    seat.proxies.push_back(std::make_unique<test::FaultProxy>("127.0.0.1", port));
    port = seat.proxies.back()->port();
  }
  if (!c.postgres_uri.empty()) c.postgres_uri = route_uri(c.postgres_uri, seat);
  if (!c.zookeeper_uri.empty()) c.zookeeper_uri = route_uri(c.zookeeper_uri, seat);
  return c;
}

ClientNemesis::ClientNemesis(std::unique_ptr<Faults> store, std::vector<ClientSeat>& seats,
                             std::int64_t lease_ms, std::int64_t first, std::int64_t last,
                             std::uint64_t seed, std::FILE* log)
    : store_(std::move(store)),
      seats_(seats),
      lease_ms_(lease_ms),
      last_(last),
      rng_(seed ^ 0x636c69656e74ULL),
      log_(log),
      next_inject_(first) {
  own_["client_partition"] = 0;
  own_["client_pause"] = 0;
}

ClientNemesis::~ClientNemesis() { heal_all(); }

std::int64_t ClientNemesis::step(std::int64_t now) {
  std::int64_t next = store_->step(now);
  if (active_ >= 0 && now >= heal_at_) heal(now);
  if (active_ < 0 && now >= next_inject_ && now < last_) inject(now);
  next = std::min(next, active_ >= 0 ? heal_at_ : next_inject_);
  merge_counts();
  return next;
}

void ClientNemesis::heal_all() {
  if (active_ >= 0) heal(mono_ns());
  store_->heal_all();
  merge_counts();
}

int ClientNemesis::pick() {
  std::vector<int> running;  // a worker that exited (or was killed) is no target
  std::vector<int> holding;
  for (std::size_t i = 0; i < seats_.size(); ++i) {
    if (seats_[i].pid <= 0) continue;
    running.push_back(static_cast<int>(i));
    if (log_shows_a_hold(seats_[i].log_path)) holding.push_back(static_cast<int>(i));
  }
  if (running.empty()) return -1;
  if (rng_() % 4 != 0 && !holding.empty()) return holding[rng_() % holding.size()];
  return running[rng_() % running.size()];
}

void ClientNemesis::inject(std::int64_t now) {
  active_ = pick();
  if (active_ < 0) return;
  ClientSeat& seat = seats_[static_cast<std::size_t>(active_)];
  active_pause_ = rng_() % 2 == 0 && seat.pid > 0;  // an exited worker's pid is not its own
  heal_at_ = now + (lease_ms_ + 200 + static_cast<std::int64_t>(rng_() % 801)) * kMs;
  if (active_pause_) {
    const std::int64_t sent = mono_ns();  // not later than the moment it stopped
    if (seat.pid <= 0 || ::kill(seat.pid, SIGSTOP) != 0) {
      own_problems_.push_back("SIGSTOP of worker " + std::to_string(active_) + " failed");
      active_ = -1;
      return;
    }
    paused_[active_].emplace_back(sent, 0);
  } else {
    for (auto& proxy : seat.proxies) proxy->set_blackhole(true);
    partitioned_[active_].emplace_back(mono_ns(), 0);  // not earlier than the cut
  }
  ++own_[active_pause_ ? "client_pause" : "client_partition"];
  note(std::string(active_pause_ ? "client_pause" : "client_partition") +
       " worker=" + std::to_string(active_) + " for_ms=" + std::to_string((heal_at_ - now) / kMs));
}

void ClientNemesis::heal(std::int64_t now) {
  ClientSeat& seat = seats_[static_cast<std::size_t>(active_)];
  if (active_pause_) {
    // No worker exits before the run's end, after the last heal, and none under a fault is
    // killed (--liveness spares it): the pid is still its own. Never kill(-1, ...).
    if (seat.pid > 0) ::kill(seat.pid, SIGCONT);
    paused_[active_].back().second = mono_ns();  // not earlier than the moment it ran again
  } else {
    for (auto& proxy : seat.proxies) proxy->clear();
    partitioned_[active_].back().second = mono_ns();  // not earlier than the heal
  }
  note(std::string("heal ") + (active_pause_ ? "client_pause" : "client_partition") +
       " worker=" + std::to_string(active_));
  active_ = -1;
  next_inject_ = now + (300 + static_cast<std::int64_t>(rng_() % 701)) * kMs;
}

void ClientNemesis::note(const std::string& what) {
  if (log_ == nullptr) return;
  std::fprintf(log_, "%lld %s\n", static_cast<long long>(mono_ns()), what.c_str());
  std::fflush(log_);
}

void ClientNemesis::merge_counts() {
  injected_ = store_->injected();
  for (const auto& [kind, n] : own_) injected_[kind] += n;
  problems_ = store_->problems();
  problems_.insert(problems_.end(), own_problems_.begin(), own_problems_.end());
}

}  // namespace redlock::torture
