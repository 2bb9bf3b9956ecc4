// src/api/endpoint.cpp: Endpoint::parse() (scheme, credentials, host, port and path; the query is
// endpoint_query.cpp's), address() and to_string().
#include <redlock/endpoint.hpp>

#include <algorithm>    // std::all_of
#include <climits>      // INT_MAX
#include <cstddef>      // std::size_t
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

#include "api/endpoint_text.hpp"

namespace redlock {

namespace {

using detail::is_alpha;
using detail::is_digit;
using detail::is_hex_digit;
using detail::parse_number;
using detail::Scheme;
using detail::uri_fail;

constexpr std::string_view kSchemeSeparator = "://";
// Every scheme parse() takes, for the messages that list them.
constexpr const char* kSchemes =
    "redis://, rediss://, unix://, redis-sentinel://, rediss-sentinel://, redis-cluster:// or "
    "rediss-cluster://";
constexpr int kMaxPort = 65535;
constexpr int kSentinelPort = 26379;

// Host names and IPv4 addresses: letters, digits, '-', '.', '_'.
bool is_valid_host_name(std::string_view host) {
  return std::all_of(host.begin(), host.end(), [](char c) {
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_';
  });
}

// The inside of [...]: hex digits, ':' and '.' (for ::ffff:1.2.3.4), at least one ':'.
bool is_valid_ipv6(std::string_view host) {
  if (host.find(':') == std::string_view::npos) return false;
  return std::all_of(host.begin(), host.end(),
                     [](char c) { return is_hex_digit(c) || c == ':' || c == '.'; });
}

Scheme parse_scheme(std::string_view uri, std::string_view scheme) {
  if (detail::iequals(scheme, "redis")) return Scheme::redis;
  if (detail::iequals(scheme, "unix")) return Scheme::unix_socket;
  if (detail::iequals(scheme, "redis-sentinel")) return Scheme::sentinel;
  if (detail::iequals(scheme, "redis-cluster")) return Scheme::cluster;
  const bool sentinel = detail::iequals(scheme, "rediss-sentinel");
  const bool cluster = detail::iequals(scheme, "rediss-cluster");
  if (sentinel || cluster || detail::iequals(scheme, "rediss")) {
#if defined(REDLOCK_WITH_TLS)
    return sentinel ? Scheme::sentinel_tls : cluster ? Scheme::cluster_tls : Scheme::rediss;
#else
    uri_fail(uri, std::string(scheme) +
                      ":// (TLS) needs a library built with -DREDLOCK_WITH_TLS=ON (this one was "
                      "built with REDLOCK_WITH_TLS=OFF)");
#endif
  }
  uri_fail(uri, "unsupported scheme '" + std::string(scheme) + "' (expected " + kSchemes + ")");
}

struct Split {
  bool has_userinfo = false;
  std::string_view userinfo;
  std::string_view rest;
};

// Separates "user:password@" from what follows "scheme://".
//  redis: up to the last '@'. Nothing after the host may legitimately contain a raw '@' (db and
//         timeouts are numbers, paths in TLS parameters escape it), so this also accepts a
//         password with an unescaped '/' or '?'.
//  unix:  none if the path follows directly; otherwise up to the first "@/" (socket paths may
//         contain '@'), or up to the last '@' when there is no "@/" (an error follows anyway).
Split split_userinfo(std::string_view after_scheme, Scheme scheme) {
  Split split;
  split.rest = after_scheme;
  std::size_t at = std::string_view::npos;
  if (scheme == Scheme::unix_socket) {
    if (!after_scheme.empty() && after_scheme.front() == '/') return split;
    at = after_scheme.find("@/");
    if (at == std::string_view::npos) at = after_scheme.rfind('@');
  } else {
    at = after_scheme.rfind('@');
  }
  if (at == std::string_view::npos) return split;
  split.has_userinfo = true;
  split.userinfo = after_scheme.substr(0, at);
  split.rest = after_scheme.substr(at + 1);
  return split;
}

void parse_userinfo(std::string_view uri, std::string_view userinfo, Endpoint& endpoint) {
  const std::size_t colon = userinfo.find(':');
  if (!detail::percent_decode(userinfo.substr(0, colon), endpoint.username)) {
    uri_fail(uri, "malformed percent-escape in the user name (expected %XX with two hex digits)");
  }
  if (colon == std::string_view::npos) return;
  if (!detail::percent_decode(userinfo.substr(colon + 1), endpoint.password)) {
    uri_fail(uri, "malformed percent-escape in the password (expected %XX with two hex digits)");
  }
}

// "[v6]" or "[v6]:port" into endpoint.host; returns what follows the ':' (port text) or npos data.
bool parse_ipv6_host(std::string_view uri, std::string_view authority, Endpoint& endpoint,
                     std::string_view& port_text) {
  const std::size_t close = authority.find(']');
  if (close == std::string_view::npos) uri_fail(uri, "IPv6 host is missing its closing ']'");
  const std::string_view host = authority.substr(1, close - 1);
  if (host.empty()) uri_fail(uri, "empty host (nothing between '[' and ']')");
  if (!is_valid_ipv6(host)) uri_fail(uri, "invalid IPv6 address in host");
  endpoint.host = std::string(host);
  const std::string_view after = authority.substr(close + 1);
  if (after.empty()) return false;
  if (after.front() != ':') uri_fail(uri, "unexpected characters after the IPv6 host");
  port_text = after.substr(1);
  return true;
}

// "name" or "name:port" into endpoint.host; returns true (and port_text) if a port follows.
bool parse_named_host(std::string_view uri, std::string_view authority, Endpoint& endpoint,
                      std::string_view& port_text) {
  const std::size_t colon = authority.find(':');
  const std::string_view host = authority.substr(0, colon);
  if (colon != std::string_view::npos && authority.find(':', colon + 1) != std::string_view::npos) {
    uri_fail(uri, "host has more than one ':' (write IPv6 hosts in brackets, e.g. [::1])");
  }
  if (host.empty()) uri_fail(uri, "empty host");
  if (!is_valid_host_name(host)) {
    uri_fail(uri, "invalid character in host (expected a name, an IPv4 address or [IPv6])");
  }
  endpoint.host = std::string(host);
  if (colon == std::string_view::npos) return false;
  port_text = authority.substr(colon + 1);
  return true;
}

void parse_port(std::string_view uri, std::string_view text, Endpoint& endpoint) {
  long long port = 0;
  if (text.empty()) uri_fail(uri, "empty port after ':'");
  if (!parse_number(text, 1, kMaxPort, port)) {
    uri_fail(uri, "port must be a whole number in 1..65535 (digits only)");
  }
  endpoint.port = static_cast<int>(port);
}

// host[:port] into endpoint.host and endpoint.port (which keeps its value if no port is given).
void parse_authority(std::string_view uri, std::string_view authority, Endpoint& endpoint) {
  std::string_view port_text;
  const bool has_port = !authority.empty() && authority.front() == '['
                            ? parse_ipv6_host(uri, authority, endpoint, port_text)
                            : parse_named_host(uri, authority, endpoint, port_text);
  if (has_port) parse_port(uri, port_text, endpoint);
}

// host[:port][,host[:port]...] of a Sentinel or Cluster URI: one Endpoint per host (port
// `default_port` unless given), appended to `out`.
void parse_hosts(std::string_view uri, std::string_view authorities, int default_port,
                 std::vector<Endpoint>& out) {
  for (;;) {
    const std::size_t comma = authorities.find(',');
    Endpoint node;
    node.port = default_port;
    parse_authority(uri, authorities.substr(0, comma), node);
    out.push_back(std::move(node));
    if (comma == std::string_view::npos) return;
    authorities.remove_prefix(comma + 1);
  }
}

// host[:port][/db] of a redis:// or rediss:// URI (a list of hosts through Sentinel). Returns
// true if the path named a database.
bool parse_location(std::string_view uri, std::string_view location, Scheme scheme,
                    Endpoint& endpoint) {
  const std::size_t slash = location.find('/');
  const std::string_view authority = location.substr(0, slash);
  if (detail::through_sentinel(scheme)) {
    parse_hosts(uri, authority, kSentinelPort, endpoint.sentinel.sentinels);
  } else if (detail::through_cluster(scheme)) {
    parse_hosts(uri, authority, endpoint.port, endpoint.cluster.seeds);
  } else {
    parse_authority(uri, authority, endpoint);
  }
  if (slash == std::string_view::npos) return false;
  const std::string_view path = location.substr(slash + 1);
  if (path.empty()) return false;  // "redis://host/" means db 0
  long long db = 0;
  if (!parse_number(path, 0, INT_MAX, db)) {
    uri_fail(uri, "db must be a non-negative whole number (digits only)");
  }
  endpoint.database = static_cast<int>(db);
  return true;
}

void parse_unix_path(std::string_view uri, std::string_view location, Endpoint& endpoint) {
  if (location.empty()) uri_fail(uri, "empty unix socket path");
  if (location.front() != '/') {
    uri_fail(uri, "unix socket path must be absolute (unix:///path or unix://user@/path)");
  }
  endpoint.unix_socket = std::string(location);
}

// "#service" of a Sentinel URI (the first '#' after the credentials). Returns the URI without
// it. Other schemes have no fragment: a '#' there stays part of what it is in.
std::string_view take_service(std::string_view uri, Scheme scheme, Endpoint& endpoint) {
  if (!detail::through_sentinel(scheme)) return uri;
  const std::size_t at = uri.rfind('@');
  const std::size_t hash = uri.find('#', at == std::string_view::npos ? 0 : at);
  if (hash == std::string_view::npos || hash + 1 == uri.size()) {
    uri_fail(uri,
             "missing the service name: a Sentinel URI ends in #service, the name the "
             "sentinels monitor the master under");
  }
  if (!detail::percent_decode(uri.substr(hash + 1), endpoint.sentinel.service)) {
    uri_fail(uri, "malformed percent-escape in the service name (expected %XX)");
  }
  return uri.substr(0, hash);
}

// The settings a Sentinel URI gives for the master apply to the sentinels too: TLS, timeouts.
void share_settings(Endpoint& endpoint) {
  for (Endpoint& sentinel : endpoint.sentinel.sentinels) {
    sentinel.tls = endpoint.tls;
    sentinel.tls.server_name.clear();  // sni= names the master; each sentinel is checked by host
    sentinel.connect_timeout = endpoint.connect_timeout;
    sentinel.command_timeout = endpoint.command_timeout;
    sentinel.reply_limits = endpoint.reply_limits;
  }
}

}  // namespace

Endpoint Endpoint::parse(std::string_view whole) {
  const std::size_t separator = whole.find(kSchemeSeparator);
  if (separator == std::string_view::npos) {
    uri_fail(whole, std::string("missing \"://\" after the scheme (expected ") + kSchemes + ")");
  }
  const Scheme scheme = parse_scheme(whole, whole.substr(0, separator));
  Endpoint endpoint;
  const std::string_view uri = take_service(whole, scheme, endpoint);
  endpoint.tls.enabled = detail::uses_tls(scheme);
  const Split split = split_userinfo(uri.substr(separator + kSchemeSeparator.size()), scheme);
  if (split.has_userinfo) parse_userinfo(whole, split.userinfo, endpoint);

  const std::size_t question = split.rest.find('?');
  const std::string_view location = split.rest.substr(0, question);
  bool db_in_path = false;
  if (scheme == Scheme::unix_socket) {
    parse_unix_path(whole, location, endpoint);
  } else {
    db_in_path = parse_location(whole, location, scheme, endpoint);
  }
  if (question != std::string_view::npos) {
    detail::parse_query(whole, split.rest.substr(question + 1), scheme, db_in_path, endpoint);
  }
  if (detail::through_sentinel(scheme)) share_settings(endpoint);
  if (detail::through_cluster(scheme) && endpoint.database != 0) {
    uri_fail(whole, "a Redis Cluster has only database 0 (no db in the path or query)");
  }
  return endpoint;
}

std::string Endpoint::address() const {
  if (!sentinel.service.empty()) return "sentinel:" + sentinel.service;
  if (!cluster.seeds.empty()) {
    std::string out = "cluster:";
    for (const Endpoint& seed : cluster.seeds) {
      if (&seed != cluster.seeds.data()) out += ',';
      out += seed.address();
    }
    return out;
  }
  if (!unix_socket.empty()) return "unix:" + unix_socket;
  std::string out;
  if (host.find(':') != std::string::npos) {
    out += '[';
    out += host;
    out += ']';
  } else {
    out += host;
  }
  out += ':';
  out += std::to_string(port);
  return out;
}

std::string Endpoint::to_string() const {
  const bool sentinels = !sentinel.service.empty();
  const bool seeds = !cluster.seeds.empty();
  std::string out = sentinels ? (tls.enabled ? "rediss-sentinel://" : "redis-sentinel://")
                    : seeds   ? (tls.enabled ? "rediss-cluster://" : "redis-cluster://")
                    : !unix_socket.empty() ? "unix://"
                    : tls.enabled          ? "rediss://"
                                           : "redis://";
  if (!username.empty() || !password.empty()) {
    out += detail::percent_encode(username);
    if (!password.empty()) out += ":***";
    out += '@';
  }
  if (!unix_socket.empty()) {
    out += unix_socket;
    return out + detail::format_query(*this, detail::DbIn::query);
  }
  if (sentinels || seeds) {
    const auto& nodes = sentinels ? sentinel.sentinels : cluster.seeds;
    for (const Endpoint& node : nodes) {
      if (&node != nodes.data()) out += ',';
      out += node.address();
    }
  } else {
    out += address();
  }
  if (database != 0) {
    out += '/';
    out += std::to_string(database);
  }
  out += detail::format_query(*this, detail::DbIn::path);
  if (sentinels) out += '#' + detail::percent_encode(sentinel.service);
  return out;
}

}  // namespace redlock
