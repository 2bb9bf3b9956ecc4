# Findhiredis.cmake: hiredis 0.14 ships a pkg-config file but no CMake package.
# Provides the imported target hiredis::hiredis (and hiredis_FOUND, hiredis_VERSION).
include(FindPackageHandleStandardArgs)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_HIREDIS QUIET hiredis)
endif()
find_path(hiredis_INCLUDE_DIR NAMES hiredis/hiredis.h HINTS ${PC_HIREDIS_INCLUDE_DIRS})
find_library(hiredis_LIBRARY NAMES hiredis HINTS ${PC_HIREDIS_LIBRARY_DIRS})
set(hiredis_VERSION "${PC_HIREDIS_VERSION}")
find_package_handle_standard_args(hiredis
  REQUIRED_VARS hiredis_LIBRARY hiredis_INCLUDE_DIR
  VERSION_VAR hiredis_VERSION)
if(hiredis_FOUND AND NOT TARGET hiredis::hiredis)
  add_library(hiredis::hiredis UNKNOWN IMPORTED)
  set_target_properties(hiredis::hiredis PROPERTIES
    IMPORTED_LOCATION "${hiredis_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${hiredis_INCLUDE_DIR}")
endif()
mark_as_advanced(hiredis_INCLUDE_DIR hiredis_LIBRARY)
