// src/io/tls_off.cpp: the TLS entry points of a library built with -DREDLOCK_WITH_TLS=OFF.
#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/tls.hpp"

namespace redlock {
namespace detail {

std::unique_ptr<SecureLayer> make_secure_layer(const Endpoint& endpoint,
                                               const std::string& address) {
  if (!endpoint.tls.enabled) return nullptr;
  throw ConnectionError(fmt::format(
      "redlock: cannot connect to {} over TLS: this redlock was built with REDLOCK_WITH_TLS=OFF",
      address));
}

void set_tls_resumption(Resumption /*resumption*/) noexcept {}

}  // namespace detail
}  // namespace redlock
