// src/io/codec.cpp: RESP encoding into our buffer and decoding through a redisReader.
#include "io/codec.hpp"

#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace redlock {
namespace detail {

void OutBuffer::append(int argc, const char* const* argv, const std::size_t* lens) {
  char* encoded = nullptr;
  // hiredis takes `const char**` but does not modify the array.
  const int length = redisFormatCommandArgv(&encoded, argc, const_cast<const char**>(argv), lens);
  if (length < 0 || encoded == nullptr) throw std::bad_alloc();
  std::unique_ptr<char, void (*)(char*)> owned(encoded, redisFreeCommand);
  if (sent_ == bytes_.size()) {  // all written before: start over, keeping the capacity
    bytes_.clear();
    sent_ = 0;
  }
  bytes_.append(encoded, static_cast<std::size_t>(length));
}

void OutBuffer::consume(std::size_t n) noexcept {
  sent_ += n < size() ? n : size();
  if (sent_ == bytes_.size()) {
    bytes_.clear();
    sent_ = 0;
  }
}

Decoder::Decoder() : reader_(redisReaderCreate()) {
  if (!reader_) throw std::bad_alloc();
}

bool Decoder::feed(const char* data, std::size_t length) noexcept {
  return redisReaderFeed(reader_.get(), data, length) == REDIS_OK;
}

Decoded Decoder::next(ReplyPtr& out) noexcept {
  void* raw = nullptr;
  if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) return Decoded::malformed;
  if (raw == nullptr) return Decoded::need_more;
  out.reset(static_cast<redisReply*>(raw));
  return Decoded::reply;
}

std::string_view Decoder::error() const noexcept { return reader_->errstr; }

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
