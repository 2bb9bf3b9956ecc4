// src/io/sentinel.cpp: MasterLocator, the lookup of a Sentinel-managed master and the watcher
// that hears +switch-master (see sentinel.hpp).
#include "io/sentinel.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include <fmt/format.h>

#include <redlock/errors.hpp>
#include <redlock/reply.hpp>

#include "io/codec.hpp"
#include "io/executor.hpp"
#include "io/pool.hpp"
#include "io/wire.hpp"
#include "util/log_internal.hpp"
#include "util/shared_registry.hpp"

namespace redlock {
namespace detail {

namespace {

// Runs one command on `node` and returns its reply (error replies included). Throws the node's
// ConnectionError, TimeoutError, ProtocolError or handshake ServerError.
Reply run_one(ClientImpl& node, std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  NodeBatch batch;
  batch.node = &node;
  batch.commands.push_back(CommandView{static_cast<int>(argv.size()), argv.data(), lens.data()});
  execute(&batch, 1);
  if (batch.error) std::rethrow_exception(batch.error);
  return to_reply(batch.replies[0].get());
}

std::string host_port(const std::string& host, int port) {
  Endpoint e;
  e.host = host;
  e.port = port;
  return e.address();
}

}  // namespace

bool says_not_master(std::string_view error) noexcept {
  for (std::string_view code : {"READONLY", "LOADING", "MASTERDOWN"}) {
    if (error.substr(0, code.size()) == code) return true;
  }
  return false;
}

MasterLocator::MasterLocator(const Endpoint& endpoint) : template_(endpoint) {
  template_.sentinel = SentinelOptions{};
  template_.sentinel.service = endpoint.sentinel.service;  // kept only for the messages below
  for (const Endpoint& s : endpoint.sentinel.sentinels) {
    Endpoint plain = s;
    plain.database = 0;
    plain.max_connections = 2;  // a lookup and the watcher
    sentinels_.push_back(std::make_shared<ClientImpl>(std::move(plain)));
    order_.push_back(order_.size());
  }
}

MasterLocator::~MasterLocator() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }
  if (watcher_.joinable()) watcher_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

MasterLocator::Answer MasterLocator::master() {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (std::chrono::steady_clock::now() < gate_until_) {
      throw ConnectionError(fmt::format(
          "redlock: sentinel:{}: a failover is under way ({} is being promoted); no new "
          "connection to the old master meanwhile",
          template_.sentinel.service, hint_ ? host_port(hint_->host, hint_->port) : "a replica"));
    }
    if (current_) return {current_, epoch()};
  }
  std::lock_guard<std::mutex> one_lookup(resolve_mutex_);
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (current_) return {current_, epoch()};  // found by the lookup this caller waited for
  }
  Answer answer = resolve();
  std::call_once(watcher_once_, [this] { start_watcher(); });
  return answer;
}

void MasterLocator::stale(std::string_view why) noexcept {
  if (forget(why)) tell_followers();
}

bool MasterLocator::forget(std::string_view why) noexcept {
  std::shared_ptr<const Endpoint> was;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (!current_) return false;
    was = std::move(current_);
    current_.reset();
    epoch_.fetch_add(1, std::memory_order_acq_rel);
  }
  logf(LogLevel::info, "redlock: sentinel:{}: asking the sentinels again (was {}: {})",
       template_.sentinel.service, was->address(), why);
  return true;
}

void MasterLocator::tell_followers() noexcept {
  std::lock_guard<std::mutex> guard(followers_mutex_);
  for (const auto& follower : followers_) follower.second();
}

std::shared_ptr<void> MasterLocator::follow(std::function<void()> news) {
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> guard(followers_mutex_);
    id = ++last_follower_;
  }
  auto end = [self = shared_from_this(), id](char* registration) noexcept {
    {
      std::lock_guard<std::mutex> guard(self->followers_mutex_);
      auto& f = self->followers_;
      f.erase(std::remove_if(f.begin(), f.end(), [id](const auto& e) { return e.first == id; }),
              f.end());
    }
    delete registration;
  };
  // Made before the follower is added: if adding throws, the registration ends at once.
  std::shared_ptr<char> registration(new char(0), std::move(end));
  {
    std::lock_guard<std::mutex> guard(followers_mutex_);
    followers_.emplace_back(id, std::move(news));
  }
  return registration;
}

MasterLocator::Answer MasterLocator::resolve() {
  std::vector<std::size_t> order;
  std::unique_ptr<Reported> hint;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    order = order_;
    hint = std::move(hint_);
  }
  std::string log;
  if (hint) {  // a sentinel announced the new master: try it before asking
    log += fmt::format("announced {}", host_port(hint->host, hint->port));
    if (confirm(*hint, log)) {
      adopt(*hint, std::nullopt);
      std::lock_guard<std::mutex> guard(mutex_);
      return {current_, epoch()};
    }
  }
  std::vector<Reported> reported;
  std::size_t unknown = 0;
  for (std::size_t index : order) {
    const std::size_t before = reported.size();
    const Said said = ask(index, reported, log);
    if (said != Said::address) {
      unknown += said == Said::unknown ? 1U : 0U;
      continue;
    }
    const Reported& candidate = reported[before];
    const bool seen = std::any_of(reported.begin(), reported.begin() + before, [&](auto& r) {
      return r.host == candidate.host && r.port == candidate.port;
    });
    if (seen) continue;  // already found not to be a master
    if (confirm(candidate, log)) {
      adopt(candidate, index);
      std::lock_guard<std::mutex> guard(mutex_);
      return {current_, epoch()};
    }
  }
  const std::string& service = template_.sentinel.service;
  if (reported.empty() && unknown > 0) {
    throw ServerError(fmt::format("redlock: sentinel:{}: no sentinel knows the service '{}' "
                                  "(check the name after '#'): {}",
                                  service, service, log),
                      "");
  }
  if (reported.empty()) {
    throw ConnectionError(
        fmt::format("redlock: sentinel:{}: no sentinel answered: {}", service, log));
  }
  const bool disagree = std::any_of(reported.begin(), reported.end(), [&](const Reported& r) {
    return r.host != reported[0].host || r.port != reported[0].port;
  });
  throw ConnectionError(
      fmt::format("redlock: sentinel:{}: no address the sentinels report is a master now{}: {}",
                  service, disagree ? " (the sentinels disagree)" : "", log));
}

// Asks sentinel `index`. An address it reports is appended to `reported`; `log` says what it
// answered.
MasterLocator::Said MasterLocator::ask(std::size_t index, std::vector<Reported>& reported,
                                       std::string& log) {
  ClientImpl& sentinel = *sentinels_[index];
  const std::string& service = template_.sentinel.service;
  try {
    const Reply reply = run_one(sentinel, {"SENTINEL", "get-master-addr-by-name", service});
    if (reply.is_nil()) {
      log += fmt::format("{} does not know it; ", sentinel.address());
      return Said::unknown;
    }
    const auto& e = reply.elements();
    char* end = nullptr;
    const long port = e.size() == 2 ? std::strtol(e[1].str().c_str(), &end, 10) : 0;
    if (reply.is_error() || e.size() != 2 || end == nullptr || *end != '\0' || port < 1 ||
        port > 65535) {
      log += fmt::format("{} answered {}; ", sentinel.address(),
                         reply.is_error() ? reply.str() : "no host and port");
      return Said::failed;
    }
    reported.push_back(Reported{e[0].str(), static_cast<int>(port), index});
    log += fmt::format("{} reports {}", sentinel.address(), host_port(e[0].str(), port));
    return Said::address;
  } catch (const std::exception& error) {
    log += fmt::format("{}: {}; ", sentinel.address(), error.what());
    return Said::failed;
  }
}

// Asks the reported address for its ROLE. A master is confirmed; a replica, a sentinel or an
// unreachable server is not (and `log` says so). A wrong password for the master is thrown.
bool MasterLocator::confirm(const Reported& candidate, std::string& log) {
  Endpoint target = template_;
  target.sentinel = SentinelOptions{};
  target.host = candidate.host;
  target.port = candidate.port;
  target.max_connections = 1;
  ClientImpl probe(target);
  try {
    const Reply role = run_one(probe, {"ROLE"});
    const std::string what = role.elements().empty() ? role.str() : role.elements()[0].str();
    if (what == "master") {
      log += "; ";
      return true;
    }
    log += fmt::format(", which reports itself a {}; ", role.is_error() ? role.str() : what);
  } catch (const ServerError&) {
    throw;  // AUTH or SELECT refused: the master's credentials are wrong, asking again won't help
  } catch (const std::exception& error) {
    log += fmt::format(", unreachable: {}; ", error.what());
  }
  return false;
}

void MasterLocator::adopt(const Reported& candidate, std::optional<std::size_t> sentinel) {
  auto master = std::make_shared<Endpoint>(template_);
  master->sentinel = SentinelOptions{};
  master->host = candidate.host;
  master->port = candidate.port;
  std::lock_guard<std::mutex> guard(mutex_);
  current_ = std::move(master);
  if (sentinel) {  // the sentinel that answered is asked first next time
    const auto at = std::find(order_.begin(), order_.end(), *sentinel);
    std::rotate(order_.begin(), at, at + 1);
  }
  logf(LogLevel::info, "redlock: sentinel:{}: master is {}", template_.sentinel.service,
       current_->address());
}

void MasterLocator::start_watcher() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return;  // no watcher: failures and replies still trigger a new lookup
  try {
    watcher_ = std::thread([this] { watch(); });
  } catch (...) {
    ::close(wake_fd_);
    wake_fd_ = -1;
  }
}

std::shared_ptr<MasterLocator> shared_locator(const Endpoint& endpoint) {
  static auto& registry = *new SharedRegistry<MasterLocator>;  // never destroyed
  return registry.get(settings_key(endpoint),
                      [&endpoint] { return std::make_shared<MasterLocator>(endpoint); });
}

}  // namespace detail
}  // namespace redlock
