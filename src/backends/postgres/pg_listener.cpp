// src/backends/postgres/pg_listener.cpp: one LISTEN connection per Database and its thread.
// Every libpq call on the connection is made with mutex_ held; the thread only polls the socket
// without it. A lost connection wakes every watch (a release may have gone unheard: each waiter
// tries again), and while anyone watches the thread reconnects and LISTENs again.
#include "backends/postgres/pg_listener.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "backends/postgres/pg_database.hpp"

namespace redlock {
namespace detail {

std::uint64_t pg_hash64(const std::string& table, const std::string& name) noexcept {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a, 64 bits
  for (const std::string* part : {&table, &name}) {
    for (unsigned char c : *part) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0;  // the separator: a zero byte
    h *= 1099511628211ULL;
  }
  return h;
}

std::string pg_channel(const std::string& table, const std::string& name) {
  const std::uint64_t h = pg_hash64(table, name);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return std::string("redlock_") + hex;
}

PgWatch::PgWatch(std::shared_ptr<PgListener> listener, std::string channel,
                 SteadyClock::time_point deadline) noexcept
    : listener_(std::move(listener)), channel_(std::move(channel)) {
  listener_->add(channel_, this, deadline);
}

PgWatch::~PgWatch() { listener_->remove(channel_, this); }

bool PgWatch::wait_until(SteadyClock::time_point until) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool woken = cv_.wait_until(lock, until, [&] { return woken_; });
  woken_ = false;
  return woken;
}

void PgWatch::wake() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  woken_ = true;
  cv_.notify_all();
}

PgListener::PgListener(std::string uri, std::chrono::milliseconds timeout)
    : uri_(std::move(uri)), timeout_(timeout) {
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::bad_alloc();
  try {
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    ::close(wake_pipe_[0]);
    ::close(wake_pipe_[1]);
    throw;
  }
}

PgListener::~PgListener() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  const char byte = 0;
  (void)!::write(wake_pipe_[1], &byte, 1);
  thread_.join();
  if (conn_ != nullptr) PQfinish(conn_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

bool PgListener::ensure_connected(SteadyClock::time_point deadline) {
  if (conn_ != nullptr) return true;
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - SteadyClock::now());
  if (left.count() < 0) return false;
  const std::string seconds = std::to_string(std::max<long long>(2, left.count() + 1));
  const char* keys[] = {"dbname", "connect_timeout", nullptr};
  const char* values[] = {uri_.c_str(), seconds.c_str(), nullptr};
  conn_ = PQconnectdbParams(keys, values, 1);
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    drop_connection();
    return false;
  }
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);  // not on our stderr
  listening_.clear();
  for (const auto& entry : channels_) {
    if (!command("LISTEN " + entry.first, deadline)) return false;
  }
  // Releases while there was no connection went unheard: everyone tries again.
  for (const auto& entry : channels_) {
    for (PgWatch* watch : entry.second) watch->wake();
  }
  const char byte = 0;
  (void)!::write(wake_pipe_[1], &byte, 1);  // the thread polls the new socket
  return true;
}

// Sends `sql` (LISTEN / UNLISTEN) and waits for its answer until `deadline`; notifications read
// meanwhile are dispatched. On failure the connection is dropped. Returns true on success.
bool PgListener::command(const std::string& sql, SteadyClock::time_point deadline) {
  if (conn_ == nullptr) return false;
  bool ok =
      PQsendQuery(conn_, sql.c_str()) != 0 && pg_wait_result(conn_, deadline) && !PQisBusy(conn_);
  while (ok) {
    PGresult* res = PQgetResult(conn_);
    if (res == nullptr) break;
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
  }
  if (!ok || PQstatus(conn_) != CONNECTION_OK) {
    drop_connection();
    return false;
  }
  const bool listen = sql.rfind("LISTEN ", 0) == 0;
  const std::string channel = sql.substr(sql.find(' ') + 1);
  if (listen) listening_[channel] = true;
  if (!listen) listening_.erase(channel);
  dispatch();
  return true;
}

void PgListener::drop_connection() noexcept {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
  listening_.clear();
  for (const auto& entry : channels_) {
    for (PgWatch* watch : entry.second) watch->wake();
  }
}

void PgListener::dispatch() noexcept {
  if (conn_ == nullptr) return;
  while (PGnotify* note = PQnotifies(conn_)) {
    const auto found = channels_.find(note->relname);
    if (found != channels_.end()) {
      for (PgWatch* watch : found->second) watch->wake();
    }
    PQfreemem(note);
  }
}

void PgListener::add(const std::string& channel, PgWatch* watch,
                     SteadyClock::time_point deadline) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    channels_[channel].push_back(watch);
    deadline = std::min(deadline, SteadyClock::now() + timeout_);
    if (ensure_connected(deadline) && listening_.count(channel) == 0) {
      command("LISTEN " + channel, deadline);
    }
  } catch (...) {  // out of memory: the watch is left to its timer
  }
}

void PgListener::remove(const std::string& channel, PgWatch* watch) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = channels_.find(channel);
  if (found == channels_.end()) return;
  auto& watches = found->second;
  watches.erase(std::remove(watches.begin(), watches.end(), watch), watches.end());
  if (!watches.empty()) return;
  channels_.erase(found);
  try {
    if (conn_ != nullptr && listening_.count(channel) != 0) {
      command("UNLISTEN " + channel, SteadyClock::now() + timeout_);
    }
  } catch (...) {
  }
}

bool PgListener::live(const std::string& channel) const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return listening_.count(channel) != 0;
}

void PgListener::run() noexcept {
  for (;;) {
    int fd = -1;
    bool reconnect = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      fd = conn_ != nullptr ? PQsocket(conn_) : -1;
      reconnect = conn_ == nullptr && !channels_.empty();
    }
    pollfd fds[2] = {{wake_pipe_[0], POLLIN, 0}, {fd, POLLIN, 0}};
    // Without a connection but with watchers: try again every 200 ms.
    const int rc = ::poll(fds, fd >= 0 ? 2 : 1, reconnect ? 200 : (fd >= 0 ? -1 : 1000));
    char drain[64];
    while (::read(wake_pipe_[0], drain, sizeof drain) > 0) {
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    if (conn_ != nullptr && rc > 0 && fd >= 0 && fd == PQsocket(conn_) && fds[1].revents != 0) {
      if (PQconsumeInput(conn_) == 0) {
        drop_connection();
      } else {
        dispatch();
      }
    }
    if (conn_ == nullptr && !channels_.empty()) {
      try {
        ensure_connected(SteadyClock::now() + timeout_);
      } catch (...) {
      }
    }
  }
}

}  // namespace detail
}  // namespace redlock
