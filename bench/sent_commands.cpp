// bench/sent_commands.cpp: send(2) for redlock-bench, counting RESP requests (sent_commands.hpp).
#include "sent_commands.hpp"

#include <sys/socket.h>   // sendto
#include <sys/syscall.h>  // SYS_sendto
#include <unistd.h>       // syscall

#include <array>    // std::array
#include <atomic>   // std::atomic
#include <cstddef>  // std::size_t

namespace bench {
namespace {

std::atomic<bool> g_counting{false};
std::atomic<std::uint64_t> g_commands{0};

// Where a socket's request stream stands. Only one thread writes to a socket at a time (the
// library hands a connection to one request at a time), so each parser has a single writer.
struct RespParser {
  enum class At : unsigned char { command, argc, bulk, length, bytes };
  At at{At::command};
  std::uint64_t number{0};     // digits of the header being read
  std::uint64_t arguments{0};  // arguments of the current command not yet read
  std::uint64_t left{0};       // bytes of the current argument (and its CR LF) not yet read

  // Consumes `n` bytes that went out; returns the commands whose header they held.
  std::uint64_t feed(const char* p, std::size_t n) noexcept {
    std::uint64_t commands = 0;
    for (std::size_t i = 0; i < n;) {
      if (at == At::bytes) {
        const std::size_t take = left < n - i ? static_cast<std::size_t>(left) : n - i;
        i += take;
        left -= take;
        if (left == 0) at = --arguments == 0 ? At::command : At::bulk;
        continue;
      }
      const char c = p[i++];
      if (at == At::command || at == At::bulk) {  // anything else there is not ours: skip it
        const bool header = (at == At::command && c == '*') || (at == At::bulk && c == '$');
        if (header) {
          commands += at == At::command ? 1 : 0;
          at = at == At::command ? At::argc : At::length;
          number = 0;
        }
      } else if (c >= '0' && c <= '9') {
        number = number * 10 + static_cast<std::uint64_t>(c - '0');
      } else if (c == '\n') {
        if (at == At::argc) {
          arguments = number;
          at = number == 0 ? At::command : At::bulk;
        } else {
          left = number + 2;  // the bytes and CR LF
          at = At::bytes;
        }
      }
    }
    return commands;
  }
};

constexpr std::size_t kSockets = 4096;  // descriptors beyond are not counted
std::array<RespParser, kSockets> g_parsers;

}  // namespace

void count_sent_commands() noexcept { g_counting.store(true); }

std::uint64_t sent_commands() noexcept { return g_commands.load(std::memory_order_relaxed); }

}  // namespace bench

// The executable's own send(): the library (and hiredis, libpq) call this one.
extern "C" ssize_t send(int fd, const void* data, std::size_t length, int flags) {
  const auto sent =
      static_cast<ssize_t>(::syscall(SYS_sendto, fd, data, length, flags, nullptr, 0));
  if (sent > 0 && bench::g_counting.load(std::memory_order_relaxed) && fd >= 0 &&
      static_cast<std::size_t>(fd) < bench::kSockets) {
    const std::uint64_t n = bench::g_parsers[static_cast<std::size_t>(fd)].feed(
        static_cast<const char*>(data), static_cast<std::size_t>(sent));
    if (n > 0) bench::g_commands.fetch_add(n, std::memory_order_relaxed);
  }
  return sent;
}
