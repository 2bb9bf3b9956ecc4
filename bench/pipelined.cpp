// bench/pipelined.cpp: the pipelined floor of section 13 (see pipelined.hpp).
#include "pipelined.hpp"

#include <poll.h>  // poll

#include <cerrno>     // errno, EINTR
#include <stdexcept>  // std::runtime_error
#include <utility>    // std::move

namespace bench {
namespace {

[[noreturn]] void fail(const redisContext* c, const char* doing) {
  throw std::runtime_error(std::string("pipelined floor: ") + doing + ": " +
                           (c->err != 0 ? c->errstr : "no reply"));
}

}  // namespace

PipelinedFloor::PipelinedFloor(const std::vector<redlock::Endpoint>& nodes,
                               std::vector<std::string> keys)
    : ttl_(std::to_string(kTtl.count())) {
  for (const auto& e : nodes) {
    Node node;
    node.context = raw_connect(e);
    load_scripts(node.context.get());
    nodes_.push_back(std::move(node));
  }
  for (auto& k : keys) {
    Slot s;
    s.channel = k + ":released";
    s.key = std::move(k);
    slots_.push_back(std::move(s));
  }
}

// Appends the slot's next command (its SET with a new token, or its release) to every node.
void PipelinedFloor::send(std::size_t slot) {
  Slot& s = slots_[slot];
  if (!s.releasing) s.token = raw_token();
  const std::string& sha = release_script_sha();
  const char* set[] = {"SET", s.key.data(), s.token.data(), "NX", "PX", ttl_.data(), "GET"};
  const std::size_t set_lens[] = {3, s.key.size(), s.token.size(), 2, 2, ttl_.size(), 3};
  const char* release[] = {"EVALSHA",      sha.data(),       "1", s.key.data(),
                           s.token.data(), s.channel.data(), "0"};
  const std::size_t release_lens[] = {
      7, sha.size(), 1, s.key.size(), s.token.size(), s.channel.size(), 1};
  for (Node& n : nodes_) {
    const int rc = s.releasing ? redisAppendCommandArgv(n.context.get(), 7, release, release_lens)
                               : redisAppendCommandArgv(n.context.get(), 7, set, set_lens);
    if (rc != REDIS_OK) fail(n.context.get(), "append");
    n.waiting.push_back(slot);
    n.unsent = true;
  }
  s.answers = 0;
  s.granted = 0;
  if (s.idle) ++busy_;
  s.idle = false;
}

void PipelinedFloor::flush() {
  for (Node& n : nodes_) {
    if (!n.unsent) continue;
    int done = 0;
    while (done == 0) {
      if (redisBufferWrite(n.context.get(), &done) == REDIS_ERR) fail(n.context.get(), "write");
    }
    n.unsent = false;
  }
}

// One node's reply for `slot`: counts it, and once every node answered, moves the slot on.
void PipelinedFloor::answered(std::size_t slot, bool yes, const std::atomic<bool>& stop,
                              std::atomic<std::uint64_t>& cycles) {
  Slot& s = slots_[slot];
  s.granted += yes ? 1 : 0;
  if (++s.answers < nodes_.size()) return;
  if (!s.releasing) {
    if (s.granted != nodes_.size()) {
      throw std::runtime_error("pipelined floor: SET NX refused on a key of its own: " + s.key);
    }
    s.releasing = true;
    send(slot);
    return;
  }
  if (s.granted != nodes_.size()) {
    throw std::runtime_error("pipelined floor: a release found the key not its own: " + s.key);
  }
  cycles.store(cycles.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  s.releasing = false;
  if (stop.load(std::memory_order_relaxed)) {
    s.idle = true;
    --busy_;
    return;
  }
  send(slot);
}

void PipelinedFloor::read(Node& node, const std::atomic<bool>& stop,
                          std::atomic<std::uint64_t>& cycles) {
  redisContext* c = node.context.get();
  if (redisBufferRead(c) != REDIS_OK) fail(c, "read");
  while (true) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(c, &raw) != REDIS_OK) fail(c, "parse");
    if (raw == nullptr) return;
    RawReply r(static_cast<redisReply*>(raw));
    if (node.waiting.empty()) throw std::runtime_error("pipelined floor: a reply nobody sent for");
    const std::size_t slot = node.waiting.front();
    node.waiting.pop_front();
    if (r->type == REDIS_REPLY_ERROR) {
      throw std::runtime_error("pipelined floor: error reply: " + std::string(r->str, r->len));
    }
    const bool yes = slots_[slot].releasing
                         ? r->type == REDIS_REPLY_INTEGER && r->integer >= 1  // 1 + listeners
                         : r->type == REDIS_REPLY_NIL;                        // SET ... GET: nil
    answered(slot, yes, stop, cycles);
  }
}

void PipelinedFloor::run(const std::atomic<bool>& stop, std::atomic<std::uint64_t>& cycles) {
  for (std::size_t i = 0; i < slots_.size(); ++i) send(i);
  std::vector<pollfd> fds;
  for (Node& n : nodes_) fds.push_back(pollfd{n.context->fd, POLLIN, 0});
  while (busy_ > 0) {
    flush();
    const int ready = ::poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) throw std::runtime_error("pipelined floor: poll failed");
    for (std::size_t i = 0; ready > 0 && i < fds.size(); ++i) {
      if ((fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0) read(nodes_[i], stop, cycles);
    }
  }
}

}  // namespace bench
