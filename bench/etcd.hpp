// bench/etcd.hpp: what section 14 needs to drive other programs: a child process whose output
// is read line by line with a deadline (etcdctl, redlock-run, the bench's own leader mode), and
// an etcd server (Debian's etcd-server 3.4) on free loopback ports in a temporary data directory.
//
//   bench::EtcdServer etcd;                               // throws if it does not answer in 20 s
//   bench::Child leader({"/usr/bin/etcdctl", "--endpoints=" + etcd.endpoint(), "elect", "n", "A"});
//   leader.read_line(bench::now_ns() + 10'000'000'000);   // the key line: it leads
//   leader.signal(SIGINT);
#ifndef REDLOCK_BENCH_ETCD_HPP
#define REDLOCK_BENCH_ETCD_HPP

#include <sys/types.h>  // pid_t

#include <cstdint>  // std::int64_t
#include <memory>   // std::unique_ptr
#include <string>   // std::string
#include <vector>   // std::vector

namespace bench {

// A child process (fork + exec of argv[0], a path) with stdout, and stderr too when `merge` is
// true, on a pipe; otherwise stderr goes to /dev/null. It gets SIGKILL if this thread's process
// dies (PR_SET_PDEATHSIG). The destructor sends SIGKILL and reaps it. Not thread-safe.
class Child {
 public:
  enum class Stderr { discard, merged };
  explicit Child(const std::vector<std::string>& argv, Stderr err = Stderr::discard);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // The next line of output (without its newline), read until `deadline_ns` (now_ns() clock).
  // Throws std::runtime_error naming the program at the deadline or at end of output.
  std::string read_line(std::int64_t deadline_ns);
  // Reads lines until one contains `needle`; returns it. Throws as read_line.
  std::string read_until(const std::string& needle, std::int64_t deadline_ns);
  // Everything left until end of output or the deadline (then whatever was read).
  std::string read_all(std::int64_t deadline_ns);
  // kill(pid, sig); no-op once reaped.
  void signal(int sig);
  // Waits until it exits, SIGKILL at `deadline_ns`. Returns its waitpid status.
  int wait(std::int64_t deadline_ns);
  pid_t pid() const { return pid_; }

 private:
  bool fill(std::int64_t deadline_ns);  // reads more output; false at EOF or the deadline
  std::string program_;
  pid_t pid_{-1};
  int out_{-1};
  std::string buffer_;
};

// True if both etcd and etcdctl are installed where Debian puts them.
bool etcd_available();

// A single-member etcd on 127.0.0.1 (client and peer ports picked free), data in a temporary
// directory removed by the destructor, which also stops the server (SIGKILL, waited for).
class EtcdServer {
 public:
  // Starts it and waits until `etcdctl endpoint health` passes. Throws std::runtime_error.
  EtcdServer();
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // "http://127.0.0.1:<client port>"
  const std::string& endpoint() const { return endpoint_; }
  // etcdctl's argv with --endpoints set, then `args`.
  std::vector<std::string> ctl(std::vector<std::string> args) const;

 private:
  std::string dir_;
  std::string endpoint_;
  std::unique_ptr<Child> server_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_loopback_port();

}  // namespace bench

#endif  // REDLOCK_BENCH_ETCD_HPP
