// src/io/codec.cpp: RESP encoding into our buffer and decoding through a redisReader.
#include "io/codec.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace redlock {
namespace detail {

namespace {

// Room for a RESP header: a one-character prefix, up to 20 digits, CR LF.
constexpr std::size_t kHeaderRoom = 1 + 20 + 2;

// Writes "<prefix><n>\r\n" at `at`; returns the end.
char* put_header(char* at, char prefix, std::size_t n) noexcept {
  *at++ = prefix;
  at = std::to_chars(at, at + 20, n).ptr;
  *at++ = '\r';
  *at++ = '\n';
  return at;
}

// Writes the bytes of one argument and CR LF at `at`; returns the end.
char* put_bulk(char* at, const char* bytes, std::size_t length) noexcept {
  at = put_header(at, '$', length);
  if (length > 0) std::memcpy(at, bytes, length);
  at += length;
  *at++ = '\r';
  *at++ = '\n';
  return at;
}

}  // namespace

// RESP's request form ("*argc", then "$len" and the bytes of each argument), written straight
// into the buffer: the same bytes as redisFormatCommandArgv (tests/test_io.cpp compares them),
// without its sprintf per argument and its malloc and free per command, which made encoding most
// of a watchdog renewal's CPU.
void OutBuffer::append(int argc, const char* const* argv, const std::size_t* lens) {
  if (sent_ == bytes_.size()) {  // all written before: start over, keeping the capacity
    bytes_.clear();
    sent_ = 0;
  }
  const auto count = static_cast<std::size_t>(argc);
  std::size_t room = kHeaderRoom;
  for (std::size_t i = 0; i < count; ++i) room += kHeaderRoom + lens[i] + 2;
  const std::size_t start = bytes_.size();
  // Only this may throw: a command goes in whole or not at all. Grown geometrically (reserve
  // alone may grow to exactly what is asked, on some libraries).
  if (start + room > bytes_.capacity()) bytes_.reserve(std::max(start + room, 2 * start));
  bytes_.resize(start + room);  // an upper bound, cut to size below
  char* const first = &bytes_[start];
  char* at = put_header(first, '*', count);
  for (std::size_t i = 0; i < count; ++i) at = put_bulk(at, argv[i], lens[i]);
  bytes_.resize(start + static_cast<std::size_t>(at - first));
}

void OutBuffer::consume(std::size_t n) noexcept {
  sent_ += n < size() ? n : size();
  if (sent_ == bytes_.size()) {
    bytes_.clear();
    sent_ = 0;
  }
}

Decoder::Decoder() : Decoder(ReplyLimits{}) {}

Decoder::Decoder(const ReplyLimits& limits) : reader_(redisReaderCreate()), scan_(limits) {
  if (!reader_) throw std::bad_alloc();
}

bool Decoder::feed(const char* data, std::size_t length) noexcept {
  try {
    if (!scan_.scan(data, length)) {
      over_limit_ = true;
      return true;
    }
  } catch (...) {  // bad_alloc while describing the failure
    return false;
  }
  return redisReaderFeed(reader_.get(), data, length) == REDIS_OK;
}

Decoded Decoder::next(ReplyPtr& out) noexcept {
  if (over_limit_) return Decoded::malformed;
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) return Decoded::malformed;
  if (raw == nullptr) return Decoded::need_more;
  out.reset(static_cast<redisReply*>(raw));
  return Decoded::reply;
}

std::string_view Decoder::error() const noexcept {
  return over_limit_ ? std::string_view(scan_.why()) : std::string_view(reader_->errstr);
}

bool is_error(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR;
}

std::string_view text(const redisReply* reply) noexcept {
  if (reply == nullptr || reply->str == nullptr) return {};
  return {reply->str, reply->len};
}

Reply to_reply(const redisReply* reply) {
  if (reply == nullptr) return Reply();
  switch (reply->type) {
    case REDIS_REPLY_STRING:
      return Reply(Reply::Type::string, std::string(reply->str, reply->len));
    case REDIS_REPLY_STATUS:
      return Reply(Reply::Type::status, std::string(reply->str, reply->len));
    case REDIS_REPLY_ERROR:
      return Reply(Reply::Type::error, std::string(reply->str, reply->len));
    case REDIS_REPLY_INTEGER:
      return Reply(static_cast<std::int64_t>(reply->integer));
    case REDIS_REPLY_ARRAY: {
      std::vector<Reply> elements;
      elements.reserve(reply->elements);
      for (std::size_t i = 0; i < reply->elements; ++i) {
        elements.push_back(to_reply(reply->element[i]));
      }
      return Reply(std::move(elements));
    }
    default:
      return Reply();
  }
}

}  // namespace detail
}  // namespace redlock
