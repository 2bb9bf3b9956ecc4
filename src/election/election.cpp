// src/election/election.cpp: the public Election and StopToken, and the Redis form's
// construction (the lock engine's lease with fencing and renewal, and the Redis leader board).
#include <redlock/election.hpp>

#include <stdexcept>
#include <utility>

#include "api/access.hpp"
#include "core/engine.hpp"
#include "election/election_core.hpp"
#include "election/redis_board.hpp"
#include "election/settings.hpp"

namespace redlock {

bool StopToken::stop_requested() const noexcept {
  if (!state_) return false;
  std::lock_guard<std::mutex> guard(state_->mutex);
  return state_->stopped;
}

bool StopToken::wait_for(std::chrono::milliseconds timeout) const {
  if (!state_) return false;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait_for(lock, timeout, [&] { return state_->stopped; });
  return state_->stopped;
}

void StopToken::on_stop(std::function<void()> callback) const {
  if (!state_) return;
  {
    std::lock_guard<std::mutex> guard(state_->mutex);
    if (!state_->stopped) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
  }
  try {
    callback();
  } catch (...) {
  }
}

namespace {

std::shared_ptr<detail::ElectionCore> make_redis_election(std::vector<Client> instances,
                                                          std::string name, std::string id,
                                                          ElectionOptions options) {
  detail::check_election_names(name, id);
  if (instances.empty()) {
    throw std::invalid_argument("redlock: Election: instances must not be empty");
  }
  const LockOptions lock_options = detail::election_lock_options(options);
  std::string key = detail::election_key(name);
  std::vector<std::shared_ptr<detail::ClientImpl>> nodes;
  nodes.reserve(instances.size());
  for (const Client& client : instances) nodes.push_back(detail::Access::client(client));
  auto engine = detail::make_lease_engine(std::move(nodes), std::move(key), lock_options);
  auto board = std::make_shared<detail::RedisBoard>(engine);
  return std::make_shared<detail::ElectionCore>(std::move(engine), lock_options, std::move(board),
                                                std::move(name), std::move(id), std::move(options));
}

}  // namespace

Election::Election(Client client, std::string name, std::string id, ElectionOptions options)
    : Election(std::vector<Client>{std::move(client)}, std::move(name), std::move(id),
               std::move(options)) {}

Election::Election(std::vector<Client> instances, std::string name, std::string id,
                   ElectionOptions options)
    : core_(make_redis_election(std::move(instances), std::move(name), std::move(id),
                                std::move(options))) {}

Election::Election(std::shared_ptr<detail::ElectionCore> core) noexcept : core_(std::move(core)) {}

Election::~Election() { core_->shutdown(); }

std::uint64_t Election::campaign() {
  std::shared_ptr<detail::ElectionCore> core = core_;
  return *core->campaign(detail::SteadyClock::time_point::max());
}

std::optional<std::uint64_t> Election::try_campaign_for_ns(std::chrono::nanoseconds timeout) {
  std::shared_ptr<detail::ElectionCore> core = core_;
  const auto now = detail::SteadyClock::now();
  const auto left = detail::SteadyClock::time_point::max() - now;
  const auto deadline =
      timeout.count() <= 0 ? now
      : timeout >= left ? detail::SteadyClock::time_point::max() - detail::SteadyClock::duration(1)
                        : now + timeout;
  return core->campaign(deadline);
}

bool Election::resign() noexcept { return core_->resign(); }
bool Election::is_leader() const noexcept { return core_->is_leader(); }
std::uint64_t Election::term() const noexcept { return core_->term(); }
std::chrono::milliseconds Election::validity() const noexcept { return core_->validity(); }
LeaseToken Election::lease() const noexcept { return core_->lease(); }
std::optional<Leader> Election::leader() const { return core_->leader(); }

void Election::observe(std::function<void(const std::optional<Leader>&)> callback) {
  core_->observe(std::move(callback));
}

void Election::run(std::function<void(StopToken, std::uint64_t)> worker) {
  std::shared_ptr<detail::ElectionCore> core = core_;
  core->run(worker);
}

void Election::stop() noexcept { core_->stop(); }
const std::string& Election::name() const noexcept { return core_->name(); }
const std::string& Election::id() const noexcept { return core_->id(); }

}  // namespace redlock
