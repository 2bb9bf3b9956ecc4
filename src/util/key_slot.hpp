// src/util/key_slot.hpp: Redis Cluster key slots (CRC16-XMODEM of the key's hash tag, mod 16384)
// and the names of a lock's helper keys, which always share the lock key's slot.
//
//   key_slot("orders{42}:lock") == key_slot("42");
//   helper_key("orders{42}:lock", ":fence") == "orders{42}:lock:fence";  // keeps the tag
//   helper_key("orders", ":fence") == "{orders}:fence";                  // wraps the key
//
// Pure functions; thread-safe; never throw (helper_key: std::bad_alloc only).
#ifndef REDLOCK_SRC_UTIL_KEY_SLOT_HPP
#define REDLOCK_SRC_UTIL_KEY_SLOT_HPP

#include <cstdint>
#include <string>
#include <string_view>

namespace redlock {
namespace detail {

constexpr std::uint16_t kClusterSlots = 16384;

// CRC16, XMODEM variant (polynomial 0x1021, initial value 0), as Redis Cluster uses it.
std::uint16_t crc16_xmodem(std::string_view data) noexcept;

// The part of `key` that Redis Cluster hashes: what lies between the first '{' and the first '}'
// after it, if that is non-empty; otherwise the whole key.
std::string_view hash_tag(std::string_view key) noexcept;

// Whether `key` has a (non-empty) hash tag.
bool has_hash_tag(std::string_view key) noexcept;

// The cluster slot of `key`, 0..16383.
std::uint16_t key_slot(std::string_view key) noexcept;

// The name of one of `key`'s helper keys or channels (`suffix` such as ":fence"): `key + suffix`
// when the key has a hash tag (the tag is kept), else `"{" + key + "}" + suffix`. Either way it
// hashes to key_slot(key), except for a key without a tag that contains '}' (see
// helpers_share_slot).
std::string helper_key(const std::string& key, std::string_view suffix);

// Whether every helper_key(key, ...) lies in key_slot(key): false only for a key without a hash
// tag that contains '}' (wrapping it in braces would end the tag early).
bool helpers_share_slot(std::string_view key) noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_UTIL_KEY_SLOT_HPP
