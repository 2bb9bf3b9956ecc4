// src/api/endpoint_text.hpp: what the two halves of Endpoint's URI handling share: endpoint.cpp
// (scheme, credentials, host, port, path, to_string) and endpoint_query.cpp (query parameters,
// the text helpers behind them, and error messages with secrets masked).
#ifndef REDLOCK_SRC_API_ENDPOINT_TEXT_HPP
#define REDLOCK_SRC_API_ENDPOINT_TEXT_HPP

#include <string>
#include <string_view>

#include <redlock/endpoint.hpp>

namespace redlock {
namespace detail {

// Which scheme a URI used: query parameters differ (TLS ones need rediss://).
enum class Scheme : unsigned char {
  redis,
  rediss,
  unix_socket,
  sentinel,
  sentinel_tls,
  cluster,
  cluster_tls
};

inline bool uses_tls(Scheme scheme) {
  return scheme == Scheme::rediss || scheme == Scheme::sentinel_tls ||
         scheme == Scheme::cluster_tls;
}
inline bool through_cluster(Scheme scheme) {
  return scheme == Scheme::cluster || scheme == Scheme::cluster_tls;
}
inline bool through_sentinel(Scheme scheme) {
  return scheme == Scheme::sentinel || scheme == Scheme::sentinel_tls;
}

// Throws std::invalid_argument: "invalid Redis endpoint URI "<uri, secrets masked>": <what>".
[[noreturn]] void uri_fail(std::string_view uri, std::string_view what);

bool is_digit(char c);
bool is_alpha(char c);
bool is_hex_digit(char c);
bool iequals(std::string_view a, std::string_view b);
// A non-empty run of ASCII digits within [min, max] (no sign, no spaces, no overflow).
bool parse_number(std::string_view text, long long min, long long max, long long& out);
// Decodes %XX escapes. Returns false on a malformed escape ("%4", "%zz").
bool percent_decode(std::string_view text, std::string& out);
// Escapes everything but RFC 3986 unreserved characters and those in `keep`.
std::string percent_encode(std::string_view text, std::string_view keep = {});

// Parses "name=value&..." into `endpoint`. `db_in_path`: the path named a database already.
// Throws std::invalid_argument naming the parameter.
void parse_query(std::string_view uri, std::string_view query, Scheme scheme, bool db_in_path,
                 Endpoint& endpoint);
// The query part of to_string(): "" or "?name=value&...", only what differs from the defaults
// (`db`: unix sockets carry the database in the query).
enum class DbIn : unsigned char { path, query };
std::string format_query(const Endpoint& endpoint, DbIn db);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_API_ENDPOINT_TEXT_HPP
