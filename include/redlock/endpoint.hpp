// redlock/endpoint.hpp: where one Redis instance lives, and how to reach it.
//
// An Endpoint is plain data. Build it field by field or parse a URI:
//
//   auto a = redlock::Endpoint::parse("redis://app:s3cret@127.0.0.1:6380/2");
//   auto b = redlock::Endpoint::parse("unix:///run/redis/redis.sock?db=1");
//   redlock::Endpoint c;            // 127.0.0.1:6379, db 0, 200 ms timeouts
//   c.port = 7000;
//
// Accepted URIs (anything else throws std::invalid_argument naming the bad part):
//   redis://[user[:password]@]host[:port][/db][?param=value&...]
//   unix://[user[:password]@]/path/to/socket[?db=N&...]
// host may be a name, an IPv4 address or a bracketed IPv6 address ([::1]). user and password are
// percent-decoded. Query parameters (both schemes): db, connect_timeout, command_timeout (the
// timeouts in whole milliseconds, e.g. ?command_timeout=500). TLS (rediss://) is not supported.
#ifndef REDLOCK_ENDPOINT_HPP
#define REDLOCK_ENDPOINT_HPP

#include <chrono>       // std::chrono::milliseconds
#include <string>       // std::string
#include <string_view>  // std::string_view

namespace redlock {

struct Endpoint {
  // Host name or IP address. Ignored when unix_socket is set.
  std::string host{"127.0.0.1"};
  // TCP port, 1..65535. Ignored when unix_socket is set.
  int port{6379};
  // Path of a unix domain socket; when non-empty it is used instead of host:port.
  std::string unix_socket;
  // ACL user name. Set: every connection sends `AUTH username password`, also with an empty
  // password (`redis://app@host`): a `nopass` user accepts that, any other user answers
  // WRONGPASS, which surfaces as a ServerError naming AUTH. Empty: legacy `AUTH password` (when
  // password is set) or no AUTH at all (the server's `default` user).
  std::string username;
  // Password for AUTH. Empty with an empty username: no AUTH. Never appears in messages or logs.
  std::string password;
  // Logical database selected after connecting (SELECT); 0 sends no SELECT.
  int database{0};
  // Upper bound on establishing a TCP/unix connection. Must be > 0.
  std::chrono::milliseconds connect_timeout{200};
  // Upper bound on waiting for any one reply. Must be > 0. A lock operation on a hung server
  // costs at most about this much.
  std::chrono::milliseconds command_timeout{200};

  // Parses a redis:// or unix:// URI (format above).
  // Returns the endpoint; fields the URI does not mention keep their defaults.
  // Throws std::invalid_argument naming the bad part (scheme, host, port, db, parameter, ...).
  // Thread-safe (pure function).
  static Endpoint parse(std::string_view uri);

  // "host:port" (IPv6 hosts in brackets) or "unix:/path". Never includes credentials.
  // Used in every message about this endpoint. Thread-safe (const).
  std::string address() const;

  // The endpoint as a URI, with the password replaced by "***" if there is one. Thread-safe.
  std::string to_string() const;
};

}  // namespace redlock

#endif  // REDLOCK_ENDPOINT_HPP
