// src/io/codec.hpp: the RESP codec: commands are encoded (as redisFormatCommandArgv would) into
// an output buffer we own, and replies decoded by a hiredis redisReader we feed; no redisContext.
#ifndef REDLOCK_SRC_IO_CODEC_HPP
#define REDLOCK_SRC_IO_CODEC_HPP

#include <hiredis/hiredis.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <redlock/reply.hpp>

#include "io/reply_limits.hpp"

namespace redlock {
namespace detail {

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept {
    if (reply != nullptr) freeReplyObject(reply);
  }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// Bytes encoded and not yet written. Keeps its capacity across batches (no allocation once warm).
class OutBuffer {
 public:
  // Appends one command in RESP, whole or (std::bad_alloc) not at all. No allocation once the
  // buffer has grown to a batch's size.
  void append(int argc, const char* const* argv, const std::size_t* lens);
  const char* data() const noexcept { return bytes_.data() + sent_; }
  std::size_t size() const noexcept { return bytes_.size() - sent_; }
  bool empty() const noexcept { return size() == 0; }
  // Drops the first `n` bytes of what is left (they were written).
  void consume(std::size_t n) noexcept;

 private:
  std::string bytes_;
  std::size_t sent_{0};
};

// What the decoder found.
enum class Decoded : unsigned char { reply, need_more, malformed };

// Decodes replies from the bytes fed to it. Move-only; owns its redisReader. Every byte is checked
// by a HeaderScan before the reader sees it: a reply over the limits is malformed input, and the
// reader never allocates for it.
class Decoder {
 public:
  Decoder();  // default ReplyLimits; throws std::bad_alloc
  explicit Decoder(const ReplyLimits& limits);
  // Adds bytes read from the server. Returns false only when out of memory (bytes over a limit
  // are not fed: next() then answers malformed).
  bool feed(const char* data, std::size_t length) noexcept;
  // The next complete reply into `out`, if one is buffered.
  Decoded next(ReplyPtr& out) noexcept;
  // What was wrong with malformed input (the limit exceeded, or hiredis's description).
  std::string_view error() const noexcept;

 private:
  struct ReaderDeleter {
    void operator()(redisReader* reader) const noexcept { redisReaderFree(reader); }
  };
  std::unique_ptr<redisReader, ReaderDeleter> reader_;
  HeaderScan scan_;
  bool over_limit_{false};
};

// Helpers for reading replies.
bool is_error(const redisReply* reply) noexcept;
std::string_view text(const redisReply* reply) noexcept;
// Converts a hiredis reply to the public value type.
Reply to_reply(const redisReply* reply);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_CODEC_HPP
