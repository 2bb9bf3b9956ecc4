# redlock-run: run a command while holding a Redis lock (flock(1) for a fleet).
# Included by examples/CMakeLists.txt; paths are relative to this file so any includer works.
add_executable(redlock-run ${CMAKE_CURRENT_LIST_DIR}/redlock_run.cpp)
redlock_setup_target(redlock-run)
target_link_libraries(redlock-run PRIVATE redlock::redlock)

if(REDLOCK_INSTALL)
  install(TARGETS redlock-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
