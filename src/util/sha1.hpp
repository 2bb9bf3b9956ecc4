// src/util/sha1.hpp: SHA-1 (FIPS 180-4), to name Lua scripts for EVALSHA, and to name a fair-mode
// waiter in a hand-over message without publishing its token (that needs only preimage
// resistance, which SHA-1 still has for a 160-bit random token).
#ifndef REDLOCK_SRC_SHA1_HPP
#define REDLOCK_SRC_SHA1_HPP

#include <string>
#include <string_view>

namespace redlock {
namespace detail {

// Lowercase hex digest (40 characters) of `data`.
std::string sha1_hex(std::string_view data);

// Frees the calling thread's libcrypto state (its error queue), which libcrypto otherwise frees
// when the thread ends: for a long-lived library thread about to sleep (lock/async_driver), so
// that what it holds is not counted as leaked while it sleeps through the process's exit. The
// next libcrypto call on the thread sets it up again. Never throws.
void release_thread_crypto_state() noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_SHA1_HPP
