// src/util/token.cpp: tokens from getrandom(2) (buffered per thread, fork-safe); jitter from an
// OS-seeded per-thread PRNG.
#include "util/token.hpp"

#include <pthread.h>
#include <sys/random.h>

#include <atomic>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <random>
#include <system_error>

namespace redlock {
namespace detail {
namespace {

void fill_random(unsigned char* out, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = getrandom(out + done, size - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "redlock: getrandom failed");
    }
    done += static_cast<std::size_t>(n);
  }
}

std::atomic<std::uint64_t> g_fork_generation{0};

// The fork generation: bumped in the child of every fork(), so per-thread state copied into a
// child (a token buffer, a generator) is recognised as the parent's and thrown away.
std::uint64_t fork_generation() noexcept {
  static const bool registered = [] {
    pthread_atfork(nullptr, nullptr, [] { g_fork_generation.fetch_add(1); });
    return true;
  }();
  (void)registered;
  return g_fork_generation.load(std::memory_order_relaxed);
}

// getrandom(2) output for 32 tokens per thread, so a token costs a system call only once in 32.
// Bytes are zeroed as they are handed out (never given twice); the buffer is refilled after a
// fork, so parent and child never share a token.
// Process duplication that bypasses fork() (a raw clone(2) without CLONE_VM, a checkpoint and
// restore of the process or VM) would duplicate the unused tokens too; so would it duplicate
// any user-space CSPRNG state.
struct TokenBuffer {
  std::array<unsigned char, kTokenBytes * 32> bytes{};
  std::size_t used{kTokenBytes * 32};
  std::uint64_t generation{~std::uint64_t{0}};
  TokenBuffer() = default;
  TokenBuffer(const TokenBuffer&) = delete;
  TokenBuffer& operator=(const TokenBuffer&) = delete;
  ~TokenBuffer() {  // unused tokens do not outlive the thread in freed memory
    volatile unsigned char* p = bytes.data();
    for (std::size_t i = 0; i < bytes.size(); ++i) p[i] = 0;
  }
};

}  // namespace

std::string make_token() {
  thread_local TokenBuffer buffer;
  const std::uint64_t generation = fork_generation();
  if (buffer.used == buffer.bytes.size() || buffer.generation != generation) {
    fill_random(buffer.bytes.data(), buffer.bytes.size());
    buffer.used = 0;
    buffer.generation = generation;
  }
  unsigned char* bytes = buffer.bytes.data() + buffer.used;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * kTokenBytes, '0');
  for (std::size_t i = 0; i < kTokenBytes; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  std::fill_n(bytes, kTokenBytes, 0);  // handed out: never again
  buffer.used += kTokenBytes;
  return out;
}

std::chrono::nanoseconds jittered(std::chrono::nanoseconds base) {
  // Jitter only spreads retries apart; it needs no secrecy, but it must differ between processes
  // and threads (never std::rand(), never a fixed seed), hence the OS seed.
  // Reseeded after fork() (a pthread_atfork handler bumps the generation), so parent and child
  // do not retry in lock-step; no system call on the common path.
  thread_local std::mt19937_64 generator;
  thread_local std::uint64_t seeded_for = ~std::uint64_t{0};
  const std::uint64_t generation = fork_generation();
  if (seeded_for != generation) {
    std::array<unsigned char, 8> seed{};
    fill_random(seed.data(), seed.size());
    std::uint64_t value = 0;
    for (unsigned char byte : seed) value = (value << 8) | byte;
    generator.seed(value);
    seeded_for = generation;
  }
  if (base.count() <= 1) return base;
  std::uniform_int_distribution<std::int64_t> dist(base.count() / 2,
                                                   base.count() + base.count() / 2);
  return std::chrono::nanoseconds(dist(generator));
}

}  // namespace detail
}  // namespace redlock
