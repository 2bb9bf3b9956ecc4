// src/api/endpoint.cpp: Endpoint::parse(), address() and to_string().
//
// Error messages never echo a value taken from the URI (apart from the scheme): they name the bad
// part and quote the whole URI with the password masked. redact() masks a superset of whatever
// split_userinfo() can take for the password, so a password never reaches a message even when the
// URI is malformed (say, an unescaped '/' or '@' inside the password), and it masks the values of
// unknown query parameters too.
#include <redlock/endpoint.hpp>

#include <algorithm>     // std::all_of
#include <charconv>      // std::from_chars
#include <climits>       // INT_MAX
#include <cstddef>       // std::size_t
#include <stdexcept>     // std::invalid_argument
#include <string>        // std::string, std::to_string
#include <string_view>   // std::string_view
#include <system_error>  // std::errc
#include <utility>       // std::move

namespace redlock {

namespace {

constexpr std::string_view kSchemeSeparator = "://";
constexpr int kMaxPort = 65535;
// Timeouts are capped so that later arithmetic (now() + timeout in nanoseconds) cannot overflow.
constexpr long long kMaxTimeoutMs = INT_MAX;

bool is_known_parameter(std::string_view name) {
  return name == "db" || name == "connect_timeout" || name == "command_timeout";
}

// The URI as it may appear in a message: everything between the first ':' after "://" and the
// last '@' becomes "***" (the password, and then some if the URI is malformed), and so does the
// value of any query parameter parse() does not know (someone may try "?password=...").
std::string redact(std::string_view uri) {
  std::string out;
  const std::size_t separator = uri.find(kSchemeSeparator);
  std::size_t start = separator == std::string_view::npos ? 0 : separator + 3;
  const std::size_t at = uri.rfind('@');
  if (at != std::string_view::npos && at >= start) {
    const std::size_t colon = uri.find(':', start);
    if (colon != std::string_view::npos && colon < at) {
      out += uri.substr(0, colon + 1);
      out += "***";
      uri.remove_prefix(at);
      start = 0;
    }
  }
  const std::size_t question = uri.find('?', start);
  out += uri.substr(0, question);
  if (question == std::string_view::npos) {
    return out;
  }
  std::string_view query = uri.substr(question + 1);
  out += '?';
  while (true) {
    const std::size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    const std::size_t eq = param.find('=');
    if (eq != std::string_view::npos && !is_known_parameter(param.substr(0, eq))) {
      out += param.substr(0, eq + 1);
      out += "***";
    } else {
      out += param;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    out += '&';
    query.remove_prefix(amp + 1);
  }
  return out;
}

[[noreturn]] void fail(std::string_view uri, std::string_view what) {
  std::string message = "invalid Redis endpoint URI \"";
  message += redact(uri);
  message += "\": ";
  message += what;
  throw std::invalid_argument(message);
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool is_hex_digit(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int hex_value(char c) {
  if (is_digit(c)) {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return c - 'A' + 10;
}

char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) {
      return false;
    }
  }
  return true;
}

// Parses a non-empty run of ASCII digits into [min, max]. No sign, no spaces, no overflow.
bool parse_number(std::string_view text, long long min, long long max, long long& out) {
  if (text.empty()) {
    return false;
  }
  for (const char c : text) {
    if (!is_digit(c)) {
      return false;
    }
  }
  long long value = 0;
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    return false;  // std::errc::result_out_of_range
  }
  if (value < min || value > max) {
    return false;
  }
  out = value;
  return true;
}

// Decodes %XX escapes. Returns false on a malformed escape ("%4", "%zz").
bool percent_decode(std::string_view text, std::string& out) {
  std::string decoded;
  decoded.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      decoded += text[i];
      continue;
    }
    if (text.size() - i < 3) {
      return false;  // "%" or "%4" at the end
    }
    if (!is_hex_digit(text[i + 1]) || !is_hex_digit(text[i + 2])) {
      return false;
    }
    decoded += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
    i += 2;
  }
  out = std::move(decoded);
  return true;
}

// Escapes everything but RFC 3986 unreserved characters.
std::string percent_encode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      const auto byte = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[byte >> 4];
      out += kHex[byte & 0x0F];
    }
  }
  return out;
}

// Host names and IPv4 addresses: letters, digits, '-', '.', '_'.
bool is_valid_host_name(std::string_view host) {
  return std::all_of(host.begin(), host.end(), [](char c) {
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_';
  });
}

// The inside of [...]: hex digits, ':' and '.' (for ::ffff:1.2.3.4), at least one ':'.
bool is_valid_ipv6(std::string_view host) {
  if (host.find(':') == std::string_view::npos) {
    return false;
  }
  return std::all_of(host.begin(), host.end(),
                     [](char c) { return is_hex_digit(c) || c == ':' || c == '.'; });
}

struct Split {
  bool has_userinfo = false;
  std::string_view userinfo;
  std::string_view rest;
};

// Separates "user:password@" from what follows "scheme://".
//  redis: up to the last '@'. Nothing after the host may legitimately contain '@' (db and query
//         values are numbers), so this also accepts a password with an unescaped '/' or '?'.
//  unix:  none if the path follows directly; otherwise up to the first "@/" (socket paths may
//         contain '@'), or up to the last '@' when there is no "@/" (an error follows anyway).
Split split_userinfo(std::string_view after_scheme, bool is_unix) {
  Split split;
  split.rest = after_scheme;
  std::size_t at = std::string_view::npos;
  if (is_unix) {
    if (!after_scheme.empty() && after_scheme.front() == '/') {
      return split;
    }
    at = after_scheme.find("@/");
    if (at == std::string_view::npos) {
      at = after_scheme.rfind('@');
    }
  } else {
    at = after_scheme.rfind('@');
  }
  if (at == std::string_view::npos) {
    return split;
  }
  split.has_userinfo = true;
  split.userinfo = after_scheme.substr(0, at);
  split.rest = after_scheme.substr(at + 1);
  return split;
}

void parse_userinfo(std::string_view uri, std::string_view userinfo, Endpoint& endpoint) {
  const std::size_t colon = userinfo.find(':');
  const std::string_view user = userinfo.substr(0, colon);
  if (!percent_decode(user, endpoint.username)) {
    fail(uri, "malformed percent-escape in the user name (expected %XX with two hex digits)");
  }
  if (colon == std::string_view::npos) {
    return;
  }
  if (!percent_decode(userinfo.substr(colon + 1), endpoint.password)) {
    fail(uri, "malformed percent-escape in the password (expected %XX with two hex digits)");
  }
}

void parse_db(std::string_view uri, std::string_view text, Endpoint& endpoint) {
  long long db = 0;
  if (!parse_number(text, 0, INT_MAX, db)) {
    fail(uri, "db must be a non-negative whole number (digits only)");
  }
  endpoint.database = static_cast<int>(db);
}

std::chrono::milliseconds parse_timeout(std::string_view uri, std::string_view name,
                                        std::string_view text) {
  long long ms = 0;
  if (!parse_number(text, 1, kMaxTimeoutMs, ms)) {
    std::string what(name);
    what += " must be a positive whole number of milliseconds (digits only, at most ";
    what += std::to_string(kMaxTimeoutMs);
    what += ")";
    fail(uri, what);
  }
  return std::chrono::milliseconds(ms);
}

// "name=value&name=value". `db_in_path`: the path already set the database.
void parse_query(std::string_view uri, std::string_view query, bool db_in_path,
                 Endpoint& endpoint) {
  bool seen_db = false;
  bool seen_connect_timeout = false;
  bool seen_command_timeout = false;
  while (true) {
    const std::size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    if (param.empty()) {
      fail(uri, "empty query parameter (stray '?' or '&')");
    }
    const std::size_t eq = param.find('=');
    if (eq == std::string_view::npos) {
      fail(uri, "query parameter without '=' (expected name=value)");
    }
    const std::string_view name = param.substr(0, eq);
    const std::string_view value = param.substr(eq + 1);
    if (name.empty()) {
      fail(uri, "query parameter with an empty name");
    }
    if (!is_known_parameter(name)) {
      fail(uri, "unknown query parameter (expected db, connect_timeout or command_timeout)");
    }
    if (name == "db") {
      if (db_in_path) {
        fail(uri, "db given twice (in the path and as a query parameter)");
      }
      if (seen_db) {
        fail(uri, "duplicate query parameter db");
      }
      if (value.empty()) {
        fail(uri, "query parameter db has an empty value");
      }
      parse_db(uri, value, endpoint);
      seen_db = true;
    } else if (name == "connect_timeout") {
      if (seen_connect_timeout) {
        fail(uri, "duplicate query parameter connect_timeout");
      }
      if (value.empty()) {
        fail(uri, "query parameter connect_timeout has an empty value");
      }
      endpoint.connect_timeout = parse_timeout(uri, name, value);
      seen_connect_timeout = true;
    } else {
      if (seen_command_timeout) {
        fail(uri, "duplicate query parameter command_timeout");
      }
      if (value.empty()) {
        fail(uri, "query parameter command_timeout has an empty value");
      }
      endpoint.command_timeout = parse_timeout(uri, name, value);
      seen_command_timeout = true;
    }
    if (amp == std::string_view::npos) {
      break;
    }
    query.remove_prefix(amp + 1);
  }
}

// host[:port][/db] of a redis:// URI. Returns true if the path named a database.
bool parse_redis_location(std::string_view uri, std::string_view location, Endpoint& endpoint) {
  const std::size_t slash = location.find('/');
  std::string_view authority = location.substr(0, slash);
  std::string_view port_text;
  bool has_port = false;

  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      fail(uri, "IPv6 host is missing its closing ']'");
    }
    const std::string_view host = authority.substr(1, close - 1);
    if (host.empty()) {
      fail(uri, "empty host (nothing between '[' and ']')");
    }
    if (!is_valid_ipv6(host)) {
      fail(uri, "invalid IPv6 address in host");
    }
    endpoint.host = std::string(host);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        fail(uri, "unexpected characters after the IPv6 host");
      }
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    const std::size_t colon = authority.find(':');
    const std::string_view host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      if (authority.find(':', colon + 1) != std::string_view::npos) {
        fail(uri, "host has more than one ':' (write IPv6 hosts in brackets, e.g. [::1])");
      }
      has_port = true;
      port_text = authority.substr(colon + 1);
    }
    if (host.empty()) {
      fail(uri, "empty host");
    }
    if (!is_valid_host_name(host)) {
      fail(uri, "invalid character in host (expected a name, an IPv4 address or [IPv6])");
    }
    endpoint.host = std::string(host);
  }

  if (has_port) {
    long long port = 0;
    if (port_text.empty()) {
      fail(uri, "empty port after ':'");
    }
    if (!parse_number(port_text, 1, kMaxPort, port)) {
      fail(uri, "port must be a whole number in 1..65535 (digits only)");
    }
    endpoint.port = static_cast<int>(port);
  }

  if (slash == std::string_view::npos) {
    return false;
  }
  const std::string_view path = location.substr(slash + 1);
  if (path.empty()) {
    return false;  // "redis://host/" means db 0
  }
  parse_db(uri, path, endpoint);
  return true;
}

void append_param(std::string& query, std::string_view name, long long value) {
  query += query.empty() ? '?' : '&';
  query += name;
  query += '=';
  query += std::to_string(value);
}

}  // namespace

Endpoint Endpoint::parse(std::string_view uri) {
  const std::size_t separator = uri.find(kSchemeSeparator);
  if (separator == std::string_view::npos) {
    fail(uri, "missing \"://\" after the scheme (expected redis://... or unix://...)");
  }
  const std::string_view scheme = uri.substr(0, separator);
  const bool is_unix = iequals(scheme, "unix");
  if (iequals(scheme, "rediss")) {
    fail(uri, "scheme rediss:// (TLS) is not supported; use redis:// or unix://");
  }
  if (!is_unix && !iequals(scheme, "redis")) {
    std::string what = "unsupported scheme '";
    what += scheme;
    what += "' (expected redis:// or unix://)";
    fail(uri, what);
  }

  Endpoint endpoint;
  const Split split = split_userinfo(uri.substr(separator + kSchemeSeparator.size()), is_unix);
  if (split.has_userinfo) {
    parse_userinfo(uri, split.userinfo, endpoint);
  }

  const std::size_t question = split.rest.find('?');
  const std::string_view location = split.rest.substr(0, question);
  bool db_in_path = false;
  if (is_unix) {
    if (location.empty()) {
      fail(uri, "empty unix socket path");
    }
    if (location.front() != '/') {
      fail(uri, "unix socket path must be absolute (unix:///path or unix://user@/path)");
    }
    endpoint.unix_socket = std::string(location);
  } else {
    db_in_path = parse_redis_location(uri, location, endpoint);
  }

  if (question != std::string_view::npos) {
    parse_query(uri, split.rest.substr(question + 1), db_in_path, endpoint);
  }
  return endpoint;
}

std::string Endpoint::address() const {
  if (!unix_socket.empty()) {
    return "unix:" + unix_socket;
  }
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
  std::string out = unix_socket.empty() ? "redis://" : "unix://";
  if (!username.empty() || !password.empty()) {
    out += percent_encode(username);
    if (!password.empty()) {
      out += ":***";
    }
    out += '@';
  }

  std::string query;
  if (unix_socket.empty()) {
    out += address();
    if (database != 0) {
      out += '/';
      out += std::to_string(database);
    }
  } else {
    out += unix_socket;
    if (database != 0) {
      append_param(query, "db", database);
    }
  }
  const Endpoint defaults;
  if (connect_timeout != defaults.connect_timeout) {
    append_param(query, "connect_timeout", connect_timeout.count());
  }
  if (command_timeout != defaults.command_timeout) {
    append_param(query, "command_timeout", command_timeout.count());
  }
  out += query;
  return out;
}

}  // namespace redlock
