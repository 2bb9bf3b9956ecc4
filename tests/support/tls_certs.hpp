// tests/support/tls_certs.hpp: throwaway certificates for the TLS tests, made with the `openssl`
// command line (and `faketime`, for an expired one) in a temporary directory on first use, and
// removed when the process exits.
//
//   const auto& certs = redlock::test::tls_certs();
//   endpoint.tls.ca_file = certs.ca;   // trusts certs.server (SAN 127.0.0.1, localhost)
//
// Keys are EC P-256 (fast to make). Every certificate but self_signed is issued by `ca`.
#ifndef REDLOCK_TESTS_SUPPORT_TLS_CERTS_HPP
#define REDLOCK_TESTS_SUPPORT_TLS_CERTS_HPP

#include <string>

namespace redlock::test {

struct TlsCerts {
  std::string dir;
  std::string ca;        // the CA's certificate (PEM)
  std::string other_ca;  // an unrelated CA: trusting only it must fail
  std::string server;    // server certificate, SAN IP:127.0.0.1 and DNS:localhost
  std::string server_key;
  std::string expired;      // like server, but valid only during January 2020 (key: server_key)
  std::string no_san;       // CN=redis.example, no subjectAltName (key: server_key)
  std::string self_signed;  // self-signed, SAN 127.0.0.1 (key: server_key)
  std::string client;       // client certificate (extendedKeyUsage clientAuth)
  std::string client_key;
};

// Makes them on first call (thread-safe). Throws std::runtime_error with openssl's output if
// they cannot be made.
const TlsCerts& tls_certs();

}  // namespace redlock::test

#endif  // REDLOCK_TESTS_SUPPORT_TLS_CERTS_HPP
