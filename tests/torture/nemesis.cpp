// tests/torture/nemesis.cpp: see nemesis.hpp.
#include "nemesis.hpp"

#include <algorithm>  // std::any_of, std::find, std::min, std::shuffle
#include <chrono>     // std::chrono::milliseconds
#include <exception>  // std::exception

namespace redlock::torture {

namespace {
constexpr std::int64_t kMs = 1'000'000;
}  // namespace

Nemesis::Nemesis(std::vector<Node>& nodes, Unsafe unsafe, std::uint64_t seed, std::FILE* log)
    : nodes_(nodes),
      unsafe_(unsafe),
      // A minority of the nodes; the one node of lock mode may fail outright.
      max_faulty_(nodes.size() == 1 ? 1 : (nodes.size() - 1) / 2),
      rng_(seed ^ 0x9e3779b97f4a7c15ULL),
      log_(log) {}

const char* Nemesis::name(Kind k) {
  switch (k) {
    case Kind::pause:
      return "pause";
    case Kind::kill_restart:
      return "kill_restart";
    case Kind::client_kill:
      return "client_kill";
    case Kind::debug_sleep:
      return "debug_sleep";
    case Kind::latency:
      return "latency";
    case Kind::blackhole:
      return "blackhole";
    case Kind::drop_after_request:
      return "drop_after_request";
    case Kind::reset_all:
      return "reset_all";
    case Kind::majority_restart:
      return "majority_restart";
  }
  return "?";
}

std::int64_t Nemesis::uniform_ms(int lo, int hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_) * kMs;
}

void Nemesis::note(const std::string& what) {
  if (log_ != nullptr) {
    std::fprintf(log_, "%lld %s\n", static_cast<long long>(mono_ns()), what.c_str());
    std::fflush(log_);
  }
}

bool Nemesis::busy(std::size_t node) const {
  return std::any_of(active_.begin(), active_.end(), [node](const Active& a) {
    return std::find(a.nodes.begin(), a.nodes.end(), node) != a.nodes.end();
  });
}

std::int64_t Nemesis::step(std::int64_t now) {
  // Heal what is due (a failed heal stays active and is retried soon).
  for (std::size_t i = 0; i < active_.size();) {
    if (active_[i].heal_at <= now) {
      if (heal(active_[i])) {
        active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      active_[i].heal_at = now + 200 * kMs;
    }
    ++i;
  }
  if (next_inject_ == 0) next_inject_ = now + uniform_ms(500, 2000);
  if (now >= next_inject_) {
    inject(mono_ns());
    next_inject_ = mono_ns() + uniform_ms(500, 2000);
  }
  std::int64_t next = next_inject_;
  for (const Active& a : active_) next = std::min(next, a.heal_at);
  return next;
}

void Nemesis::inject(std::int64_t now) {
  // Outside the model: a majority restarted empty, about every third injection.
  if (unsafe_ == Unsafe::restart && nodes_.size() >= 3 &&
      std::uniform_int_distribution<int>(0, 2)(rng_) == 0) {
    heal_all();
    std::vector<std::size_t> order(nodes_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng_);
    order.resize(nodes_.size() / 2 + 1);
    std::string which;
    for (std::size_t n : order) {
      nodes_[n].server->kill9();
      which += " " + std::to_string(n);
    }
    // Back quickly (0-100 ms): a majority that returns empty while the holder still works is
    // what breaks exclusion; a long outage would mostly outlast the hold.
    active_.push_back(Active{Kind::majority_restart, order, now + uniform_ms(0, 100)});
    ++injected_[name(Kind::majority_restart)];
    note("inject majority_restart nodes" + which);
    return;
  }

  std::size_t faulty = 0;
  for (std::size_t n = 0; n < nodes_.size(); ++n) faulty += busy(n) ? 1 : 0;
  if (faulty >= max_faulty_) return;  // a minority is already down: wait for a heal
  std::vector<std::size_t> healthy;
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    if (!busy(n)) healthy.push_back(n);
  }
  const std::size_t node =
      healthy[std::uniform_int_distribution<std::size_t>(0, healthy.size() - 1)(rng_)];
  Node& target = nodes_[node];
  std::vector<Kind> kinds = {Kind::pause,     Kind::client_kill, Kind::debug_sleep,
                             Kind::latency,   Kind::blackhole,   Kind::drop_after_request,
                             Kind::reset_all, Kind::kill_restart};
  // A faketime server restarted would start its fast clock again from the real time (a jump
  // back): that is a different experiment, so clock mode spares those nodes from restarts.
  if (target.fake_clock) kinds.pop_back();
  const Kind kind = kinds[std::uniform_int_distribution<std::size_t>(0, kinds.size() - 1)(rng_)];

  std::string detail;
  std::int64_t heal_at = now;
  try {
    switch (kind) {
      case Kind::pause:
        target.server->pause();
        heal_at = now + uniform_ms(100, 1500);
        break;
      case Kind::kill_restart:
        target.server->kill9();
        heal_at = now + uniform_ms(100, 1000);
        break;
      case Kind::client_kill: {
        const Reply r = target.server->raw({"CLIENT", "KILL", "TYPE", "normal"});
        detail = " killed=" + std::to_string(r.integer());
        heal_at = now + 100 * kMs;
        break;
      }
      case Kind::debug_sleep:
        // Do not wait for the reply: the server executes the request it has read even after this
        // connection gives up, and the nemesis must not hang with it.
        try {
          target.server->raw({"DEBUG", "SLEEP", "0.3"}, std::chrono::milliseconds(50));
        } catch (const std::exception&) {
        }
        heal_at = now + 400 * kMs;
        break;
      case Kind::latency: {
        const std::int64_t delay = uniform_ms(50, 300) / kMs;
        target.proxy->set_delay(std::chrono::milliseconds(delay));
        detail = " delay_ms=" + std::to_string(delay);
        heal_at = now + uniform_ms(300, 2000);
        break;
      }
      case Kind::blackhole:
        target.proxy->set_blackhole(true);
        heal_at = now + uniform_ms(200, 1500);
        break;
      case Kind::drop_after_request:
        target.proxy->set_drop_after_request(true);
        heal_at = now + uniform_ms(200, 1500);
        break;
      case Kind::reset_all:
        target.proxy->reset_all();
        heal_at = now + 50 * kMs;
        break;
      case Kind::majority_restart:
        break;
    }
  } catch (const std::exception& e) {
    problems_.push_back(std::string("inject ") + name(kind) + " on node " + std::to_string(node) +
                        ": " + e.what());
    note(problems_.back());
    // Whatever half-happened is healed like the fault itself.
  }
  active_.push_back(Active{kind, {node}, heal_at});
  ++injected_[name(kind)];
  note(std::string("inject ") + name(kind) + " node " + std::to_string(node) + detail);
}

bool Nemesis::heal(const Active& fault) {
  bool ok = true;
  if (fault.kind == Kind::kill_restart || fault.kind == Kind::majority_restart) {
    note(std::string("healing ") + name(fault.kind) + " (restarting)");
  }
  for (std::size_t n : fault.nodes) {
    Node& node = nodes_[n];
    try {
      switch (fault.kind) {
        case Kind::pause:
          node.server->resume();
          break;
        case Kind::kill_restart:
        case Kind::majority_restart:
          if (!node.server->running()) node.server->restart();
          break;
        case Kind::latency:
        case Kind::blackhole:
        case Kind::drop_after_request:
          node.proxy->clear();
          break;
        case Kind::client_kill:
        case Kind::debug_sleep:
        case Kind::reset_all:
          break;  // one-shot faults: the slot only kept other faults off this node for a moment
      }
    } catch (const std::exception& e) {
      problems_.push_back(std::string("heal ") + name(fault.kind) + " on node " +
                          std::to_string(n) + ": " + e.what());
      note(problems_.back());
      ok = false;
    }
  }
  note(std::string("heal ") + name(fault.kind) + (ok ? "" : " (failed, will retry)"));
  return ok;
}

void Nemesis::heal_all() {
  for (std::size_t attempt = 0; attempt < 5 && !active_.empty(); ++attempt) {
    for (std::size_t i = 0; i < active_.size();) {
      if (heal(active_[i])) {
        active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
}

std::int64_t TopologyNemesis::uniform_ms(int lo, int hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_) * 1'000'000;
}

void TopologyNemesis::note(const std::string& what) {
  if (log_ == nullptr) return;
  std::fprintf(log_, "%lld %s\n", static_cast<long long>(mono_ns()), what.c_str());
  std::fflush(log_);
}

}  // namespace redlock::torture
