// src/backends/zookeeper/zk_names.hpp: the lock's znode names (Curator's protected mode):
// `_c_<token>-lock-<sequence>` (a ReadWriteLock's readers: `-read-`), where the token (40 hex
// digits, fresh per waiter) lets a client find its own znode again when the reply to its create was
// lost, and the 10-digit sequence the server appends orders the waiters.
#ifndef REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_NAMES_HPP
#define REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_NAMES_HPP

#include <algorithm>
#include <string>
#include <vector>

namespace redlock {
namespace detail {

class ZkConn;

constexpr std::size_t kZkSequenceDigits = 10;

inline std::string zk_node_prefix(const std::string& token) { return "_c_" + token + "-lock-"; }
// A ReadWriteLock's reader: `_c_<token>-read-<sequence>` (a writer's is a lock znode).
inline std::string zk_read_prefix(const std::string& token) { return "_c_" + token + "-read-"; }
// What every znode made with `token` starts with, of either kind (a token is 40 hex digits).
inline std::string zk_token_prefix(const std::string& token) { return "_c_" + token + "-"; }

// True if the lock znode `name` is a reader's.
inline bool zk_is_read_node(const std::string& name) {
  static const std::string kRead = "-read-";
  return name.size() > kZkSequenceDigits + kRead.size() &&
         name.compare(name.size() - kZkSequenceDigits - kRead.size(), kRead.size(), kRead) == 0;
}

// True if `name` is a lock znode (ends with the server's sequence).
inline bool zk_is_lock_node(const std::string& name) {
  if (name.size() <= kZkSequenceDigits || name.compare(0, 3, "_c_") != 0) return false;
  return std::all_of(name.end() - kZkSequenceDigits, name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// The lock znodes among `children`, in sequence order (the holder first).
inline std::vector<std::string> zk_queue_of(const std::vector<std::string>& children) {
  std::vector<std::string> queue;
  for (const auto& name : children) {
    if (zk_is_lock_node(name)) queue.push_back(name);
  }
  std::sort(queue.begin(), queue.end(), [](const std::string& a, const std::string& b) {
    return a.compare(a.size() - kZkSequenceDigits, kZkSequenceDigits, b,
                     b.size() - kZkSequenceDigits, kZkSequenceDigits) < 0;
  });
  return queue;
}

// The index in `queue` of the znode made with `token`, or queue.size().
inline std::size_t zk_find_token(const std::vector<std::string>& queue, const std::string& token) {
  const std::string prefix = zk_token_prefix(token);
  for (std::size_t i = 0; i < queue.size(); ++i) {
    if (queue[i].compare(0, prefix.size(), prefix) == 0) return i;
  }
  return queue.size();
}

// Deletes the znodes under `parent` made with `token` (protected mode). Returns how many were
// deleted. Throws ConnectionError / ServerError (zk_session.hpp).
std::size_t delete_by_token(ZkConn& conn, const std::string& parent, const std::string& token);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_BACKENDS_ZOOKEEPER_ZK_NAMES_HPP
