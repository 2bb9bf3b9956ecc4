// src/sha1.hpp: SHA-1 (FIPS 180-4), only to name Lua scripts for EVALSHA. Not for security.
#ifndef REDLOCK_SRC_SHA1_HPP
#define REDLOCK_SRC_SHA1_HPP

#include <string>
#include <string_view>

namespace redlock {
namespace detail {

// Lowercase hex digest (40 characters) of `data`.
std::string sha1_hex(std::string_view data);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_SHA1_HPP
