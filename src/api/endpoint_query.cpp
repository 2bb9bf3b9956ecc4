// src/api/endpoint_query.cpp: an endpoint URI's query parameters (parsing and printing them), the
// text helpers behind every part of the URI, and error messages that never show a secret.
//
// Error messages never echo a secret taken from the URI: they name the bad part and quote the
// whole URI with the password masked. redact() masks a superset of whatever endpoint.cpp's
// split_userinfo() can take for the password, so a password never reaches a message even when the
// URI is malformed (say, an unescaped '/' or '@' inside the password), and it masks the values of
// query parameters that are (or are named like) secrets too.
#include <algorithm>     // std::find_if, std::any_of, std::transform
#include <array>         // std::array
#include <charconv>      // std::from_chars
#include <climits>       // INT_MAX
#include <cstddef>       // std::size_t
#include <stdexcept>     // std::invalid_argument
#include <string>        // std::string, std::to_string
#include <string_view>   // std::string_view
#include <system_error>  // std::errc
#include <utility>       // std::move

#include "api/endpoint_text.hpp"

namespace redlock {
namespace detail {
namespace {

constexpr std::string_view kSchemeSeparator = "://";
// Timeouts are capped so that later arithmetic (now() + timeout in nanoseconds) cannot overflow.
constexpr long long kMaxTimeoutMs = INT_MAX;

// Which schemes accept a parameter.
enum class Needs : unsigned char { any_scheme, tls, sentinel };

using Apply = void (*)(std::string_view uri, std::string_view value, Endpoint& endpoint);

// A parameter either has its own parser (apply) or names a file path in TlsOptions (path).
struct Parameter {
  std::string_view name;
  Needs needs;
  Apply apply;
  std::string TlsOptions::*path;
};

void apply_db(std::string_view uri, std::string_view value, Endpoint& endpoint) {
  long long db = 0;
  if (!parse_number(value, 0, INT_MAX, db)) {
    uri_fail(uri, "db must be a non-negative whole number (digits only)");
  }
  endpoint.database = static_cast<int>(db);
}

std::chrono::milliseconds timeout(std::string_view uri, std::string_view name,
                                  std::string_view text) {
  long long ms = 0;
  if (!parse_number(text, 1, kMaxTimeoutMs, ms)) {
    uri_fail(uri, std::string(name) +
                      " must be a positive whole number of milliseconds (digits only, at most " +
                      std::to_string(kMaxTimeoutMs) + ")");
  }
  return std::chrono::milliseconds(ms);
}

std::string decoded(std::string_view uri, std::string_view name, std::string_view value) {
  std::string out;
  if (!percent_decode(value, out)) {
    uri_fail(uri, "malformed percent-escape in query parameter " + std::string(name) +
                      " (expected %XX with two hex digits)");
  }
  return out;
}

void apply_insecure(std::string_view uri, std::string_view value, Endpoint& endpoint) {
  if (value != "0" && value != "1") uri_fail(uri, "insecure must be 1 (no verification) or 0");
  endpoint.tls.verify = value == "0";
}

void apply_sni(std::string_view uri, std::string_view value, Endpoint& endpoint) {
  const bool valid = std::all_of(value.begin(), value.end(), [](char c) {
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == ':';
  });
  if (!valid) uri_fail(uri, "sni must be a host name or an IP address");
  endpoint.tls.server_name = std::string(value);
}

// sentinel_username= and sentinel_password=: every sentinel's credentials.
void apply_sentinel_user(std::string_view uri, std::string_view value, Endpoint& endpoint) {
  const std::string user = decoded(uri, "sentinel_username", value);
  for (Endpoint& sentinel : endpoint.sentinel.sentinels) sentinel.username = user;
}
void apply_sentinel_password(std::string_view uri, std::string_view value, Endpoint& endpoint) {
  const std::string password = decoded(uri, "sentinel_password", value);
  for (Endpoint& sentinel : endpoint.sentinel.sentinels) sentinel.password = password;
}

void apply_wait_replicas(std::string_view uri, std::string_view value, Endpoint& endpoint) {
  long long n = 0;
  if (!parse_number(value, 0, 1000, n)) {
    uri_fail(uri, "wait_replicas must be a whole number of replicas in 0..1000 (digits only)");
  }
  endpoint.wait_replicas = static_cast<int>(n);
}

const std::array<Parameter, 13> kParameters{{
    {"db", Needs::any_scheme, apply_db, nullptr},
    {"connect_timeout", Needs::any_scheme,
     [](std::string_view uri, std::string_view v, Endpoint& e) {
       e.connect_timeout = timeout(uri, "connect_timeout", v);
     },
     nullptr},
    {"command_timeout", Needs::any_scheme,
     [](std::string_view uri, std::string_view v, Endpoint& e) {
       e.command_timeout = timeout(uri, "command_timeout", v);
     },
     nullptr},
    {"wait_replicas", Needs::any_scheme, apply_wait_replicas, nullptr},
    {"wait_timeout", Needs::any_scheme,
     [](std::string_view uri, std::string_view v, Endpoint& e) {
       e.wait_timeout = timeout(uri, "wait_timeout", v);
     },
     nullptr},
    {"cacert", Needs::tls, nullptr, &TlsOptions::ca_file},
    {"cacertdir", Needs::tls, nullptr, &TlsOptions::ca_dir},
    {"cert", Needs::tls, nullptr, &TlsOptions::cert_file},
    {"key", Needs::tls, nullptr, &TlsOptions::key_file},
    {"sni", Needs::tls, apply_sni, nullptr},
    {"insecure", Needs::tls, apply_insecure, nullptr},
    {"sentinel_username", Needs::sentinel, apply_sentinel_user, nullptr},
    {"sentinel_password", Needs::sentinel, apply_sentinel_password, nullptr},
}};

char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Parts of a name that mark an unknown parameter as a secret (misspellings such as "pasword"
// included).
constexpr std::array<std::string_view, 7> kSecretWords = {"pas",  "pw",   "secret", "token",
                                                          "auth", "cred", "key"};

const Parameter* find_parameter(std::string_view name) {
  const auto it = std::find_if(kParameters.begin(), kParameters.end(),
                               [name](const Parameter& p) { return p.name == name; });
  return it == kParameters.end() ? nullptr : &*it;
}

// Parameters whose values never appear in a message: sentinel_password, and any unknown one
// named like a secret (someone may try "?password=..." or misspell "sentinel_pasword"). Other
// values are shown, so that a typo such as "?comand_timeout=500" can be seen.
bool secret(std::string_view name) {
  if (find_parameter(name) != nullptr) return name == "sentinel_password";
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), to_lower);
  return std::any_of(kSecretWords.begin(), kSecretWords.end(), [&lower](std::string_view word) {
    return lower.find(word) != std::string::npos;
  });
}

// The URI as it may appear in a message: everything between the first ':' after "://" and the
// last '@' becomes "***" (the password, and then some if the URI is malformed), and so does the
// value of a secret() query parameter.
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
  if (question == std::string_view::npos) return out;
  std::string_view query = uri.substr(question + 1);
  out += '?';
  for (;;) {
    const std::size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    const std::size_t eq = param.find('=');
    const std::string_view name = param.substr(0, eq);
    if (eq != std::string_view::npos && secret(name)) {
      out += param.substr(0, eq + 1);
      out += "***";
    } else {
      out += param;
    }
    if (amp == std::string_view::npos) break;
    out += '&';
    query.remove_prefix(amp + 1);
  }
  return out;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

// One "name=value": checked against the table and the scheme, then applied.
void parse_parameter(std::string_view uri, std::string_view param, Scheme scheme, bool db_in_path,
                     unsigned& seen, Endpoint& endpoint) {
  if (param.empty()) uri_fail(uri, "empty query parameter (stray '?' or '&')");
  const std::size_t eq = param.find('=');
  if (eq == std::string_view::npos)
    uri_fail(uri, "query parameter without '=' (expected name=value)");
  const std::string_view name = param.substr(0, eq);
  const std::string_view value = param.substr(eq + 1);
  if (name.empty()) uri_fail(uri, "query parameter with an empty name");
  const Parameter* known = find_parameter(name);
  if (known == nullptr) {
    uri_fail(uri,
             "unknown query parameter (expected db, connect_timeout, command_timeout, "
             "wait_replicas, wait_timeout, for "
             "rediss:// cacert, cacertdir, cert, key, sni, insecure, and for redis-sentinel:// "
             "sentinel_username, sentinel_password)");
  }
  const std::string quoted(name);
  if (known->needs == Needs::tls && !uses_tls(scheme)) {
    uri_fail(uri, "query parameter " + quoted + " is for TLS: use rediss:// or rediss-sentinel://");
  }
  if (known->needs == Needs::sentinel && !through_sentinel(scheme)) {
    uri_fail(uri, "query parameter " + quoted +
                      " is for Sentinel: use redis-sentinel:// or rediss-sentinel://");
  }
  const unsigned bit = 1U << static_cast<unsigned>(known - kParameters.data());
  if ((seen & bit) != 0) uri_fail(uri, "duplicate query parameter " + quoted);
  if (name == "db" && db_in_path) {
    uri_fail(uri, "db given twice (in the path and as a query parameter)");
  }
  if (value.empty()) uri_fail(uri, "query parameter " + quoted + " has an empty value");
  if (known->path != nullptr) {
    endpoint.tls.*known->path = decoded(uri, known->name, value);
  } else {
    known->apply(uri, value, endpoint);
  }
  seen |= bit;
}

void append_param(std::string& query, std::string_view name, std::string_view value) {
  if (name.empty() || value.empty()) return;
  query += query.empty() ? '?' : '&';
  query += name;
  query += '=';
  query += value;
}

}  // namespace

[[noreturn]] void uri_fail(std::string_view uri, std::string_view what) {
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

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) return false;
  }
  return true;
}

bool parse_number(std::string_view text, long long min, long long max, long long& out) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), is_digit)) return false;
  long long value = 0;
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) return false;  // std::errc::result_out_of_range
  if (value < min || value > max) return false;
  out = value;
  return true;
}

bool percent_decode(std::string_view text, std::string& out) {
  std::string decoded;
  decoded.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      decoded += text[i];
      continue;
    }
    if (text.size() - i < 3) return false;  // "%" or "%4" at the end
    if (!is_hex_digit(text[i + 1]) || !is_hex_digit(text[i + 2])) return false;
    decoded += static_cast<char>(hex_value(text[i + 1]) * 16 + hex_value(text[i + 2]));
    i += 2;
  }
  out = std::move(decoded);
  return true;
}

std::string percent_encode(std::string_view text, std::string_view keep) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        keep.find(c) != std::string_view::npos) {
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

void parse_query(std::string_view uri, std::string_view query, Scheme scheme, bool db_in_path,
                 Endpoint& endpoint) {
  unsigned seen = 0;
  for (;;) {
    const std::size_t amp = query.find('&');
    parse_parameter(uri, query.substr(0, amp), scheme, db_in_path, seen, endpoint);
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  const TlsOptions& tls = endpoint.tls;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    uri_fail(uri, "cert and key must be given together (client certificate and its key)");
  }
}

std::string format_query(const Endpoint& endpoint, DbIn db) {
  std::string query;
  if (db == DbIn::query && endpoint.database != 0) {
    append_param(query, "db", std::to_string(endpoint.database));
  }
  const Endpoint defaults;
  if (endpoint.connect_timeout != defaults.connect_timeout) {
    append_param(query, "connect_timeout", std::to_string(endpoint.connect_timeout.count()));
  }
  if (endpoint.command_timeout != defaults.command_timeout) {
    append_param(query, "command_timeout", std::to_string(endpoint.command_timeout.count()));
  }
  if (endpoint.wait_replicas != defaults.wait_replicas) {
    append_param(query, "wait_replicas", std::to_string(endpoint.wait_replicas));
  }
  if (endpoint.wait_timeout != defaults.wait_timeout) {
    append_param(query, "wait_timeout", std::to_string(endpoint.wait_timeout.count()));
  }
  if (!endpoint.sentinel.sentinels.empty()) {
    const Endpoint& first = endpoint.sentinel.sentinels.front();
    append_param(query, "sentinel_username", percent_encode(first.username));
    if (!first.password.empty()) append_param(query, "sentinel_password", "***");
  }
  const TlsOptions& tls = endpoint.tls;
  if (!tls.enabled) return query;
  constexpr std::string_view kPathCharacters = "/:+,";  // not @ (it ends userinfo)
  append_param(query, "cacert", percent_encode(tls.ca_file, kPathCharacters));
  append_param(query, "cacertdir", percent_encode(tls.ca_dir, kPathCharacters));
  append_param(query, "cert", percent_encode(tls.cert_file, kPathCharacters));
  append_param(query, "key", percent_encode(tls.key_file, kPathCharacters));
  append_param(query, "sni", percent_encode(tls.server_name, ":"));
  if (!tls.verify) append_param(query, "insecure", "1");
  return query;
}

}  // namespace detail
}  // namespace redlock
