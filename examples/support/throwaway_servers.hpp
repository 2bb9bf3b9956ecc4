// examples/support/throwaway_servers.hpp: throwaway redis-server processes for the examples'
// --self-test and the demo, so that they link the library and nothing of the test harness.
//
//   example::ThrowawayServers servers(3);          // three servers on free loopback ports
//   redlock::Redlock lock(clients_of(servers.endpoints()), "key");
//   servers[1].pause();                            // SIGSTOP; resume() sends SIGCONT
//
// Each server runs without persistence on 127.0.0.1 and dies with its object (and with this
// process: PR_SET_PDEATHSIG). Not a test harness: no fault proxy, no logs; a copy of an example
// into another project drops this file along with its --self-test branch.
#ifndef REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_SERVERS_HPP
#define REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_SERVERS_HPP

#include <sys/types.h>  // pid_t

#include <cstddef>  // std::size_t
#include <memory>   // std::unique_ptr
#include <string>   // std::string
#include <vector>   // std::vector

#include <redlock/endpoint.hpp>  // Endpoint

namespace example {

// Throwaway TLS material for servers started with TLS: a CA and a server certificate (SAN
// 127.0.0.1 and localhost) made once per process with the `openssl` command line in a temporary
// directory, removed at exit. Throws std::runtime_error with openssl's output if it fails.
struct TlsFiles {
  std::string dir;
  std::string ca;  // what a client trusts (Endpoint::tls.ca_file)
  std::string cert;
  std::string key;
};
const TlsFiles& tls_files();

// Whether a throwaway server also listens with TLS.
enum class Tls { off, on };

// One redis-server child process. Not thread-safe: drive it from one thread.
class ThrowawayServer {
 public:
  // Starts redis-server (from PATH) on a free loopback port (and, with Tls::on, a second one for
  // TLS with tls_files()) and waits until it answers PING. Throws std::runtime_error if none
  // starts within a few seconds.
  explicit ThrowawayServer(Tls tls = Tls::off);
  // The same with more arguments for redis-server (e.g. {"--replicaof", "127.0.0.1", "6380"}),
  // and, when `sentinel_config` names a writable file, as a Redis Sentinel with that config.
  ThrowawayServer(Tls tls, std::vector<std::string> extra_args, std::string sentinel_config);
  // Kills the server (SIGKILL) and reaps it. Never throws.
  ~ThrowawayServer();
  ThrowawayServer(const ThrowawayServer&) = delete;
  ThrowawayServer& operator=(const ThrowawayServer&) = delete;

  // The TCP port it listens on (the same after restart()).
  int port() const noexcept { return port_; }
  // redis://127.0.0.1:<port>, or with Tls::on rediss://127.0.0.1:<TLS port>?cacert=<CA>.
  redlock::Endpoint endpoint() const;

  // SIGSTOP: the server stops answering, connections stay open.
  void pause() noexcept;
  // SIGCONT after pause().
  void resume() noexcept;
  // SIGKILL and reap: the server and everything it held are gone.
  void kill9() noexcept;
  // Starts it again on the same port, empty. Throws std::runtime_error if it does not come up.
  void restart();

 private:
  bool spawn_and_wait(int port);  // false: the child exited (port taken) or never answered

  Tls tls_{Tls::off};
  std::vector<std::string> extra_args_;
  std::string sentinel_config_;
  int port_{0};
  int tls_port_{0};
  pid_t pid_{-1};
};

// n servers, index 0..n-1.
class ThrowawayServers {
 public:
  // Starts n servers. Throws std::runtime_error if one does not start.
  explicit ThrowawayServers(std::size_t n, Tls tls = Tls::off);

  ThrowawayServer& operator[](std::size_t i) { return *servers_.at(i); }
  std::size_t size() const noexcept { return servers_.size(); }
  // Their endpoints, in index order.
  std::vector<redlock::Endpoint> endpoints() const;

 private:
  std::vector<std::unique_ptr<ThrowawayServer>> servers_;
};

}  // namespace example

#endif  // REDLOCK_EXAMPLES_SUPPORT_THROWAWAY_SERVERS_HPP
