// tests/support/redis_cluster.hpp: a real Redis Cluster on loopback: six redis-server processes
// (cluster-enabled yes), joined by `redis-cli --cluster create ... --cluster-replicas 1` into
// three masters with one replica each. Every node is a RedisServer, so pause/kill9/restart work
// on any of them, and all of them are stopped when the cluster object goes (also on failure).
//
//   redlock::test::RedisCluster cluster;               // waits for cluster_state:ok everywhere
//   redlock::Client client(cluster.uri());             // redis-cluster://127.0.0.1:p1,...
//   auto k = cluster.key_on(cluster.masters()[1], "lock");  // a key the second master owns
//   cluster.migrate_slot(slot_of(k), cluster.masters()[2]);
//
// Thread-safety: as RedisServer (the const probes may run on any thread).
#ifndef REDLOCK_TESTS_SUPPORT_REDIS_CLUSTER_HPP
#define REDLOCK_TESTS_SUPPORT_REDIS_CLUSTER_HPP

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <redlock/endpoint.hpp>

#include "support/redis_server.hpp"

namespace redlock::test {

class RedisCluster {
 public:
  // Starts 3 masters and `replicas` replicas of each (cluster-node-timeout `node_timeout_ms`),
  // creates the cluster and waits (at most 30 s) until every node reports cluster_state:ok and
  // agrees on the slot owners. Throws std::runtime_error with redis-cli's output if it cannot.
  explicit RedisCluster(int node_timeout_ms = 1000, std::size_t replicas = 1);

  RedisServer& node(std::size_t i) { return *nodes_.at(i); }
  const RedisServer& node(std::size_t i) const { return *nodes_.at(i); }
  std::size_t size() const { return nodes_.size(); }

  // redis-cluster://127.0.0.1:<port>,... naming every node as a seed (or only `seeds`).
  std::string uri() const;
  std::string uri(const std::vector<std::size_t>& seeds) const;
  // The structured form of uri(): Endpoint::cluster.seeds, 200 ms timeouts.
  redlock::Endpoint endpoint() const;

  // The node's cluster id (CLUSTER MYID).
  std::string id(std::size_t i) const;
  // Indices of the current masters that own slots, ordered by their lowest slot.
  std::vector<std::size_t> masters() const;
  // The index of the master that owns `slot`, as node `asked` (default: the first running node)
  // reports it in CLUSTER SLOTS. Throws std::runtime_error if nobody owns it.
  std::size_t owner(std::uint16_t slot) const;
  // CLUSTER KEYSLOT as the server computes it.
  std::uint16_t keyslot(const std::string& key) const;
  // A test key (key(base + n)) whose slot `master` owns.
  std::string key_on(std::size_t master, const std::string& base) const;

  // The three steps of moving one slot to the master `to` (from its current owner), as
  // redis-cli --cluster reshard does them: begin_migration (IMPORTING on `to`, MIGRATING on the
  // owner), move_keys (MIGRATE of every key in the slot), finish_migration (SETSLOT NODE on
  // every master). migrate_slot does all three.
  void begin_migration(std::uint16_t slot, std::size_t from, std::size_t to);
  void move_keys(std::uint16_t slot, std::size_t from, std::size_t to);
  void finish_migration(std::uint16_t slot, std::size_t to);
  void migrate_slot(std::uint16_t slot, std::size_t to);

  // CLUSTER FAILOVER on replica `replica`, asked again every 6 s while Redis drops the attempt
  // (its manual-failover limit is 5 s); returns once the replica reports itself a master and
  // every running node agrees (at most `limit`, plus 5 s for the agreement). Throws
  // std::runtime_error with the replica's log tail otherwise.
  void failover(std::size_t replica, std::chrono::milliseconds limit = std::chrono::seconds(30));
  // The index of the replica of master `master`. Throws if it has none.
  std::size_t replica_of(std::size_t master) const;
  // Waits until every running node reports cluster_state:ok and they agree on the owner of
  // every slot that `masters()` lists. Throws std::runtime_error after `limit`.
  void await_ok(std::chrono::milliseconds limit = std::chrono::seconds(30)) const;

 private:
  std::size_t first_running() const;
  std::size_t index_of_port(int port) const;

  std::unique_ptr<ServerGroup> group_;
  std::vector<RedisServer*> nodes_;
};

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_SUPPORT_REDIS_CLUSTER_HPP
