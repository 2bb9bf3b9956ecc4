// src/election/zk_election.cpp: redlock::zookeeper::Election (built into the ZooKeeper
// component). The lease is the zookeeper::Lock's queue under `<chroot>/<name>` (ephemeral
// sequential znodes, the lowest leads; the term is its czxid, which grows from each leader to
// the next). The claim writes the candidate's id as the data of its own znode, and counts only
// if the server's stat says our session owns that znode and its czxid is the granted fence
// (Curator's fix for CURATOR-696: a znode of an earlier session, or another's, is no proof).
// leader() lists the queue and reads the lowest znode (two round trips); a znode with no data
// is a grant not yet claimed. An expired session's znode is gone, so its leader is never
// reported. Observers set one-shot watches on the queue and the head's data; any event on the
// session (including a disconnect) wakes them. A leader whose session is disconnected does not
// count itself leading (suspended) until it reconnects, and its lease's validity, counted from
// its last confirmation, runs out before the server can expire the session.
#include <zookeeper/zookeeper.h>

#include <stdexcept>
#include <utility>
#include <vector>

#include <redlock/zookeeper.hpp>

#include "backends/zookeeper/zk_backend.hpp"
#include "backends/zookeeper/zk_names.hpp"
#include "backends/zookeeper/zk_session.hpp"
#include "election/election_core.hpp"
#include "election/settings.hpp"

namespace redlock {
namespace detail {
namespace {

class ZkBoard final : public LeaderBoard {
 public:
  ZkBoard(std::shared_ptr<ZkSession> session, std::shared_ptr<LeaseBackend> lease)
      : session_(std::move(session)),
        lease_(std::move(lease)),
        path_(session_->uri().chroot + "/" + lease_->key()) {}

  bool claim(const std::string& token, std::uint64_t fence, const std::string& id) override {
    const auto conn = session_->conn();
    std::vector<std::string> children;
    zk_children(*conn, path_, &children);
    const std::vector<std::string> queue = zk_queue_of(children);
    if (queue.empty() || zk_find_token(queue, token) != 0) return false;
    const std::string node = path_ + "/" + queue.front();
    struct Stat stat {};
    const int rc =
        zoo_set2(conn->handle(), node.c_str(), id.data(), static_cast<int>(id.size()), -1, &stat);
    if (rc == ZNONODE) return false;
    if (rc != ZOK) throw_zk_error(rc, conn->describe("claim", node));
    const clientid_t* self = zoo_client_id(conn->handle());
    return self && stat.ephemeralOwner == self->client_id &&
           static_cast<std::uint64_t>(stat.czxid) == fence;
  }

  Sighting read(Look look) override {
    const auto conn = session_->conn();
    const int watch = look == Look::watch ? 1 : 0;
    struct String_vector names {};
    int rc = zoo_get_children(conn->handle(), path_.c_str(), watch, &names);
    if (rc == ZNONODE) {
      // Nothing to watch yet: watch for the queue's creation instead.
      if (watch) zk_exists(*conn, path_, true);
      return Sighting{};
    }
    if (rc != ZOK) throw_zk_error(rc, conn->describe("get children of", path_));
    std::vector<std::string> children(names.data, names.data + names.count);
    deallocate_String_vector(&names);
    const std::vector<std::string> queue = zk_queue_of(children);
    if (queue.empty()) return Sighting{};
    return read_head(*conn, path_ + "/" + queue.front(), watch);
  }

  std::unique_ptr<ReleaseWatch> watch(SteadyClock::time_point deadline) override {
    return lease_->watch(deadline, std::string());
  }

  bool suspended() const noexcept override { return !session_->connected(); }
  bool may_suspend() const noexcept override { return true; }

 private:
  // The head znode's data (the claimed id) and czxid; none if unclaimed or gone.
  static Sighting read_head(ZkConn& conn, const std::string& node, int watch) {
    std::vector<char> data(256);
    for (;;) {
      struct Stat stat {};
      int length = static_cast<int>(data.size());
      const int rc = zoo_get(conn.handle(), node.c_str(), watch, data.data(), &length, &stat);
      if (rc == ZNONODE) return Sighting{};  // gone meanwhile: the queue's watch fired
      if (rc != ZOK) throw_zk_error(rc, conn.describe("get", node));
      if (stat.dataLength > static_cast<int>(data.size())) {
        data.resize(static_cast<std::size_t>(stat.dataLength));
        continue;
      }
      Sighting seen;
      if (length > 0) {
        seen.leader = Leader{std::string(data.data(), static_cast<std::size_t>(length)),
                             static_cast<std::uint64_t>(stat.czxid)};
      }
      return seen;
    }
  }

  std::shared_ptr<ZkSession> session_;
  std::shared_ptr<LeaseBackend> lease_;
  std::string path_;  // <chroot>/<name>: the queue
};

std::shared_ptr<ElectionCore> make_zk_election(const std::shared_ptr<ZkSession>& session,
                                               std::string name, std::string id,
                                               ElectionOptions options) {
  check_election_names(name, id);
  LockOptions lock_options = election_lock_options(options);
  auto lease = make_zk_backend(session, name, lock_options);
  options.ttl = lock_options.ttl;  // the session timeout is the lease
  auto board = std::make_shared<ZkBoard>(session, lease);
  return std::make_shared<ElectionCore>(std::move(lease), std::move(lock_options), std::move(board),
                                        std::move(name), std::move(id), std::move(options));
}

}  // namespace
}  // namespace detail

namespace zookeeper {

Election::Election(Session& session, std::string name, std::string id, ElectionOptions options)
    : redlock::Election(detail::make_zk_election(session.impl_, std::move(name), std::move(id),
                                                 std::move(options))) {}

}  // namespace zookeeper
}  // namespace redlock
