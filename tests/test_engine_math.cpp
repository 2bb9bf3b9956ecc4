// Pure parts of the engine: quorum and validity arithmetic with a fake clock, the loss rules,
// reply decoding, SHA-1, tokens, jitter, duration saturation.
#include <catch2/catch.hpp>

#include <hiredis/hiredis.h>

#include <chrono>
#include <set>
#include <string>

#include <redlock/detail/chrono.hpp>

#include "core/quorum.hpp"
#include "core/tally.hpp"
#include "protocol/replies.hpp"
#include "util/sha1.hpp"
#include "util/token.hpp"

using namespace std::chrono_literals;
using redlock::detail::decide;
using redlock::detail::drift_of;
using redlock::detail::quorum_of;
using redlock::detail::SteadyClock;

TEST_CASE("quorum is a strict majority", "[unit][engine]") {
  CHECK(quorum_of(1) == 1);
  CHECK(quorum_of(2) == 2);
  CHECK(quorum_of(3) == 2);
  CHECK(quorum_of(4) == 3);
  CHECK(quorum_of(5) == 3);
  CHECK(quorum_of(7) == 4);
}

TEST_CASE("drift is ttl * factor + 2 ms", "[unit][engine]") {
  CHECK(drift_of(10000ms, 0.01) == 102ms);
  CHECK(drift_of(1000ms, 0.0) == 2ms);
}

TEST_CASE("decide: held iff quorum granted and validity stays positive", "[unit][engine]") {
  const SteadyClock::time_point t0{};  // a fake clock: only differences matter
  // 3 of 5 granted, 100 ms elapsed, ttl 10 s, drift 102 ms: validity 9798 ms.
  auto d = decide(5, 3, 10000ms, 0.01, t0, t0 + 100ms);
  CHECK(d.held);
  CHECK(d.valid_until - (t0 + 100ms) == 9798ms);
  CHECK_FALSE(decide(5, 2, 10000ms, 0.01, t0, t0 + 100ms).held);
  CHECK(decide(1, 1, 10000ms, 0.01, t0, t0).held);
  CHECK_FALSE(decide(1, 0, 10000ms, 0.01, t0, t0).held);
  // Elapsed eats the validity: ttl 100 ms, drift 3 ms, 97 ms elapsed -> exactly zero: not held.
  CHECK_FALSE(decide(3, 3, 100ms, 0.01, t0, t0 + 97ms).held);
  CHECK(decide(3, 3, 100ms, 0.01, t0, t0 + 96ms).held);
}

TEST_CASE("loss rules: refusals, lapses and extends name one reason each", "[unit][engine]") {
  using redlock::LostReason;
  using namespace redlock::detail;
  // Refusals lose the quorum once fewer than a quorum could still confirm.
  CHECK(refusals_lose_quorum(1, 1));
  CHECK_FALSE(refusals_lose_quorum(1, 0));
  CHECK_FALSE(refusals_lose_quorum(5, 2));
  CHECK(refusals_lose_quorum(5, 3));
  CHECK(refusal_reason(1) == LostReason::refused);
  CHECK(refusal_reason(3) == LostReason::no_quorum);
  CHECK(lapse_reason(1) == LostReason::expired);
  CHECK(lapse_reason(3) == LostReason::no_quorum);
  CHECK(extend_reason(1, 0) == LostReason::refused);
  CHECK(extend_reason(3, 0) == LostReason::refused);
  CHECK(extend_reason(3, 1) == LostReason::no_quorum);
}

TEST_CASE("judge_renewal: renewed, lost for good, or retried", "[unit][engine]") {
  using redlock::LostReason;
  using namespace redlock::detail;
  RenewalOutcome o;
  o.nodes = 3;
  o.held_in_time = true;
  CHECK(judge_renewal(o).what == Renewal::renewed);
  o.held_in_time = false;
  o.refused = 1;  // one refusal, two silent: a quorum may still confirm later
  CHECK(judge_renewal(o).what == Renewal::retry);
  o.lapsed = true;
  CHECK(judge_renewal(o).what == Renewal::lost);
  CHECK(judge_renewal(o).reason == LostReason::no_quorum);
  o.lapsed = false;
  o.refused = 2;
  CHECK(judge_renewal(o).what == Renewal::lost);
  CHECK(judge_renewal(o).reason == LostReason::no_quorum);
  RenewalOutcome single;
  single.nodes = 1;
  single.refused = 1;
  CHECK(judge_renewal(single).reason == LostReason::refused);
  single.refused = 0;
  single.lapsed = true;
  CHECK(judge_renewal(single).reason == LostReason::expired);
}

namespace {

// One reply parsed from RESP bytes by hiredis's reader (what the I/O layer hands on).
struct ParsedReply {
  explicit ParsedReply(const std::string& resp) {
    redisReader* reader = redisReaderCreate();
    redisReaderFeed(reader, resp.data(), resp.size());
    void* raw = nullptr;
    if (redisReaderGetReply(reader, &raw) == REDIS_OK) reply = static_cast<redisReply*>(raw);
    redisReaderFree(reader);
  }
  ~ParsedReply() {
    if (reply != nullptr) freeReplyObject(reply);
  }
  ParsedReply(const ParsedReply&) = delete;
  ParsedReply& operator=(const ParsedReply&) = delete;
  redisReply* reply{nullptr};
};

}  // namespace

TEST_CASE("replies: acquire dialects, extend and release answers", "[unit][engine]") {
  using namespace redlock::detail;
  const ParsedReply nil("$-1\r\n"), ok("+OK\r\n"), mine("$3\r\ntok\r\n"), theirs("$5\r\nother\r\n"),
      syntax("-ERR syntax error\r\n"), one(":1\r\n"), zero(":0\r\n"), three(":3\r\n"),
      pttl(":1500\r\n"), fenced("*2\r\n:1\r\n:7\r\n"), busy("*2\r\n:0\r\n:900\r\n");
  // SET NX without GET: OK granted, nil refused (the pipelined PTTL is the holder's).
  CHECK(read_acquire_reply(ok.reply, nullptr, AcquireDialect::set_nx, "tok").answer ==
        Answer::granted);
  const AcquireReply refused =
      read_acquire_reply(nil.reply, pttl.reply, AcquireDialect::set_nx, "tok");
  CHECK(refused.answer == Answer::refused);
  CHECK(refused.holder_pttl == 1500);
  // SET NX GET: nil granted, our own token granted (a resend), another token refused.
  CHECK(read_acquire_reply(nil.reply, nullptr, AcquireDialect::set_nx_get, "tok").answer ==
        Answer::granted);
  CHECK(read_acquire_reply(mine.reply, nullptr, AcquireDialect::set_nx_get, "tok").answer ==
        Answer::granted);
  CHECK(read_acquire_reply(theirs.reply, nullptr, AcquireDialect::set_nx_get, "tok").answer ==
        Answer::refused);
  CHECK(read_acquire_reply(syntax.reply, nullptr, AcquireDialect::set_nx_get, "tok").problem ==
        AcquireReply::Problem::syntax_error);
  CHECK(read_acquire_reply(syntax.reply, nullptr, AcquireDialect::script, "tok").problem ==
        AcquireReply::Problem::server_error);
  const AcquireReply granted =
      read_acquire_reply(fenced.reply, nullptr, AcquireDialect::script, "tok");
  CHECK(granted.answer == Answer::granted);
  CHECK(granted.fence == 7);
  CHECK(read_acquire_reply(busy.reply, nullptr, AcquireDialect::script, "tok").holder_pttl == 900);
  CHECK(read_acquire_reply(ok.reply, nullptr, AcquireDialect::script, "tok").problem ==
        AcquireReply::Problem::unexpected);
  CHECK(confirmed(one.reply));
  CHECK_FALSE(confirmed(zero.reply));
  CHECK_FALSE(confirmed(syntax.reply));
  CHECK(read_release_reply(zero.reply).kind == ReleaseReply::Kind::refused);
  CHECK(read_release_reply(three.reply).kind == ReleaseReply::Kind::released);
  CHECK(read_release_reply(three.reply).listeners == 2);
  CHECK(read_release_reply(ok.reply).kind == ReleaseReply::Kind::other);
  CHECK(error_text(syntax.reply) == "ERR syntax error");
  CHECK(error_text(ok.reply).empty());
}

TEST_CASE("SHA-1 matches the FIPS 180 test vectors", "[unit][engine]") {
  using redlock::detail::sha1_hex;
  CHECK(sha1_hex("") == "da39a3ee5e6b4b0d3255bfef95601890afd80709");
  CHECK(sha1_hex("abc") == "a9993e364706816aba3e25717850c26c9cd0d89d");
  CHECK(sha1_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
  CHECK(sha1_hex(std::string(1000000, 'a')) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
  // Lengths around the padding boundary (55, 56, 63, 64 bytes) are all distinct and well-formed.
  std::set<std::string> seen;
  for (std::size_t n : {55u, 56u, 63u, 64u, 65u}) seen.insert(sha1_hex(std::string(n, 'x')));
  CHECK(seen.size() == 5);
}

TEST_CASE("tokens are 160-bit hex strings that do not repeat", "[unit][engine]") {
  std::set<std::string> seen;
  for (int i = 0; i < 100000; ++i) {
    const std::string token = redlock::detail::make_token();
    REQUIRE(token.size() == 2 * redlock::detail::kTokenBytes);
    REQUIRE(token.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(token);
  }
  CHECK(seen.size() == 100000);
}

TEST_CASE("jitter stays within [base/2, 3*base/2] and varies", "[unit][engine]") {
  std::set<long long> values;
  for (int i = 0; i < 1000; ++i) {
    const auto j = redlock::detail::jittered(100ms);
    REQUIRE(j >= 50ms);
    REQUIRE(j <= 150ms);
    values.insert(j.count());
  }
  CHECK(values.size() > 900);
}

TEST_CASE("durations saturate instead of overflowing", "[unit][engine]") {
  using redlock::detail::saturating_ns;
  CHECK(saturating_ns(std::chrono::hours::max()) == std::chrono::nanoseconds::max());
  CHECK(saturating_ns(std::chrono::hours::min()) == std::chrono::nanoseconds::min());
  CHECK(saturating_ns(std::chrono::duration<double>(1e300)) == std::chrono::nanoseconds::max());
  CHECK(saturating_ns(-5ms) == -5ms);
  CHECK(saturating_ns(1500us) == 1500us);
  using redlock::detail::remaining_ns;
  CHECK(remaining_ns(std::chrono::system_clock::time_point::min()) ==
        std::chrono::nanoseconds::min());
  CHECK(remaining_ns(std::chrono::steady_clock::time_point::max()) > std::chrono::hours(24 * 365));
  const auto soon = remaining_ns(std::chrono::steady_clock::now() + 1s);
  CHECK(soon > 900ms);
  CHECK(soon <= 1s);
}
