# Install rules: headers, the library, its CMake package (redlock::redlock) and redlock.pc.
include(CMakePackageConfigHelpers)

install(DIRECTORY include/redlock DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS redlock EXPORT redlockTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
set(REDLOCK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/redlock)
install(EXPORT redlockTargets NAMESPACE redlock:: DESTINATION ${REDLOCK_CMAKE_DIR})
configure_package_config_file(cmake/redlockConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/redlockConfig.cmake INSTALL_DESTINATION ${REDLOCK_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/redlockConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/redlockConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/redlockConfigVersion.cmake
              cmake/Findhiredis.cmake
        DESTINATION ${REDLOCK_CMAKE_DIR})
configure_file(cmake/redlock.pc.in ${CMAKE_CURRENT_BINARY_DIR}/redlock.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/redlock.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
