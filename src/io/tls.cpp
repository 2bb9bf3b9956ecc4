// src/io/tls.cpp: the OpenSSL TLS layer: one SSL_CTX per TLS configuration (with the servers'
// sessions for resumption), a socket BIO that never raises SIGPIPE, the non-blocking handshake,
// reads and writes, and failures described in words a user can act on.
#include "io/tls.hpp"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include <redlock/errors.hpp>

#include "io/tls_describe.hpp"
#include "util/log_internal.hpp"
#include "util/sha1.hpp"  // init_crypto

namespace redlock {
namespace detail {
namespace {

std::atomic<Resumption> g_resumption{Resumption::offered};

struct CtxDeleter {
  void operator()(SSL_CTX* ctx) const noexcept { SSL_CTX_free(ctx); }
};
struct SessionDeleter {
  void operator()(SSL_SESSION* session) const noexcept { SSL_SESSION_free(session); }
};
using SessionPtr = std::unique_ptr<SSL_SESSION, SessionDeleter>;

// --- A socket BIO on send(MSG_NOSIGNAL)/recv(MSG_DONTWAIT): OpenSSL's own uses write(2), which
// raises SIGPIPE in the caller when the server has gone.

// What a BIO reads from: the socket, and the recv flags (MSG_DONTWAIT except in read_waiting).
struct Socket {
  int fd{-1};
  int recv_flags{MSG_DONTWAIT};
  bool received{false};  // any byte from the server yet
};

Socket& socket_of(BIO* bio) { return *static_cast<Socket*>(BIO_get_data(bio)); }

bool retriable(int code) { return code == EAGAIN || code == EWOULDBLOCK || code == EINTR; }

int bio_write(BIO* bio, const char* data, int length) {
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::send(socket_of(bio).fd, data, static_cast<std::size_t>(length),
                           MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0 && retriable(errno)) BIO_set_retry_write(bio);
  return static_cast<int>(n);
}

int bio_read(BIO* bio, char* data, int length) {
  BIO_clear_retry_flags(bio);
  Socket& socket = socket_of(bio);
  const ssize_t n = ::recv(socket.fd, data, static_cast<std::size_t>(length), socket.recv_flags);
  if (n < 0 && retriable(errno)) BIO_set_retry_read(bio);
  if (n > 0) socket.received = true;
  return static_cast<int>(n);
}

long bio_ctrl(BIO* /*bio*/, int command, long /*number*/, void* /*pointer*/) {
  return command == BIO_CTRL_FLUSH ? 1 : 0;
}

int bio_create(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* socket_method() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "redlock socket");
    if (m != nullptr) {
      BIO_meth_set_write(m, bio_write);
      BIO_meth_set_read(m, bio_read);
      BIO_meth_set_ctrl(m, bio_ctrl);
      BIO_meth_set_create(m, bio_create);
    }
    return m;
  }();
  return method;
}

// --- Contexts, one per configuration, and the sessions of their servers.

int session_slot();

class TlsContext {
 public:
  TlsContext(const TlsOptions& options, const std::string& address);
  SSL_CTX* get() const noexcept { return ctx_.get(); }
  // A copy of the latest session of `peer` (for SSL_set_session), or null.
  SessionPtr session(const std::string& peer) const;
  void remember(const std::string& peer, SSL_SESSION* session) noexcept;

 private:
  std::unique_ptr<SSL_CTX, CtxDeleter> ctx_;
  mutable std::mutex mutex_;
  std::map<std::string, SessionPtr> sessions_;  // guarded by mutex_
};

[[noreturn]] void config_error(const std::string& address, const std::string& what) {
  throw ConnectionError(fmt::format("redlock: cannot connect to {} over TLS: {} ({})", address,
                                    what, openssl_reason(ERR_get_error())));
}

// Keys are never read from a terminal: an encrypted key fails instead of prompting.
int no_passphrase(char* /*buffer*/, int /*size*/, int /*rwflag*/, void* /*user*/) { return 0; }

void load_trust(SSL_CTX* ctx, const TlsOptions& options, const std::string& address) {
  if (options.ca_file.empty() && options.ca_dir.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) config_error(address, "no default CA store");
    return;
  }
  const char* file = options.ca_file.empty() ? nullptr : options.ca_file.c_str();
  const char* dir = options.ca_dir.empty() ? nullptr : options.ca_dir.c_str();
  if (SSL_CTX_load_verify_locations(ctx, file, dir) != 1) {
    config_error(address,
                 fmt::format("cannot load the CA certificates (cacert '{}', cacertdir '{}')",
                             options.ca_file, options.ca_dir));
  }
}

void load_client_certificate(SSL_CTX* ctx, const TlsOptions& options, const std::string& address) {
  if (options.cert_file.empty() && options.key_file.empty()) return;
  if (options.cert_file.empty() || options.key_file.empty()) {
    throw ConnectionError(fmt::format(
        "redlock: cannot connect to {} over TLS: a client certificate needs both cert (file) and "
        "key (file)",
        address));
  }
  if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
    config_error(address,
                 fmt::format("cannot load the client certificate '{}'", options.cert_file));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    config_error(address, fmt::format("cannot use the client key '{}' (unreadable, encrypted, or "
                                      "not the certificate's key)",
                                      options.key_file));
  }
}

int on_new_session(SSL* ssl, SSL_SESSION* session);

namespace {
// libcrypto initialised first without its exit-time cleanup (util/sha1.hpp, init_crypto).
SSL_CTX* new_client_context() {
  init_crypto();
  return SSL_CTX_new(TLS_client_method());
}
}  // namespace

TlsContext::TlsContext(const TlsOptions& options, const std::string& address)
    : ctx_(new_client_context()) {
  if (!ctx_) config_error(address, "cannot create an OpenSSL context");
  SSL_CTX* ctx = ctx_.get();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  SSL_CTX_set_verify(ctx, options.verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  if (options.verify) load_trust(ctx, options, address);
  load_client_certificate(ctx, options, address);
  // Sessions are kept here, per server, rather than in OpenSSL's cache (which a client never
  // looks up by itself).
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, on_new_session);
}

SessionPtr TlsContext::session(const std::string& peer) const {
  std::lock_guard<std::mutex> guard(mutex_);
  const auto it = sessions_.find(peer);
  if (it == sessions_.end() || SSL_SESSION_is_resumable(it->second.get()) != 1) return nullptr;
  // A copy per connection: connections on several threads never share one SSL_SESSION (OpenSSL
  // updates a connection's session when tickets arrive; the copy keeps that private).
  return SessionPtr(SSL_SESSION_dup(it->second.get()));
}

void TlsContext::remember(const std::string& peer, SSL_SESSION* session) noexcept {
  SessionPtr owned(session);
  try {
    std::lock_guard<std::mutex> guard(mutex_);
    sessions_[peer] = std::move(owned);
  } catch (...) {  // bad_alloc: the session is not kept
  }
}

using ContextKey = std::tuple<std::string, std::string, std::string, std::string, bool>;

std::shared_ptr<TlsContext> context_for(const TlsOptions& options, const std::string& address) {
  static std::mutex mutex;
  static std::map<ContextKey, std::shared_ptr<TlsContext>> contexts;  // for the process's life
  ContextKey key{options.ca_file, options.ca_dir, options.cert_file, options.key_file,
                 options.verify};
  std::lock_guard<std::mutex> guard(mutex);
  auto& slot = contexts[key];
  if (!slot) slot = std::make_shared<TlsContext>(options, address);  // a failure leaves it empty
  return slot;
}

// --- One connection.

class TlsLayer final : public SecureLayer {
 public:
  TlsLayer(std::shared_ptr<TlsContext> context, const Endpoint& endpoint);
  ~TlsLayer() override { SSL_free(ssl_); }
  TlsLayer(const TlsLayer&) = delete;
  TlsLayer& operator=(const TlsLayer&) = delete;

  Handshake handshake(int fd) noexcept override;
  IoResult read(int fd, char* into, std::size_t capacity) noexcept override;
  IoResult read_waiting(int fd, char* into, std::size_t capacity) noexcept override;
  IoResult write(int fd, const char* from, std::size_t length) noexcept override;
  short wanted() const noexcept override { return wanted_; }
  bool buffered() const noexcept override { return SSL_pending(ssl_) > 0; }
  void close(int fd) noexcept override;
  const char* failure() const noexcept override { return failure_.c_str(); }
  bool heard_from_server() const noexcept override { return socket_.received; }

  void remember(SSL_SESSION* session) noexcept { context_->remember(peer_, session); }

 private:
  bool attach(int fd) noexcept;
  IoResult outcome(int rc, const char* doing) noexcept;
  // The result of SSL_read/SSL_write's `rc`.
  IoResult moved(int rc, const char* doing) noexcept;

  std::shared_ptr<TlsContext> context_;
  SSL* ssl_;
  std::string peer_;         // the server, for its session: "name@address"
  std::string server_name_;  // what the certificate must name
  bool has_client_cert_;
  Socket socket_;  // the BIO's
  bool attached_{false};
  bool fatal_{false};  // no close_notify after a fatal error
  short wanted_{0};
  std::string failure_;
};

int session_slot() {
  static const int slot = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return slot;
}

// Keeps a copy, not the connection's live session: the store is then the only owner of what it
// holds, and no SSL_SESSION is ever touched by two threads (OpenSSL keeps updating a connection's
// own session as more tickets arrive).
int on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* layer = static_cast<TlsLayer*>(SSL_get_ex_data(ssl, session_slot()));
  SSL_SESSION* copy = layer != nullptr ? SSL_SESSION_dup(session) : nullptr;
  if (copy != nullptr) layer->remember(copy);
  return 0;  // the connection keeps its reference
}

bool is_ip_address(const std::string& name) {
  unsigned char buffer[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, name.c_str(), buffer) == 1 ||
         ::inet_pton(AF_INET6, name.c_str(), buffer) == 1;
}

TlsLayer::TlsLayer(std::shared_ptr<TlsContext> context, const Endpoint& endpoint)
    : context_(std::move(context)),
      ssl_(SSL_new(context_->get())),
      server_name_(endpoint.tls.server_name.empty() ? endpoint.host : endpoint.tls.server_name),
      has_client_cert_(!endpoint.tls.cert_file.empty()) {
  if (ssl_ == nullptr) throw std::bad_alloc();
  peer_ = server_name_ + "@" + endpoint.address();
  SSL_set_ex_data(ssl_, session_slot(), this);
  SSL_set_connect_state(ssl_);
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
  if (is_ip_address(server_name_)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, server_name_.c_str());  // IP SANs; no SNI for an IP
  } else {
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    X509_VERIFY_PARAM_set1_host(param, server_name_.c_str(), 0);
    SSL_set_tlsext_host_name(ssl_, server_name_.c_str());
  }
  if (g_resumption.load(std::memory_order_relaxed) == Resumption::offered) {
    if (SessionPtr session = context_->session(peer_)) SSL_set_session(ssl_, session.get());
  }
}

bool TlsLayer::attach(int fd) noexcept {
  BIO* bio = BIO_new(socket_method());
  if (bio == nullptr) return false;
  socket_.fd = fd;
  BIO_set_data(bio, &socket_);
  SSL_set_bio(ssl_, bio, bio);
  attached_ = true;
  return true;
}

Handshake TlsLayer::handshake(int fd) noexcept {
  if (!attached_ && !attach(fd)) {
    failure_ = "out of memory";
    return Handshake::failed;
  }
  ERR_clear_error();
  const int rc = SSL_connect(ssl_);
  if (rc == 1) {
    wanted_ = 0;
    if (SSL_session_reused(ssl_) == 1)
      logf(LogLevel::debug, "redlock: TLS session {} resumed", peer_);
    return Handshake::ready;
  }
  const IoResult result = outcome(rc, "handshake");
  if (result.error == IoError::again) {
    return wanted_ == POLLIN ? Handshake::want_read : Handshake::want_write;
  }
  return Handshake::failed;
}

// The IoResult for an SSL call that returned rc <= 0; a failure is described in failure_.
IoResult TlsLayer::outcome(int rc, const char* doing) noexcept {
  const int code = SSL_get_error(ssl_, rc);
  const int saved_errno = errno;
  wanted_ = 0;
  switch (code) {
    case SSL_ERROR_WANT_READ:
      wanted_ = POLLIN;
      return IoResult{0, IoError::again, 0};
    case SSL_ERROR_WANT_WRITE:
      wanted_ = POLLOUT;
      return IoResult{0, IoError::again, 0};
    case SSL_ERROR_ZERO_RETURN:
      return IoResult{0, IoError::closed, 0};
    default:
      break;
  }
  fatal_ = true;
  const unsigned long error = ERR_peek_error();
  const bool system = code == SSL_ERROR_SYSCALL && saved_errno != 0 && rc != 0;
  const bool eof = (code == SSL_ERROR_SYSCALL && !system) ||
                   ERR_GET_REASON(error) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
  try {
    failure_ = describe_failure(
        ssl_, error,
        TlsFailureContext{doing, server_name_, has_client_cert_, eof, system ? saved_errno : 0});
  } catch (...) {
    failure_.clear();
  }
  if (system) return IoResult{0, classify(saved_errno), saved_errno, failure_.c_str()};
  if (eof) return IoResult{0, IoError::closed, 0, failure_.c_str()};
  return IoResult{0, IoError::other, EPROTO, failure_.c_str()};
}

IoResult TlsLayer::moved(int rc, const char* doing) noexcept {
  if (rc <= 0) return outcome(rc, doing);
  wanted_ = 0;
  return IoResult{static_cast<std::size_t>(rc), IoError::none, 0};
}

IoResult TlsLayer::read(int fd, char* into, std::size_t capacity) noexcept {
  if (!attached_ && !attach(fd)) return IoResult{0, IoError::other, ENOMEM, "out of memory"};
  ERR_clear_error();
  return moved(SSL_read(ssl_, into, static_cast<int>(std::min<std::size_t>(capacity, INT_MAX))),
               "read");
}

IoResult TlsLayer::read_waiting(int fd, char* into, std::size_t capacity) noexcept {
  socket_.recv_flags = 0;  // the socket is blocking, bounded by SO_RCVTIMEO
  const IoResult result = read(fd, into, capacity);
  socket_.recv_flags = MSG_DONTWAIT;
  return result;
}

// Also the first call on a connection whose handshake was never stepped (a request queued for
// the finisher while its connect was under way): SSL_write then runs the handshake.
IoResult TlsLayer::write(int fd, const char* from, std::size_t length) noexcept {
  if (!attached_ && !attach(fd)) return IoResult{0, IoError::other, ENOMEM, "out of memory"};
  ERR_clear_error();
  return moved(SSL_write(ssl_, from, static_cast<int>(std::min<std::size_t>(length, INT_MAX))),
               "write");
}

void TlsLayer::close(int /*fd*/) noexcept {
  if (!attached_ || fatal_ || SSL_is_init_finished(ssl_) != 1) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // one close_notify, not waiting for the server's
  ERR_clear_error();
}

}  // namespace

std::unique_ptr<SecureLayer> make_secure_layer(const Endpoint& endpoint,
                                               const std::string& address) {
  if (!endpoint.tls.enabled) return nullptr;
  if (socket_method() == nullptr) throw std::bad_alloc();
  return std::make_unique<TlsLayer>(context_for(endpoint.tls, address), endpoint);
}

void set_tls_resumption(Resumption resumption) noexcept {
  g_resumption.store(resumption, std::memory_order_relaxed);
}

}  // namespace detail
}  // namespace redlock
