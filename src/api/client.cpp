// src/api/client.cpp: the public Client handle and Script.
#include <redlock/client.hpp>

#include <netdb.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/connection.hpp"
#include "util/sha1.hpp"

namespace redlock {
namespace {

void validate(const Endpoint& ep);

// Through Sentinel: the service and every sentinel (each a plain host:port) must be usable.
void validate_sentinels(const Endpoint& ep) {
  if (ep.sentinel.sentinels.empty()) {
    throw std::invalid_argument(
        fmt::format("redlock: endpoint.sentinel.sentinels must not be empty (service '{}' set)",
                    ep.sentinel.service));
  }
  for (const Endpoint& sentinel : ep.sentinel.sentinels) {
    if (!sentinel.sentinel.service.empty() || !sentinel.unix_socket.empty()) {
      throw std::invalid_argument(
          "redlock: endpoint.sentinel.sentinels: each sentinel is a host and port (no unix "
          "socket, no service of its own)");
    }
    validate(sentinel);
  }
}

// A cluster: seeds that are plain host:port, and no Sentinel or database besides.
void validate_seeds(const Endpoint& ep) {
  if (!ep.sentinel.service.empty() || ep.database != 0) {
    throw std::invalid_argument(
        "redlock: endpoint.cluster.seeds: a cluster has no Sentinel service and no database but "
        "0");
  }
  for (const Endpoint& seed : ep.cluster.seeds) {
    if (!seed.cluster.seeds.empty() || !seed.sentinel.service.empty() ||
        !seed.unix_socket.empty()) {
      throw std::invalid_argument(
          "redlock: endpoint.cluster.seeds: each seed is a host and port (no unix socket)");
    }
    validate(seed);
  }
}

// Every reply cap must be > 0 (0 would refuse every reply that has what it bounds).
void validate_reply_limits(const ReplyLimits& caps) {
  const std::pair<const char*, std::size_t> limits[] = {
      {"max_bulk_bytes", caps.max_bulk_bytes},
      {"max_elements", caps.max_elements},
      {"max_reply_elements", caps.max_reply_elements},
      {"max_reply_bytes", caps.max_reply_bytes}};
  for (const auto& [name, value] : limits) {
    if (value == 0) {
      throw std::invalid_argument(
          fmt::format("redlock: endpoint.reply_limits.{} must be > 0 (0 would refuse every reply "
                      "that has one)",
                      name));
    }
  }
}

void validate(const Endpoint& ep) {
  if (!ep.cluster.seeds.empty()) {
    validate_seeds(ep);
  } else if (!ep.sentinel.service.empty()) {
    validate_sentinels(ep);
  } else if (ep.unix_socket.empty()) {
    if (ep.host.empty()) {
      throw std::invalid_argument("redlock: endpoint.host must not be empty (or set unix_socket)");
    }
    if (ep.port < 1 || ep.port > 65535) {
      throw std::invalid_argument(
          fmt::format("redlock: endpoint.port must be in 1..65535 (got {})", ep.port));
    }
  }
  if (ep.database < 0) {
    throw std::invalid_argument(
        fmt::format("redlock: endpoint.database must be >= 0 (got {})", ep.database));
  }
  constexpr std::chrono::hours kDay(24);
  if (ep.connect_timeout.count() <= 0 || ep.connect_timeout > kDay) {
    throw std::invalid_argument("redlock: endpoint.connect_timeout must be > 0 ms and <= 24 h");
  }
  if (ep.command_timeout.count() <= 0 || ep.command_timeout > kDay) {
    throw std::invalid_argument("redlock: endpoint.command_timeout must be > 0 ms and <= 24 h");
  }
  if (ep.wait_replicas < 0) {
    throw std::invalid_argument(
        fmt::format("redlock: endpoint.wait_replicas must be >= 0 (got {})", ep.wait_replicas));
  }
  if (ep.wait_replicas > 0 &&
      (ep.wait_timeout.count() <= 0 || ep.wait_timeout >= ep.command_timeout)) {
    throw std::invalid_argument(fmt::format(
        "redlock: endpoint.wait_timeout must be > 0 ms and shorter than command_timeout ({} ms), "
        "which bounds the reply that waits for WAIT (got {} ms)",
        ep.command_timeout.count(), ep.wait_timeout.count()));
  }
  if (ep.max_connections < 1 || ep.max_connections > 65536) {
    throw std::invalid_argument("redlock: endpoint.max_connections must be 1..65536");
  }
  validate_reply_limits(ep.reply_limits);
}

// Runs one batch on one node and returns its replies, throwing the node's error if any.
std::vector<detail::ReplyPtr> run(detail::ClientImpl& node,
                                  const std::vector<detail::CommandView>& commands) {
  detail::NodeBatch batch;
  batch.node = &node;
  batch.commands.reserve(commands.size());
  for (const auto& command : commands) batch.commands.push_back(command);
  detail::execute(&batch, 1);
  if (batch.error) std::rethrow_exception(batch.error);
  std::vector<detail::ReplyPtr> replies;
  replies.reserve(batch.replies.size());
  for (auto& reply : batch.replies) replies.push_back(std::move(reply));
  return replies;
}

struct ArgvStorage {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  explicit ArgvStorage(const std::vector<std::string_view>& args) {
    if (args.empty()) throw std::invalid_argument("redlock: argv must not be empty");
    argv.reserve(args.size());
    lens.reserve(args.size());
    for (auto a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
  }
  detail::CommandView view(const Script* script = nullptr) const {
    return detail::CommandView{static_cast<int>(argv.size()), argv.data(), lens.data(), script};
  }
};

// A reply as a message quotes it: its type and, for text, its first bytes (others escaped).
std::string describe(const Reply& reply) {
  switch (reply.type()) {
    case Reply::Type::nil:
      return "nil";
    case Reply::Type::integer:
      return fmt::format("the integer {}", reply.integer());
    case Reply::Type::array:
      return fmt::format("an array of {} elements", reply.elements().size());
    default:
      break;
  }
  constexpr std::size_t kShown = 40;
  std::string shown;
  for (std::size_t i = 0; i < reply.str().size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(reply.str()[i]);
    shown +=
        std::isprint(c) != 0 ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  if (reply.str().size() > kShown) shown += "...";
  return fmt::format("{} \"{}\"", reply.type() == Reply::Type::status ? "the status" : "the string",
                     shown);
}

}  // namespace

namespace detail {
namespace {

// The first address getaddrinfo gives for `host` (IPv4 first, as hiredis connects), in numeric
// form; the host in lower case if it does not resolve (the connect will fail and say so).
std::string resolved(const std::string& host) {
  for (int family : {AF_INET, AF_INET6}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) continue;
    char numeric[NI_MAXHOST] = {};
    const int rc = getnameinfo(found->ai_addr, found->ai_addrlen, numeric, sizeof numeric, nullptr,
                               0, NI_NUMERICHOST);
    freeaddrinfo(found);
    if (rc == 0) return family == AF_INET6 ? "[" + std::string(numeric) + "]" : numeric;
  }
  std::string lower = host;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

// The run_id field of INFO server, or empty.
std::string run_id_of(ClientImpl& node) {
  const char* argv[2] = {"INFO", "server"};
  const std::size_t lens[2] = {4, 6};
  const auto replies = run(node, {CommandView{2, argv, lens, nullptr}});
  const std::string_view info = text(replies.at(0).get());
  constexpr std::string_view kField = "run_id:";
  const auto at = info.find(kField);
  if (at == std::string_view::npos) return {};
  const auto start = at + kField.size();
  const auto end = info.find_first_of("\r\n", start);
  return std::string(info.substr(start, end == std::string_view::npos ? end : end - start));
}

}  // namespace

std::string ClientImpl::identity() {
  {
    std::lock_guard<std::mutex> guard(run_id_mutex);
    if (!run_id.empty()) return "run_id:" + run_id;
  }
  std::string id;
  try {
    // Two different addresses (or a unix socket and a TCP port) of one server share its run_id.
    id = run_id_of(*this);
  } catch (const std::exception&) {  // unreachable now: the address has to do
  }
  if (!id.empty()) {
    std::lock_guard<std::mutex> guard(run_id_mutex);
    run_id = id;
    return "run_id:" + id;
  }
  if (!endpoint_.unix_socket.empty()) return "unix:" + endpoint_.unix_socket;
  return resolved(endpoint_.host) + ":" + std::to_string(endpoint_.port);
}

}  // namespace detail

Script::Script(std::string body) : body_(std::move(body)), sha1_(detail::sha1_hex(body_)) {}

Client::Client(Endpoint endpoint) {
  validate(endpoint);
  impl_ = std::make_shared<detail::ClientImpl>(std::move(endpoint));
}

Client::Client(std::string_view uri) : Client(Endpoint::parse(uri)) {}

const Endpoint& Client::endpoint() const noexcept { return impl_->endpoint(); }

void Client::ping() const {
  const Reply reply = command({"PING"});
  // Redis answers +PONG; a proxy may answer the bulk string PONG. Anything else is not Redis.
  const bool pong = (reply.type() == Reply::Type::status || reply.type() == Reply::Type::string) &&
                    reply.str() == "PONG";
  if (!pong) {
    throw ProtocolError(fmt::format(
        "redlock: {} answered PING with {} instead of PONG; is it really a Redis server?",
        impl_->address(), describe(reply)));
  }
}

std::string Client::server_version() const {
  const Reply info = command({"INFO", "server"});
  const std::string& text = info.str();
  const std::string field = "redis_version:";
  const auto at = text.find(field);
  if (at == std::string::npos) {
    throw ProtocolError(
        fmt::format("redlock: INFO from {} has no redis_version field", impl_->address()));
  }
  const auto start = at + field.size();
  const auto end = text.find_first_of("\r\n", start);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// Pooled connections are shared by the locks: a command that changes a connection's state
// (its database, its user, its protocol, pub/sub or transaction mode) would change it for the
// next lock operation on it; SELECT could even make two holders possible.
void reject_stateful(const std::vector<std::string_view>& argv) {
  if (argv.empty()) return;
  static const char* const kStateful[] = {
      "SELECT",     "AUTH",        "HELLO",        "RESET",        "QUIT",      "MULTI",
      "EXEC",       "DISCARD",     "WATCH",        "UNWATCH",      "SUBSCRIBE", "PSUBSCRIBE",
      "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE", "MONITOR",   "SYNC",
      "PSYNC",      "READONLY",    "READWRITE",    "ASKING"};
  for (const char* name : kStateful) {
    if (iequals(argv[0], name)) {
      throw std::invalid_argument(
          fmt::format("redlock: argv: {} changes the state of a pooled connection the locks "
                      "share; use Endpoint::database or a separate Redis client for it",
                      argv[0]));
    }
  }
  if (argv.size() > 1 && iequals(argv[0], "CLIENT") &&
      (iequals(argv[1], "REPLY") || iequals(argv[1], "TRACKING") || iequals(argv[1], "NO-EVICT") ||
       iequals(argv[1], "NO-TOUCH"))) {
    throw std::invalid_argument(fmt::format(
        "redlock: argv: CLIENT {} changes the state of a pooled connection the locks share",
        argv[1]));
  }
}

}  // namespace

Reply Client::command(const std::vector<std::string_view>& argv) const {
  reject_stateful(argv);
  ArgvStorage storage(argv);
  auto replies = run(*impl_, {storage.view()});
  if (detail::is_error(replies[0].get())) {
    std::rethrow_exception(
        detail::server_error(impl_->address(), argv[0], detail::text(replies[0].get())));
  }
  return detail::to_reply(replies[0].get());
}

std::vector<Reply> Client::pipeline(
    const std::vector<std::vector<std::string_view>>& commands) const {
  if (commands.empty()) return {};
  std::vector<ArgvStorage> storage;
  storage.reserve(commands.size());
  std::vector<detail::CommandView> views;
  views.reserve(commands.size());
  for (const auto& c : commands) {
    reject_stateful(c);
    storage.emplace_back(c);
    views.push_back(storage.back().view());
  }
  auto replies = run(*impl_, std::move(views));
  std::vector<Reply> out;
  out.reserve(replies.size());
  for (const auto& r : replies) out.push_back(detail::to_reply(r.get()));
  return out;
}

Reply Client::eval(const Script& script, const std::vector<std::string_view>& keys,
                   const std::vector<std::string_view>& args) const {
  const std::string numkeys = std::to_string(keys.size());
  std::vector<std::string_view> argv{"EVALSHA", script.sha1(), numkeys};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  ArgvStorage storage(argv);
  auto replies = run(*impl_, {storage.view(&script)});
  if (detail::is_error(replies[0].get())) {
    std::rethrow_exception(
        detail::server_error(impl_->address(), "EVALSHA", detail::text(replies[0].get())));
  }
  return detail::to_reply(replies[0].get());
}

std::size_t Client::idle_connections() const { return impl_->idle(); }

}  // namespace redlock
