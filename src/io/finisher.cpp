// src/io/finisher.cpp: the process-wide finisher thread behind finish_in_background(), and its
// job thread behind run_in_background().
#include "io/finisher.hpp"

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace redlock {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

class Finisher {
 public:
  // Never destroyed: its detached thread may still run while static destructors do.
  static Finisher& get() {
    static Finisher* finisher = new Finisher();
    return *finisher;
  }

  void finish(std::unique_ptr<Connection> connection, std::size_t owed) noexcept {
    Item item{std::move(connection), owed, false, Clock::now() + kFinishFor};
    if (settled(item)) return;  // nothing owed, or the connection is over already
    try {
      std::lock_guard<std::mutex> guard(mutex_);
      if (!started_) {
        std::thread([this] { run(); }).detach();
        started_ = true;
      }
      queue_.push_back(std::move(item));
    } catch (...) {  // no thread or no memory: the connection is closed unfinished
      return;
    }
  }

 private:
  static constexpr std::chrono::minutes kFinishFor{10};
  struct Item {
    std::unique_ptr<Connection> connection;
    std::size_t owed{0};  // replies the server still owes
    bool written{false};  // all sent (or failed)
    Clock::time_point until;
  };

  // Reads and decodes what has arrived without blocking, counting the replies owed; true once
  // every one has come, or the connection is over (closed, failed, not RESP).
  static bool drain(Item& item) noexcept {
    Connection& connection = *item.connection;
    for (;;) {
      while (item.owed > 0) {
        ReplyPtr reply;
        const Decoded decoded = connection.in.next(reply);
        if (decoded == Decoded::malformed) return true;
        if (decoded == Decoded::need_more) break;
        --item.owed;
      }
      if (item.owed == 0) return true;
      const IoResult result = read_some(connection);
      if (result.error != IoError::none) return result.error != IoError::again;
    }
  }

  // Sends without blocking; true when all is written or it failed.
  static bool write_rest(Item& item) noexcept {
    const IoResult result = write_some(*item.connection);
    if (result.error == IoError::again) return false;
    item.written = true;
    return true;
  }

  // True when the item may be closed: all written and every reply owed read, so the server has
  // run everything sent on it; or the connection is over. Our side never ends the stream first:
  // a server that postpones commands (CLIENT PAUSE, a failover's pause of writes) and reads an
  // end of stream frees the client with its postponed commands, and a release would be lost.
  static bool settled(Item& item) noexcept {
    if (!item.written && !write_rest(item)) return false;
    return drain(item);
  }

  // Runs while there is work, then ends (a later finish() starts a new thread): an idle process
  // keeps no thread of ours, so a fork() that follows finds only the threads it started.
  void run() {
    std::vector<Item> items;
    std::vector<pollfd> fds;
    for (;;) {
      if (!take_queued(items)) return;
      fds.clear();
      for (const auto& item : items) {
        // A TLS connection may want the other direction (its handshake, or a record).
        const short events = item.connection->transport.wanted(item.written ? POLLIN : POLLOUT);
        fds.push_back(pollfd{item.connection->transport.fd(), events, 0});
      }
      // Short: new items join on the next pass, and a send queue empties without an event.
      ::poll(fds.data(), fds.size(), 50);
      const auto now = Clock::now();
      std::size_t kept = 0;
      for (auto& item : items) {
        if (now < item.until && !settled(item)) items[kept++] = std::move(item);
      }
      items.resize(kept);
    }
  }

  // Moves newly queued items to `items`. False when there is nothing left to do: the thread
  // then ends (started_ is cleared under the same mutex finish() checks it under).
  bool take_queued(std::vector<Item>& items) {
    std::lock_guard<std::mutex> guard(mutex_);
    for (auto& item : queue_) items.push_back(std::move(item));
    queue_.clear();
    if (items.empty()) started_ = false;
    return !items.empty();
  }

  std::mutex mutex_;
  std::vector<Item> queue_;  // guarded by mutex_
  bool started_{false};      // guarded by mutex_
};

// The jobs of run_in_background(): a thread of their own, so that a job that blocks (a release
// to a server that does not answer) never holds up the connections being finished.
class Jobs {
 public:
  // Never destroyed, as the Finisher.
  static Jobs& get() {
    static Jobs* jobs = new Jobs();
    return *jobs;
  }

  void add(std::function<void()>& job) noexcept {
    try {
      std::lock_guard<std::mutex> guard(mutex_);
      queue_.push_back(std::move(job));
      if (started_) return;
      try {
        std::thread([this] { run(); }).detach();
        started_ = true;
        return;
      } catch (...) {  // no thread: take the job back and run it here
        job = std::move(queue_.back());
        queue_.pop_back();
      }
    } catch (...) {  // no memory to queue it: run it here
    }
    run_one(job);
  }

 private:
  static void run_one(std::function<void()>& job) noexcept {
    try {
      if (job) job();
    } catch (...) {  // documented: a job must not throw; what it throws is swallowed
    }
  }

  // Runs jobs until none is left, then ends (a later add() starts a new thread): an idle
  // process keeps no thread of ours.
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::lock_guard<std::mutex> guard(mutex_);
        if (queue_.empty()) {
          started_ = false;
          return;
        }
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      run_one(job);
    }
  }

  std::mutex mutex_;
  std::deque<std::function<void()>> queue_;  // guarded by mutex_
  bool started_{false};                      // guarded by mutex_
};

}  // namespace

void finish_in_background(std::unique_ptr<Connection> connection, std::size_t owed) noexcept {
  if (connection) Finisher::get().finish(std::move(connection), owed);
}

void run_in_background(std::function<void()> job) noexcept { Jobs::get().add(job); }

}  // namespace detail
}  // namespace redlock
