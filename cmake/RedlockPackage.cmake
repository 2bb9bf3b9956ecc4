# RedlockPackage: `cpack -G DEB` in the build directory makes a Debian package of what
# `cmake --install` installs. Build it from a shared build (-DBUILD_SHARED_LIBS=ON): then the
# runtime dependencies (libhiredis0.14, libfmt9, libstdc++6, ...) come from dpkg-shlibdeps. A
# static build's package depends on the -dev packages its consumers link against instead.
set(CPACK_PACKAGE_NAME "libredlock-dev")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "redlock maintainers <maintainers@users.noreply.github.com>"
    CACHE STRING "Maintainer of the Debian package")
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
if(redlock_type STREQUAL "STATIC_LIBRARY")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libhiredis-dev (>= 0.14), libfmt-dev (>= 9)")
endif()
if(REDLOCK_WITH_ASIO)  # <redlock/asio.hpp> needs asio's headers; the rest of the library does not
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libasio-dev (>= 1:1.22)")
endif()
set(CPACK_GENERATOR DEB)
include(CPack)
