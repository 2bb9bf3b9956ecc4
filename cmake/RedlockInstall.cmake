# RedlockInstall: install rules (headers, the library, its CMake package redlock::redlock,
# redlock.pc, redlock-run's man page comes with the tool) and the Debian package (CPack DEB).
#
# The library's private dependencies are listed once, here, for the CMake package and for
# pkg-config: adding one (e.g. OpenSSL) is one entry in each list.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# find_dependency() arguments (libcrypto always: SHA-1; libssl with REDLOCK_WITH_TLS)
set(REDLOCK_CMAKE_DEPS hiredis fmt "OpenSSL COMPONENTS Crypto")
set(REDLOCK_PC_DEPS hiredis fmt libcrypto)  # pkg-config module names
if(REDLOCK_WITH_TLS)
  set(REDLOCK_CMAKE_DEPS hiredis fmt "OpenSSL COMPONENTS Crypto SSL")
  list(APPEND REDLOCK_PC_DEPS libssl)
endif()
# The PostgreSQL component links -lpq by name: no CMake dependency, and in redlock-postgres.pc a
# plain -lpq (Debian's libpq.pc --static names archives libpq-dev does not ship).
set(REDLOCK_PC_POSTGRES "")
if(REDLOCK_WITH_POSTGRES)
  set(REDLOCK_HAS_POSTGRES TRUE)
  set(redlock_install_targets redlock redlock_postgres)
else()
  set(REDLOCK_HAS_POSTGRES FALSE)
  set(redlock_install_targets redlock)
endif()

# The ZooKeeper component: a static redlock_zookeeper needs the C client on every link
# (redlockConfig.cmake finds it through the installed FindZooKeeperMt.cmake when the component
# is asked for; pkg-config's redlock-zookeeper.pc names both archives); in a shared build
# libredlock.so links it itself.
set(REDLOCK_HAS_ZOOKEEPER FALSE)
set(REDLOCK_ZOOKEEPER_NEEDS_CLIENT FALSE)
set(REDLOCK_PC_ZOOKEEPER "")
if(REDLOCK_WITH_ZOOKEEPER)
  list(APPEND redlock_install_targets redlock_zookeeper)
  set(REDLOCK_HAS_ZOOKEEPER TRUE)
endif()

# The asio component: an INTERFACE target over redlock. Consumers need asio's headers, looked for
# by redlockConfig.cmake when the component is asked for; redlock-asio.pc names asio's directory
# when the compiler does not search it anyway.
set(REDLOCK_HAS_ASIO FALSE)
set(REDLOCK_PC_ASIO_CFLAGS "")
if(REDLOCK_WITH_ASIO)
  list(APPEND redlock_install_targets redlock_asio)
  set(REDLOCK_HAS_ASIO TRUE)
  if(NOT REDLOCK_ASIO_INCLUDE_DIR IN_LIST CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES)
    set(REDLOCK_PC_ASIO_CFLAGS " -I${REDLOCK_ASIO_INCLUDE_DIR}")
  endif()
endif()

# A shared library links its dependencies itself; a static archive needs them on every link:
# find_dependency() in redlockConfig.cmake, and Requires (not Requires.private) in redlock.pc.
get_target_property(redlock_type redlock TYPE)
set(REDLOCK_CONFIG_DEPENDENCIES "find_dependency(Threads)")
list(JOIN REDLOCK_PC_DEPS " " redlock_pc_modules)
if(redlock_type STREQUAL "STATIC_LIBRARY")
  foreach(dep IN LISTS REDLOCK_CMAKE_DEPS)
    string(APPEND REDLOCK_CONFIG_DEPENDENCIES "\nfind_dependency(${dep})")
  endforeach()
  set(REDLOCK_PC_REQUIRES "Requires: ${redlock_pc_modules}")
  if(REDLOCK_WITH_POSTGRES)
    set(REDLOCK_PC_POSTGRES " -L\${libdir} -lredlock_postgres -lpq")
  endif()
  if(REDLOCK_WITH_ZOOKEEPER)
    set(REDLOCK_ZOOKEEPER_NEEDS_CLIENT TRUE)
    set(REDLOCK_PC_ZOOKEEPER " -L\${libdir} -lredlock_zookeeper -lzookeeper_mt")
  endif()
else()
  set(REDLOCK_PC_REQUIRES "Requires.private: ${redlock_pc_modules}")
endif()

install(DIRECTORY include/redlock DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/redlock/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/redlock)
install(TARGETS ${redlock_install_targets} EXPORT redlockTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_COMPONENT Development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(REDLOCK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/redlock)
install(EXPORT redlockTargets NAMESPACE redlock:: DESTINATION ${REDLOCK_CMAKE_DIR})
configure_package_config_file(cmake/redlockConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/redlockConfig.cmake INSTALL_DESTINATION ${REDLOCK_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/redlockConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/redlockConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/redlockConfigVersion.cmake
              cmake/Findhiredis.cmake
              cmake/FindZooKeeperMt.cmake
        DESTINATION ${REDLOCK_CMAKE_DIR})

# The .pc files find the prefix from where they are installed (${pcfiledir} is LIBDIR/pkgconfig),
# so `cmake --install --prefix DIR` and a moved prefix work; an absolute install dir stays as given.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(REDLOCK_PC_LOCATIONS "prefix=${CMAKE_INSTALL_PREFIX}")
else()
  string(REGEX REPLACE "[^/]+" ".." redlock_pc_up "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
  set(REDLOCK_PC_LOCATIONS "prefix=\${pcfiledir}/${redlock_pc_up}")
endif()
foreach(dir IN ITEMS LIBDIR INCLUDEDIR)
  string(TOLOWER ${dir} name)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    string(APPEND REDLOCK_PC_LOCATIONS "\n${name}=${CMAKE_INSTALL_${dir}}")
  else()
    string(APPEND REDLOCK_PC_LOCATIONS "\n${name}=\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
configure_file(cmake/redlock.pc.in ${CMAKE_CURRENT_BINARY_DIR}/redlock.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/redlock.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(REDLOCK_WITH_POSTGRES)
  configure_file(cmake/redlock-postgres.pc.in ${CMAKE_CURRENT_BINARY_DIR}/redlock-postgres.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/redlock-postgres.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
if(REDLOCK_WITH_ASIO)
  configure_file(cmake/redlock-asio.pc.in ${CMAKE_CURRENT_BINARY_DIR}/redlock-asio.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/redlock-asio.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()
if(REDLOCK_WITH_ZOOKEEPER)
  configure_file(cmake/redlock-zookeeper.pc.in ${CMAKE_CURRENT_BINARY_DIR}/redlock-zookeeper.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/redlock-zookeeper.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

include(RedlockPackage)
