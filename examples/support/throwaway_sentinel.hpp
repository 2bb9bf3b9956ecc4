// examples/support/throwaway_sentinel.hpp: a throwaway Sentinel set for the demo: a master, two
// replicas and three sentinels, all ThrowawayServers on free loopback ports, with
// down-after-milliseconds 500 and failover-timeout 2000 (a failover takes a few seconds).
//
//   example::ThrowawaySentinel set;
//   redlock::Client client(set.uri());                 // redis-sentinel://...#demo
//   set.failover();                                    // SENTINEL FAILOVER
//   set.data(set.master_index()).kill9();
#ifndef REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_SENTINEL_HPP
#define REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_SENTINEL_HPP

#include <cstddef>  // std::size_t
#include <memory>   // std::unique_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include "throwaway_servers.hpp"

namespace example {

class ThrowawaySentinel {
 public:
  // Starts everything and waits (up to about 20 s) until the sentinels know the replicas and
  // each other. Throws std::runtime_error naming what did not come up.
  ThrowawaySentinel();
  // Stops every server and removes the sentinels' config directory. Never throws.
  ~ThrowawaySentinel();
  ThrowawaySentinel(const ThrowawaySentinel&) = delete;
  ThrowawaySentinel& operator=(const ThrowawaySentinel&) = delete;

  // The service's name ("demo") and the URI of the whole set.
  static constexpr const char* kService = "demo";
  std::string uri() const;
  // Data node i (0: the first master, 1-2: the replicas).
  ThrowawayServer& data(std::size_t i) { return *data_.at(i); }
  std::size_t data_count() const noexcept { return data_.size(); }
  // The data node the sentinels report as the master (the first that answers). Throws
  // std::runtime_error if none does.
  std::size_t master_index() const;
  // SENTINEL FAILOVER; returns false with the sentinel's answer in `why` if it refused.
  bool failover(std::string& why);

 private:
  std::string dir_;  // the sentinels' config files
  std::vector<std::unique_ptr<ThrowawayServer>> data_;
  std::vector<std::unique_ptr<ThrowawayServer>> sentinels_;
};

}  // namespace example

#endif  // REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_SENTINEL_HPP
