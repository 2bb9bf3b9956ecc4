// src/io/tls_describe.cpp: TLS failures described for people (see tls_describe.hpp).
#include "io/tls_describe.hpp"

#include <openssl/err.h>
#include <openssl/x509_vfy.h>

#include <cstring>

#include <fmt/format.h>

namespace redlock {
namespace detail {
namespace {

std::string describe_verify(long result, const TlsFailureContext& context) {
  const char* text = X509_verify_cert_error_string(result);
  switch (result) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_CERT_UNTRUSTED:
      return fmt::format(
          "unknown CA: the server's certificate is not signed by a trusted CA ({}); give its CA "
          "with cacert=/path/ca.pem (Endpoint::tls.ca_file)",
          text);
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return fmt::format(
          "name mismatch: the server's certificate is not valid for '{}' ({}); connect by a name "
          "or address its certificate lists, or set sni= (Endpoint::tls.server_name)",
          context.server_name, text);
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return fmt::format("the server's certificate has expired ({}); renew it on the server", text);
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return fmt::format("the server's certificate is not valid yet ({}); check the clocks", text);
    default:
      return fmt::format("the server's certificate failed verification ({})", text);
  }
}

std::string describe_error(unsigned long error, const TlsFailureContext& context) {
  const int reason = ERR_GET_REASON(error);
  const char* text = openssl_reason(error);
  if (ERR_GET_LIB(error) != ERR_LIB_SSL) {
    return fmt::format("TLS {} failed ({})", context.doing, text);
  }
  switch (reason) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
      if (!context.has_client_cert) {
        return fmt::format(
            "the server requires a client certificate (tls-auth-clients); give one with cert= "
            "and key= (Endpoint::tls.cert_file, key_file) ({})",
            text);
      }
      break;
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
      return fmt::format("the server rejected the client certificate ({})", text);
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
      return fmt::format("the server did not answer in TLS ({}); is this its tls-port?", text);
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
      return fmt::format("no common TLS version (redlock needs TLS 1.2 or later) ({})", text);
    default:
      break;
  }
  return fmt::format("TLS {} failed ({})", context.doing, text);
}

}  // namespace

const char* openssl_reason(unsigned long error) noexcept {
  const char* text = error == 0 ? nullptr : ERR_reason_error_string(error);
  return text != nullptr ? text : "no details";
}

std::string describe_failure(const SSL* ssl, unsigned long error,
                             const TlsFailureContext& context) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) return describe_verify(verify, context);
  if (context.eof || (error == 0 && context.system_error != 0)) {
    // With TLS 1.3 a server that wants a client certificate says so after the client's side of
    // the handshake is done: often all the client sees is the connection closing.
    return fmt::format(
        "the server closed the connection during the TLS {} ({}){}", context.doing,
        context.system_error != 0 ? std::strerror(context.system_error) : "end of stream",
        context.has_client_cert ? ""
                                : "; if it requires a client certificate (tls-auth-clients), "
                                  "give one with cert= and key=");
  }
  return describe_error(error, context);
}

}  // namespace detail
}  // namespace redlock
