// bench/tls.cpp: section 7, TLS. The Lock cycle and Redlock(5) over rediss:// against a raw floor
// doing the same commands synchronously over OpenSSL (a blocking SSL socket, commands formatted
// by hiredis, replies decoded by hiredis's redisReader), the same operations in plain text on the
// same servers, and the cost of a reconnect (TCP connect + TLS handshake + PING) with and
// without session resumption (the library), next to a raw OpenSSL full handshake.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include <functional>  // std::function
#include <iostream>    // std::cout
#include <memory>      // std::unique_ptr
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string
#include <vector>      // std::vector

#include <fmt/format.h>

#include <redlock/redlock.hpp>

#include "bench.hpp"
#include "common.hpp"
#include "io/tls.hpp"
#include "raw.hpp"
#include "support/redis_server.hpp"
#include "support/tls_certs.hpp"

namespace bench {
namespace {

using redlock::test::RedisServer;

struct SslFree {
  void operator()(SSL* s) const noexcept { SSL_free(s); }
};
struct CtxFree {
  void operator()(SSL_CTX* c) const noexcept { SSL_CTX_free(c); }
};
struct ReaderFree {
  void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};

std::unique_ptr<SSL_CTX, CtxFree> raw_ctx() {
  std::unique_ptr<SSL_CTX, CtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  SSL_CTX_load_verify_locations(ctx.get(), redlock::test::tls_certs().ca.c_str(), nullptr);
  return ctx;
}

// The floor's connection: blocking socket, blocking SSL, hiredis's reader.
class RawTls {
 public:
  RawTls(SSL_CTX* ctx, int port) : reader_(redisReaderCreate()) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) {
      ::close(fd_);
      throw std::runtime_error("raw TLS: connect failed");
    }
    ssl_.reset(SSL_new(ctx));
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_.get()), "127.0.0.1");
    SSL_set_fd(ssl_.get(), fd_);
    if (SSL_connect(ssl_.get()) != 1) {
      ::close(fd_);
      throw std::runtime_error("raw TLS: handshake failed");
    }
  }
  ~RawTls() {
    ssl_.reset();
    ::close(fd_);
  }
  RawTls(const RawTls&) = delete;
  RawTls& operator=(const RawTls&) = delete;

  void append(int argc, const char** argv, const std::size_t* lens) {
    char* out = nullptr;
    const int n = redisFormatCommandArgv(&out, argc, argv, lens);
    if (n < 0 || SSL_write(ssl_.get(), out, n) != n) {
      redisFreeCommand(out);
      throw std::runtime_error("raw TLS: write failed");
    }
    redisFreeCommand(out);
  }
  RawReply read() {
    for (;;) {
      void* reply = nullptr;
      if (redisReaderGetReply(reader_.get(), &reply) != REDIS_OK) {
        throw std::runtime_error("raw TLS: protocol error");
      }
      if (reply != nullptr) return RawReply(static_cast<redisReply*>(reply));
      char buffer[16 * 1024];
      const int n = SSL_read(ssl_.get(), buffer, sizeof buffer);
      if (n <= 0) throw std::runtime_error("raw TLS: read failed");
      redisReaderFeed(reader_.get(), buffer, static_cast<std::size_t>(n));
    }
  }
  RawReply command(std::vector<std::string> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    append(static_cast<int>(argv.size()), argv.data(), lens.data());
    return read();
  }

 private:
  int fd_{-1};
  std::unique_ptr<SSL, SslFree> ssl_;
  std::unique_ptr<redisReader, ReaderFree> reader_;
};

// SET NX PX GET then EVALSHA release on N nodes, pipelined (all writes, then all reads).
class RawTlsQuorum {
 public:
  RawTlsQuorum(std::vector<RawTls*> nodes, std::string key)
      : nodes_(std::move(nodes)), key_(std::move(key)), channel_(key_ + ":released") {}
  bool run() {
    token_ = raw_token();
    const std::string ttl = std::to_string(kTtl.count());
    const char* set[] = {"SET", key_.data(), token_.data(), "NX", "PX", ttl.data(), "GET"};
    const std::size_t set_lens[] = {3, key_.size(), token_.size(), 2, 2, ttl.size(), 3};
    std::size_t granted = 0;
    for (RawTls* n : nodes_) n->append(7, set, set_lens);
    for (RawTls* n : nodes_) granted += n->read()->type == REDIS_REPLY_NIL ? 1 : 0;
    const std::string& sha = release_script_sha();
    const char* rel[] = {"EVALSHA",     sha.data(),      "1", key_.data(),
                         token_.data(), channel_.data(), "0"};
    const std::size_t rel_lens[] = {7, sha.size(), 1, key_.size(), token_.size(), channel_.size(),
                                    1};
    for (RawTls* n : nodes_) n->append(7, rel, rel_lens);
    for (RawTls* n : nodes_) n->read();
    return granted >= nodes_.size() / 2 + 1;
  }

 private:
  std::vector<RawTls*> nodes_;
  std::string key_;
  std::string channel_;
  std::string token_;
};

// Mean microseconds of `count` reconnects (connect, handshake, PING) made by `once`.
double reconnect_us(int count, const std::function<void()>& once) {
  once();
  const std::int64_t t0 = now_ns();
  for (int i = 0; i < count; ++i) once();
  return static_cast<double>(now_ns() - t0) / 1e3 / count;
}

std::string goal(bool met) { return met ? "goal met" : "goal MISSED"; }

// The five TLS servers (also listening in plain text), clients of both kinds and the floor's
// connections.
struct Fixture {
  explicit Fixture(const Config& config) : group(5, tls_options()), ctx(raw_ctx()) {
    for (std::size_t i = 0; i < group.size(); ++i) {
      const redlock::Endpoint e = endpoint_of(group[i], config.timeout);  // rediss://, its CA
      tls_clients.emplace_back(e);
      plain_clients.emplace_back(group[i].plain_endpoint());
      RawContext c = raw_connect(group[i].plain_endpoint());
      load_scripts(c.get());
      raw.push_back(std::make_unique<RawTls>(ctx.get(), group[i].tls_port()));
      raw_nodes.push_back(raw.back().get());
    }
  }
  static redlock::test::ServerOptions tls_options() {
    redlock::test::ServerOptions options;
    options.tls.enabled = true;
    return options;
  }

  redlock::test::ServerGroup group;
  std::unique_ptr<SSL_CTX, CtxFree> ctx;
  std::vector<redlock::Client> tls_clients;
  std::vector<redlock::Client> plain_clients;
  std::vector<std::unique_ptr<RawTls>> raw;
  std::vector<RawTls*> raw_nodes;
};

// Lock and Redlock(5) cycles: TLS library, raw TLS floor, plain library; table and JSON rows.
Json report_cycles(const Config& config, Fixture& f) {
  const std::string k1 = redlock::test::key("s5:lock");
  const std::string k5 = redlock::test::key("s5:redlock");
  redlock::Lock tls_lock(f.tls_clients[0], k1), plain_lock(f.plain_clients[0], k1 + ":plain");
  redlock::Redlock tls_red(f.tls_clients, k5), plain_red(f.plain_clients, k5 + ":plain");
  RawTlsQuorum raw_one({f.raw_nodes[0]}, k1 + ":raw");
  RawTlsQuorum raw_five(f.raw_nodes, k5 + ":raw");
  const std::vector<Timed> t =
      interleaved(config.rounds, config.seconds,
                  {[&] { return raw_one.run(); }, cycle_of(tls_lock), cycle_of(plain_lock),
                   [&] { return raw_five.run(); }, cycle_of(tls_red), cycle_of(plain_red)});
  Table table({"cycle", "cycles/s", "raw TLS floor", "ratio", "cpu us/cyc", "floor", "ratio",
               "plain cycles/s", "TLS/plain", "goal (>=0.95x rate, <=1.1x cpu)"});
  Json rows = Json::array();
  const char* names[] = {"Lock try_lock+unlock", "Redlock(5) try_lock+unlock"};
  for (int i = 0; i < 2; ++i) {
    const Timed& floor = t[3 * i];
    const Timed& lib = t[3 * i + 1];
    const Timed& plain = t[3 * i + 2];
    const double rate = ratio(lib.cycles_per_s, floor.cycles_per_s);
    const double cpu = ratio(lib.cpu_ns, floor.cpu_ns);
    table.row({names[i], num(lib.cycles_per_s), num(floor.cycles_per_s), times(rate),
               num(lib.cpu_ns / 1e3), num(floor.cpu_ns / 1e3), times(cpu), num(plain.cycles_per_s),
               times(ratio(lib.cycles_per_s, plain.cycles_per_s)),
               goal(rate >= 0.95 && cpu <= 1.1)});
    Json row = Json::object();
    row.set("cycle", names[i]);
    row.set("tls_cycles_per_s", lib.cycles_per_s);
    row.set("floor_cycles_per_s", floor.cycles_per_s);
    row.set("tls_cpu_us_per_cycle", lib.cpu_ns / 1e3);
    row.set("floor_cpu_us_per_cycle", floor.cpu_ns / 1e3);
    row.set("plain_cycles_per_s", plain.cycles_per_s);
    row.set("goal_met", rate >= 0.95 && cpu <= 1.1);
    rows.push(std::move(row));
  }
  table.print(std::cout);
  return rows;
}

// Reconnects: a new Client (own pool) per PING; the SSL_CTX and its sessions are process-wide.
void report_reconnects(const Config& config, Fixture& f, Json& j) {
  const int count = config.quick ? 20 : 200;
  const redlock::Endpoint e = f.tls_clients[0].endpoint();
  const auto library = [&] { redlock::Client(e).ping(); };
  redlock::detail::set_tls_resumption(redlock::detail::Resumption::not_offered);
  const double full = reconnect_us(count, library);
  redlock::detail::set_tls_resumption(redlock::detail::Resumption::offered);
  const double resumed = reconnect_us(count, library);
  const double plain =
      reconnect_us(count, [&] { redlock::Client(f.plain_clients[0].endpoint()).ping(); });
  const double raw_full =
      reconnect_us(count, [&] { RawTls(f.ctx.get(), f.group[0].tls_port()).command({"PING"}); });
  Table table(
      {"reconnect + PING", "full handshake us", "resumed us", "resumed/full", "plain TCP us"});
  table.row(
      {"library (new Client)", num(full), num(resumed), times(ratio(resumed, full)), num(plain)});
  table.row({"raw OpenSSL", num(raw_full), "-", "-", "-"});
  table.print(std::cout);
  j.set("reconnects", count);
  j.set("reconnect_full_us", full);
  j.set("reconnect_resumed_us", resumed);
  j.set("reconnect_plain_us", plain);
  j.set("raw_reconnect_full_us", raw_full);
}

}  // namespace

void section_tls(const Config& config, Report& report) {
  std::cout << "\n[7] TLS (rediss://, TLS 1.3, verified): Lock and Redlock(5) cycles vs a raw "
               "OpenSSL + hiredis-reader floor; TLS vs plain; reconnect cost\n";
  Fixture fixture(config);
  Json j = Json::object();
  j.set("rows", report_cycles(config, fixture));
  report_reconnects(config, fixture, j);
  report.sections.set("7_tls", std::move(j));
  std::cout << "  median of " << config.rounds << " interleaved rounds of " << config.seconds
            << " s, one thread; cpu = the calling thread's CPU; reconnects: mean of "
            << (config.quick ? 20 : 200) << "\n";
}

}  // namespace bench
