// src/util/token.hpp: lock tokens from the OS CSPRNG, and jitter for retry waits.
#ifndef REDLOCK_SRC_TOKEN_HPP
#define REDLOCK_SRC_TOKEN_HPP

#include <chrono>
#include <cstddef>
#include <string>

namespace redlock {
namespace detail {

// Bytes in a token: 160 bits, so a guess or a collision is out of reach.
constexpr std::size_t kTokenBytes = 20;

// A fresh token: kTokenBytes from getrandom(2), hex-encoded (40 characters, so it reads well in
// redis-cli and logs). Throws std::system_error if the kernel cannot supply randomness.
// Thread-safe; fork-safe (each thread buffers 32 tokens' worth of getrandom output, which a
// child of fork() discards, and bytes are zeroed as they are used).
std::string make_token();

// A wait drawn uniformly from [base/2, base*3/2], from a per-thread generator seeded by the OS.
// Thread-safe.
std::chrono::nanoseconds jittered(std::chrono::nanoseconds base);

}  // namespace detail
}  // namespace redlock

#endif  // REDLOCK_SRC_TOKEN_HPP
