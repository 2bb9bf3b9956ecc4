// bench/primitives.hpp: the parts of section 14 (primitives against etcd and Kazoo), each in a
// file of its own; section_primitives() (primitives.cpp) runs them in order.
#ifndef REDLOCK_BENCH_PRIMITIVES_HPP
#define REDLOCK_BENCH_PRIMITIVES_HPP

#include <string>  // std::string

#include "bench.hpp"   // Config
#include "common.hpp"  // Json, Goals

namespace bench {

// 14a (primitives_election.cpp): Election's hand-over next to `etcdctl elect`'s and
// `redlock-run --elect`'s, crash failover, leader() against a raw GET, on `server`.
Json election_part(const Config& config, const redlock::test::RedisServer& server, Goals& goals);

// The hidden leader mode of 14a's crash failover: `redlock-bench --elect-leader URI NAME TTL_MS`
// campaigns, prints "leading" on stdout, then sleeps until killed. Returns 1 on an error.
int elect_leader_main(int argc, char** argv);

// "skipped: <why>" as a table cell, and the JSON beside it.
inline std::string skipped(const std::string& why) { return "skipped: " + why; }

}  // namespace bench

#endif  // REDLOCK_BENCH_PRIMITIVES_HPP
