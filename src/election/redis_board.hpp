// src/election/redis_board.hpp: the leader board of an Election on Redis (one Client, any
// topology, or a quorum of instances), over the lock engine's lease (see redis_board.cpp).
#ifndef REDLOCK_SRC_ELECTION_REDIS_BOARD_HPP
#define REDLOCK_SRC_ELECTION_REDIS_BOARD_HPP

#include <atomic>
#include <memory>
#include <string>

#include "election/election_core.hpp"

namespace redlock {
namespace detail {

class LeaseEngine;

class RedisBoard final : public LeaderBoard {
 public:
  // The board of the election whose lease is `engine`, on the engine's nodes.
  explicit RedisBoard(std::shared_ptr<LeaseEngine> engine);

  // One script on every node at once; true once a quorum confirmed (a slower minority is cut by
  // the executor's grace, as in a Redlock attempt). Throws when fewer than a quorum answered.
  bool claim(const std::string& token, std::uint64_t fence, const std::string& id) override;
  // One script on every node at once; the leader a quorum names, done as soon as that is
  // certain either way. Throws when fewer than a quorum answered.
  Sighting read(Look look) override;
  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline) override;

 private:
  Sighting read_with(Look look);  // Look::once: MGET; Look::watch: the script

  std::shared_ptr<LeaseEngine> engine_;
  std::atomic<bool> mget_refused_{false};  // the server answered NOPERM to MGET
  std::string record_;                     // helper_key(lock key, ":id")
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_ELECTION_REDIS_BOARD_HPP
