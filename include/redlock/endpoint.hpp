// redlock/endpoint.hpp: where one Redis instance lives, and how to reach it.
//
// An Endpoint is plain data. Build it field by field or parse a URI:
//
//   auto a = redlock::Endpoint::parse("redis://app:s3cret@127.0.0.1:6380/2");
//   auto b = redlock::Endpoint::parse("unix:///run/redis/redis.sock?db=1");
//   auto t = redlock::Endpoint::parse("rediss://cache.example.com:6380?cacert=/etc/ssl/ca.pem");
//   redlock::Endpoint c;            // 127.0.0.1:6379, db 0, 200 ms timeouts
//   c.port = 7000;
//
// wait_replicas=N and wait_timeout=ms (every scheme) ask for replica acknowledgements (below).
// Accepted URIs (anything else throws std::invalid_argument naming the bad part):
//   redis://[user[:password]@]host[:port][/db][?param=value&...]
//   rediss://[user[:password]@]host[:port][/db][?param=value&...]     (TLS)
//   unix://[user[:password]@]/path/to/socket[?db=N&...]
//   `redis-sentinel://[user[:password]@]host[:port][,host2[:port2]...][/db][?param=value&...]#service`
//   rediss-sentinel://...                                               (Sentinel, TLS everywhere)
//   redis-cluster://[user[:password]@]host[:port][,host2[:port2]...][?param=value&...]
//   rediss-cluster://...                                                (Redis Cluster, TLS)
// host may be a name, an IPv4 address or a bracketed IPv6 address ([::1]). user, password and
// parameter values are percent-decoded. Query parameters (every scheme): db, connect_timeout,
// command_timeout (the timeouts in whole milliseconds, e.g. ?command_timeout=500). rediss://
// only, named after redis-cli's flags: cacert (CA bundle file), cacertdir (CA directory), cert
// and key (client certificate and key, PEM, for mutual TLS), sni (the server name sent and
// verified; default: host) and insecure=1 (no verification at all: ask for it explicitly).
// A library built with -DREDLOCK_WITH_TLS=OFF rejects rediss://.
// The Sentinel forms (Lettuce's syntax) name the sentinels (default port 26379) and, after '#',
// the service: the lock talks to whichever server the sentinels report as that service's
// master. user and password are the master's; sentinel_username= and sentinel_password= log in
// to the sentinels. rediss-sentinel:// uses TLS (and its parameters) to the sentinels and to the
// master alike.
// The Cluster forms name seed nodes (default port 6379) of a Redis Cluster: the lock routes each
// key to the master that owns its slot (see ClusterOptions). user, password, TLS and the
// timeouts apply to every node; there is no database but 0.
#ifndef REDLOCK_ENDPOINT_HPP
#define REDLOCK_ENDPOINT_HPP

#include <chrono>       // std::chrono::milliseconds
#include <cstddef>      // std::size_t
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

namespace redlock {

// TLS for one endpoint (rediss://). Plain data; every field has a query parameter (see above).
// Connections with equal TlsOptions share one OpenSSL context (and its resumable sessions).
struct TlsOptions {
  // Use TLS (set by rediss://). Never falls back to plain text.
  bool enabled{false};
  // PEM file of trusted CA certificates (cacert=). Empty with an empty ca_dir: the system's
  // default trust store.
  std::string ca_file;
  // Directory of hashed CA certificates, as `openssl rehash` makes (cacertdir=).
  std::string ca_dir;
  // Client certificate chain (PEM) for servers that require one (tls-auth-clients yes), and its
  // unencrypted private key (cert=, key=); both or neither.
  std::string cert_file;
  std::string key_file;
  // The name sent as SNI and checked against the certificate (sni=). Empty: host. An IP address
  // is checked against the certificate's IP SANs and sent without SNI.
  std::string server_name;
  // Verify the server's chain and name (the default). false (insecure=1) accepts any certificate:
  // the traffic is encrypted but anyone in the path can read it; for tests only.
  bool verify{true};
};

// Upper bounds on what a reply may declare, checked before anything is allocated for it: a
// server (or anyone in the path of a plain connection) cannot make the client allocate
// gigabytes with one header, nor with many headers each within its own bound (nested arrays).
// A reply over a bound fails with ProtocolError naming the bound, and the connection is
// dropped. Every bound must be > 0: a Client refuses 0 with std::invalid_argument.
struct ReplyLimits {
  // Largest bulk string, in bytes (Redis's own proto-max-bulk-len default: 512 MiB).
  std::size_t max_bulk_bytes{512U * 1024U * 1024U};
  // Most elements in one array, at any level (each costs a pointer before it arrives).
  std::size_t max_elements{1024U * 1024U};
  // Most elements in one whole reply: the lengths of all its arrays, summed over every level of
  // nesting (each element costs a reply object, about 50 bytes, before it arrives). Default
  // 1,048,576, as max_elements: a flat array of that many still fits, 7 nested ones do not.
  std::size_t max_reply_elements{1024U * 1024U};
  // Most bytes one whole reply takes on the wire, summed over every level (headers, strings,
  // CR LF). Default 1 GiB: one bulk string of max_bulk_bytes fits.
  std::size_t max_reply_bytes{1024U * 1024U * 1024U};
};

struct Endpoint;

// Where to find a master through Redis Sentinel (redis-sentinel:// and rediss-sentinel://).
// Plain data. With `service` set, the Endpoint's host, port and unix_socket are not used: every
// new connection goes to the address the sentinels report for `service`, once ROLE has
// confirmed that it is a master. The Client asks again after a connection failure, after a
// READONLY, LOADING or MASTERDOWN reply, and at once when the sentinel it listens to announces
// +switch-master; pooled connections to a former master are dropped, never reused.
struct SentinelOptions {
  // The master's name, as in `sentinel monitor <name> ...`. Empty: not through Sentinel.
  std::string service;
  // The sentinels, asked in turn (the one that answers moves to the front). Each one's host and
  // port, its ACL user and password (sentinel_username=, sentinel_password=), its TLS settings
  // and its timeouts are used; database, max_connections and the sentinel field are ignored.
  // Must not be empty when service is set.
  std::vector<Endpoint> sentinels;
};

// Where to find a Redis Cluster (redis-cluster:// and rediss-cluster://). Plain data. With
// `seeds` set, the Endpoint's host, port and unix_socket are not used: the slot map comes from
// CLUSTER SLOTS, asked of the seeds in turn (then of the masters it names), and every command
// goes to the master that owns its key's slot, with one pool of connections per master. A MOVED
// reply refreshes the map (one refresh for a burst) and the command is sent again to the new
// owner; ASK sends it (after ASKING) to the importing node without changing the map; TRYAGAIN is
// retried after a short back-off. A cluster that is down (CLUSTERDOWN), a slot without an owner
// and seeds that all fail are errors (ConnectionError, ServerError), never an endless retry.
// Lock commands never go to a replica.
struct ClusterOptions {
  // Seed nodes: only each one's host and port are used; credentials, TLS, timeouts, reply caps
  // and wait_replicas come from the Endpoint that holds them. Empty: not a cluster.
  std::vector<Endpoint> seeds;
};

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
  // Most connections a Client keeps open to this endpoint for commands and locks at once
  // (in use, idle, or being closed after a timeout). An operation that finds all of them busy
  // waits, first come first served, for one to come back; it throws TimeoutError only if none
  // came back for connect_timeout + command_timeout (a long line that moves is waited out). A
  // Redlock's fan-out never waits (it would stall the other nodes behind a paused one): when all
  // of a node's connections are busy it opens one more for that attempt and closes it after, so
  // in-flight Redlock attempts are not bounded by this. The wake-on-release subscriber's
  // connection is extra. Must be 1..65536.
  std::size_t max_connections{16};
  // TLS settings; tls.enabled is what rediss:// sets. The connect timeout also bounds the TLS
  // handshake.
  TlsOptions tls;
  // Caps on reply headers (see ReplyLimits).
  ReplyLimits reply_limits;
  // Through Redis Sentinel when sentinel.service is set (see SentinelOptions).
  SentinelOptions sentinel;
  // Through Redis Cluster when cluster.seeds is set (see ClusterOptions). Not with sentinel.
  ClusterOptions cluster;
  // Replica safety (wait_replicas=, wait_timeout=): > 0 pipelines `WAIT wait_replicas
  // wait_timeout` behind every acquire and extend on this server, in the same round trip. A
  // grant or extend that fewer replicas acknowledged in time is rolled back (an extend counts
  // as not confirmed) and the attempt fails with ReplicationError, never as contention; in a
  // Redlock such a node counts as one that did not grant. 0 (the default): no WAIT. The reply
  // waits for WAIT, so wait_timeout must be shorter than command_timeout.
  int wait_replicas{0};
  std::chrono::milliseconds wait_timeout{100};

  // Parses a redis://, rediss://, unix://, redis-sentinel://, rediss-sentinel://,
  // redis-cluster:// or rediss-cluster:// URI (format above).
  // Returns the endpoint; fields the URI does not mention keep their defaults.
  // Throws std::invalid_argument naming the bad part (scheme, host, port, db, parameter, ...);
  // for rediss:// in a library built without TLS, the message names REDLOCK_WITH_TLS.
  // Thread-safe (pure function).
  static Endpoint parse(std::string_view uri);

  // "host:port" (IPv6 hosts in brackets), "unix:/path", "sentinel:<service>" through
  // Sentinel, or "cluster:<seed>,<seed>..." for a cluster. Never includes credentials.
  // Used in every message about this endpoint. Thread-safe (const).
  std::string address() const;

  // The endpoint as a URI (rediss:// with its TLS parameters when tls.enabled, the Sentinel form
  // through Sentinel, the Cluster form for a cluster), with the passwords replaced by "***";
  // parse() of it gives back every other field (reply_limits have no URI form). Thread-safe.
  std::string to_string() const;
};

}  // namespace redlock

#endif  // REDLOCK_ENDPOINT_HPP
