// The one Catch2 main for the redlock test suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
