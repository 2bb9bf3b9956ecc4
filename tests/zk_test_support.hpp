// tests/zk_test_support.hpp: what the ZooKeeper test files share: a chroot per case, the URI
// with a session timeout, and worker processes that are this binary again running the hidden
// case "[.zkchild]" (tests/test_zookeeper.cpp; no fork of a multithreaded process).
//   const std::string uri = uri_of(server, fresh_chroot(), 2000);
//   const pid_t child = spawn_child({"REDLOCK_ZK_URI=" + uri, "REDLOCK_ZK_MODE=hold", ...});
#ifndef REDLOCK_TESTS_ZK_TEST_SUPPORT_HPP
#define REDLOCK_TESTS_ZK_TEST_SUPPORT_HPP

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/zookeeper_server.hpp"

extern char** environ;

namespace redlock::test::zk {

// A chroot no other case (or run) uses.
inline std::string fresh_chroot() {
  static std::atomic<int> n{0};
  return "/redlock-test-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
}

// The URI of `server` under `chroot`, with a session timeout of `timeout_ms`.
inline std::string uri_of(const redlock::test::ZooKeeperServer& server, const std::string& chroot,
                          int timeout_ms) {
  return server.uri(chroot + "?session_timeout=" + std::to_string(timeout_ms));
}

// Starts `args` (args[0] is the path) with this process's environment plus `env`; returns
// its pid.
inline pid_t spawn(std::vector<std::string> args, const std::vector<std::string>& env) {
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) envs.emplace_back(*e);
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  if (::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) != 0) {
    throw std::runtime_error("posix_spawn " + args[0] + " failed");
  }
  return pid;
}

// Runs this binary's "[.zkchild]" case with `env` added; returns its pid.
inline pid_t spawn_child(const std::vector<std::string>& env) {
  return spawn({"/proc/self/exe", "[.zkchild]", "--use-colour", "no"}, env);
}

// The exit code of `pid` (128 + the signal that ended it).
inline int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace redlock::test::zk

#endif  // REDLOCK_TESTS_ZK_TEST_SUPPORT_HPP
