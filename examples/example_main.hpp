// examples/example_main.hpp: the main() every single-server example shares, so that each example
// file holds only its lesson. Options: --redis URI (default redis://127.0.0.1:6379),
// --self-test (run against a throwaway redis-server; ctest uses it) and at most one extra
// numeric option named by the example (e.g. --max-renewals N).
#ifndef REDLOCK_EXAMPLES_EXAMPLE_MAIN_HPP
#define REDLOCK_EXAMPLES_EXAMPLE_MAIN_HPP

#include <cstdint>    // std::uint64_t
#include <cstdio>     // std::fprintf
#include <cstdlib>    // std::strtoull
#include <cstring>    // std::strcmp
#include <exception>  // std::exception
#include <memory>     // std::unique_ptr
#include <string>     // std::string

#include <redlock/endpoint.hpp>  // Endpoint

#include "support/throwaway_servers.hpp"  // --self-test only: a throwaway redis-server

namespace example {

// Parses the options, then returns run(endpoint, number): `number` is the value of the option
// named `extra` (nullptr: none), or `extra_default`. Exit status 2 on a usage error, 1 when
// run() or the setup throws (the message goes to stderr).
template <class Run>
int main_with(int argc, char** argv, const char* extra, std::uint64_t extra_default, Run run) {
  std::string uri = "redis://127.0.0.1:6379";
  std::uint64_t number = extra_default;
  bool self_test = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--redis") == 0 && i + 1 < argc) {
      uri = argv[++i];
    } else if (extra != nullptr && std::strcmp(argv[i], extra) == 0 && i + 1 < argc) {
      number = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--self-test") == 0) {
      self_test = true;
    } else {
      std::fprintf(stderr, "usage: %s [--redis URI]%s%s%s [--self-test]\n", argv[0],
                   extra != nullptr ? " [" : "", extra != nullptr ? extra : "",
                   extra != nullptr ? " N]" : "");
      return 2;
    }
  }
  try {
    std::unique_ptr<ThrowawayServer> server;  // lives until main returns
    redlock::Endpoint endpoint;
    if (self_test) {
      server = std::make_unique<ThrowawayServer>();
      endpoint = server->endpoint();
    } else {
      endpoint = redlock::Endpoint::parse(uri);  // throws std::invalid_argument if malformed
    }
    return run(endpoint, number);
  } catch (const std::exception& e) {  // a bad URI, or a throwaway server that would not start
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace example

#endif  // REDLOCK_EXAMPLES_EXAMPLE_MAIN_HPP
