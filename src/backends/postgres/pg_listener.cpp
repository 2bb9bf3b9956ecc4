// src/backends/postgres/pg_listener.cpp: one LISTEN connection per Database and its thread.
// Lease mode: the connection is the process's waiter identity (see pg_listener.hpp).
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
#include "backends/postgres/pg_sql.hpp"
#include "util/token.hpp"

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

std::string pg_waiter_channel(std::uint64_t id) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id));
  return std::string("redlock_w_") + hex;
}

int pg_waiter_key(std::uint64_t id) noexcept { return static_cast<int>(id & 0x7fffffffU); }

namespace {
// A fresh random waiter id (never 0).
std::uint64_t new_waiter_id() {
  const std::uint64_t id = std::stoull(make_token().substr(0, 16), nullptr, 16);
  return id == 0 ? 1 : id;
}
}  // namespace

PgWatch::PgWatch(std::shared_ptr<PgListener> listener, std::string channel,
                 SteadyClock::time_point deadline) noexcept
    : listener_(std::move(listener)), channel_(std::move(channel)) {
  listener_->add(channel_, this, deadline);
}

PgWatch::PgWatch(std::shared_ptr<PgListener> listener, std::string prefix,
                 const std::string& token_sha1, SteadyClock::time_point deadline) noexcept
    : listener_(std::move(listener)), prefix_(std::move(prefix)) {
  try {
    channel_ = prefix_ + token_sha1;
  } catch (...) {  // out of memory: the tag matches nothing; the watch is left to its timer
  }
  listener_->add_tagged(channel_, this, deadline);
}

PgWatch::~PgWatch() {
  if (prefix_.empty()) {
    listener_->remove(channel_, this);
  } else {
    listener_->remove_tagged(channel_, this);
  }
}

void PgWatch::retoken(std::string token_sha1) noexcept {
  if (prefix_.empty()) return;
  try {
    std::string tag = prefix_ + token_sha1;
    listener_->retag(channel_, tag, this);
    channel_ = std::move(tag);
  } catch (...) {
  }
}

bool PgWatch::wait_until(SteadyClock::time_point until) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool woken = cv_.wait_until(lock, until, [&] { return woken_; });
  woken_ = false;
  return woken;
}

void PgWatch::wake() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  woken_ = true;
  if (waker_) waker_->wake_up();
  cv_.notify_all();
}

bool PgWatch::set_waker(Waker* waker) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  waker_ = waker;
  if (waker_ && woken_) waker_->wake_up();
  return true;
}

PgListener::PgListener(std::string uri, std::chrono::milliseconds timeout)
    : uri_(std::move(uri)), timeout_(timeout), id_(new_waiter_id()) {
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
  if (!take_identity(deadline) || !command("LISTEN " + pg_waiter_channel(id_), deadline)) {
    return false;
  }
  for (const auto& entry : channels_) {
    if (!command("LISTEN " + entry.first, deadline)) return false;
  }
  // Releases (and hand-overs) while there was no connection went unheard: everyone tries again.
  wake_all();
  const char byte = 0;
  (void)!::write(wake_pipe_[1], &byte, 1);  // the thread polls the new socket
  return true;
}

// The session takes the advisory lock on the waiter id (a new id if another session holds it:
// another process with the same low 31 bits, or this one's old session the server has not yet
// noticed is gone). Returns true once it holds one; on failure the connection is dropped.
bool PgListener::take_identity(SteadyClock::time_point deadline) {
  for (int tries = 0; tries < 8; ++tries) {
    std::string held;
    if (!query("SELECT pg_try_advisory_lock(" + std::to_string(kPgWaiterLockSpace) + ", " +
                   std::to_string(pg_waiter_key(id_)) + ")",
               deadline, &held)) {
      return false;
    }
    if (held == "t") {
      identified_ = true;
      return true;
    }
    try {
      id_ = new_waiter_id();
    } catch (...) {
      break;
    }
  }
  drop_connection();
  return false;
}

void PgListener::wake_all() noexcept {
  for (const auto* watches : {&channels_, &tagged_}) {
    for (const auto& entry : *watches) {
      for (PgWatch* watch : entry.second) watch->wake();
    }
  }
}

// Sends `sql` and waits for its answer until `deadline`; with `value`, the answer is a row and
// its first value goes there. On failure the connection is dropped. Returns true on success.
bool PgListener::query(const std::string& sql, SteadyClock::time_point deadline,
                       std::string* value) {
  if (conn_ == nullptr) return false;
  bool ok =
      PQsendQuery(conn_, sql.c_str()) != 0 && pg_wait_result(conn_, deadline) && !PQisBusy(conn_);
  while (ok) {
    PGresult* res = PQgetResult(conn_);
    if (res == nullptr) break;
    ok = PQresultStatus(res) == (value ? PGRES_TUPLES_OK : PGRES_COMMAND_OK);
    if (ok && value && PQntuples(res) > 0) *value = PQgetvalue(res, 0, 0);
    PQclear(res);
  }
  if (!ok || PQstatus(conn_) != CONNECTION_OK) {
    drop_connection();
    return false;
  }
  return true;
}

// LISTEN / UNLISTEN (as query); notifications read meanwhile are dispatched.
bool PgListener::command(const std::string& sql, SteadyClock::time_point deadline) {
  if (!query(sql, deadline, nullptr)) return false;
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
  identified_ = false;
  listening_.clear();
  wake_all();
}

void PgListener::dispatch() noexcept {
  if (conn_ == nullptr) return;
  const std::string mine = pg_waiter_channel(id_);
  while (PGnotify* note = PQnotifies(conn_)) {
    // A hand-over's payload: "g:" (granted) or "w:" (second: watch the lease) and the tag.
    const std::string payload = note->extra != nullptr ? note->extra : "";
    const auto& watches = note->relname == mine ? tagged_ : channels_;
    const auto found = watches.find(note->relname == mine
                                        ? payload.substr(std::min<std::size_t>(2, payload.size()))
                                        : std::string(note->relname));
    if (found != watches.end()) {
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

namespace {
// Takes `watch` out of `watches[key]`. True if it was the key's last (the key is erased).
bool unregister(std::map<std::string, std::vector<PgWatch*>>& watches, const std::string& key,
                PgWatch* watch) noexcept {
  const auto found = watches.find(key);
  if (found == watches.end()) return false;
  auto& list = found->second;
  list.erase(std::remove(list.begin(), list.end(), watch), list.end());
  if (!list.empty()) return false;
  watches.erase(found);
  return true;
}
}  // namespace

void PgListener::remove(const std::string& channel, PgWatch* watch) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!unregister(channels_, channel, watch)) return;
  try {
    if (conn_ != nullptr && listening_.count(channel) != 0) {
      command("UNLISTEN " + channel, SteadyClock::now() + timeout_);
    }
  } catch (...) {
  }
}

void PgListener::add_tagged(const std::string& tag, PgWatch* watch,
                            SteadyClock::time_point deadline) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    tagged_[tag].push_back(watch);
    ensure_connected(std::min(deadline, SteadyClock::now() + timeout_));
  } catch (...) {  // out of memory: the watch is left to its timer
  }
}

void PgListener::remove_tagged(const std::string& tag, PgWatch* watch) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  unregister(tagged_, tag, watch);
}

void PgListener::retag(const std::string& from, const std::string& to, PgWatch* watch) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);  // at once: no hand-over falls between the tags
  unregister(tagged_, from, watch);
  try {
    tagged_[to].push_back(watch);
  } catch (...) {  // out of memory: the watch is left to its timer
  }
}

std::uint64_t PgListener::identity(SteadyClock::time_point deadline) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    ensure_connected(std::min(deadline, SteadyClock::now() + timeout_));
    return identified_ ? id_ : 0;
  } catch (...) {
    return 0;
  }
}

std::uint64_t PgListener::identified() const noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  return identified_ ? id_ : 0;
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
      reconnect = conn_ == nullptr && !(channels_.empty() && tagged_.empty());
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
    if (conn_ == nullptr && !(channels_.empty() && tagged_.empty())) {
      try {
        ensure_connected(SteadyClock::now() + timeout_);
      } catch (...) {
      }
    }
  }
}

}  // namespace detail
}  // namespace redlock
