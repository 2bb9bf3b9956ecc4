# REDLOCK_HAVE_COROUTINES: the compiler does C++20 coroutines (asio's use_awaitable needs them).
# Only what is built on the asio component uses them (examples/async_service.cpp, the torture's
# --async); the library stays C++17. The result is cached, so including this twice checks once.
include_guard(GLOBAL)
if("cxx_std_20" IN_LIST CMAKE_CXX_COMPILE_FEATURES)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS ${CMAKE_CXX20_STANDARD_COMPILE_OPTION})
  check_cxx_source_compiles([=[
    #include <coroutine>
    struct Task {
      struct promise_type {
        Task get_return_object() { return {}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_never final_suspend() noexcept { return {}; }
        void return_void() {}
        void unhandled_exception() {}
      };
    };
    Task run() { co_await std::suspend_never{}; }
    int main() { run(); }
  ]=] REDLOCK_HAVE_COROUTINES)
  unset(CMAKE_REQUIRED_FLAGS)
endif()
