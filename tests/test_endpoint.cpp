// Unit tests for redlock::Endpoint: URI parsing, address() and to_string(). No Redis needed.
#include <redlock/client.hpp>
#include <redlock/endpoint.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

namespace {

using redlock::Endpoint;
using std::chrono::milliseconds;

constexpr const char* kSecret = "hunter2secret";

// Parses `uri`, which must fail; returns the message.
std::string parse_error(const std::string& uri) {
  try {
    Endpoint::parse(uri);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  FAIL("Endpoint::parse(\"" << uri << "\") did not throw std::invalid_argument");
  return {};
}

struct BadUri {
  const char* uri;
  const char* names;  // a word the message must contain
};

void check_bad(const BadUri& bad) {
  CAPTURE(bad.uri);
  const std::string message = parse_error(bad.uri);
  CAPTURE(message);
  CHECK(message.find(bad.names) != std::string::npos);
  CHECK(message.find(kSecret) == std::string::npos);
  CHECK(message.find("hunter2") == std::string::npos);
}

}  // namespace

TEST_CASE("Endpoint defaults match the documented values", "[unit]") {
  const Endpoint e;
  CHECK(e.host == "127.0.0.1");
  CHECK(e.port == 6379);
  CHECK(e.unix_socket.empty());
  CHECK(e.username.empty());
  CHECK(e.password.empty());
  CHECK(e.database == 0);
  CHECK(e.connect_timeout == milliseconds(200));
  CHECK(e.command_timeout == milliseconds(200));
}

TEST_CASE("Endpoint::parse accepts a host only and keeps the defaults", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://cache.example.com");
  CHECK(e.host == "cache.example.com");
  CHECK(e.port == 6379);
  CHECK(e.unix_socket.empty());
  CHECK(e.username.empty());
  CHECK(e.password.empty());
  CHECK(e.database == 0);
  CHECK(e.connect_timeout == milliseconds(200));
  CHECK(e.command_timeout == milliseconds(200));
}

TEST_CASE("Endpoint::parse accepts host:port", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://10.0.0.7:6380");
  CHECK(e.host == "10.0.0.7");
  CHECK(e.port == 6380);
  CHECK(Endpoint::parse("redis://h:1").port == 1);
  CHECK(Endpoint::parse("redis://h:65535").port == 65535);
  CHECK(Endpoint::parse("redis://h:06379").port == 6379);
  CHECK(Endpoint::parse("redis://my_host-1.local:7000").host == "my_host-1.local");
}

TEST_CASE("Endpoint::parse accepts a database in the path", "[unit]") {
  CHECK(Endpoint::parse("redis://h/3").database == 3);
  CHECK(Endpoint::parse("redis://h:6380/15").database == 15);
  CHECK(Endpoint::parse("redis://h/0").database == 0);
  CHECK(Endpoint::parse("redis://h/").database == 0);
  CHECK(Endpoint::parse("redis://h").database == 0);
  CHECK(Endpoint::parse("redis://h/2147483647").database == 2147483647);
}

TEST_CASE("Endpoint::parse accepts user:password@", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://app:hunter2secret@127.0.0.1:6380/2");
  CHECK(e.username == "app");
  CHECK(e.password == kSecret);
  CHECK(e.host == "127.0.0.1");
  CHECK(e.port == 6380);
  CHECK(e.database == 2);
}

TEST_CASE("Endpoint::parse accepts :password@ as password only", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://:hunter2secret@h");
  CHECK(e.username.empty());
  CHECK(e.password == kSecret);
  CHECK(e.host == "h");
}

TEST_CASE("Endpoint::parse accepts user@ without a password", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://app@h");
  CHECK(e.username == "app");
  CHECK(e.password.empty());
  const Endpoint empty = Endpoint::parse("redis://app:@h");
  CHECK(empty.username == "app");
  CHECK(empty.password.empty());
}

TEST_CASE("Endpoint::parse percent-decodes user and password", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://me%40corp:p%40ss%3Aw%2Fo%25rd%3f@h:1234");
  CHECK(e.username == "me@corp");
  CHECK(e.password == "p@ss:w/o%rd?");
  CHECK(e.host == "h");
  CHECK(e.port == 1234);
}

TEST_CASE("Endpoint::parse takes the last '@' so a raw '@' or '/' in a password works", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://u:a@b/c?d@h:6390/4");
  CHECK(e.username == "u");
  CHECK(e.password == "a@b/c?d");
  CHECK(e.host == "h");
  CHECK(e.port == 6390);
  CHECK(e.database == 4);
}

TEST_CASE("Endpoint::parse accepts bracketed IPv6 hosts", "[unit]") {
  const Endpoint loopback = Endpoint::parse("redis://[::1]");
  CHECK(loopback.host == "::1");
  CHECK(loopback.port == 6379);

  const Endpoint full = Endpoint::parse("redis://u:hunter2secret@[2001:db8::7]:6380/1");
  CHECK(full.host == "2001:db8::7");
  CHECK(full.port == 6380);
  CHECK(full.database == 1);
  CHECK(full.username == "u");

  CHECK(Endpoint::parse("redis://[::ffff:10.0.0.1]:7000").host == "::ffff:10.0.0.1");
}

TEST_CASE("Endpoint::parse accepts unix sockets without a database", "[unit]") {
  const Endpoint e = Endpoint::parse("unix:///run/redis/redis.sock");
  CHECK(e.unix_socket == "/run/redis/redis.sock");
  CHECK(e.database == 0);
  CHECK(e.username.empty());
  CHECK(e.password.empty());
}

TEST_CASE("Endpoint::parse accepts unix sockets with a database and credentials", "[unit]") {
  const Endpoint e = Endpoint::parse("unix://app:hunter2secret@/run/redis.sock?db=1");
  CHECK(e.unix_socket == "/run/redis.sock");
  CHECK(e.database == 1);
  CHECK(e.username == "app");
  CHECK(e.password == kSecret);

  const Endpoint password_only = Endpoint::parse("unix://:hunter2secret@/tmp/r.sock");
  CHECK(password_only.username.empty());
  CHECK(password_only.password == kSecret);
  CHECK(password_only.unix_socket == "/tmp/r.sock");
}

TEST_CASE("Endpoint::parse accepts a unix socket path containing '@'", "[unit]") {
  CHECK(Endpoint::parse("unix:///run/redis@main/r.sock").unix_socket == "/run/redis@main/r.sock");
  const Endpoint e = Endpoint::parse("unix://u:pw@/run/redis@main/r.sock");
  CHECK(e.unix_socket == "/run/redis@main/r.sock");
  CHECK(e.username == "u");
  CHECK(e.password == "pw");
}

TEST_CASE("Endpoint::parse accepts timeouts and db as query parameters", "[unit]") {
  const Endpoint e = Endpoint::parse("redis://h:6380?connect_timeout=50&command_timeout=1500&db=7");
  CHECK(e.connect_timeout == milliseconds(50));
  CHECK(e.command_timeout == milliseconds(1500));
  CHECK(e.database == 7);
  CHECK(e.port == 6380);

  const Endpoint only_command = Endpoint::parse("redis://h/2?command_timeout=500");
  CHECK(only_command.database == 2);
  CHECK(only_command.connect_timeout == milliseconds(200));
  CHECK(only_command.command_timeout == milliseconds(500));

  const Endpoint slash_then_db = Endpoint::parse("redis://h/?db=4");
  CHECK(slash_then_db.database == 4);

  const Endpoint unix_socket =
      Endpoint::parse("unix:///tmp/r.sock?command_timeout=10&db=3&connect_timeout=20");
  CHECK(unix_socket.connect_timeout == milliseconds(20));
  CHECK(unix_socket.command_timeout == milliseconds(10));
  CHECK(unix_socket.database == 3);
}

TEST_CASE("Endpoint::parse accepts schemes in any case", "[unit]") {
  CHECK(Endpoint::parse("REDIS://h:1").port == 1);
  CHECK(Endpoint::parse("Unix:///s").unix_socket == "/s");
}

TEST_CASE("Endpoint::parse rejects bad schemes", "[unit]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"http://u:hunter2secret@h", "scheme"},
      {"redis:/h", "://"},
      {"redis:h", "scheme"},
      {"h:6379", "scheme"},
      {"", "scheme"},
      {"://h", "scheme"},
      {"u:hunter2secret@h", "scheme"},
      {"redis:u:hunter2secret@h", "scheme"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::parse rejects bad hosts", "[unit]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"redis://", "host"},
      {"redis://:6379", "host"},
      {"redis:///0", "host"},
      {"redis://?db=1", "host"},
      {"redis://u:hunter2secret@", "host"},
      {"redis://u:hunter2secret@:6379", "host"},
      {"redis://[]:6379", "host"},
      {"redis://[::1", "IPv6"},
      {"redis://[::1]x", "IPv6"},
      {"redis://[zz::1]", "IPv6"},
      {"redis://[127.0.0.1]", "IPv6"},
      {"redis://::1", "host"},
      {"redis://::1:6379", "host"},
      {"redis://ho st", "host"},
      {"redis://ho%20st", "host"},
      {"redis://h#frag", "host"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::parse rejects bad ports", "[unit]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"redis://h:", "port"},
      {"redis://h:0", "port"},
      {"redis://h:65536", "port"},
      {"redis://h:99999999999999999999999", "port"},
      {"redis://h:-1", "port"},
      {"redis://h:+80", "port"},
      {"redis://h: 80", "port"},
      {"redis://h:80a", "port"},
      {"redis://h:0x50", "port"},
      {"redis://[::1]:", "port"},
      {"redis://[::1]:70000", "port"},
      {"redis://u:hunter2secret@h:abc/0", "port"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::parse rejects bad databases", "[unit]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"redis://h/x", "db"},
      {"redis://h/-1", "db"},
      {"redis://h/+1", "db"},
      {"redis://h/1.5", "db"},
      {"redis://h/1/2", "db"},
      {"redis://h//", "db"},
      {"redis://h/2147483648", "db"},
      {"redis://h/99999999999999999999999", "db"},
      {"redis://h?db=x", "db"},
      {"redis://h?db=-2", "db"},
      {"redis://h?db=", "db"},
      {"redis://h/1?db=1", "db"},
      {"redis://h/0?db=2", "db"},
      {"redis://h?db=1&db=2", "db"},
      {"unix:///s?db=abc", "db"},
      {"unix:///s?db=1&db=1", "db"},
      {"unix://u:hunter2secret@/s?db=", "db"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::parse rejects bad query parameters", "[unit]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"redis://h?", "parameter"},
      {"redis://h?&db=1", "parameter"},
      {"redis://h?db=1&", "parameter"},
      {"redis://h?db=1&&connect_timeout=5", "parameter"},
      {"redis://h?db", "'='"},
      {"redis://h?connect_timeout", "'='"},
      {"redis://h?=5", "parameter"},
      {"redis://h?foo=1", "unknown"},
      {"redis://h?DB=1", "unknown"},
      {"redis://h?timeout=100", "unknown"},
      {"unix:///s?password=hunter2secret", "unknown"},
      {"redis://h?connect_timeout=", "connect_timeout"},
      {"redis://h?connect_timeout=0", "connect_timeout"},
      {"redis://h?connect_timeout=-5", "connect_timeout"},
      {"redis://h?connect_timeout=1.5", "connect_timeout"},
      {"redis://h?connect_timeout=10ms", "connect_timeout"},
      {"redis://h?connect_timeout=99999999999999999999999", "connect_timeout"},
      {"redis://h?connect_timeout=2147483648", "connect_timeout"},
      {"redis://h?command_timeout=", "command_timeout"},
      {"redis://h?command_timeout=0", "command_timeout"},
      {"redis://h?command_timeout=+5", "command_timeout"},
      {"redis://h?command_timeout=5&command_timeout=6", "command_timeout"},
      {"unix://u:hunter2secret@/s?command_timeout=x", "command_timeout"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::parse rejects malformed percent-escapes in credentials", "[unit]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"redis://us%4@h", "user"},
      {"redis://us%zzer@h", "user"},
      {"redis://%@h", "user"},
      {"redis://u:hunter2secret%4@h", "password"},
      {"redis://u:hunter2secret%zz@h", "password"},
      {"redis://u:hunter2secret%@h", "password"},
      {"redis://:%g1hunter2secret@h", "password"},
      {"unix://u:hunter2secret%4@/s", "password"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::parse rejects bad unix socket paths", "[unit]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"unix://", "path"},
      {"unix://?db=1", "path"},
      {"unix://u:hunter2secret@", "path"},
      {"unix://u:hunter2secret@?db=1", "path"},
      {"unix://run/redis.sock", "absolute"},
      {"unix://u:hunter2secret@run/redis.sock", "absolute"},
      {"unix://u:hunter2secret@host/run/redis.sock", "absolute"},
      {"unix://./redis.sock", "absolute"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::parse errors are std::invalid_argument and quote the redacted URI", "[unit]") {
  CHECK_THROWS_AS(Endpoint::parse("redis://h:0"), std::invalid_argument);
  const std::string message = parse_error("redis://app:hunter2secret@h:0/1");
  CHECK(message.find("redis://app:***@h:0/1") != std::string::npos);
  CHECK(message.find("port") != std::string::npos);
  CHECK(message.find(kSecret) == std::string::npos);

  const std::string unix_message = parse_error("unix://app:hunter2secret@/s?db=x");
  CHECK(unix_message.find("unix://app:***@/s?db=x") != std::string::npos);

  const std::string query_message =
      parse_error("redis://h:6379?db=1&password=hunter2secret&command_timeout=5");
  CHECK(query_message.find("redis://h:6379?db=1&password=***&command_timeout=5") !=
        std::string::npos);
  CHECK(query_message.find("unknown") != std::string::npos);

  const std::string scheme_message = parse_error("http://h");
  CHECK(scheme_message.find("'http'") != std::string::npos);
}

TEST_CASE("Endpoint::parse messages name every scheme and mask only secrets", "[unit]") {
  // A missing "://" lists the same schemes as an unknown scheme does, the Cluster ones included.
  for (const char* uri : {"redis:/h", "http://h"}) {
    CAPTURE(uri);
    const std::string message = parse_error(uri);
    for (const char* scheme : {"redis://", "rediss://", "unix://", "redis-sentinel://",
                               "rediss-sentinel://", "redis-cluster://", "rediss-cluster://"}) {
      CHECK_THAT(message, Catch::Contains(scheme));
    }
  }
  // A misspelled parameter shows its value, so the typo can be seen; secrets stay masked, and so
  // do unknown parameters named like secrets.
  CHECK_THAT(parse_error("redis://h?comand_timeout=500"),
             Catch::Contains("?comand_timeout=500") && !Catch::Contains("***"));
  for (const char* name : {"password", "passwd", "pass", "sentinel_pasword", "auth", "token",
                           "apikey", "secret", "requirepass", "AUTH_TOKEN"}) {
    CAPTURE(name);
    const std::string message = parse_error(std::string("redis://h?") + name + "=hunter2secret");
    CHECK_THAT(message, Catch::Contains(std::string(name) + "=***") && !Catch::Contains("hunter2"));
  }
}

TEST_CASE("Endpoint::parse never leaks a malformed password into messages", "[unit]") {
  // Unescaped '/', '?', ':' and '@' inside the password, combined with a later error.
  const std::string uri = GENERATE(as<std::string>{},                    //
                                   "redis://u:hunter2secret/x@h:0",      //
                                   "redis://u:hunter2/secret@h:bad",     //
                                   "redis://u:hun?ter2secret@h?db=x",    //
                                   "redis://u:hunter2:secret@h/x",       //
                                   "redis://u:hunter2@secret@:1",        //
                                   "redis://:hunter2secret@[::1]:0",     //
                                   "unix://u:hunter2/secret@relative",   //
                                   "unix://u:hunter2secret@/s?db=1@x",   //
                                   "unix://:hunter2secret@/s?foo=1",     //
                                   "unix://u:hunter2secret@/s?db=x",     //
                                   "ftp://u:hunter2secret@h",            //
                                   "rediss://:hunter2secret@h?cacert=",  //
                                   "rediss://:hunter2secret@h?key=k",    //
                                   "redis:u:hunter2secret@h",            //
                                   "redis//:hunter2secret@h");
  CAPTURE(uri);
  const std::string message = parse_error(uri);
  CAPTURE(message);
  CHECK(message.find("hunter2") == std::string::npos);
  CHECK(message.find("secret") == std::string::npos);
}

TEST_CASE("Endpoint::address formats host:port, IPv6 and unix sockets", "[unit]") {
  CHECK(Endpoint().address() == "127.0.0.1:6379");
  CHECK(Endpoint::parse("redis://u:hunter2secret@cache:6380/3").address() == "cache:6380");
  CHECK(Endpoint::parse("redis://[::1]").address() == "[::1]:6379");
  CHECK(Endpoint::parse("redis://[2001:db8::1]:7000").address() == "[2001:db8::1]:7000");
  CHECK(Endpoint::parse("unix://u:hunter2secret@/run/r.sock?db=2").address() == "unix:/run/r.sock");

  Endpoint built;
  built.host = "::1";
  built.port = 7001;
  CHECK(built.address() == "[::1]:7001");
  built.unix_socket = "/tmp/x.sock";
  CHECK(built.address() == "unix:/tmp/x.sock");
}

TEST_CASE("Endpoint::to_string masks the password and omits defaults", "[unit]") {
  CHECK(Endpoint().to_string() == "redis://127.0.0.1:6379");
  CHECK(Endpoint::parse("redis://h").to_string() == "redis://h:6379");
  CHECK(Endpoint::parse("redis://h/0").to_string() == "redis://h:6379");
  CHECK(Endpoint::parse("redis://app:hunter2secret@h:6380/2").to_string() ==
        "redis://app:***@h:6380/2");
  CHECK(Endpoint::parse("redis://:hunter2secret@h").to_string() == "redis://:***@h:6379");
  CHECK(Endpoint::parse("redis://app@h").to_string() == "redis://app@h:6379");
  CHECK(Endpoint::parse("redis://me%40corp%3Ax@h").to_string() == "redis://me%40corp%3Ax@h:6379");
  CHECK(Endpoint::parse("redis://[::1]:7000/1").to_string() == "redis://[::1]:7000/1");
  CHECK(Endpoint::parse("redis://h?connect_timeout=50").to_string() ==
        "redis://h:6379?connect_timeout=50");
  CHECK(Endpoint::parse("redis://h?command_timeout=900&connect_timeout=50").to_string() ==
        "redis://h:6379?connect_timeout=50&command_timeout=900");
  CHECK(Endpoint::parse("redis://h?connect_timeout=200&command_timeout=200").to_string() ==
        "redis://h:6379");
  CHECK(Endpoint::parse("unix:///run/r.sock").to_string() == "unix:///run/r.sock");
  CHECK(Endpoint::parse("unix://u:hunter2secret@/run/r.sock?db=3&command_timeout=7").to_string() ==
        "unix://u:***@/run/r.sock?db=3&command_timeout=7");

  Endpoint built;
  built.password = kSecret;
  CHECK(built.to_string() == "redis://:***@127.0.0.1:6379");
  CHECK(built.to_string().find(kSecret) == std::string::npos);
  CHECK(built.address().find(kSecret) == std::string::npos);
}

TEST_CASE("Endpoint::to_string round-trips through Endpoint::parse", "[unit]") {
  const std::string uri =
      GENERATE(as<std::string>{},  //
               "redis://h", "redis://10.1.2.3:6380/5", "redis://app:hunter2secret@h:1/15",
               "redis://:hunter2secret@h", "redis://a%20b%3Ac%40d%25:pw@h",
               "redis://[::1]:7000/2?connect_timeout=1", "redis://h?command_timeout=2147483647",
               "unix:///run/r.sock", "unix://u:pw@/run/redis@x/r.sock?db=9&connect_timeout=30",
               "unix://:pw@/s?command_timeout=5", "rediss://h",
               "rediss://u:hunter2secret@cache.example:6380/2?cacert=/etc/ssl/ca%20x.pem",
               "rediss://h?cacertdir=/etc/ssl/certs&cert=/c.pem&key=/k.pem&sni=other.example",
               "rediss://127.0.0.1?insecure=1&connect_timeout=900");
  CAPTURE(uri);
  const Endpoint original = Endpoint::parse(uri);
  const std::string text = original.to_string();
  CAPTURE(text);
  CHECK(text.find(kSecret) == std::string::npos);
  const Endpoint again = Endpoint::parse(text);
  CHECK(again.host == original.host);
  CHECK(again.port == original.port);
  CHECK(again.unix_socket == original.unix_socket);
  CHECK(again.username == original.username);
  CHECK(again.password == (original.password.empty() ? "" : "***"));
  CHECK(again.database == original.database);
  CHECK(again.connect_timeout == original.connect_timeout);
  CHECK(again.command_timeout == original.command_timeout);
  CHECK(again.tls.enabled == original.tls.enabled);
  CHECK(again.tls.ca_file == original.tls.ca_file);
  CHECK(again.tls.ca_dir == original.tls.ca_dir);
  CHECK(again.tls.cert_file == original.tls.cert_file);
  CHECK(again.tls.key_file == original.tls.key_file);
  CHECK(again.tls.server_name == original.tls.server_name);
  CHECK(again.tls.verify == original.tls.verify);
  CHECK(again.to_string() == text);
}

TEST_CASE("Endpoint::to_string of a field-built endpoint round-trips", "[unit]") {
  Endpoint built;
  built.host = "2001:db8::2";
  built.port = 6390;
  built.username = "ops team/1";
  built.password = kSecret;
  built.database = 4;
  built.connect_timeout = milliseconds(75);
  built.command_timeout = milliseconds(1200);
  const std::string text = built.to_string();
  CHECK(text ==
        "redis://ops%20team%2F1:***@[2001:db8::2]:6390/4?connect_timeout=75&command_timeout=1200");
  const Endpoint again = Endpoint::parse(text);
  CHECK(again.host == built.host);
  CHECK(again.port == built.port);
  CHECK(again.username == built.username);
  CHECK(again.password == "***");
  CHECK(again.database == built.database);
  CHECK(again.connect_timeout == built.connect_timeout);
  CHECK(again.command_timeout == built.command_timeout);
}

TEST_CASE("Endpoint::parse reads rediss:// and its TLS parameters", "[unit][tls]") {
  const Endpoint plain = Endpoint::parse("redis://h");
  CHECK_FALSE(plain.tls.enabled);
  const Endpoint e = Endpoint::parse(
      "rediss://app:pw@cache.example:6380/3?cacert=/etc/ca.pem&cacertdir=/etc/certs&cert=/c.pem"
      "&key=/k%20x.pem&sni=redis.example");
  CHECK(e.tls.enabled);
  CHECK(e.host == "cache.example");
  CHECK(e.port == 6380);
  CHECK(e.database == 3);
  CHECK(e.tls.ca_file == "/etc/ca.pem");
  CHECK(e.tls.ca_dir == "/etc/certs");
  CHECK(e.tls.cert_file == "/c.pem");
  CHECK(e.tls.key_file == "/k x.pem");
  CHECK(e.tls.server_name == "redis.example");
  CHECK(e.tls.verify);
  CHECK_FALSE(Endpoint::parse("rediss://h?insecure=1").tls.verify);
  CHECK(Endpoint::parse("rediss://h?insecure=0").tls.verify);
  CHECK(Endpoint::parse("REDISS://h").tls.enabled);
  CHECK(Endpoint::parse("rediss://h").to_string() == "rediss://h:6379");
}

TEST_CASE("Endpoint::parse rejects bad TLS parameters, naming them", "[unit][tls]") {
  const BadUri bad = GENERATE(values<BadUri>({
      {"redis://h?cacert=/ca.pem", "cacert is for TLS: use rediss://"},
      {"unix:///s?insecure=1", "insecure is for TLS"},
      {"rediss://h?cacert=", "cacert has an empty value"},
      {"rediss://h?insecure=yes", "insecure must be 1"},
      {"rediss://h?sni=a/b", "sni"},
      {"rediss://h?cert=/c.pem", "cert and key"},
      {"rediss://h?key=/k.pem", "cert and key"},
      {"rediss://h?cacert=/a&cacert=/b", "duplicate query parameter cacert"},
      {"rediss://h?cacert=%zz", "percent-escape in query parameter cacert"},
      {"rediss://h?tls=1", "unknown"},
  }));
  check_bad(bad);
}

TEST_CASE("Endpoint::to_string prints TLS settings but never the password", "[unit][tls]") {
  Endpoint built;
  built.host = "cache.example";
  built.password = kSecret;
  built.tls.enabled = true;
  built.tls.ca_file = "/etc/ssl/ca.pem";
  built.tls.verify = false;
  const std::string text = built.to_string();
  CHECK(text == "rediss://:***@cache.example:6379?cacert=/etc/ssl/ca.pem&insecure=1");
  CHECK(text.find(kSecret) == std::string::npos);
}

TEST_CASE("Endpoint::parse reads the Sentinel forms", "[unit][sentinel-uri]") {
  const Endpoint e = Endpoint::parse(std::string("redis-sentinel://app:") + kSecret +
                                     "@s1,s2:26380,[::1]:7/2?sentinel_username=watch&"
                                     "sentinel_password=" +
                                     kSecret + "&command_timeout=500#my%20master");
  CHECK(e.sentinel.service == "my master");
  CHECK(e.username == "app");
  CHECK(e.password == kSecret);
  CHECK(e.database == 2);
  CHECK_FALSE(e.tls.enabled);
  REQUIRE(e.sentinel.sentinels.size() == 3);
  CHECK(e.sentinel.sentinels[0].host == "s1");
  CHECK(e.sentinel.sentinels[0].port == 26379);  // the default sentinel port
  CHECK(e.sentinel.sentinels[1].port == 26380);
  CHECK(e.sentinel.sentinels[2].host == "::1");
  for (const Endpoint& s : e.sentinel.sentinels) {
    CHECK(s.username == "watch");
    CHECK(s.password == kSecret);
    CHECK(s.command_timeout == std::chrono::milliseconds(500));  // shared with the master
    CHECK(s.database == 0);
  }
  CHECK(e.address() == "sentinel:my master");
  const std::string text = e.to_string();
  CHECK(text ==
        "redis-sentinel://app:***@s1:26379,s2:26380,[::1]:7/2?command_timeout=500&"
        "sentinel_username=watch&sentinel_password=***#my%20master");
  CHECK(text.find(kSecret) == std::string::npos);

  const Endpoint t = Endpoint::parse("rediss-sentinel://s1:1?cacert=/ca.pem#m");
  CHECK(t.tls.enabled);
  REQUIRE(t.sentinel.sentinels.size() == 1);
  CHECK(t.sentinel.sentinels[0].tls.enabled);  // TLS to the sentinels too
  CHECK(t.sentinel.sentinels[0].tls.ca_file == "/ca.pem");
  CHECK(Endpoint::parse(t.to_string()).sentinel.sentinels[0].port == 1);
}

TEST_CASE("Endpoint::parse rejects malformed Sentinel URIs, naming the part",
          "[unit][sentinel-uri]") {
  const auto bad = GENERATE(values<BadUri>({
      {"redis-sentinel://s1", "#service"},
      {"redis-sentinel://s1#", "#service"},
      {"redis-sentinel://s1,,s2#m", "empty host"},
      {"redis-sentinel://s1:0#m", "port"},
      {"redis-sentinel://s1#m%zz", "service name"},
      {"redis://h?sentinel_password=hunter2secret", "is for Sentinel"},
      {"redis-sentinel://s1?sentinel_password=hunter2secret&nope=1#m", "unknown query parameter"},
      {"redis-sentinel://s1?cacert=/a#m", "is for TLS"},
      {"redis-sentinels://s1#m", "unsupported scheme"},
  }));
  check_bad(bad);
}

TEST_CASE("Client(uri) parses like Endpoint::parse and validates Sentinel endpoints", "[unit]") {
  CHECK(redlock::Client("redis://127.0.0.1:7000").endpoint().port == 7000);
  CHECK(redlock::Client("redis-sentinel://127.0.0.1#m").endpoint().sentinel.service == "m");
  CHECK_THROWS_WITH(redlock::Client("redis-sentinel://127.0.0.1"), Catch::Contains("#service"));
  Endpoint none;
  none.sentinel.service = "m";
  CHECK_THROWS_WITH(redlock::Client(none), Catch::Contains("sentinel.sentinels must not be empty"));
  Endpoint bad_port = Endpoint::parse("redis-sentinel://127.0.0.1#m");
  bad_port.sentinel.sentinels[0].port = 0;
  CHECK_THROWS_WITH(redlock::Client(bad_port), Catch::Contains("endpoint.port"));
}
