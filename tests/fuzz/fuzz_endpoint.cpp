// libFuzzer target: Endpoint::parse on arbitrary bytes. It may only return an Endpoint or throw
// std::invalid_argument; whatever it returns must print (to_string) and re-parse to the same
// endpoint with the password masked as "***".
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include <redlock/endpoint.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view uri(reinterpret_cast<const char*>(data), size);
  redlock::Endpoint ep;
  try {
    ep = redlock::Endpoint::parse(uri);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  (void)ep.address();
  // to_string() round-trips, with a password (if any) printed as "***".
  const redlock::Endpoint again = redlock::Endpoint::parse(ep.to_string());
  if (again.host != ep.host || again.port != ep.port || again.database != ep.database ||
      again.username != ep.username || again.unix_socket != ep.unix_socket ||
      again.connect_timeout != ep.connect_timeout || again.command_timeout != ep.command_timeout ||
      again.password != (ep.password.empty() ? "" : "***")) {
    std::abort();
  }
  return 0;
}
