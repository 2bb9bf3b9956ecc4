// src/election/redis_board.hpp: the leader board of an Election on Redis (one Client, any
// topology, or a quorum of instances), over the lock engine's lease (see redis_board.cpp).
#ifndef REDLOCK_SRC_ELECTION_REDIS_BOARD_HPP
#define REDLOCK_SRC_ELECTION_REDIS_BOARD_HPP

#include <memory>
#include <string>
#include <vector>

#include <redlock/client.hpp>

#include "election/election_core.hpp"

namespace redlock {
namespace detail {

class LeaseEngine;

class RedisBoard final : public LeaderBoard {
 public:
  // `engine` is the election's lease on `nodes` (the same instances, in the same order).
  RedisBoard(std::vector<Client> nodes, std::shared_ptr<LeaseEngine> engine);

  bool claim(const std::string& token, std::uint64_t fence, const std::string& id) override;
  Sighting read(Look look) override;
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline) override;

 private:
  template <class Each>
  void on_nodes(Each&& each) const;

  std::vector<Client> nodes_;
  std::shared_ptr<LeaseEngine> engine_;
  std::string record_;  // helper_key(lock key, ":id")
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_ELECTION_REDIS_BOARD_HPP
