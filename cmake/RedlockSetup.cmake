# redlock_setup_target(<target>): the flags every redlock target shares, in one place.
include(GNUInstallDirs)

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
