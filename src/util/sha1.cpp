// src/util/sha1.cpp: SHA-1 digests through OpenSSL's libcrypto (EVP), printed as lowercase hex.
#include "util/sha1.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <new>

namespace redlock {
namespace detail {

void init_crypto() noexcept {
  static const bool once = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  (void)once;
}

std::string sha1_hex(std::string_view data) {
  init_crypto();
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // EVP_Digest fails only when out of memory (a provider cannot be set up).
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha1(), nullptr) != 1) {
    throw std::bad_alloc();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * length, '0');
  for (unsigned int i = 0; i < length; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

void release_thread_crypto_state() noexcept { OPENSSL_thread_stop(); }

}  // namespace detail
}  // namespace redlock
