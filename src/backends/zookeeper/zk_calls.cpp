// src/backends/zookeeper/zk_calls.cpp: the plain zoo_* calls (each one round trip, made on a
// caller's thread), the pipelined create-and-list of an acquire, and the error mapping.
#include <atomic>
#include <condition_variable>
#include <mutex>

#include <redlock/errors.hpp>

#include "backends/zookeeper/zk_names.hpp"
#include "backends/zookeeper/zk_session.hpp"

namespace redlock {
namespace detail {
namespace {

// The two replies of zk_create_and_list, filled on the client's completion thread. Owned by the
// caller and by each completion it queued (the client always runs one: with the reply, or with
// ZCONNECTIONLOSS / ZCLOSING): the last of the three to let go frees it. A completion can then
// wake the caller after unlocking the mutex (a caller woken while it is still held would at once
// sleep again on the mutex: two more futex calls and a context switch per acquire).
struct CreateAndList {
  std::mutex mutex;
  std::condition_variable cv;
  int pending{0};              // completions not yet run; guarded by mutex
  std::atomic<int> owners{1};  // the caller, plus one per completion queued
  int create_rc{ZCONNECTIONLOSS};
  std::string created;
  std::int64_t czxid{0};
  int list_rc{ZCONNECTIONLOSS};
  std::vector<std::string> children;

  void release() noexcept {
    if (owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  // A completion's last word: the caller wakes once, for both replies.
  void done() {
    bool last = false;
    {
      std::lock_guard<std::mutex> guard(mutex);
      last = --pending == 0;
    }
    if (last) cv.notify_all();
    release();
  }
};

void created(int rc, const char* path, const struct Stat* stat, const void* data) {
  auto* call = static_cast<CreateAndList*>(const_cast<void*>(data));
  {
    std::lock_guard<std::mutex> guard(call->mutex);
    call->create_rc = rc;
    if (rc == ZOK && path != nullptr) call->created = path;
    if (rc == ZOK && stat != nullptr) call->czxid = stat->czxid;
  }
  call->done();
}

void listed(int rc, const struct String_vector* strings, const void* data) {
  auto* call = static_cast<CreateAndList*>(const_cast<void*>(data));
  {
    std::lock_guard<std::mutex> guard(call->mutex);
    call->list_rc = rc;
    if (rc == ZOK && strings != nullptr) {
      for (int i = 0; i < strings->count; ++i) call->children.emplace_back(strings->data[i]);
    }
  }
  call->done();  // the client frees `strings` after this returns
}

// The reply of zk_exists_until. Shared by the caller, who may stop waiting, and the completion,
// which always runs (with the reply, ZCONNECTIONLOSS or ZCLOSING) and frees its reference.
struct ExistsCall {
  std::mutex mutex;
  std::condition_variable cv;
  bool done{false};
  int rc{ZCONNECTIONLOSS};
};

void existed(int rc, const struct Stat* /*stat*/, const void* data) {
  auto* ref = static_cast<std::shared_ptr<ExistsCall>*>(const_cast<void*>(data));
  {
    std::lock_guard<std::mutex> guard((*ref)->mutex);
    (*ref)->rc = rc;
    (*ref)->done = true;
    (*ref)->cv.notify_all();
  }
  delete ref;
}

}  // namespace

[[noreturn]] void throw_zk_error(int rc, const std::string& what) {
  const std::string text = zerror(rc);
  if (rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT || rc == ZSESSIONEXPIRED ||
      rc == ZSESSIONMOVED || rc == ZCLOSING || rc == ZINVALIDSTATE) {
    throw ConnectionError(what + ": " + text);
  }
  throw ServerError(what + ": " + text, text);
}

ZkStatResult zk_exists(ZkConn& conn, const std::string& path, bool watch) {
  struct Stat stat {};
  const int rc = zoo_exists(conn.handle(), path.c_str(), watch ? 1 : 0, &stat);
  if (rc != ZOK && rc != ZNONODE) throw_zk_error(rc, conn.describe("exists", path));
  return ZkStatResult{rc, rc == ZOK ? stat.czxid : 0};
}

int zk_delete(ZkConn& conn, const std::string& path) {
  const int rc = zoo_delete(conn.handle(), path.c_str(), -1);
  if (rc != ZOK && rc != ZNONODE) throw_zk_error(rc, conn.describe("delete", path));
  return rc;
}

int zk_create(ZkConn& conn, const std::string& path, int mode, std::string* created,
              std::int64_t* czxid) {
  char buffer[1024];
  struct Stat stat {};
  const int rc = zoo_create2(conn.handle(), path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, mode,
                             buffer, sizeof buffer, &stat);
  if (rc == ZOK) {
    if (created) *created = buffer;
    if (czxid) *czxid = stat.czxid;
  } else if (rc != ZNONODE && rc != ZNODEEXISTS) {
    throw_zk_error(rc, conn.describe("create", path));
  }
  return rc;
}

int zk_children(ZkConn& conn, const std::string& path, std::vector<std::string>* out) {
  struct String_vector children {};
  const int rc = zoo_get_children(conn.handle(), path.c_str(), 0, &children);
  if (rc == ZNONODE) {
    out->clear();  // no parent, no children
    return rc;
  }
  if (rc != ZOK) throw_zk_error(rc, conn.describe("get children of", path));
  out->clear();
  for (int i = 0; i < children.count; ++i) out->emplace_back(children.data[i]);
  deallocate_String_vector(&children);
  return rc;
}

std::size_t delete_by_token(ZkConn& conn, const std::string& parent, const std::string& token) {
  std::vector<std::string> children;
  if (zk_children(conn, parent, &children) == ZNONODE) return 0;
  const std::string prefix = zk_token_prefix(token);
  std::size_t deleted = 0;
  for (const auto& name : children) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (zk_delete(conn, parent + "/" + name) == ZOK) ++deleted;
  }
  return deleted;
}

int zk_exists_until(ZkConn& conn, const std::string& path, SteadyClock::time_point deadline) {
  auto call = std::make_shared<ExistsCall>();
  auto* ref = new std::shared_ptr<ExistsCall>(call);
  const int queued = zoo_aexists(conn.handle(), path.c_str(), 0, existed, ref);
  if (queued != ZOK) {
    delete ref;  // no completion will run
    throw_zk_error(queued, conn.describe("exists", path));
  }
  std::unique_lock<std::mutex> lock(call->mutex);
  if (!call->cv.wait_until(lock, deadline, [&] { return call->done; })) {
    throw TimeoutError(conn.describe("exists", path) + ": no answer in time");
  }
  if (call->rc != ZOK && call->rc != ZNONODE) {
    throw_zk_error(call->rc, conn.describe("exists", path));
  }
  return call->rc;
}

int zk_create_and_list(ZkConn& conn, const std::string& path, int mode, std::string* created_path,
                       std::int64_t* czxid, const std::string& parent,
                       std::vector<std::string>* children) {
  auto* call = new CreateAndList;
  call->pending = 2;  // set before either request exists
  call->owners.store(3, std::memory_order_relaxed);
  const int rc = zoo_acreate2(conn.handle(), path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, mode,
                              created, call);
  if (rc != ZOK) {  // nothing was queued
    delete call;
    throw_zk_error(rc, conn.describe("create", path));
  }
  // Queued behind the create on the same connection: the server answers it after the create.
  const int queued = zoo_aget_children(conn.handle(), parent.c_str(), 0, listed, call);
  std::unique_lock<std::mutex> lock(call->mutex);
  if (queued != ZOK) {  // no completion will run for it
    --call->pending;
    call->list_rc = queued;
    call->owners.fetch_sub(1, std::memory_order_relaxed);  // the create's completion still owns it
  }
  call->cv.wait(lock, [&] { return call->pending == 0; });
  const int create_rc = call->create_rc;
  const int list_rc = call->list_rc;
  if (create_rc == ZOK) {
    created_path->swap(call->created);
    *czxid = call->czxid;
    children->clear();  // if the list failed, the caller lists again
    if (list_rc == ZOK) children->swap(call->children);
  }
  lock.unlock();
  call->release();
  if (create_rc != ZOK && create_rc != ZNONODE) {
    throw_zk_error(create_rc, conn.describe("create", path));
  }
  if (create_rc == ZNONODE) return ZNONODE;
  return list_rc == ZOK ? ZOK : ZNOTHING;
}

void zk_ensure_path(ZkConn& conn, const std::string& path) {
  if (zk_exists(conn, path, false).rc == ZOK) return;
  // Ancestors (the chroot's parts) are persistent; the lock's own node is a container, which
  // the server removes once its last child is gone.
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    zk_create(conn, path.substr(0, slash), ZOO_PERSISTENT, nullptr, nullptr);
  }
  zk_create(conn, path, ZOO_CONTAINER, nullptr, nullptr);
}

}  // namespace detail
}  // namespace redlock
