// tests/support/redis_cluster.cpp: see redis_cluster.hpp.
#include "support/redis_cluster.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <thread>

namespace redlock::test {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{50};
constexpr std::size_t kMasters = 3;

// The last `lines` lines of a node's redis.log, for failure messages.
std::string log_tail(const RedisServer& n, std::size_t lines = 15) {
  std::FILE* f = std::fopen(n.log_path().c_str(), "rb");
  if (f == nullptr) return "(no log at " + n.log_path() + ")";
  std::string all;
  char buf[4096];
  for (std::size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) all.append(buf, got);
  std::fclose(f);
  std::size_t pos = all.size();
  for (std::size_t seen = 0; pos > 0 && seen <= lines;) {
    if (all[--pos] == '\n') ++seen;
  }
  return all.substr(pos == 0 ? 0 : pos + 1);
}

ServerOptions node_options(int node_timeout_ms) {
  ServerOptions o;
  o.tls.enabled = false;
  o.extra_args = {"--cluster-enabled",          "yes",
                  "--cluster-config-file",      "nodes.conf",
                  "--cluster-node-timeout",     std::to_string(node_timeout_ms),
                  "--repl-diskless-sync-delay", "0"};
  return o;
}

// Runs `command` through the shell; returns its exit status and output.
int run(const std::string& command, std::string& output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("redis_cluster: cannot run " + command);
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  return ::pclose(pipe);
}

std::string redis_cli() {
  const char* env = std::getenv("REDLOCK_REDIS_CLI");
  return env != nullptr && *env != '\0' ? env : "redis-cli";
}

// "start-end@port" for every range of a CLUSTER SLOTS reply, sorted: two nodes that agree on the
// owners give the same text.
std::string summary(const redlock::Reply& slots) {
  std::vector<std::string> ranges;
  for (const auto& range : slots.elements()) {
    const auto& e = range.elements();
    if (e.size() < 3) continue;
    ranges.push_back(std::to_string(e[0].integer()) + "-" + std::to_string(e[1].integer()) + "@" +
                     std::to_string(e[2].elements().at(1).integer()));
  }
  std::sort(ranges.begin(), ranges.end());
  std::string out;
  for (const auto& r : ranges) out += r + " ";
  return out;
}

}  // namespace

RedisCluster::RedisCluster(int node_timeout_ms, std::size_t replicas)
    : group_(
          std::make_unique<ServerGroup>(kMasters * (1 + replicas), node_options(node_timeout_ms))) {
  for (std::size_t i = 0; i < group_->size(); ++i) nodes_.push_back(&(*group_)[i]);
  std::string command = redis_cli() + " --cluster create";
  for (auto* n : nodes_) command += " 127.0.0.1:" + std::to_string(n->port());
  command += " --cluster-replicas " + std::to_string(replicas) + " --cluster-yes";
  std::string output;
  if (run(command, output) != 0) {
    throw std::runtime_error("redis_cluster: " + command + " failed:\n" + output);
  }
  await_ok();
  // Every replica must know its master before a test may fail one over.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (std::size_t m : masters()) {
    if (replicas == 0) break;
    while (node(m).raw({"INFO", "replication"}).str().find("state=online") == std::string::npos) {
      if (Clock::now() > deadline) throw std::runtime_error("redis_cluster: replicas not in sync");
      std::this_thread::sleep_for(kPoll);
    }
  }
}

std::string RedisCluster::uri() const {
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < nodes_.size(); ++i) all.push_back(i);
  return uri(all);
}

std::string RedisCluster::uri(const std::vector<std::size_t>& seeds) const {
  std::string out = "redis-cluster://";
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    out += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(node(seeds[i]).port());
  }
  return out;
}

redlock::Endpoint RedisCluster::endpoint() const {
  redlock::Endpoint e;
  for (const auto* n : nodes_) {
    redlock::Endpoint seed = n->plain_endpoint();
    seed.username.clear();
    seed.password.clear();
    e.cluster.seeds.push_back(seed);
  }
  return e;
}

std::string RedisCluster::id(std::size_t i) const { return node(i).raw({"CLUSTER", "MYID"}).str(); }

std::size_t RedisCluster::first_running() const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->running()) return i;
  }
  throw std::runtime_error("redis_cluster: no node is running");
}

std::size_t RedisCluster::index_of_port(int port) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->port() == port) return i;
  }
  throw std::runtime_error("redis_cluster: unknown port " + std::to_string(port));
}

std::vector<std::size_t> RedisCluster::masters() const {
  std::map<long long, std::size_t> by_start;
  const redlock::Reply slots = node(first_running()).raw({"CLUSTER", "SLOTS"});
  for (const auto& range : slots.elements()) {
    const auto& e = range.elements();
    by_start[e.at(0).integer()] =
        index_of_port(static_cast<int>(e.at(2).elements().at(1).integer()));
  }
  std::vector<std::size_t> out;
  for (const auto& [start, index] : by_start) {
    if (std::find(out.begin(), out.end(), index) == out.end()) out.push_back(index);
  }
  return out;
}

std::size_t RedisCluster::owner(std::uint16_t slot) const {
  const redlock::Reply slots = node(first_running()).raw({"CLUSTER", "SLOTS"});
  for (const auto& range : slots.elements()) {
    const auto& e = range.elements();
    if (e.at(0).integer() <= slot && slot <= e.at(1).integer()) {
      return index_of_port(static_cast<int>(e.at(2).elements().at(1).integer()));
    }
  }
  throw std::runtime_error("redis_cluster: nobody owns slot " + std::to_string(slot));
}

std::uint16_t RedisCluster::keyslot(const std::string& k) const {
  return static_cast<std::uint16_t>(node(first_running()).raw({"CLUSTER", "KEYSLOT", k}).integer());
}

std::string RedisCluster::key_on(std::size_t master, const std::string& base) const {
  for (int n = 0; n < 10000; ++n) {
    std::string k = key(base + std::to_string(n));
    if (owner(keyslot(k)) == master) return k;
  }
  throw std::runtime_error("redis_cluster: no key found for that master");
}

void RedisCluster::begin_migration(std::uint16_t slot, std::size_t from, std::size_t to) {
  const std::string s = std::to_string(slot);
  node(to).raw({"CLUSTER", "SETSLOT", s, "IMPORTING", id(from)});
  node(from).raw({"CLUSTER", "SETSLOT", s, "MIGRATING", id(to)});
}

void RedisCluster::move_keys(std::uint16_t slot, std::size_t from, std::size_t to) {
  const std::string s = std::to_string(slot);
  for (;;) {
    const auto keys = node(from).raw({"CLUSTER", "GETKEYSINSLOT", s, "100"}).elements();
    if (keys.empty()) return;
    std::vector<std::string> migrate = {
        "MIGRATE", "127.0.0.1", std::to_string(node(to).port()), "", "0", "5000", "KEYS"};
    for (const auto& k : keys) migrate.push_back(k.str());
    const auto reply = node(from).raw(migrate, std::chrono::milliseconds(6000));
    if (reply.type() == redlock::Reply::Type::error) {
      throw std::runtime_error("redis_cluster: MIGRATE failed: " + reply.str());
    }
  }
}

void RedisCluster::finish_migration(std::uint16_t slot, std::size_t to) {
  const std::string s = std::to_string(slot);
  const std::string target = id(to);
  node(to).raw({"CLUSTER", "SETSLOT", s, "NODE", target});
  for (std::size_t m : masters()) {
    if (m != to) node(m).raw({"CLUSTER", "SETSLOT", s, "NODE", target});
  }
}

void RedisCluster::migrate_slot(std::uint16_t slot, std::size_t to) {
  const std::size_t from = owner(slot);
  if (from == to) return;
  begin_migration(slot, from, to);
  move_keys(slot, from, to);
  finish_migration(slot, to);
  await_ok();
}

std::size_t RedisCluster::replica_of(std::size_t master) const {
  const std::string master_id = id(master);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (i == master || !nodes_[i]->running()) continue;
    const auto role = nodes_[i]->raw({"ROLE"}).elements();
    if (!role.empty() && role[0].str() == "slave" && role.at(2).integer() == node(master).port()) {
      return i;
    }
  }
  throw std::runtime_error("redis_cluster: master " + master_id + " has no replica");
}

void RedisCluster::failover(std::size_t replica, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  // A replica that has just (re)started must finish its sync first, or it refuses to take over.
  while (node(replica).raw({"INFO", "replication"}).str().find("master_link_status:up") ==
         std::string::npos) {
    if (Clock::now() > deadline) throw std::runtime_error("redis_cluster: replica not in sync");
    std::this_thread::sleep_for(kPoll);
  }
  // Redis gives a manual failover 5 s (CLUSTER_MF_TIMEOUT) to catch up with the paused master
  // and win the masters' votes, then drops it silently ("Manual failover timed out" in its log).
  // On a busy machine that happens, so an attempt that has not promoted the replica after
  // kAttempt is asked for again, until `limit`.
  constexpr std::chrono::milliseconds kAttempt{6000};
  int attempts = 0;
  for (;;) {
    const auto reply = node(replica).raw({"CLUSTER", "FAILOVER"});
    ++attempts;
    if (reply.type() == redlock::Reply::Type::error) {
      throw std::runtime_error("redis_cluster: CLUSTER FAILOVER refused: " + reply.str());
    }
    const auto attempt_end = std::min(deadline, Clock::now() + kAttempt);
    while (Clock::now() < attempt_end &&
           node(replica).raw({"ROLE"}).elements().at(0).str() != "master") {
      std::this_thread::sleep_for(kPoll);
    }
    if (node(replica).raw({"ROLE"}).elements().at(0).str() == "master") break;
    if (Clock::now() >= deadline) {
      throw std::runtime_error("redis_cluster: failover timed out after " +
                               std::to_string(attempts) + " CLUSTER FAILOVER attempts; " +
                               node(replica).raw({"INFO", "replication"}).str() +
                               "\nthe replica's log ends:\n" + log_tail(node(replica)));
    }
  }
  await_ok(std::chrono::duration_cast<std::chrono::milliseconds>(
      std::max(deadline - Clock::now(), Clock::duration(std::chrono::seconds(5)))));
}

void RedisCluster::await_ok(std::chrono::milliseconds limit) const {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    bool ok = true;
    std::string first;
    for (const auto* n : nodes_) {
      if (!n->running()) continue;
      try {
        if (n->raw({"CLUSTER", "INFO"}).str().find("cluster_state:ok") == std::string::npos) {
          ok = false;
          break;
        }
        const std::string s = summary(n->raw({"CLUSTER", "SLOTS"}));
        if (first.empty()) first = s;
        ok = ok && s == first && s.find("16383@") != std::string::npos;
      } catch (const std::exception&) {
        ok = false;  // a node still starting
      }
    }
    if (ok) return;
    if (Clock::now() > deadline) throw std::runtime_error("redis_cluster: cluster not ok in time");
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace redlock::test
