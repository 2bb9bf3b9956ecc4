// bench/pipelined.hpp: the floor of section 13 (async): a raw hiredis client that keeps C lock
// cycles in flight on one thread, pipelined on one connection per node. A cycle is the commands
// of RawLock (raw.hpp): SET key token NX PX ttl GET, then, once every node answered, EVALSHA of
// the library's release script; once every node answered that, the slot starts its next cycle
// with a new token. The thread writes what it appended, poll()s the sockets and reads whatever
// replies arrived (hiredis's reader), so every slot's next command goes out as soon as its reply
// is in: the most a single-threaded client can keep in flight, with nothing around it.
//
//   bench::PipelinedFloor floor(endpoints, keys);       // one node: a Lock; five: a Redlock
//   std::atomic<bool> stop{false};
//   std::atomic<std::uint64_t> cycles{0};
//   std::thread t([&] { floor.run(stop, cycles); });  // cycles counts as they complete
#ifndef REDLOCK_BENCH_PIPELINED_HPP
#define REDLOCK_BENCH_PIPELINED_HPP

#include <atomic>   // std::atomic
#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint64_t
#include <deque>    // std::deque
#include <string>   // std::string
#include <vector>   // std::vector

#include <redlock/endpoint.hpp>  // Endpoint

#include "raw.hpp"  // RawContext

namespace bench {

class PipelinedFloor {
 public:
  // Connects one context per endpoint and loads the scripts on each. One cycle slot per key (the
  // keys must be distinct: the floor never waits). Throws std::runtime_error.
  PipelinedFloor(const std::vector<redlock::Endpoint>& nodes, std::vector<std::string> keys);

  // Runs every slot's cycles until `stop` is set, adding each completed cycle to `cycles` (read
  // by another thread); then lets the cycles in flight finish (a granted key is released), and
  // returns. Throws std::runtime_error on a transport error, an error reply, a refused SET or a
  // release that found another token (the keys are the floor's own: something else holds them).
  void run(const std::atomic<bool>& stop, std::atomic<std::uint64_t>& cycles);

 private:
  struct Slot {
    std::string key;
    std::string channel;
    std::string token;
    bool releasing{false};
    bool idle{true};
    std::size_t answers{0};
    std::size_t granted{0};
  };
  struct Node {
    RawContext context;
    std::deque<std::size_t> waiting;  // the slot of every reply due, in the order sent
    bool unsent{false};               // commands appended and not yet written
  };

  void send(std::size_t slot);
  void flush();
  void read(Node& node, const std::atomic<bool>& stop, std::atomic<std::uint64_t>& cycles);
  void answered(std::size_t slot, bool yes, const std::atomic<bool>& stop,
                std::atomic<std::uint64_t>& cycles);

  std::vector<Node> nodes_;
  std::vector<Slot> slots_;
  std::string ttl_;
  std::size_t busy_{0};  // slots with a command in flight
};

}  // namespace bench

#endif  // REDLOCK_BENCH_PIPELINED_HPP
