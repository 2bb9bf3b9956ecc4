// src/io/reply_limits.cpp: HeaderScan, the RESP header check in front of hiredis's reader.
#include "io/reply_limits.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace redlock {
namespace detail {
namespace {

// A header line is a type byte, an optional '-', at most 20 digits and CR: longer is not RESP.
constexpr std::uint64_t kMaxHeaderLine = 32;
constexpr std::uint64_t kSaturated = UINT64_MAX / 16;

}  // namespace

void HeaderScan::start_line(char type) noexcept {
  type_ = type;
  negative_ = false;
  after_cr_ = false;
  number_ = 0;
  line_length_ = 0;
  state_ = type == '$' || type == '*' ? State::header : State::line;
}

// The first byte of an element (a reply is one element, an array's elements are more).
bool HeaderScan::start_element(char type) {
  if (elements_due_ == 0) {  // a new reply
    elements_due_ = 1;
    reply_elements_ = 0;
    reply_bytes_ = 0;
  }
  --elements_due_;
  start_line(type);
  return count_bytes(1);
}

// Counts `n` more bytes of the reply on the wire; false (and why) past max_reply_bytes.
bool HeaderScan::count_bytes(std::uint64_t n) {
  if (n <= limits_.max_reply_bytes - reply_bytes_) {
    reply_bytes_ += n;
    return true;
  }
  why_ = fmt::format(
      "a reply takes more than Endpoint::reply_limits.max_reply_bytes ({}) bytes on the wire, "
      "summed over every level of nesting ({} so far, {} more declared or read)",
      limits_.max_reply_bytes, reply_bytes_, n);
  return false;
}

bool HeaderScan::end_header() {
  state_ = State::type;
  if (negative_) return true;  // nil ($-1, *-1): nothing to allocate
  return type_ == '$' ? end_bulk_header() : end_array_header();
}

bool HeaderScan::end_bulk_header() {
  if (number_ > limits_.max_bulk_bytes) {
    why_ = fmt::format(
        "a reply declares a {}-byte bulk string, over Endpoint::reply_limits.max_bulk_bytes "
        "({})",
        number_, limits_.max_bulk_bytes);
    return false;
  }
  if (!count_bytes(number_ + 2)) return false;  // the payload and its CR LF, before they come
  payload_left_ = number_ + 2;
  state_ = State::payload;
  return true;
}

bool HeaderScan::end_array_header() {
  if (number_ > limits_.max_elements) {
    why_ = fmt::format(
        "a reply declares an array of {} elements, over Endpoint::reply_limits.max_elements ({})",
        number_, limits_.max_elements);
    return false;
  }
  if (number_ > limits_.max_reply_elements - reply_elements_) {
    why_ = fmt::format(
        "a reply declares an array of {} elements after {} in its other arrays, over "
        "Endpoint::reply_limits.max_reply_elements ({}, summed over every level of nesting)",
        number_, reply_elements_, limits_.max_reply_elements);
    return false;
  }
  reply_elements_ += number_;
  elements_due_ += number_;
  return true;
}

// One byte of a line (a header, or a status, error or integer line). Lines end at CR LF, as in
// hiredis (a lone LF does not end one).
bool HeaderScan::step(char c) {
  if (!count_bytes(1)) return false;
  if (c == '\n' && after_cr_) {
    if (state_ == State::header) return end_header();
    state_ = State::type;
    return true;
  }
  after_cr_ = c == '\r';
  ++line_length_;
  if (state_ == State::header) {
    if (line_length_ > kMaxHeaderLine) {
      why_ = "a reply header line is longer than any valid RESP header";
      return false;
    }
    if (c >= '0' && c <= '9') {
      number_ = std::min(number_ * 10 + static_cast<std::uint64_t>(c - '0'), kSaturated);
    } else if (c == '-' && line_length_ == 1) {
      negative_ = true;
    }
    return true;
  }
  if (line_length_ > limits_.max_bulk_bytes) {
    why_ = fmt::format(
        "a reply line is longer than Endpoint::reply_limits.max_bulk_bytes ({}) without its end",
        limits_.max_bulk_bytes);
    return false;
  }
  return true;
}

bool HeaderScan::scan(const char* data, std::size_t length) {
  if (!why_.empty()) return false;
  const char* const end = data + length;
  while (data != end) {
    if (state_ == State::payload) {
      const auto skip = static_cast<std::size_t>(
          std::min<std::uint64_t>(payload_left_, static_cast<std::uint64_t>(end - data)));
      data += skip;
      payload_left_ -= skip;
      if (payload_left_ == 0) state_ = State::type;
      continue;
    }
    const char c = *data++;
    if (!(state_ == State::type ? start_element(c) : step(c))) return false;
  }
  return true;
}

}  // namespace detail
}  // namespace redlock
