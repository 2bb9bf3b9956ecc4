// src/util/shared_registry.hpp: one shared object per key for the whole process, kept alive only
// by its users (the registry holds weak references). Used for the objects Clients of the same
// settings share: the pub/sub subscriber, the Sentinel master locator.
//
//   static SharedRegistry<Subscriber>& registry = *new SharedRegistry<Subscriber>;
//   auto shared = registry.get(key, [&] { return std::make_shared<Subscriber>(...); });
#ifndef REDLOCK_SRC_UTIL_SHARED_REGISTRY_HPP
#define REDLOCK_SRC_UTIL_SHARED_REGISTRY_HPP

#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace redlock {
namespace detail {

template <class T>
class SharedRegistry {
 public:
  // The live object for `key`, or a new one from make() (called under the registry's mutex, so
  // two callers never make two). Entries whose objects are gone are forgotten on the way.
  // Throws what make() throws. Thread-safe.
  template <class Make>
  std::shared_ptr<T> get(const std::string& key, Make make) {
    std::lock_guard<std::mutex> guard(mutex_);
    std::weak_ptr<T>& entry = by_key_[key];
    if (std::shared_ptr<T> found = entry.lock()) return found;
    for (auto it = by_key_.begin(); it != by_key_.end();) {
      it = it->second.expired() && it->first != key ? by_key_.erase(it) : std::next(it);
    }
    std::shared_ptr<T> made = make();
    entry = made;
    return made;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<T>> by_key_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_UTIL_SHARED_REGISTRY_HPP
