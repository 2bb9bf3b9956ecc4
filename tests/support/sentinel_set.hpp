// tests/support/sentinel_set.hpp: a real Sentinel topology on loopback: one master, replicas
// and sentinels, each a RedisServer (so pause/kill9/restart work on any of them).
//
//   redlock::test::SentinelSet set;              // 1 master, 2 replicas, 3 sentinels
//   redlock::Client client(set.endpoint());      // redis-sentinel://...#mymaster
//   set.failover();                              // SENTINEL FAILOVER, waits for the new master
//   set.data(set.master_index()).kill9();
//
// The constructor returns once every sentinel knows the master, both replicas and the other
// sentinels (so a failover can be agreed). Thread-safety: as RedisServer.
#ifndef REDLOCK_TESTS_SUPPORT_SENTINEL_SET_HPP
#define REDLOCK_TESTS_SUPPORT_SENTINEL_SET_HPP

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <redlock/endpoint.hpp>

#include "support/redis_server.hpp"

namespace redlock::test {

struct SentinelSetOptions {
  std::size_t replicas = 2;
  std::size_t sentinels = 3;
  std::string service = "mymaster";
  // Sentinel's down-after-milliseconds and failover-timeout.
  int down_after_ms = 500;
  int failover_timeout_ms = 2000;
  // Non-empty: requirepass (and masterauth) on the data nodes; the endpoint carries it.
  std::string master_password;
  // appendonly yes + appendfsync always on the data nodes (kill -9 + restart keeps every
  // acknowledged write, as ServerOptions::persistence).
  bool persistence = false;
  // Non-empty: requirepass on the sentinels; the endpoint carries it (sentinel_password).
  std::string sentinel_password;
};

class SentinelSet {
 public:
  // Starts everything and waits (at most 20 s) until the sentinels know the whole topology.
  // Throws std::runtime_error naming what did not come up.
  explicit SentinelSet(SentinelSetOptions options = {});

  // Data node i (0: the first master, then the replicas).
  RedisServer& data(std::size_t i) { return *data_.at(i); }
  std::size_t data_count() const { return data_.size(); }
  RedisServer& sentinel(std::size_t i) { return *sentinels_.at(i); }
  std::size_t sentinel_count() const { return sentinels_.size(); }
  const SentinelSetOptions& options() const { return options_; }

  // The Sentinel endpoint: every sentinel, the service, the passwords. 200 ms timeouts.
  redlock::Endpoint endpoint() const;
  // The same as a redis-sentinel:// URI (passwords included, for Client(uri)).
  std::string uri() const;
  // The plain endpoint of data node i.
  redlock::Endpoint data_endpoint(std::size_t i) const;

  // Which data node the running sentinels report as the master now (the first that answers).
  // Throws std::runtime_error if none answers.
  std::size_t master_index() const;
  // ROLE of data node i ("master", "slave"), or "down" if it does not answer.
  std::string role(std::size_t i) const;
  // Waits until data node i answers ROLE with `role` ("master", "slave"). Throws after `limit`.
  void await_role(std::size_t i, const std::string& role, std::chrono::milliseconds limit) const;
  // Waits until data node `master` reports at least `count` replicas online (synced: a WAIT
  // for them is answered at once). Throws std::runtime_error after `limit`.
  void await_replicas_online(std::size_t master, std::size_t count,
                             std::chrono::milliseconds limit) const;
  // SENTINEL FAILOVER on a running sentinel; returns the new master's index once the sentinels
  // report it and it answers ROLE master (at most `limit`). Throws std::runtime_error otherwise.
  std::size_t failover(std::chrono::milliseconds limit = std::chrono::seconds(20));
  // Sends SENTINEL FAILOVER to the first running sentinel and returns at once. Returns false
  // (and why in `why`) if the sentinel refused (a failover in progress, no good replica, ...).
  bool request_failover(std::string& why);
  // Waits until the sentinels report a master other than `old` that answers ROLE master;
  // returns its index. Throws std::runtime_error after `limit`.
  std::size_t await_new_master(std::size_t old, std::chrono::milliseconds limit);
  // Waits until every running sentinel agrees on a master that answers ROLE master and sees
  // every running replica of it (for a failover to be possible). Throws after `limit`.
  void await_stable(std::chrono::milliseconds limit = std::chrono::seconds(20)) const;

 private:
  redlock::Reply ask_sentinel(std::size_t i, const std::vector<std::string>& argv) const;
  redlock::Reply ask_data(std::size_t i, const std::vector<std::string>& argv) const;
  std::size_t index_of_port(int port) const;

  SentinelSetOptions options_;
  std::vector<std::unique_ptr<RedisServer>> data_;
  std::vector<std::unique_ptr<RedisServer>> sentinels_;
};

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_SUPPORT_SENTINEL_SET_HPP
