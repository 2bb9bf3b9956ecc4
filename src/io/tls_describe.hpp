// src/io/tls_describe.hpp: TLS failures (OpenSSL's verify results and error reasons) in words a
// user can act on: what failed, and which Endpoint setting or query parameter to change.
#ifndef REDLOCK_SRC_IO_TLS_DESCRIBE_HPP
#define REDLOCK_SRC_IO_TLS_DESCRIBE_HPP

#include <openssl/ssl.h>

#include <string>

namespace redlock {
namespace detail {

struct TlsFailureContext {
  const char* doing;               // "handshake", "read", "write"
  const std::string& server_name;  // what the certificate had to name
  bool has_client_cert;            // a client certificate was configured
  bool eof;                        // the server closed the connection
  int system_error;                // errno of a failed send/recv (0 if none)
};

// What went wrong on `ssl` (its verify result, else OpenSSL error `error`). Throws bad_alloc.
std::string describe_failure(const SSL* ssl, unsigned long error, const TlsFailureContext& context);
// OpenSSL's reason text for `error` ("no details" for 0). Never throws.
const char* openssl_reason(unsigned long error) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_TLS_DESCRIBE_HPP
