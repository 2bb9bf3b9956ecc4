// src/api/observer.cpp: the Observer's empty hooks and the process-wide observer.
#include <redlock/observer.hpp>

#include <atomic>
#include <mutex>
#include <vector>

namespace redlock {
namespace {

std::atomic<Observer*> g_observer{nullptr};

}  // namespace

Observer::~Observer() = default;
void Observer::on_acquire(const AcquireEvent& /*event*/) noexcept {}
void Observer::on_release(const ReleaseEvent& /*event*/) noexcept {}
void Observer::on_extend(const ExtendEvent& /*event*/) noexcept {}
void Observer::on_lost(const LostEvent& /*event*/) noexcept {}
void Observer::on_node(const NodeEvent& /*event*/) noexcept {}
void Observer::on_wake(const WakeEvent& /*event*/) noexcept {}

void set_observer(std::shared_ptr<Observer> observer) {
  // Every observer ever set stays alive (never destroyed): a hook may still run on another
  // thread when it is replaced, and at exit.
  static std::mutex& mutex = *new std::mutex;
  static std::vector<std::shared_ptr<Observer>>& kept = *new std::vector<std::shared_ptr<Observer>>;
  std::lock_guard<std::mutex> guard(mutex);
  if (observer) kept.push_back(observer);
  g_observer.store(observer.get(), std::memory_order_release);
}

Observer* observer() noexcept { return g_observer.load(std::memory_order_acquire); }

const char* to_string(AcquireOutcome outcome) noexcept {
  switch (outcome) {
    case AcquireOutcome::acquired:
      return "acquired";
    case AcquireOutcome::contended:
      return "contended";
    case AcquireOutcome::failed:
      return "failed";
  }
  return "unknown";
}

const char* to_string(NodeHealth health) noexcept {
  switch (health) {
    case NodeHealth::reachable:
      return "reachable";
    case NodeHealth::unreachable:
      return "unreachable";
    case NodeHealth::slow:
      return "slow";
  }
  return "unknown";
}

}  // namespace redlock
