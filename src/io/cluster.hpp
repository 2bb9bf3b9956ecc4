// src/io/cluster.hpp: reaching a Redis Cluster. A `ClusterRouter` keeps the slot map (from
// CLUSTER SLOTS, asked of the seeds and then the known masters in turn) and one pool (a
// ClientImpl) per master; `execute_routed` is how the executor runs batches whose node is a
// cluster: each command goes to the master that owns its key's slot, and MOVED, ASK and TRYAGAIN
// replies are followed (a bounded number of times) before the caller sees any reply.
//
//   auto router = shared_router(endpoint);          // one per process for each cluster + settings
//   ClientImpl* m = router->owner(key_slot(key));   // refreshes a missing map
//   router->moved(slot, "127.0.0.1", 7002);         // a MOVED reply: the map is refreshed once
//
// Thread-safe. Lock order: the router's refresh mutex, then its state mutex; a refresh runs
// commands on the nodes' pools with neither held across anything but that (the refresh mutex is,
// to coalesce callers: one CLUSTER SLOTS for a burst of MOVED replies).
#ifndef REDLOCK_SRC_IO_CLUSTER_HPP
#define REDLOCK_SRC_IO_CLUSTER_HPP

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <redlock/endpoint.hpp>

#include "io/command.hpp"

namespace redlock {
namespace detail {

class ClientImpl;
struct NodeBatch;
struct EarlyFinish;
enum class SkipPolicy : unsigned char;

class ClusterRouter {
 public:
  // `endpoint.cluster.seeds` must not be empty. Connects nothing yet.
  explicit ClusterRouter(const Endpoint& endpoint);
  ClusterRouter(const ClusterRouter&) = delete;
  ClusterRouter& operator=(const ClusterRouter&) = delete;

  // The pool of the master that owns `slot`, after a refresh of the map if it has none or was
  // marked stale. Throws ConnectionError (no seed or known node answered CLUSTER SLOTS, or no
  // master owns the slot); the message names what was tried.
  ClientImpl* owner(std::uint16_t slot);
  // The owner of `slot` as the map names it now, without a refresh: null when there is no map
  // or no owner. Never throws.
  ClientImpl* known_owner(std::uint16_t slot) const noexcept;
  // Some master (for commands without a key). Throws as owner().
  ClientImpl* any_master();
  // The pool for host:port (a MOVED or ASK target), created on first use. Never throws but
  // std::bad_alloc. Pools live as long as the router (the pointers above stay valid).
  ClientImpl* node(const std::string& host, int port);
  // A MOVED reply: `slot` is at host:port now; the whole map is refreshed by the next lookup
  // (once for a burst: one refresh clears the mark). Never throws but std::bad_alloc.
  void moved(std::uint16_t slot, const std::string& host, int port);
  // Marks the map stale (a master failed to answer: a failover may have moved its slots).
  void stale() noexcept { stale_.store(true, std::memory_order_release); }

  // "cluster:<seed>,..." for messages.
  const std::string& address() const noexcept { return address_; }
  // Test hook: how many times the map was fetched.
  std::uint64_t refreshes() const noexcept { return refreshes_.load(std::memory_order_relaxed); }

 private:
  struct Range {
    std::uint16_t first{0};
    std::uint16_t last{0};
    std::string host;
    int port{0};
  };
  void refresh();
  bool ask(ClientImpl& node, std::vector<Range>& ranges, std::string& log);
  void adopt(const std::vector<Range>& ranges, ClientImpl* from);
  ClientImpl* node_locked(const std::string& host, int port);
  std::vector<ClientImpl*> candidates() const;

  Endpoint template_;  // credentials, TLS, timeouts; host and port set per node
  std::string address_;
  std::vector<ClientImpl*> seeds_;
  std::mutex refresh_mutex_;  // one refresh at a time

  mutable std::mutex mutex_;                                  // guards the fields below
  std::map<std::string, std::shared_ptr<ClientImpl>> nodes_;  // by "host:port"; never shrinks
  std::vector<ClientImpl*> owners_;  // slot -> master (null: none known); empty: no map yet
  std::vector<ClientImpl*> masters_;
  ClientImpl* answered_{nullptr};  // the node that gave the current map: asked first next time

  std::atomic<bool> stale_{false};
  std::atomic<std::uint64_t> refreshes_{0};
};

// The process's router for `endpoint`'s cluster and settings: found, or created.
std::shared_ptr<ClusterRouter> shared_router(const Endpoint& endpoint);

// The slot of a command's key: argv[1], or for EVAL/EVALSHA the first of its KEYS; none for the
// commands without a key (PING, WAIT, INFO, ...) and for scripts without keys.
std::optional<std::uint16_t> command_slot(const CommandView& command) noexcept;

// execute() for batches of which at least one goes to a cluster (see executor.hpp; the same
// contract). Never throws but std::bad_alloc.
void execute_routed(NodeBatch* batches, std::size_t count, const EarlyFinish* early,
                    SkipPolicy policy);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_CLUSTER_HPP
