// tools/redlock-run/holder.hpp: the holder's identity, <key>:holder, that --status shows next to
// a held plain lock or Redlock.
//
//   HolderRecord holder(clients, config);
//   holder.write();      // when the lock is held
//   holder.refresh();    // with each renewal, about every ttl/3
//   holder.erase();      // before the release
#ifndef REDLOCK_RUN_HOLDER_HPP
#define REDLOCK_RUN_HOLDER_HPP

#include <unistd.h>  // gethostname, getpid

#include <exception>    // std::exception
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <vector>       // std::vector

#include <redlock/redlock.hpp>  // Client, Script

#include "options.hpp"  // Config

namespace redlock_run {

// "host=H pid=P command=C": who holds the lock, for --status. The lock's token stays random;
// this side key has the lease's ttl, is refreshed with it, and is deleted on release (each only
// while it still carries our text, so a later holder's entry is never touched).
class HolderRecord {
 public:
  HolderRecord(const std::vector<redlock::Client>& clients, const Config& config)
      : clients_(clients), key_(config.key + ":holder"), ttl_(std::to_string(config.ttl.count())) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    text_ = "host=" + std::string(host) + " pid=" + std::to_string(::getpid()) + " command=";
    for (const auto& word : config.command)
      text_ += word + (&word == &config.command.back() ? "" : " ");
    if (config.command.empty()) text_ += "(--hold)";
  }

  void write() const { each({"SET", key_, text_, "PX", ttl_}); }
  void refresh() const { each_script(kRefresh); }
  void erase() const { each_script(kErase); }

 private:
  // Best effort on every server: --status is informational, the lock does not depend on it.
  void each(const std::vector<std::string_view>& argv) const {
    for (const auto& client : clients_) {
      try {
        client.command(argv);
      } catch (const std::exception&) {
      }
    }
  }
  void each_script(const redlock::Script& script) const {
    for (const auto& client : clients_) {
      try {
        client.eval(script, {key_}, {text_, ttl_});
      } catch (const std::exception&) {
      }
    }
  }

  inline static const redlock::Script kRefresh{
      "if redis.call('GET', KEYS[1]) == ARGV[1] then "
      "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"};
  inline static const redlock::Script kErase{
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
      "return 0"};

  const std::vector<redlock::Client>& clients_;
  std::string key_;
  std::string ttl_;
  std::string text_;
};

}  // namespace redlock_run

#endif  // REDLOCK_RUN_HOLDER_HPP
