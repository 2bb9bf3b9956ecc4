// Consumer test of the ZooKeeper component: builds a Session and a Lock and expects a
// ConnectionError from a port nobody listens on (no ZooKeeper server needed). Exit 0 on success.
#include <cstdio>
#include <stdexcept>

#include <redlock/zookeeper.hpp>

int main() {
  try {
    redlock::zookeeper::Session bad("redis://127.0.0.1:1");
    std::puts("consumer_app: a redis:// URI was accepted as zookeeper://");
    return 1;
  } catch (const std::invalid_argument&) {
  }
  redlock::zookeeper::Session session("zookeeper://127.0.0.1:1/consumer?session_timeout=300");
  redlock::zookeeper::Lock lock(session, "job");
  try {
    lock.try_lock();
  } catch (const redlock::ConnectionError& e) {
    std::printf("consumer_app: zookeeper component linked; unreachable server: %s\n", e.what());
    return 0;
  }
  std::puts("consumer_app: try_lock on a closed port did not throw ConnectionError");
  return 1;
}
