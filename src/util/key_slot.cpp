// src/util/key_slot.cpp: CRC16-XMODEM, hash tags and helper key names (see key_slot.hpp).
#include "util/key_slot.hpp"

namespace redlock {
namespace detail {

namespace {

// The CRC of every byte value, so that a key costs one lookup per byte (it is computed for every
// command sent to a cluster).
struct Crc16Table {
  std::uint16_t entry[256]{};
  constexpr Crc16Table() {
    for (unsigned byte = 0; byte < 256; ++byte) {
      unsigned crc = byte << 8;
      for (int bit = 0; bit < 8; ++bit)
        crc = (crc & 0x8000U) != 0 ? (crc << 1) ^ 0x1021U : crc << 1;
      entry[byte] = static_cast<std::uint16_t>(crc);
    }
  }
};
constexpr Crc16Table kCrc16;

}  // namespace

std::uint16_t crc16_xmodem(std::string_view data) noexcept {
  unsigned crc = 0;
  for (const char c : data) {
    crc =
        ((crc << 8) ^ kCrc16.entry[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xFFU]) & 0xFFFFU;
  }
  return static_cast<std::uint16_t>(crc);
}

std::string_view hash_tag(std::string_view key) noexcept {
  const std::size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const std::size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

bool has_hash_tag(std::string_view key) noexcept { return hash_tag(key).size() != key.size(); }

std::uint16_t key_slot(std::string_view key) noexcept {
  return static_cast<std::uint16_t>(crc16_xmodem(hash_tag(key)) % kClusterSlots);
}

std::string helper_key(const std::string& key, std::string_view suffix) {
  std::string out;
  if (has_hash_tag(key)) {
    out.reserve(key.size() + suffix.size());
    out.append(key);
  } else {
    out.reserve(key.size() + suffix.size() + 2);
    out.append(1, '{').append(key).append(1, '}');
  }
  out.append(suffix);
  return out;
}

bool helpers_share_slot(std::string_view key) noexcept {
  return has_hash_tag(key) || key.find('}') == std::string_view::npos;
}

}  // namespace detail
}  // namespace redlock
