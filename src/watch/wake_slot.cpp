// src/watch/wake_slot.cpp: WakeSlot (where one waiter is told a release happened) and the parser
// of fair mode's hand-over messages; declared in watch/subscriber.hpp.
#include <unistd.h>

#include <cstdint>
#include <string_view>

#include "core/backend.hpp"
#include "watch/subscriber.hpp"

namespace redlock {
namespace detail {

void WakeSlot::interrupt() noexcept {
  if (waker_) waker_->wake_up();
  // Under mutex_, so the fd cannot be given back (and closed) between the read and the write.
  if (interrupt_fd_ < 0) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(interrupt_fd_, &one, sizeof one);
}

void WakeSlot::interrupt_with(int event_fd) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  interrupt_fd_ = event_fd;
}

void WakeSlot::set_waker(Waker* waker) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  waker_ = waker;
  if (waker_ && (notified_ || noticed_)) waker_->wake_up();
}

void WakeSlot::notify() noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    notified_ = true;
    interrupt();
  }
  cv_.notify_all();
}

void WakeSlot::offer_grant(std::string_view named, std::uint64_t seq,
                           std::uint64_t fence) noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (token_sha1_.empty() || token_sha1_ != named) return;
    notified_ = true;
    granted_ = true;
    grant_seq_ = seq;
    grant_fence_ = fence;
    interrupt();
  }
  cv_.notify_all();
}

void WakeSlot::offer_notice(std::string_view named, std::uint64_t position,
                            std::uint64_t pttl_ms) noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (token_sha1_.empty() || token_sha1_ != named) return;
    noticed_ = true;
    deaf_ = false;  // a watcher now
    notice_position_ = static_cast<unsigned>(position);
    notice_pttl_ = pttl_ms;
    interrupt();
  }
  cv_.notify_all();
}

bool WakeSlot::take_notice(unsigned& position, std::chrono::milliseconds& pttl) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!noticed_) return false;
  noticed_ = false;
  position = notice_position_;
  pttl = std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(notice_pttl_));
  return true;
}

bool WakeSlot::ready() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return notified_ || noticed_;
}

void WakeSlot::retoken(std::string token_sha1) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  token_sha1_.swap(token_sha1);  // the old string is freed outside the lock
  granted_ = false;
  noticed_ = false;
  deaf_ = false;
}

bool WakeSlot::take_grant(std::uint64_t& seq, std::uint64_t& fence) noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!granted_) return false;
  granted_ = false;
  notified_ = false;  // consumed: a grant is never passed on to another waiter
  released_ = false;
  seq = grant_seq_;
  fence = grant_fence_;
  return true;
}

namespace {
bool parse_number(std::string_view& rest, std::uint64_t& out) noexcept {
  const auto colon = rest.find(':');
  if (colon == 0 || colon == std::string_view::npos || colon > 19) return false;
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < colon; ++i) {
    const char c = rest[i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  out = value;
  rest.remove_prefix(colon + 1);
  return true;
}
}  // namespace

bool parse_grant(std::string_view payload, std::uint64_t& seq, std::uint64_t& fence,
                 std::string_view& token_sha1) noexcept {
  constexpr std::string_view kPrefix = "grant:";
  if (payload.substr(0, kPrefix.size()) != kPrefix) return false;
  payload.remove_prefix(kPrefix.size());
  if (!parse_number(payload, seq) || !parse_number(payload, fence) || payload.empty()) {
    return false;
  }
  token_sha1 = payload;
  return true;
}

bool parse_notice(std::string_view payload, std::uint64_t& position, std::uint64_t& pttl_ms,
                  std::string_view& token_sha1) noexcept {
  constexpr std::string_view kPrefix = "head:";
  if (payload.substr(0, kPrefix.size()) != kPrefix) return false;
  payload.remove_prefix(kPrefix.size());
  if (!parse_number(payload, position) || !parse_number(payload, pttl_ms) || payload.empty()) {
    return false;
  }
  token_sha1 = payload;
  return position == 1 || position == 2;
}

void WakeSlot::relocate() noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    relocate_ = true;
    deaf_ = false;
    notified_ = true;  // releases may be missed until it subscribes again: retry now
    interrupt();
  }
  cv_.notify_all();
}

bool WakeSlot::must_relocate() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return relocate_;
}

void WakeSlot::relocated() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  relocate_ = false;
  notified_ = false;  // the attempt made after relocating covers what it announced
  released_ = false;
}

void WakeSlot::spend_release_wake() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  if (!granted_ && !relocate_) notified_ = released_ = false;
}

void WakeSlot::deafen() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  // A notice not taken yet was published after the join this call reports (it names the joined
  // token): it is the newer news, and it made this waiter a watcher.
  if (noticed_) return;
  deaf_ = true;
  if (!granted_ && !relocate_) notified_ = released_ = false;
}

bool WakeSlot::offer_release() noexcept {
  {
    std::lock_guard<std::mutex> guard(mutex_);
    if (deaf_) return false;
    notified_ = true;
    released_ = true;
    interrupt();
  }
  cv_.notify_all();
  return true;
}

bool WakeSlot::pending() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return notified_;
}

bool WakeSlot::waited() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  return waited_;
}

bool WakeSlot::consume() noexcept {
  const bool was = notified_;
  heard_ = heard_ || (was && released_);
  notified_ = released_ = false;
  return was;
}

bool WakeSlot::take() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  waited_ = true;
  return consume();
}

bool WakeSlot::wait_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  waited_ = true;
  cv_.wait_until(lock, deadline, [this] { return notified_ || noticed_; });
  return consume();
}

void WakeSlot::give_up() noexcept {
  std::lock_guard<std::mutex> guard(mutex_);
  // Only this slot's waiter calls it, as it leaves: nobody waits on the slot any more, so the
  // wake-up is made pending without waking anyone; unwatching offers it to another waiter.
  if (heard_) notified_ = released_ = true;
  heard_ = false;
}

}  // namespace detail
}  // namespace redlock
