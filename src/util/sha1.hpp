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

// Initialises libcrypto, unless something in the process did first, without OpenSSL's exit-time
// cleanup: the library's threads (a subscriber reconnecting over TLS, a renewal) may still use
// it while the process exits, and that cleanup frees its locks under them (ThreadSanitizer saw a
// subscriber's handshake race it). What it leaves is memory still reachable at exit. Called
// before the library's first libcrypto or libssl use. Never throws. Thread-safe.
void init_crypto() noexcept;

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_SHA1_HPP
