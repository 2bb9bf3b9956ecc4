// SmallVector (src/small_vector.hpp): inline up to N, heap beyond, moves in both states.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "util/small_vector.hpp"

using redlock::detail::SmallVector;

TEST_CASE("SmallVector keeps up to N elements inline and grows past N", "[unit][small_vector]") {
  SmallVector<std::string, 2> v;
  CHECK(v.empty());
  const std::string* const inline_data = v.data();
  v.push_back("a long string that does not fit in the small-string buffer");
  v.emplace_back("b");
  CHECK(v.data() == inline_data);
  v.push_back(v[0]);  // refers to an element that moves while it grows
  CHECK(v.data() != inline_data);
  REQUIRE(v.size() == 3);
  CHECK(v[0] == "a long string that does not fit in the small-string buffer");
  CHECK(v[1] == "b");
  CHECK(v[2] == v[0]);
  for (int i = 0; i < 20; ++i) v.push_back(std::to_string(i));
  CHECK(v.size() == 23);
  CHECK(v.back() == "19");
  v.clear();
  CHECK(v.empty());
  v.push_back("again");
  CHECK(v[0] == "again");
}

TEST_CASE("SmallVector resizes with value-initialised elements", "[unit][small_vector]") {
  SmallVector<int, 4> v(3);
  REQUIRE(v.size() == 3);
  CHECK((v[0] == 0 && v[1] == 0 && v[2] == 0));
  v.resize(6);
  CHECK(v.size() == 6);
  CHECK(v[5] == 0);
  v.resize(1);
  CHECK(v.size() == 1);
  SmallVector<bool, 4> flags(5, true);
  CHECK(flags.size() == 5);
  int set = 0;
  for (bool f : flags) set += f ? 1 : 0;
  CHECK(set == 5);
}

TEST_CASE("SmallVector moves its elements, inline or on the heap", "[unit][small_vector]") {
  for (std::size_t count : {1u, 2u, 5u}) {
    SmallVector<std::unique_ptr<int>, 2> from;
    for (std::size_t i = 0; i < count; ++i) from.push_back(std::make_unique<int>(int(i)));
    SmallVector<std::unique_ptr<int>, 2> to(std::move(from));
    CHECK(from.empty());
    REQUIRE(to.size() == count);
    for (std::size_t i = 0; i < count; ++i) CHECK(*to[i] == int(i));

    SmallVector<std::unique_ptr<int>, 2> other;
    other.push_back(std::make_unique<int>(42));
    other = std::move(to);
    CHECK(to.empty());
    REQUIRE(other.size() == count);
    CHECK(*other[count - 1] == int(count - 1));
    to.push_back(std::make_unique<int>(7));  // a moved-from vector is usable
    CHECK(*to[0] == 7);
  }
}
