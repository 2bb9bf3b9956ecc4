# RedlockSetup: what every redlock target shares, in one place. As a sub-project it sets nothing
# global: the build type, compile_commands.json and install layout are the parent's.
if(REDLOCK_TOP_LEVEL)
  set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
  endif()
endif()

# The tests and the benchmark reach into the internals (src/), which a shared libredlock keeps
# to itself (cmake/redlock.map): they need the static library.
if(BUILD_SHARED_LIBS AND (REDLOCK_BUILD_TESTS OR REDLOCK_BUILD_BENCH OR REDLOCK_BUILD_FUZZ))
  message(FATAL_ERROR "redlock: the tests, bench and fuzz targets link the library's internals; "
                      "build them with BUILD_SHARED_LIBS=OFF, or turn them off "
                      "(-DREDLOCK_BUILD_TESTS=OFF -DREDLOCK_BUILD_BENCH=OFF)")
endif()

# Before 1.0 any minor release may break the ABI, so the SONAME carries MAJOR.MINOR
# (libredlock.so.0.1); from 1.0 on, MAJOR alone.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(REDLOCK_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(REDLOCK_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()

# redlock_setup_target(<target>): warnings, the language level and the sanitizers.
function(redlock_setup_target target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  endif()
  if(REDLOCK_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${REDLOCK_SANITIZE} -fno-omit-frame-pointer
                                             -fno-sanitize-recover=all)
    target_link_options(${target} PUBLIC -fsanitize=${REDLOCK_SANITIZE})
  endif()
endfunction()

# redlock_setup_library(<target>): the library itself: its public include directories (the
# headers and the generated redlock/version.hpp), the SONAME, and, when shared, the exported
# symbols (cmake/redlock.map: redlock:: only; hiredis, fmt and redlock::detail stay inside).
function(redlock_setup_library target)
  set(generated ${PROJECT_BINARY_DIR}/include)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/version.hpp.in ${generated}/redlock/version.hpp @ONLY)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                              $<BUILD_INTERFACE:${generated}>)
  set_target_properties(${target} PROPERTIES VERSION ${PROJECT_VERSION}
                                             SOVERSION ${REDLOCK_SOVERSION}
                                             POSITION_INDEPENDENT_CODE ON)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "SHARED_LIBRARY" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    set(map ${PROJECT_SOURCE_DIR}/cmake/redlock.map)
    target_link_options(${target} PRIVATE "LINKER:--version-script=${map}"
                                          "LINKER:--no-undefined")
    set_target_properties(${target} PROPERTIES LINK_DEPENDS ${map})
  endif()
endfunction()
