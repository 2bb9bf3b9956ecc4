// src/io/reply_limits.hpp: a streaming check of RESP reply headers against ReplyLimits, run on
// the bytes before they reach hiredis's reader (which allocates whatever a header declares).
// Each header is checked on its own (max_bulk_bytes, max_elements) and against what the whole
// reply has declared so far, summed over every level of nesting (max_reply_elements,
// max_reply_bytes): a reply ends when the elements its arrays declared have all come.
//
//   HeaderScan scan(endpoint.reply_limits);
//   if (!scan.scan(bytes, n)) drop_the_connection(scan.why());   // never fed to the reader
//
// It follows the framing exactly as hiredis 0.14 does (lines end at CR LF; a bulk string's
// payload is its declared length plus CR LF, taken without looking inside), so no header can hide
// from it inside what it took for a payload. Input hiredis would reject anyway may be rejected
// here first.
#ifndef REDLOCK_SRC_IO_REPLY_LIMITS_HPP
#define REDLOCK_SRC_IO_REPLY_LIMITS_HPP

#include <cstddef>
#include <cstdint>
#include <string>

#include <redlock/endpoint.hpp>

namespace redlock {
namespace detail {

class HeaderScan {
 public:
  HeaderScan() = default;
  explicit HeaderScan(const ReplyLimits& limits) noexcept : limits_(limits) {}

  // Checks the next `length` bytes of the stream. Returns false once a header is over a limit
  // (and from then on); why() then says which. Never allocates before a failure.
  bool scan(const char* data, std::size_t length);
  // What was over a limit ("" while none was).
  const std::string& why() const noexcept { return why_; }

 private:
  enum class State : unsigned char { type, header, line, payload };

  void start_line(char type) noexcept;
  bool start_element(char type);
  bool end_header();
  bool end_bulk_header();
  bool end_array_header();
  bool count_bytes(std::uint64_t n);
  bool step(char c);

  ReplyLimits limits_;
  State state_{State::type};
  char type_{0};
  bool negative_{false};
  bool after_cr_{false};
  std::uint64_t number_{0};  // saturates: never wraps to something small
  std::uint64_t line_length_{0};
  std::uint64_t payload_left_{0};  // bytes of a bulk payload (and its CR LF) still to skip
  // The reply being read: the elements its arrays declared that have not started yet (0
  // between replies), and its totals so far (never above their limits).
  std::uint64_t elements_due_{0};
  std::uint64_t reply_elements_{0};
  std::uint64_t reply_bytes_{0};
  std::string why_;
};

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_IO_REPLY_LIMITS_HPP
