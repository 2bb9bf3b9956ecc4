// tests/support/tls_certs.cpp: the openssl commands behind tls_certs().
#include "support/tls_certs.hpp"

#include <cstdlib>     // std::system, std::atexit, std::getenv
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream
#include <iterator>    // std::istreambuf_iterator
#include <stdexcept>   // std::runtime_error
#include <string>      // std::string

namespace redlock::test {
namespace {

namespace fs = std::filesystem;

// One shell script, so a failure stops at once (set -e) and its output is in one log.
constexpr const char* kScript = R"(set -e
trap 'echo "make.sh: line $LINENO failed (status $?): $BASH_COMMAND"' ERR
cd "$1"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 3650 -out "$1.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}
# issue <name> <key> <extensions> [faketime prefix...]
issue() {
  name=$1; k=$2; ext=$3; shift 3
  openssl req -new -key "$k" -subj "/CN=$name" -out "$name.csr"
  printf '%s\n' "$ext" > "$name.ext"
  "$@" openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -days 30 -extfile "$name.ext" -out "$name.pem"
}
ca ca "redlock test CA"
ca other-ca "redlock other CA"
key server.key
key client.key
issue server server.key "subjectAltName=IP:127.0.0.1,DNS:localhost"
issue expired server.key "subjectAltName=IP:127.0.0.1,DNS:localhost" faketime "2020-01-01 00:00:00"
issue no-san server.key "basicConstraints=CA:FALSE"
issue client client.key "extendedKeyUsage=clientAuth"
openssl req -x509 -new -key server.key -subj "/CN=self-signed" -days 30 -out self-signed.pem \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost"
)";

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TlsCerts make_certs() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/redlock-certs-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("tls_certs: mkdtemp failed");
  const std::string dir = pattern;
  {
    std::ofstream script(dir + "/make.sh");
    script << kScript;
  }
  const std::string command =
      "bash '" + dir + "/make.sh' '" + dir + "' >>'" + dir + "/make.log' 2>&1";
  // Once, under TSan on a loaded CI machine, the script failed with nothing in its log (then
  // its stderr was dropped): it now says which line failed, and a failed run is retried twice.
  int status = -1;
  for (int attempt = 0; attempt < 3 && status != 0; ++attempt)
    status = std::system(command.c_str());
  if (status != 0) {
    throw std::runtime_error("tls_certs: openssl failed (system() status " +
                             std::to_string(status) + "): " + read_all(dir + "/make.log"));
  }
  TlsCerts c;
  c.dir = dir;
  c.ca = dir + "/ca.pem";
  c.other_ca = dir + "/other-ca.pem";
  c.server = dir + "/server.pem";
  c.server_key = dir + "/server.key";
  c.expired = dir + "/expired.pem";
  c.no_san = dir + "/no-san.pem";
  c.self_signed = dir + "/self-signed.pem";
  c.client = dir + "/client.pem";
  c.client_key = dir + "/client.key";
  return c;
}

const TlsCerts* g_certs = nullptr;

void remove_certs() {
  std::error_code ec;
  if (g_certs != nullptr) fs::remove_all(g_certs->dir, ec);
}

}  // namespace

const TlsCerts& tls_certs() {
  static const TlsCerts certs = [] {
    TlsCerts made = make_certs();
    return made;
  }();
  static const bool registered = [] {
    g_certs = &certs;
    std::atexit(remove_certs);
    return true;
  }();
  (void)registered;
  return certs;
}

}  // namespace redlock::test
