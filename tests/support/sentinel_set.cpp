// tests/support/sentinel_set.cpp: see sentinel_set.hpp.
#include "support/sentinel_set.hpp"

#include <stdexcept>
#include <string_view>
#include <thread>

namespace redlock::test {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{50};

// The value of `field` in one entry of SENTINEL replicas/sentinels (a flat key, value list).
std::string field_of(const redlock::Reply& entry, std::string_view field) {
  const auto& e = entry.elements();
  for (std::size_t i = 0; i + 1 < e.size(); i += 2) {
    if (e[i].str() == field) return e[i + 1].str();
  }
  return {};
}

bool healthy(const std::string& flags) {
  return flags.find("s_down") == std::string::npos && flags.find("o_down") == std::string::npos &&
         flags.find("disconnected") == std::string::npos;
}

}  // namespace

SentinelSet::SentinelSet(SentinelSetOptions options) : options_(std::move(options)) {
  std::vector<std::string> auth;
  if (!options_.master_password.empty()) {
    auth = {"--requirepass", options_.master_password, "--masterauth", options_.master_password};
  }
  // Every data node may become the master: a full sync starts at once (not after the default 5 s
  // delay for more replicas to join).
  auth.insert(auth.end(), {"--repl-diskless-sync-delay", "0"});
  ServerOptions master;
  master.persistence = options_.persistence;
  master.extra_args = auth;
  data_.push_back(std::make_unique<RedisServer>(master));
  const std::string master_port = std::to_string(data_[0]->port());
  for (std::size_t i = 0; i < options_.replicas; ++i) {
    ServerOptions replica;
    replica.persistence = options_.persistence;
    replica.extra_args = auth;
    replica.extra_args.insert(replica.extra_args.end(), {"--replicaof", "127.0.0.1", master_port});
    data_.push_back(std::make_unique<RedisServer>(replica));
  }
  // Sentinels learn the replicas from the master's INFO, asked at once and then every 10 s: the
  // replicas must be online (synced) before the sentinels start, or the set waits 10 s for them.
  await_replicas_online(0, options_.replicas, std::chrono::seconds(20));
  const std::string& name = options_.service;
  ServerOptions sentinel;
  sentinel.sentinel = true;
  sentinel.config_lines = {
      "sentinel monitor " + name + " 127.0.0.1 " + master_port + " 2",
      "sentinel down-after-milliseconds " + name + " " + std::to_string(options_.down_after_ms),
      "sentinel failover-timeout " + name + " " + std::to_string(options_.failover_timeout_ms),
      "sentinel parallel-syncs " + name + " 2"};
  if (!options_.master_password.empty()) {
    sentinel.config_lines.push_back("sentinel auth-pass " + name + " " + options_.master_password);
  }
  if (!options_.sentinel_password.empty()) {
    sentinel.config_lines.push_back("requirepass " + options_.sentinel_password);
    sentinel.config_lines.push_back("sentinel sentinel-pass " + options_.sentinel_password);
  }
  for (std::size_t i = 0; i < options_.sentinels; ++i) {
    sentinels_.push_back(std::make_unique<RedisServer>(sentinel));
  }
  await_stable();
}

redlock::Endpoint SentinelSet::endpoint() const {
  redlock::Endpoint e;
  e.sentinel.service = options_.service;
  e.password = options_.master_password;
  for (const auto& s : sentinels_) {
    redlock::Endpoint node = s->plain_endpoint();
    node.username.clear();
    node.password = options_.sentinel_password;
    e.sentinel.sentinels.push_back(node);
  }
  return e;
}

std::string SentinelSet::uri() const {
  std::string out = "redis-sentinel://";
  if (!options_.master_password.empty()) out += ":" + options_.master_password + "@";
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    out += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(sentinels_[i]->port());
  }
  if (!options_.sentinel_password.empty())
    out += "?sentinel_password=" + options_.sentinel_password;
  return out + "#" + options_.service;
}

redlock::Endpoint SentinelSet::data_endpoint(std::size_t i) const {
  redlock::Endpoint e = data_.at(i)->plain_endpoint();
  e.username.clear();
  e.password = options_.master_password;
  return e;
}

redlock::Reply SentinelSet::ask_sentinel(std::size_t i,
                                         const std::vector<std::string>& argv) const {
  if (options_.sentinel_password.empty()) return sentinels_.at(i)->raw(argv);
  return sentinels_.at(i)->raw_pipeline({{"AUTH", options_.sentinel_password}, argv}).at(1);
}

redlock::Reply SentinelSet::ask_data(std::size_t i, const std::vector<std::string>& argv) const {
  if (options_.master_password.empty()) return data_.at(i)->raw(argv);
  return data_.at(i)->raw_pipeline({{"AUTH", options_.master_password}, argv}).at(1);
}

std::size_t SentinelSet::index_of_port(int port) const {
  for (std::size_t i = 0; i < data_.size(); ++i) {
    if (data_[i]->port() == port) return i;
  }
  throw std::runtime_error("sentinel_set: the sentinels report an unknown port " +
                           std::to_string(port));
}

std::size_t SentinelSet::master_index() const {
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    if (!sentinels_[i]->running()) continue;
    try {
      const auto r = ask_sentinel(i, {"SENTINEL", "get-master-addr-by-name", options_.service});
      if (r.elements().size() == 2) return index_of_port(std::stoi(r.elements()[1].str()));
    } catch (const std::runtime_error&) {  // paused or down: ask the next one
    }
  }
  throw std::runtime_error("sentinel_set: no sentinel reports a master");
}

std::string SentinelSet::role(std::size_t i) const {
  try {
    const auto r = ask_data(i, {"ROLE"});
    return r.elements().empty() ? r.str() : r.elements()[0].str();
  } catch (const std::runtime_error&) {
    return "down";
  }
}

void SentinelSet::await_replicas_online(std::size_t master, std::size_t count,
                                        std::chrono::milliseconds limit) const {
  const auto deadline = Clock::now() + limit;
  const auto online = [&] {
    const std::string info = ask_data(master, {"INFO", "replication"}).str();
    std::size_t n = 0;
    for (auto at = info.find("state=online"); at != std::string::npos;
         at = info.find("state=online", at + 1)) {
      ++n;
    }
    return n >= count;
  };
  while (!online()) {
    if (Clock::now() > deadline) {
      throw std::runtime_error("sentinel_set: " + std::to_string(count) +
                               " replicas are not online on data node " + std::to_string(master) +
                               " within the limit");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

void SentinelSet::await_role(std::size_t i, const std::string& want,
                             std::chrono::milliseconds limit) const {
  const auto deadline = Clock::now() + limit;
  while (role(i) != want) {
    if (Clock::now() > deadline) {
      throw std::runtime_error("sentinel_set: data node " + std::to_string(i) + " is not a " +
                               want + " within the limit");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

std::size_t SentinelSet::failover(std::chrono::milliseconds limit) {
  await_stable(limit);
  const std::size_t old = master_index();
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    if (!sentinels_[i]->running()) continue;
    const auto r = ask_sentinel(i, {"SENTINEL", "FAILOVER", options_.service});
    if (r.is_error()) throw std::runtime_error("sentinel_set: SENTINEL FAILOVER: " + r.str());
    return await_new_master(old, limit);
  }
  throw std::runtime_error("sentinel_set: no sentinel is running");
}

bool SentinelSet::request_failover(std::string& why) {
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    if (!sentinels_[i]->running()) continue;
    try {
      const auto r = ask_sentinel(i, {"SENTINEL", "FAILOVER", options_.service});
      if (!r.is_error()) return true;
      why = r.str();
    } catch (const std::runtime_error& e) {
      why = e.what();
    }
    return false;
  }
  why = "no sentinel is running";
  return false;
}

std::size_t SentinelSet::await_new_master(std::size_t old, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    try {
      const std::size_t now = master_index();
      if (now != old && role(now) == "master") return now;
    } catch (const std::runtime_error&) {
    }
    std::this_thread::sleep_for(kPoll);
  }
  throw std::runtime_error("sentinel_set: no new master within the limit");
}

void SentinelSet::await_stable(std::chrono::milliseconds limit) const {
  const auto deadline = Clock::now() + limit;
  std::string why;
  while (Clock::now() < deadline) {
    why.clear();
    try {
      const std::size_t master = master_index();
      if (role(master) != "master") why = "the reported master is not one yet";
      std::size_t replicas = 0;
      for (std::size_t i = 0; i < data_.size(); ++i) {
        replicas += i != master && data_[i]->running() ? 1U : 0U;
      }
      std::size_t running = 0;
      for (const auto& s : sentinels_) running += s->running() ? 1U : 0U;
      for (std::size_t i = 0; i < sentinels_.size() && why.empty(); ++i) {
        if (!sentinels_[i]->running()) continue;
        const auto r = ask_sentinel(i, {"SENTINEL", "get-master-addr-by-name", options_.service});
        if (r.elements().size() != 2 || index_of_port(std::stoi(r.elements()[1].str())) != master) {
          why = "the sentinels disagree on the master";
          break;
        }
        std::size_t seen = 0;
        const redlock::Reply listed = ask_sentinel(i, {"SENTINEL", "REPLICAS", options_.service});
        for (const auto& e : listed.elements()) {
          seen += healthy(field_of(e, "flags")) ? 1U : 0U;
        }
        if (seen < replicas) why = "a sentinel does not see every replica";
        const auto others = ask_sentinel(i, {"SENTINEL", "SENTINELS", options_.service});
        if (others.elements().size() + 1 < running) why = "a sentinel does not know the others";
      }
      if (why.empty()) return;
    } catch (const std::runtime_error& e) {
      why = e.what();
    }
    std::this_thread::sleep_for(kPoll);
  }
  throw std::runtime_error("sentinel_set: not stable within the limit: " + why);
}

}  // namespace redlock::test
