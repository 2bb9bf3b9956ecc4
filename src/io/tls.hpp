// src/io/tls.hpp: TLS connections (rediss://) as a SecureLayer over a connection's own
// non-blocking socket, on OpenSSL (tls.cpp; tls_off.cpp when built with REDLOCK_WITH_TLS=OFF).
//
//   Transport transport = finish_dial(dial, address);
//   transport.secure(make_secure_layer(endpoint, address));  // null for plain endpoints
//   ... the poll loop calls transport.handshake() until ready, within the connect timeout ...
//
// Connections whose TlsOptions agree (CA, client certificate, verification) share one SSL_CTX,
// kept for the life of the process; each server's latest session is kept there too, so a
// reconnect resumes it (an abbreviated handshake) when the server allows.
#ifndef REDLOCK_SRC_IO_TLS_HPP
#define REDLOCK_SRC_IO_TLS_HPP

#include <memory>
#include <string>

#include <redlock/endpoint.hpp>

#include "io/transport.hpp"

namespace redlock {
namespace detail {

// The layer for a new connection to `endpoint` (at `address`, for messages); null when
// endpoint.tls.enabled is false. Throws ConnectionError naming `address` when the TLS settings
// cannot be used (a CA, certificate or key file missing or unreadable, a key that does not match
// its certificate, or a library built without TLS). Thread-safe.
std::unique_ptr<SecureLayer> make_secure_layer(const Endpoint& endpoint,
                                               const std::string& address);

// Whether new connections offer the last session of their server (on by default). For the
// benchmark and tests that measure what resumption saves. Thread-safe.
enum class Resumption : unsigned char { offered, not_offered };
void set_tls_resumption(Resumption resumption) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_TLS_HPP
