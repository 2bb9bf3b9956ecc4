// examples/support/throwaway_sentinel.cpp: see throwaway_sentinel.hpp.
#include "throwaway_sentinel.hpp"

#include <stdlib.h>  // mkdtemp

#include <chrono>      // std::chrono
#include <filesystem>  // std::filesystem::remove_all
#include <fstream>     // std::ofstream
#include <stdexcept>   // std::runtime_error
#include <thread>      // std::this_thread::sleep_for

#include <redlock/client.hpp>
#include <redlock/errors.hpp>

namespace example {

namespace {

redlock::Reply ask(const ThrowawayServer& server, const std::vector<std::string_view>& argv) {
  return redlock::Client(server.endpoint()).command(argv);
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Polls `ready` every 50 ms for up to 20 s; throws naming `what` if it never is.
template <class Ready>
void await(const char* what, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    try {
      if (ready()) return;
    } catch (const redlock::Error&) {  // not up yet
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error(std::string("the Sentinel set did not come up: ") + what);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

ThrowawaySentinel::ThrowawaySentinel() {
  std::string pattern = (std::filesystem::temp_directory_path() / "redlock-demo-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = pattern;
  try {
    const std::vector<std::string> fast_sync = {"--repl-diskless-sync-delay", "0"};
    data_.push_back(std::make_unique<ThrowawayServer>(Tls::off, fast_sync, ""));
    const std::string master_port = std::to_string(data_[0]->port());
    for (int i = 0; i < 2; ++i) {
      std::vector<std::string> args = fast_sync;
      args.insert(args.end(), {"--replicaof", "127.0.0.1", master_port});
      data_.push_back(std::make_unique<ThrowawayServer>(Tls::off, args, ""));
    }
    await("replicas in sync", [&] {
      return count_of(ask(*data_[0], {"INFO", "replication"}).str(), "state=online") == 2;
    });
    for (int i = 0; i < 3; ++i) {
      const std::string config = dir_ + "/sentinel-" + std::to_string(i) + ".conf";
      std::ofstream(config) << "sentinel monitor " << kService << " 127.0.0.1 " << master_port
                            << " 2\nsentinel down-after-milliseconds " << kService
                            << " 500\nsentinel failover-timeout " << kService << " 2000\n";
      sentinels_.push_back(
          std::make_unique<ThrowawayServer>(Tls::off, std::vector<std::string>{}, config));
    }
    await("sentinels that know the replicas and each other", [&] {
      for (const auto& s : sentinels_) {
        if (ask(*s, {"SENTINEL", "REPLICAS", kService}).elements().size() != 2) return false;
        if (ask(*s, {"SENTINEL", "SENTINELS", kService}).elements().size() != 2) return false;
      }
      return true;
    });
  } catch (...) {
    sentinels_.clear();
    data_.clear();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    throw;
  }
}

ThrowawaySentinel::~ThrowawaySentinel() {
  sentinels_.clear();
  data_.clear();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

std::string ThrowawaySentinel::uri() const {
  std::string out = "redis-sentinel://";
  for (std::size_t i = 0; i < sentinels_.size(); ++i) {
    out += (i == 0 ? "127.0.0.1:" : ",127.0.0.1:") + std::to_string(sentinels_[i]->port());
  }
  return out + "#" + kService;
}

std::size_t ThrowawaySentinel::master_index() const {
  for (const auto& s : sentinels_) {
    try {
      const auto r = ask(*s, {"SENTINEL", "get-master-addr-by-name", kService});
      if (r.elements().size() != 2) continue;
      const int port = std::stoi(r.elements()[1].str());
      for (std::size_t i = 0; i < data_.size(); ++i) {
        if (data_[i]->port() == port) return i;
      }
    } catch (const redlock::Error&) {  // this sentinel is down: ask the next
    }
  }
  throw std::runtime_error("no sentinel reports a master");
}

bool ThrowawaySentinel::failover(std::string& why) {
  for (const auto& s : sentinels_) {
    try {
      ask(*s, {"SENTINEL", "FAILOVER", kService});
      return true;
    } catch (const redlock::ServerError& e) {
      why = e.server_message();
      return false;
    } catch (const redlock::Error& e) {
      why = e.what();
    }
  }
  return false;
}

}  // namespace example
