// examples/support/throwaway_cluster.cpp: see throwaway_cluster.hpp.
#include "throwaway_cluster.hpp"

#include <stdio.h>   // popen, pclose
#include <stdlib.h>  // mkdtemp

#include <algorithm>   // std::find
#include <chrono>      // std::chrono
#include <filesystem>  // std::filesystem::remove_all
#include <map>         // std::map
#include <stdexcept>   // std::runtime_error
#include <thread>      // std::this_thread::sleep_for

#include <redlock/client.hpp>
#include <redlock/errors.hpp>

namespace example {

namespace {

redlock::Reply ask(const ThrowawayServer& server, const std::vector<std::string_view>& argv) {
  return redlock::Client(server.endpoint()).command(argv);
}

// Polls `ready` every 50 ms for up to 30 s; throws naming `what` if it never is.
template <class Ready>
void await(const char* what, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    try {
      if (ready()) return;
    } catch (const redlock::Error&) {  // not up yet
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error(std::string("the cluster did not come up: ") + what);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void create(const std::vector<std::unique_ptr<ThrowawayServer>>& nodes) {
  std::string command = "redis-cli --cluster create";
  for (const auto& n : nodes) command += " 127.0.0.1:" + std::to_string(n->port());
  command += " --cluster-replicas 1 --cluster-yes 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run redis-cli");
  std::string output;
  char buffer[1024];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  if (::pclose(pipe) != 0)
    throw std::runtime_error("redis-cli --cluster create failed:\n" + output);
}

}  // namespace

ThrowawayCluster::ThrowawayCluster() {
  std::string pattern = (std::filesystem::temp_directory_path() / "redlock-demo-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = pattern;
  try {
    for (int i = 0; i < 6; ++i) {
      const std::vector<std::string> args = {
          "--cluster-enabled", "yes", "--cluster-config-file",
          dir_ + "/nodes-" + std::to_string(i) + ".conf", "--cluster-node-timeout", "1000",
          "--repl-diskless-sync-delay", "0",
          // A file of its own: someone else's dump.rdb in the shared --dir would be loaded, and
          // a node with keys cannot join a new cluster.
          "--dbfilename",
          "redlock-demo-" + dir_.substr(dir_.rfind('-') + 1) + "-" + std::to_string(i) + ".rdb"};
      nodes_.push_back(std::make_unique<ThrowawayServer>(Tls::off, args, ""));
    }
    create(nodes_);
    await("cluster_state:ok everywhere", [&] {
      for (const auto& n : nodes_) {
        if (ask(*n, {"CLUSTER", "INFO"}).str().find("cluster_state:ok") == std::string::npos) {
          return false;
        }
      }
      return masters().size() == 3;
    });
    await("replicas in sync", [&] {
      for (std::size_t m : masters()) {
        if (ask(*nodes_[m], {"INFO", "replication"}).str().find("state=online") ==
            std::string::npos) {
          return false;
        }
      }
      return true;
    });
  } catch (...) {
    nodes_.clear();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw;
  }
}

ThrowawayCluster::~ThrowawayCluster() {
  nodes_.clear();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string ThrowawayCluster::uri() const {
  std::string out = "redis-cluster://";
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    out += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(nodes_[i]->port());
  }
  return out;
}

std::uint16_t ThrowawayCluster::keyslot(const std::string& key) const {
  return static_cast<std::uint16_t>(ask(*nodes_[0], {"CLUSTER", "KEYSLOT", key}).integer());
}

std::size_t ThrowawayCluster::owner(std::uint16_t slot) const {
  for (const auto& n : nodes_) {
    try {
      const redlock::Reply slots = ask(*n, {"CLUSTER", "SLOTS"});
      for (const auto& range : slots.elements()) {
        const auto& e = range.elements();
        if (e.at(0).integer() > slot || slot > e.at(1).integer()) continue;
        const auto port = e.at(2).elements().at(1).integer();
        for (std::size_t i = 0; i < nodes_.size(); ++i) {
          if (nodes_[i]->port() == port) return i;
        }
      }
    } catch (const redlock::Error&) {  // this node is down: ask the next
    }
  }
  throw std::runtime_error("no node reports an owner of the slot");
}

std::vector<std::size_t> ThrowawayCluster::masters() const {
  std::map<long long, std::size_t> by_start;
  const redlock::Reply slots = ask(*nodes_[0], {"CLUSTER", "SLOTS"});
  for (const auto& range : slots.elements()) {
    by_start[range.elements().at(0).integer()] =
        owner(static_cast<std::uint16_t>(range.elements().at(0).integer()));
  }
  std::vector<std::size_t> out;
  for (const auto& [start, index] : by_start) {
    if (std::find(out.begin(), out.end(), index) == out.end()) out.push_back(index);
  }
  return out;
}

std::size_t ThrowawayCluster::replica_of(std::size_t master) const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (i == master) continue;
    try {
      const redlock::Reply role = ask(*nodes_[i], {"ROLE"});
      if (role.elements().at(0).str() == "slave" &&
          role.elements().at(2).integer() == nodes_[master]->port()) {
        return i;
      }
    } catch (const redlock::Error&) {  // down
    }
  }
  throw std::runtime_error("the master has no replica");
}

void ThrowawayCluster::migrate_slot(std::uint16_t slot, std::size_t to) {
  const std::size_t from = owner(slot);
  if (from == to) return;
  const std::string s = std::to_string(slot);
  const std::string from_id = ask(*nodes_[from], {"CLUSTER", "MYID"}).str();
  const std::string to_id = ask(*nodes_[to], {"CLUSTER", "MYID"}).str();
  ask(*nodes_[to], {"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
  ask(*nodes_[from], {"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
  for (;;) {
    const redlock::Reply keys = ask(*nodes_[from], {"CLUSTER", "GETKEYSINSLOT", s, "100"});
    if (keys.elements().empty()) break;
    const std::string port = std::to_string(nodes_[to]->port());
    std::vector<std::string_view> migrate = {"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"};
    for (const auto& k : keys.elements()) migrate.push_back(k.str());
    ask(*nodes_[from], migrate);
  }
  for (std::size_t m : masters()) ask(*nodes_[m], {"CLUSTER", "SETSLOT", s, "NODE", to_id});
  ask(*nodes_[to], {"CLUSTER", "SETSLOT", s, "NODE", to_id});
}

bool ThrowawayCluster::failover(std::size_t replica, std::string& why) {
  try {
    ask(*nodes_[replica], {"CLUSTER", "FAILOVER"});
    return true;
  } catch (const redlock::ServerError& e) {
    why = e.server_message();
  } catch (const redlock::Error& e) {
    why = e.what();
  }
  return false;
}

}  // namespace example
