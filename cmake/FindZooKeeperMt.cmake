# FindZooKeeperMt.cmake: the ZooKeeper C client, multithreaded (Debian: libzookeeper-mt-dev),
# which ships neither a CMake package nor a pkg-config file. Provides the imported target
# ZooKeeper::zookeeper_mt (and ZooKeeperMt_FOUND), which defines THREADED for its users.
include(FindPackageHandleStandardArgs)
find_path(ZooKeeperMt_INCLUDE_DIR NAMES zookeeper/zookeeper.h)
find_library(ZooKeeperMt_LIBRARY NAMES zookeeper_mt)
find_package_handle_standard_args(ZooKeeperMt
  REQUIRED_VARS ZooKeeperMt_LIBRARY ZooKeeperMt_INCLUDE_DIR)
if(ZooKeeperMt_FOUND AND NOT TARGET ZooKeeper::zookeeper_mt)
  add_library(ZooKeeper::zookeeper_mt UNKNOWN IMPORTED)
  set_target_properties(ZooKeeper::zookeeper_mt PROPERTIES
    IMPORTED_LOCATION "${ZooKeeperMt_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${ZooKeeperMt_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS THREADED)  # the synchronous zoo_* calls exist only with it
endif()
mark_as_advanced(ZooKeeperMt_INCLUDE_DIR ZooKeeperMt_LIBRARY)
