// redlock/detail/visibility.hpp: REDLOCK_LOCAL, for a member of a public class that only the
// library itself calls (a private constructor that takes a redlock::detail type).
#ifndef REDLOCK_DETAIL_VISIBILITY_HPP
#define REDLOCK_DETAIL_VISIBILITY_HPP

// libredlock.so exports namespace redlock (cmake/redlock.map) and keeps redlock::detail local; a
// symbol whose class is public but whose signature names a detail type is internal all the same,
// so it is hidden from the dynamic symbol table. Static builds are unaffected: hidden symbols
// still link between the library's own archives (redlock::zookeeper, redlock::postgres).
#if defined(__GNUC__) || defined(__clang__)
#define REDLOCK_LOCAL __attribute__((visibility("hidden")))
#else
#define REDLOCK_LOCAL
#endif

#endif  // REDLOCK_DETAIL_VISIBILITY_HPP
