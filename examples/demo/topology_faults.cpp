// examples/demo/topology_faults.cpp: see topology_faults.hpp.
#include "topology_faults.hpp"

#include <cstdio>  // std::snprintf

namespace demo {

std::string TopologyFaults::at_seconds(std::int64_t ns) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ns) / 1e9);
  return text;
}

void TopologyFaults::event(const std::string& what) {
  const std::int64_t at = monotonic_ns() - run_.start_ns;
  run_.faults.push_back(FaultEvent{static_cast<double>(at) / 1e9, what});
  if (print_) print_("  t=" + at_seconds(at) + "  " + what);
}

}  // namespace demo
