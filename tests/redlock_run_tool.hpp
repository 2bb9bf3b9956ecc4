// tests/redlock_run_tool.hpp: what the redlock-run test files share: a redlock-run process with
// its output captured (Tool), a temporary directory, and small helpers (run to completion, a
// server's URI, whether a key is held, a command that loops until SIGTERM).
//
//   Tool tool({"--redis", uri(server), "--key", k, "--", "true"});
//   CHECK(tool.wait() == 0);
//
// The binary's path comes from the build: REDLOCK_RUN_PATH="$<TARGET_FILE:redlock-run>".
#ifndef REDLOCK_TESTS_REDLOCK_RUN_TOOL_HPP
#define REDLOCK_TESTS_REDLOCK_RUN_TOOL_HPP

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.hpp"

#ifndef REDLOCK_RUN_PATH
#error "REDLOCK_RUN_PATH must name the redlock-run binary (see tests/CMakeLists.txt)"
#endif

namespace redlock_run_test {

using namespace std::chrono_literals;
using redlock::test::RedisServer;
using Clock = std::chrono::steady_clock;

// A directory for markers and captured output, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "redlock-run-test-XXXXXX");
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// One redlock-run process: stdin /dev/null, stdout and stderr captured in files. Dies with the
// test process (PR_SET_PDEATHSIG), and is killed by the destructor if still running (its
// command then gets SIGTERM through redlock-run's own PR_SET_PDEATHSIG).
// What a Tool's stdin is: /dev/null, or a pipe the test closes with close_stdin().
enum class Input { null, pipe };

class Tool {
 public:
  explicit Tool(std::vector<std::string> args, std::vector<std::string> extra_env = {},
                Input input = Input::null) {
    args.insert(args.begin(), REDLOCK_RUN_PATH);
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    int stdin_pipe[2] = {-1, -1};
    if (input == Input::pipe) REQUIRE(::pipe2(stdin_pipe, O_CLOEXEC) == 0);
    const std::string out = files_ / "stdout";
    const std::string err = files_ / "stderr";
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int null_fd =
        input == Input::pipe ? stdin_pipe[0] : ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    stdin_write_ = stdin_pipe[1];
    REQUIRE(out_fd >= 0);
    REQUIRE(err_fd >= 0);
    REQUIRE(null_fd >= 0);
    const pid_t parent = ::getpid();
    started_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls from here to execv.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGPIPE, &dfl, nullptr);
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (::dup2(null_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(126);
      ::close_range(3, ~0U, 0);  // no test sockets in redlock-run (nor in its command)
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(126);
    }
    ::close(out_fd);
    ::close(err_fd);
    ::close(null_fd);
    REQUIRE(pid_ > 0);
  }
  ~Tool() {
    close_stdin();
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Tool(const Tool&) = delete;
  Tool& operator=(const Tool&) = delete;

  pid_t pid() const { return pid_; }

  void close_stdin() {
    if (stdin_write_ >= 0) ::close(stdin_write_);
    stdin_write_ = -1;
  }

  bool running() {
    if (done_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) finish(status);
    return !done_;
  }

  // Waits for the exit. Returns the exit status; 1000 + N if redlock-run itself was killed by
  // signal N. Fails the test (and kills it) if it runs longer than `timeout`.
  int wait(Clock::duration timeout = 10s) {
    const auto deadline = Clock::now() + timeout;
    while (running()) {
      if (Clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        finish(status);
        FAIL("redlock-run still running after the timeout; stderr: " << err());
      }
      std::this_thread::sleep_for(5ms);
    }
    return status_;
  }

  // Start to exit (valid after wait()).
  Clock::duration elapsed() const { return ended_ - started_; }
  std::string out() const { return slurp(files_ / "stdout"); }
  std::string err() const { return slurp(files_ / "stderr"); }

 private:
  void finish(int status) {
    done_ = true;
    ended_ = Clock::now();
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
  }

  TempDir files_;
  int stdin_write_ = -1;
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = -1;
  Clock::time_point started_;
  Clock::time_point ended_;
};

// Waits until the command redlock-run runs has created `path` (it does so first thing once the
// lock is held). Returns false, with redlock-run's exit status and stderr reported, if redlock-run
// exits first or `timeout` passes; the timeout is long because an ASan build on a busy 2-core
// machine starts slowly, and a failure here is about redlock-run, not about speed.
inline bool command_started(Tool& tool, const std::string& path, Clock::duration timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  while (!exists(path)) {
    if (!tool.running() && !exists(path)) {
      UNSCOPED_INFO("redlock-run exited with " << tool.wait() << " before its command started"
                                               << "; stderr: " << tool.err());
      return false;
    }
    if (Clock::now() >= deadline) {
      UNSCOPED_INFO("redlock-run's command not started after the timeout; stderr: " << tool.err());
      return false;
    }
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Runs redlock-run to completion. Returns its exit status; stderr in `err` if given.
inline int run(std::vector<std::string> args, std::string* err = nullptr) {
  Tool tool(std::move(args));
  const int status = tool.wait();
  if (err != nullptr) *err = tool.err();
  return status;
}

inline std::string uri(const RedisServer& server) {
  return "redis://127.0.0.1:" + std::to_string(server.port());
}

inline bool held(const RedisServer& server, const std::string& k) {
  return server.raw({"EXISTS", k}).integer() == 1;
}

// A command that marks `started`, then loops until a signal; SIGTERM makes it mark `term` and
// exit 0 (or exit `term_status`).
inline std::vector<std::string> looping_command(const TempDir& dir, int term_status = 0) {
  return {"sh", "-c",
          "trap 'touch " + dir / "term" + "; exit " + std::to_string(term_status) +
              "' TERM; touch " + dir / "started" + "; while :; do sleep 0.05; done"};
}

inline std::vector<std::string> operator+(std::vector<std::string> a,
                                          const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace redlock_run_test

#endif  // REDLOCK_TESTS_REDLOCK_RUN_TOOL_HPP
