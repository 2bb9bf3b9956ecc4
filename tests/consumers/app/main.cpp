// tests/consumers/app/main.cpp: the program every consumer test builds, as a user would, against
// redlock found one way or another (find_package, add_subdirectory, FetchContent, pkg-config).
//
//   consumer_app redis://127.0.0.1:PORT
//
// Takes a lock, sees a second Lock contend, releases, and catches a redlock::ConnectionError
// thrown inside the library by its type (which needs the library's type information exported).
// Exit status 0 and one line on stdout when all of that worked; 1 otherwise.
#include <cstdio>  // std::printf, std::fprintf
#include <mutex>   // std::lock_guard
#include <string>  // std::string

#include <redlock/redlock.hpp>  // Client, Endpoint, Lock, errors
#include <redlock/version.hpp>  // REDLOCK_VERSION_STRING

namespace {

// Returns true when a client of a port nothing listens on throws ConnectionError.
bool connection_error_is_caught() {
  try {
    redlock::Client client(redlock::Endpoint::parse("redis://127.0.0.1:1"));
    redlock::Lock lock(client, "consumer:unreachable");
    lock.try_lock();
  } catch (const redlock::ConnectionError&) {
    return true;
  } catch (const redlock::Error&) {
    return true;  // a TimeoutError is as good: caught by the library's base type
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_app redis://127.0.0.1:PORT\n");
    return 2;
  }
  try {
    redlock::Client client(redlock::Endpoint::parse(argv[1]));
    redlock::Lock lock(client, "consumer:test");
    redlock::Lock other(client, "consumer:test");
    {
      std::lock_guard<redlock::Lock> guard(lock);
      if (!lock.owns_lock() || other.try_lock()) {
        std::fprintf(stderr, "consumer_app: the lock does not exclude a second holder\n");
        return 1;
      }
    }
    if (!other.try_lock()) {
      std::fprintf(stderr, "consumer_app: the lock was not released\n");
      return 1;
    }
    other.unlock();
    if (!connection_error_is_caught()) {
      std::fprintf(stderr, "consumer_app: no redlock::Error for an unreachable server\n");
      return 1;
    }
    std::printf("consumer_app: redlock %s: locked, contended and released on %s\n",
                REDLOCK_VERSION_STRING, argv[1]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_app: %s\n", e.what());
    return 1;
  }
}
