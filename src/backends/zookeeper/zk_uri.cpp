// src/backends/zookeeper/zk_uri.cpp: parsing `zookeeper://host:port[,...][/chroot][?...]`.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "backends/zookeeper/zk_session.hpp"

namespace redlock {
namespace detail {
namespace {

[[noreturn]] void bad(const std::string& what, std::string_view uri) {
  throw std::invalid_argument("redlock: zookeeper URI '" + std::string(uri) + "': " + what);
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// A decimal number in [lo, hi], or -1.
long long number_in(std::string_view s, long long lo, long long hi) {
  if (!all_digits(s) || s.size() > 12) return -1;
  const long long v = std::stoll(std::string(s));
  return v < lo || v > hi ? -1 : v;
}

// "host[:port]" -> "host:port" (port 2181 if missing); IPv6 literals in brackets.
std::string parse_host(std::string_view item, std::string_view uri) {
  if (item.empty()) bad("empty host in the host list", uri);
  std::string_view host = item;
  std::string_view port;
  if (item.front() == '[') {
    const auto close = item.find(']');
    if (close == std::string_view::npos)
      bad("unclosed '[' in host '" + std::string(item) + "'", uri);
    host = item.substr(0, close + 1);
    const auto rest = item.substr(close + 1);
    if (!rest.empty() && rest.front() != ':')
      bad("junk after ']' in '" + std::string(item) + "'", uri);
    if (!rest.empty()) port = rest.substr(1);
  } else if (const auto colon = item.rfind(':'); colon != std::string_view::npos) {
    host = item.substr(0, colon);
    port = item.substr(colon + 1);
    if (port.empty()) bad("empty port after '" + std::string(host) + ":'", uri);
  }
  if (host.empty() || host == "[]") bad("empty host name in '" + std::string(item) + "'", uri);
  for (char c : host) {
    if (c == '@' || c == ' ' || c == '/' || c == '?') {
      bad("bad character '" + std::string(1, c) + "' in host '" + std::string(host) + "'", uri);
    }
  }
  if (port.empty()) return std::string(host) + ":2181";
  if (number_in(port, 1, 65535) < 0) {
    bad("port '" + std::string(port) + "' is not a number in 1..65535", uri);
  }
  return std::string(host) + ":" + std::string(port);
}

std::string parse_chroot(std::string_view path, std::string_view uri) {
  if (path.empty() || path == "/") return "";
  if (path.back() == '/') bad("chroot '" + std::string(path) + "' must not end with '/'", uri);
  std::size_t start = 1;
  while (start <= path.size()) {
    auto end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const auto part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      bad("chroot '" + std::string(path) + "' has an empty, '.' or '..' part", uri);
    }
    start = end + 1;
  }
  return std::string(path);
}

void parse_query(std::string_view query, ZkUri& out, std::string_view uri) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = item.find('=');
    const auto name = item.substr(0, eq);
    const auto value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    if (name != "session_timeout") {
      bad("unknown parameter '" + std::string(name) + "' (known: session_timeout)", uri);
    }
    const long long ms = number_in(value, 1, INT32_MAX);
    if (ms < 0) {
      bad("session_timeout '" + std::string(value) + "' is not a number of milliseconds in 1.." +
              std::to_string(INT32_MAX),
          uri);
    }
    out.session_timeout = std::chrono::milliseconds(ms);
  }
}

}  // namespace

ZkUri parse_zk_uri(std::string_view uri) {
  constexpr std::string_view kScheme = "zookeeper://";
  if (uri.substr(0, kScheme.size()) != kScheme) bad("the scheme must be zookeeper://", uri);
  std::string_view rest = uri.substr(kScheme.size());
  ZkUri out;
  const auto q = rest.find('?');
  if (q != std::string_view::npos) {
    parse_query(rest.substr(q + 1), out, uri);
    rest = rest.substr(0, q);
  }
  const auto slash = rest.find('/');
  const auto hosts = rest.substr(0, slash);
  if (slash != std::string_view::npos) out.chroot = parse_chroot(rest.substr(slash), uri);
  if (hosts.empty()) bad("no host (expected host:port[,host:port...])", uri);
  std::size_t start = 0;
  for (;;) {
    const auto comma = hosts.find(',', start);
    const auto item = hosts.substr(start, comma == std::string_view::npos ? comma : comma - start);
    if (!out.hosts.empty()) out.hosts += ',';
    out.hosts += parse_host(item, uri);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace detail
}  // namespace redlock
