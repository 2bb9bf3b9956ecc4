// src/io/sentinel_listen.cpp: the MasterLocator's listener thread (see sentinel.hpp). It keeps
// a subscription on every sentinel, because a failover's progress is published only by the
// sentinel that leads it, and turns the events into a stale answer, a hint and a gate:
//
//   +failover-state-send-slaveof-noone  a replica is about to be promoted: until it is, the old
//                                       master still takes writes that its demotion will
//                                       discard, so no new connection is made (the gate)
//   +promoted-slave                     the replica is a master: the gate opens, and the next
//                                       lookup tries it first
//   +switch-master                      the failover is over (what sentinels that did not lead
//                                       it publish too)
//   -failover-abort-*, +failover-end-for-timeout
//                                       the failover did not happen: the gate opens
//
// Each of them is also told to the locator's followers (MasterLocator::follow: the subscriber
// for wake-on-release, which moves its connection and subscriptions to the new master).
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include <redlock/reply.hpp>

#include "io/codec.hpp"
#include "io/pool.hpp"
#include "io/sentinel.hpp"
#include "io/wire.hpp"
#include "util/log_internal.hpp"

namespace redlock {
namespace detail {

namespace {

using Clock = std::chrono::steady_clock;

// After a sentinel's subscription failed: the pause before it is tried again.
constexpr std::chrono::milliseconds kRelisten{500};
// The longest a failover may keep new connections away from the old master without news.
constexpr std::chrono::seconds kGate{5};

const char* const kChannels[] = {"SUBSCRIBE",
                                 "+failover-state-send-slaveof-noone",
                                 "+promoted-slave",
                                 "+switch-master",
                                 "+failover-end-for-timeout",
                                 "-failover-abort-not-elected",
                                 "-failover-abort-no-good-slave",
                                 "-failover-abort-slave-timeout"};

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t space = std::min(text.find(' ', at), text.size());
    words.push_back(text.substr(at, space - at));
    at = space + 1;
  }
  return words;
}

}  // namespace

void MasterLocator::watch() {
  const std::size_t n = sentinels_.size();
  std::vector<std::unique_ptr<Connection>> links(n);
  std::vector<Clock::time_point> retry_at(n);
  std::vector<bool> lost(n, false);
  std::vector<pollfd> fds;
  std::vector<std::size_t> of_fd;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (stopping_) return;
    }
    auto now = Clock::now();
    auto wake = Clock::time_point::max();
    bool buffered = false;
    fds.clear();
    of_fd.clear();
    for (std::size_t i = 0; i < n; ++i) {
      if (!links[i] && now >= retry_at[i]) {
        links[i] = subscribe(i, lost[i]);
        if (!links[i]) retry_at[i] = now + kRelisten;
        lost[i] = !links[i];
      }
      if (!links[i]) {
        wake = std::min(wake, retry_at[i]);
        continue;
      }
      fds.push_back({links[i]->transport.fd(), links[i]->transport.wanted(POLLIN), 0});
      of_fd.push_back(i);
      buffered = buffered || links[i]->transport.buffered();
    }
    fds.push_back({wake_fd_, POLLIN, 0});
    const long long wait_ms =
        wake == Clock::time_point::max()
            ? -1
            : std::max<long long>(
                  1, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count());
    if (!buffered && ::poll(fds.data(), fds.size(), static_cast<int>(wait_ms)) < 0) continue;
    now = Clock::now();
    for (std::size_t k = 0; k < of_fd.size(); ++k) {
      const std::size_t i = of_fd[k];
      if (fds[k].revents == 0 && !links[i]->transport.buffered()) continue;
      if (read_events(*links[i], i)) continue;
      links[i].reset();
      lost[i] = true;
      retry_at[i] = now + kRelisten;
    }
  }
}

// A connection to sentinel `index` subscribed to the failover events, or null (logged). After
// a lost subscription, events may have been missed: the answer becomes stale.
std::unique_ptr<Connection> MasterLocator::subscribe(std::size_t index, bool again) noexcept {
  ClientImpl& node = *sentinels_[index];
  try {
    std::unique_ptr<Connection> connection = node.connect_ready();
    constexpr int kCount = static_cast<int>(sizeof kChannels / sizeof kChannels[0]);
    std::size_t lens[kCount];
    for (int i = 0; i < kCount; ++i) lens[i] = std::char_traits<char>::length(kChannels[i]);
    append(*connection, CommandView{kCount, kChannels, lens}, Dialect::as_given);
    write_all(*connection, node.address());
    if (again) stale("listening to sentinel " + node.address() + " again: events may be missed");
    return connection;
  } catch (const std::exception& error) {
    logf(LogLevel::debug, "redlock: sentinel:{}: cannot listen to {}: {}",
         template_.sentinel.service, node.address(), error.what());
    return nullptr;
  }
}

// Reads what sentinel `index` sent. Returns false if the connection failed.
bool MasterLocator::read_events(Connection& connection, std::size_t index) noexcept {
  const IoResult read = read_some(connection);
  if (read.error != IoError::none && read.error != IoError::again) return false;
  try {
    ReplyPtr raw;
    for (Decoded d; (d = connection.in.next(raw)) != Decoded::need_more;) {
      if (d == Decoded::malformed) return false;
      const Reply message = to_reply(raw.get());
      const auto& e = message.elements();
      if (e.size() == 3 && e[0].str() == "message") hear(e[1].str(), e[2].str());
    }
    return true;
  } catch (const std::exception& error) {
    logf(LogLevel::debug, "redlock: sentinel:{}: event from {}: {}", template_.sentinel.service,
         sentinels_[index]->address(), error.what());
    return false;
  }
}

// One event (see the file comment). Payloads: "<type> <name> <ip> <port> @ <service> <ip>
// <port>" for an instance ("master <service> <ip> <port>" for the master itself), and
// "<service> <old ip> <old port> <new ip> <new port>" for +switch-master.
void MasterLocator::hear(const std::string& channel, const std::string& text) {
  const std::vector<std::string> w = words_of(text);
  const std::string& service = template_.sentinel.service;
  const bool about_replica = w.size() >= 6 && w[4] == "@" && w[5] == service;
  const bool about_master = w.size() >= 4 && w[0] == "master" && w[1] == service;
  std::size_t host = 0;  // where the new master's address is in `w`
  bool gate = false;
  if (channel == "+failover-state-send-slaveof-noone" && about_replica) {
    host = 2;
    gate = true;
  } else if (channel == "+promoted-slave" && about_replica) {
    host = 2;
  } else if (channel == "+switch-master" && w.size() == 5 && w[0] == service) {
    host = 3;
  } else if (channel != "+switch-master" && (about_master || about_replica)) {
    {
      std::lock_guard<std::mutex> guard(mutex_);  // an aborted or timed-out failover
      gate_until_ = Clock::time_point{};
    }
    tell_followers();  // a subscriber waiting for the gate may connect again
    return;
  } else {
    return;
  }
  char* end = nullptr;
  const long port = std::strtol(w[host + 1].c_str(), &end, 10);
  if (end == nullptr || *end != '\0' || port < 1 || port > 65535) return;
  {
    std::lock_guard<std::mutex> guard(mutex_);
    hint_ = std::make_unique<Reported>(Reported{w[host], static_cast<int>(port), 0});
    gate_until_ = gate ? Clock::now() + kGate : Clock::time_point{};
  }
  forget(channel + " " + text);
  tell_followers();  // even with no answer to forget: the gate changed, a master is announced
}

}  // namespace detail
}  // namespace redlock
