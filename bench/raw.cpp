// bench/raw.cpp: the raw hiredis floors (see raw.hpp).
#include "raw.hpp"

#include <sys/random.h>  // getrandom
#include <sys/time.h>    // timeval

#include <atomic>     // std::atomic
#include <cerrno>     // errno, EINTR
#include <stdexcept>  // std::runtime_error
#include <thread>     // std::this_thread::sleep_for
#include <utility>    // std::move
#include <vector>     // std::vector

#include <redlock/client.hpp>  // Script (its SHA1, computed locally)

#include "common.hpp"

namespace bench {

// Verbatim from src/protocol/scripts.cpp (kReleaseLua with its publish function, kExtendLua).
// bench.cpp checks with SCRIPT EXISTS, before the floor loads anything, that the library made the
// server cache these very bodies. The floor sends what the library sends to a standalone server:
// ARGV[3] "0" (classic PUBLISH).
const char kReleaseLua[] = R"(local function publish(channel, message)
  if ARGV[3] == '1' then
    local heard = redis.pcall('spublish', channel, message)
    if type(heard) == 'number' then return heard end
  end
  return redis.call('publish', channel, message)
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  return 1 + publish(ARGV[2], ARGV[1])
end
return 0)";

const char kExtendLua[] = R"(if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0)";

namespace {

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

[[noreturn]] void fail(const redisContext* c, const char* doing) {
  throw std::runtime_error(std::string("raw hiredis: ") + doing + ": " +
                           (c != nullptr && c->err != 0 ? c->errstr : "no reply"));
}

RawReply command_argv(redisContext* c, int argc, const char* const* argv, const std::size_t* lens) {
  // hiredis 0.14 takes `const char**` but does not modify the array.
  void* reply = redisCommandArgv(c, argc, const_cast<const char**>(argv), lens);
  if (reply == nullptr) fail(c, argv[0]);
  return RawReply(static_cast<redisReply*>(reply));
}

void check_not_error(const redisReply* r, const char* what) {
  if (r->type == REDIS_REPLY_ERROR) {
    throw std::runtime_error(std::string("raw hiredis: ") + what + " answered " +
                             std::string(r->str, r->len));
  }
}

}  // namespace

RawContext raw_connect(const redlock::Endpoint& endpoint) {
  RawContext c(redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port,
                                       to_timeval(endpoint.connect_timeout)));
  if (!c || c->err != 0) fail(c.get(), "connect");
  if (redisSetTimeout(c.get(), to_timeval(endpoint.command_timeout)) != REDIS_OK) {
    fail(c.get(), "set timeout");
  }
  return c;
}

RawReply raw_command(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs;
  std::vector<std::size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  return command_argv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data());
}

const std::string& release_script_sha() {
  static const std::string sha = redlock::Script(kReleaseLua).sha1();
  return sha;
}

const std::string& extend_script_sha() {
  static const std::string sha = redlock::Script(kExtendLua).sha1();
  return sha;
}

void load_scripts(redisContext* c) {
  for (const char* body : {kReleaseLua, kExtendLua}) {
    RawReply r = raw_command(c, {"SCRIPT", "LOAD", body});
    check_not_error(r.get(), "SCRIPT LOAD");
  }
}

bool script_cached(redisContext* c, const std::string& sha) {
  RawReply r = raw_command(c, {"SCRIPT", "EXISTS", sha});
  return r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
         r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

std::string raw_token() {
  unsigned char bytes[20];
  std::size_t done = 0;
  while (done < sizeof bytes) {
    const ssize_t n = getrandom(bytes + done, sizeof bytes - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("raw hiredis: getrandom failed");
    }
    done += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(40, '0');
  for (std::size_t i = 0; i < sizeof bytes; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return out;
}

// ---- RawLock ---------------------------------------------------------------------------------

RawLock::RawLock(redisContext* c, std::string key)
    : c_(c), key_(std::move(key)), ttl_(std::to_string(kTtl.count())) {
  channel_ = key_ + ":released";
}

bool RawLock::acquire() {
  token_ = raw_token();
  const char* argv[] = {"SET", key_.data(), token_.data(), "NX", "PX", ttl_.data(), "GET"};
  const std::size_t lens[] = {3, key_.size(), token_.size(), 2, 2, ttl_.size(), 3};
  RawReply r = command_argv(c_, 7, argv, lens);
  check_not_error(r.get(), "SET NX PX GET");
  return r->type == REDIS_REPLY_NIL;
}

bool RawLock::release() {
  const std::string& sha = release_script_sha();
  const char* argv[] = {"EVALSHA",     sha.data(),      "1", key_.data(),
                        token_.data(), channel_.data(), "0"};
  const std::size_t lens[] = {7, sha.size(), 1, key_.size(), token_.size(), channel_.size(), 1};
  RawReply r = command_argv(c_, 7, argv, lens);
  check_not_error(r.get(), "EVALSHA release");
  return r->type == REDIS_REPLY_INTEGER && r->integer >= 1;  // 1 + listeners
}

// ---- RawQuorum -------------------------------------------------------------------------------

RawQuorum::RawQuorum(std::vector<redisContext*> nodes, std::string key, bool pipelined)
    : nodes_(std::move(nodes)),
      key_(std::move(key)),
      ttl_(std::to_string(kTtl.count())),
      pipelined_(pipelined) {
  channel_ = key_ + ":released";
}

std::size_t RawQuorum::fan_out(const char* const* argv, const std::size_t* lens, int argc,
                               bool granted) {
  std::size_t yes = 0;
  auto count = [&](const redisReply* r) {
    check_not_error(r, argv[0]);
    yes +=
        granted ? r->type == REDIS_REPLY_NIL : (r->type == REDIS_REPLY_INTEGER && r->integer >= 1);
  };
  if (!pipelined_) {
    for (redisContext* c : nodes_) count(command_argv(c, argc, argv, lens).get());
    return yes;
  }
  for (redisContext* c : nodes_) {
    redisAppendCommandArgv(c, argc, const_cast<const char**>(argv), lens);
  }
  for (redisContext* c : nodes_) {
    int done = 0;
    while (done == 0) {
      if (redisBufferWrite(c, &done) == REDIS_ERR) fail(c, "write");
    }
  }
  for (redisContext* c : nodes_) {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr) fail(c, "read");
    RawReply r(static_cast<redisReply*>(reply));
    count(r.get());
  }
  return yes;
}

bool RawQuorum::acquire() {
  token_ = raw_token();
  const std::int64_t start = now_ns();
  const char* argv[] = {"SET", key_.data(), token_.data(), "NX", "PX", ttl_.data(), "GET"};
  const std::size_t lens[] = {3, key_.size(), token_.size(), 2, 2, ttl_.size(), 3};
  const std::size_t granted = fan_out(argv, lens, 7, true);
  // The same validity rule as the library: ttl - elapsed - (ttl * 0.01 + 2 ms) > 0.
  const std::int64_t ttl_ns = kTtl.count() * 1'000'000;
  const std::int64_t validity = ttl_ns - (now_ns() - start) - (ttl_ns / 100 + 2'000'000);
  const bool held = granted >= nodes_.size() / 2 + 1 && validity > 0;
  if (!held) release();  // roll back partial grants
  return held;
}

void RawQuorum::release() {
  const std::string& sha = release_script_sha();
  const char* argv[] = {"EVALSHA",     sha.data(),      "1", key_.data(),
                        token_.data(), channel_.data(), "0"};
  const std::size_t lens[] = {7, sha.size(), 1, key_.size(), token_.size(), channel_.size(), 1};
  fan_out(argv, lens, 7, false);
}

// ---- INFO, PING ------------------------------------------------------------------------------

std::map<std::string, std::uint64_t> command_calls(redisContext* c) {
  RawReply r = raw_command(c, {"INFO", "commandstats"});
  check_not_error(r.get(), "INFO commandstats");
  std::map<std::string, std::uint64_t> out;
  const std::string text(r->str, r->len);
  std::size_t at = 0;
  while ((at = text.find("cmdstat_", at)) != std::string::npos) {
    const std::size_t name_start = at + 8;
    const std::size_t colon = text.find(':', name_start);
    const std::size_t calls = text.find("calls=", colon);
    if (colon == std::string::npos || calls == std::string::npos) break;
    out[text.substr(name_start, colon - name_start)] =
        std::stoull(text.substr(calls + 6, text.find(',', calls) - (calls + 6)));
    at = colon;
  }
  return out;
}

std::string info_field(redisContext* c, const std::string& section, const std::string& field) {
  RawReply r = raw_command(c, {"INFO", section});
  if (r->type != REDIS_REPLY_STRING) return {};
  const std::string text(r->str, r->len);
  const std::string needle = field + ":";
  std::size_t at = text.rfind(needle, 0) == 0 ? 0 : text.find("\n" + needle);
  if (at == std::string::npos) return {};
  if (at != 0) ++at;
  const std::size_t start = at + needle.size();
  return text.substr(start, text.find_first_of("\r\n", start) - start);
}

std::vector<std::int64_t> publish_delivery(const redlock::Endpoint& endpoint, int count,
                                           std::chrono::microseconds idle) {
  RawContext publisher = raw_connect(endpoint);
  RawContext subscriber = raw_connect(endpoint);
  const std::string channel = "rltest:bench:delivery:" + raw_token();
  RawReply r = raw_command(subscriber.get(), {"SUBSCRIBE", channel});
  if (r->type != REDIS_REPLY_ARRAY) throw std::runtime_error("raw SUBSCRIBE failed");
  std::atomic<std::int64_t> sent{0};
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  std::string error;
  std::thread reader([&] {
    for (int i = 0; i < count; ++i) {
      void* raw = nullptr;
      if (redisGetReply(subscriber.get(), &raw) != REDIS_OK || raw == nullptr) {
        error = subscriber->errstr;
        return;
      }
      const std::int64_t got = now_ns();
      freeReplyObject(raw);
      out.push_back(got - sent.load());
    }
  });
  for (int i = 0; i < count && error.empty(); ++i) {
    std::this_thread::sleep_for(idle);
    sent.store(now_ns());
    raw_command(publisher.get(), {"PUBLISH", channel, "x"});
  }
  reader.join();
  if (!error.empty()) throw std::runtime_error("raw subscriber: " + error);
  return out;
}

std::vector<std::int64_t> ping_rtts(redisContext* c, int count, std::chrono::microseconds idle) {
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(count));
  const char* argv[] = {"PING"};
  const std::size_t lens[] = {4};
  for (int i = 0; i < count; ++i) {
    if (idle.count() > 0) std::this_thread::sleep_for(idle);
    const std::int64_t t0 = now_ns();
    RawReply r = command_argv(c, 1, argv, lens);
    out.push_back(now_ns() - t0);
  }
  return out;
}

}  // namespace bench
