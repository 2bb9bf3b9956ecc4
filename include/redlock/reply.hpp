// redlock/reply.hpp: a Redis reply as a plain value, for Client::command and Client::pipeline.
//
// The lock classes never hand replies to users; this type exists so that a program can run the
// odd command (INFO, GET of a counter, ...) through the same connection pool without touching
// hiredis:
//
//   redlock::Reply r = client.command({"INCR", "visits"});
//   std::int64_t n = r.integer();
#ifndef REDLOCK_REPLY_HPP
#define REDLOCK_REPLY_HPP

#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

namespace redlock {

class Reply {
 public:
  enum class Type { nil, status, error, integer, string, array };

  Reply() = default;  // nil
  Reply(Type type, std::string text) : type_(type), text_(std::move(text)) {}
  explicit Reply(std::int64_t value) : type_(Type::integer), integer_(value) {}
  explicit Reply(std::vector<Reply> elements)
      : type_(Type::array), elements_(std::move(elements)) {}

  // The reply's RESP type. Thread-safe (const).
  Type type() const noexcept { return type_; }
  bool is_nil() const noexcept { return type_ == Type::nil; }
  bool is_error() const noexcept { return type_ == Type::error; }
  // The value of an integer reply; 0 for any other type.
  std::int64_t integer() const noexcept { return integer_; }
  // The bytes of a string, status or error reply (binary-safe); empty for other types.
  const std::string& str() const noexcept { return text_; }
  // The elements of an array reply; empty for other types.
  const std::vector<Reply>& elements() const noexcept { return elements_; }

 private:
  Type type_{Type::nil};
  std::int64_t integer_{0};
  std::string text_;
  std::vector<Reply> elements_;
};

}  // namespace redlock

#endif  // REDLOCK_REPLY_HPP
