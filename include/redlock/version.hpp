// redlock/version.hpp: the library version, as macros and as a string.
#ifndef REDLOCK_VERSION_HPP
#define REDLOCK_VERSION_HPP

#define REDLOCK_VERSION_MAJOR 0
#define REDLOCK_VERSION_MINOR 1
#define REDLOCK_VERSION_PATCH 0
#define REDLOCK_VERSION_STRING "0.1.0"

#endif  // REDLOCK_VERSION_HPP
