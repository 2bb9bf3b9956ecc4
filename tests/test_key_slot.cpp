// tests/test_key_slot.cpp: Redis Cluster key slots (CRC16-XMODEM, hash tags) and the names of a
// lock's helper keys, which must share the lock key's slot in every topology.
#include <catch2/catch.hpp>

#include <string>

#include "util/key_slot.hpp"

using redlock::detail::crc16_xmodem;
using redlock::detail::hash_tag;
using redlock::detail::helper_key;
using redlock::detail::helpers_share_slot;
using redlock::detail::key_slot;

TEST_CASE("CRC16-XMODEM and key slots match the Redis Cluster specification", "[unit][cluster]") {
  CHECK(crc16_xmodem("123456789") == 0x31C3);  // the spec's check value
  CHECK(crc16_xmodem("") == 0);
  // Values CLUSTER KEYSLOT gives on a real server.
  CHECK(key_slot("foo") == 12182);
  CHECK(key_slot("bar") == 5061);
  CHECK(key_slot("hello") == 866);
}

TEST_CASE("hash tags follow the spec's first-brace rule", "[unit][cluster]") {
  CHECK(hash_tag("{user1000}.following") == "user1000");
  CHECK(key_slot("{user1000}.following") == key_slot("{user1000}.followers"));
  CHECK(hash_tag("foo{}{bar}") == "foo{}{bar}");  // an empty first tag: the whole key
  CHECK(hash_tag("foo{{bar}}zap") == "{bar");
  CHECK(hash_tag("foo{bar}{zap}") == "bar");
  CHECK(hash_tag("no-tag") == "no-tag");
  CHECK(hash_tag("open{only") == "open{only");
}

TEST_CASE("helper keys keep a key's own tag, or wrap the key as one", "[unit][cluster]") {
  CHECK(helper_key("orders{42}:lock", ":fence") == "orders{42}:lock:fence");
  CHECK(helper_key("orders", ":fence") == "{orders}:fence");
  CHECK(helper_key("orders", ":waiters:info") == "{orders}:waiters:info");
  CHECK(helper_key("a{}b", ":waiters") == "{a{}b}:waiters");
  const std::string keys[] = {
      "orders", "orders{42}:lock",         "{x}", "a{b", "rltest:123:abc:lock",
      "a{b{",   std::string("bin\0ary", 7)};
  for (const std::string& key : keys) {
    INFO(key);
    REQUIRE(helpers_share_slot(key));
    for (const char* suffix : {":fence", ":released", ":waiters", ":waiters:info", ":permit:7"}) {
      CHECK(key_slot(helper_key(key, suffix)) == key_slot(key));
    }
  }
}

TEST_CASE("a key without a tag that holds '}' cannot share its slot with wrapped helpers",
          "[unit][cluster]") {
  CHECK_FALSE(helpers_share_slot("a}b"));
  CHECK_FALSE(helpers_share_slot("a{}b}"));
  CHECK(helpers_share_slot("a{b}c}"));  // has a tag: suffixes keep it
}
