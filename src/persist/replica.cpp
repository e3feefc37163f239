#include "persist/replica.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/opensslv.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <type_traits>

#include "base/error.h"
#include "base/options.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm::persist {
namespace {

constexpr size_t kContent = 16;
constexpr size_t kNonce = 32, kProof = 32;
constexpr size_t kChunk = size_t{1} << 20;  // fetches stream in pieces this large
constexpr size_t kMinKey = 16;
constexpr const char *kDefaultKeyInHome = ".hetmem/replica.key";  // the default key file, under $HOME

// What a request may ask of the server, checked before anything is allocated or written.
constexpr uint64_t kMaxCapacity = uint64_t{1} << 50;  // the largest pool a hello may name (1 PiB)
constexpr uint64_t kMaxRanges = uint64_t{1} << 24;    // ranges in one delta
constexpr int kMaxConnections = 16;                   // connections served at once; more are told 'B'
// Deadlines: a client that has not proven its key within kHandshakeSeconds, stays silent between
// requests for kIdleSeconds, or sends (or reads) a request slower than kRequestSeconds plus one
// second per kMinRate bytes loses its connection, so that no client holds the server.
constexpr double kHandshakeSeconds = 10, kIdleSeconds = 300, kRequestSeconds = 30;
constexpr double kMinRate = 1 << 20;

using Proof = std::array<unsigned char, kProof>;

// OpenSSL's libcrypto, loaded on the first handshake rather than with libhetmem: only the replica
// protocol uses it, and every process the preload library starts in would otherwise pay for
// loading it (about 0.5 ms of a 3 ms start-up).
static_assert(OPENSSL_VERSION_MAJOR == 3, "the replica handshake loads libcrypto.so.3");
constexpr const char *kCryptoLibrary = "libcrypto.so.3";

struct Crypto {
  decltype(&HMAC) hmac = nullptr;
  decltype(&EVP_sha256) sha256 = nullptr;
  decltype(&RAND_bytes) random_bytes = nullptr;
  decltype(&CRYPTO_memcmp) equal = nullptr;
};

// The loaded functions, or nullptr with a failure set (the handshake cannot run without them).
const Crypto *crypto() {
  static std::string why;
  static const Crypto *loaded = []() -> const Crypto * {
    void *library = prim::library_open(kCryptoLibrary, &why);
    if (!library) return nullptr;
    static Crypto c;
    auto bind = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(prim::library_symbol(library, name, &why));
      return fn != nullptr;
    };
    if (!bind(c.hmac, "HMAC") || !bind(c.sha256, "EVP_sha256") || !bind(c.random_bytes, "RAND_bytes") ||
        !bind(c.equal, "CRYPTO_memcmp"))
      return nullptr;
    return &c;
  }();
  if (!loaded) fail(HM_EIO, "the replica handshake needs OpenSSL's %s: %s", kCryptoLibrary, why.c_str());
  return loaded;
}

// HMAC-SHA256(key, role || first || second): what each side sends to show it holds the key, bound
// to both nonces so that no answer can be replayed.
Proof prove(const Crypto &c, const std::string &key, const char *role, const unsigned char *first,
            const unsigned char *second) {
  unsigned char message[32 + 2 * kNonce] = {};
  const size_t role_bytes = std::strlen(role);
  std::memcpy(message, role, role_bytes);
  std::memcpy(message + role_bytes, first, kNonce);
  std::memcpy(message + role_bytes + kNonce, second, kNonce);
  Proof out{};
  unsigned int len = 0;
  c.hmac(c.sha256(), key.data(), static_cast<int>(key.size()), message, role_bytes + 2 * kNonce, out.data(), &len);
  return out;
}

// Copies ranges from the primary into a replica pool file and commits there (the server stages
// its deltas and copies them itself: ReplicaServer::delta).
int apply(Pool &replica, const Pool &primary, const Ranges &ranges, uint64_t root, uint64_t top, uint64_t sequence) {
  int rc = replica.set_top(std::max(top, replica.committed_top()));
  if (rc != HM_OK) return rc;
  for (const auto &[off, bytes] : ranges) {
    std::memcpy(replica.at<char>(off), primary.at<char>(off), bytes);
    replica.written(replica.at<char>(off), bytes);
  }
  return replica.commit(root, sequence);
}

// Checks that a replica pool matches its primary.
int matches(const Pool &replica, const std::string &content, uint64_t capacity, const std::string &where) {
  if (replica.content() != content || replica.capacity() != capacity)
    return fail(HM_EFORMAT, "replica '%s' does not match its pool (it holds '%s' in %llu bytes; the pool '%s' in %llu)",
                where.c_str(), replica.content().c_str(), static_cast<unsigned long long>(replica.capacity()),
                content.c_str(), static_cast<unsigned long long>(capacity));
  return HM_OK;
}

int open_or_create(const std::string &path, const std::string &content, uint64_t capacity, std::unique_ptr<Pool> *out) {
  int rc = prim::path_exists(path) ? Pool::open(path, out) : Pool::create(path, capacity, out, content);
  if (rc != HM_OK) return rc;
  return matches(**out, content, capacity, path);
}

class LocalReplica final : public ReplicaSink {
 public:
  explicit LocalReplica(std::unique_ptr<Pool> pool) : pool_(std::move(pool)) {}
  uint64_t sequence() const override { return pool_->sequence(); }
  int send(const Pool &primary, const Ranges &ranges, uint64_t root, uint64_t top, uint64_t sequence) override {
    return apply(*pool_, primary, ranges, root, top, sequence);
  }

 private:
  std::unique_ptr<Pool> pool_;
};

}  // namespace

// The stream to a replica server (or, on the server, to a primary). Every read and write may be
// held to a deadline; `broken()` tells a connection that failed from a request that was refused.
class Stream {
 public:
  explicit Stream(int fd) : fd_(fd) {}
  ~Stream() {
    if (fd_ >= 0) prim::close_fd(fd_);
  }
  // Reads and writes from now on must be done within `seconds` (0: no limit).
  void set_deadline(double seconds) {
    deadline_ = seconds > 0 ? prim::now_ns() + static_cast<uint64_t>(seconds * 1e9) : 0;
  }
  void extend_deadline(double seconds) {
    if (deadline_) deadline_ += static_cast<uint64_t>(seconds * 1e9);
  }
  bool broken() const { return broken_; }
  // Lets the peer read what was sent before the connection closes, though it was still sending.
  void finish() { prim::finish_stream(fd_, size_t{1} << 20, prim::now_ns() + 200000000ull); }
  bool timed_out() const { return timed_out_; }
  template <class T>
  bool put(const T &v) {
    return put_bytes(&v, sizeof v);
  }
  bool put_bytes(const void *p, size_t n) { return done(prim::send_all(fd_, p, n, deadline_)); }
  template <class T>
  bool get(T *v) {
    return get_bytes(v, sizeof *v);
  }
  bool get_bytes(void *p, size_t n) { return done(prim::recv_all(fd_, p, n, deadline_)); }
  // The status of a request; on failure the server's message becomes hetmem's error.
  int status(const std::string &where) {
    int32_t rc = 0;
    if (!get(&rc)) return fail(HM_EIO, "replica server %s closed the connection", where.c_str());
    if (rc == HM_OK) return HM_OK;
    uint32_t len = 0;
    std::string msg;
    if (get(&len) && len < (1u << 16)) {
      msg.resize(len);
      if (!get_bytes(msg.data(), len)) msg.clear();
    }
    return fail(rc, "replica server %s: %s", where.c_str(), msg.c_str());
  }
  // An answer with a status and a message (the server side).
  bool answer(int rc) {
    int32_t r = rc;
    if (!put(r)) return false;
    if (rc == HM_OK) return true;
    const std::string msg = hm_last_error();
    const uint32_t len = static_cast<uint32_t>(msg.size());
    return put(len) && put_bytes(msg.data(), msg.size());
  }

 private:
  bool done(int rc) {
    if (rc == HM_OK) return true;
    broken_ = true;
    timed_out_ = errno == ETIMEDOUT;
    return false;
  }
  int fd_;
  uint64_t deadline_ = 0;
  bool broken_ = false, timed_out_ = false;
};

namespace {

bool parse_remote(const std::string &where, std::string *host, int *port) {
  if (where.rfind("tcp://", 0) != 0) return false;
  const std::string rest = where.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = rest.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  char *end = nullptr;
  const long p = std::strtol(rest.c_str() + colon + 1, &end, 10);
  if (*end || p <= 0 || p > 65535) return false;
  *port = static_cast<int>(p);
  return true;
}

// The primary's key: HM_REPLICA_KEY's file, or else the default key file when it exists (a server
// on this host, or on a node sharing this home directory, made it). `*chosen` says whether the
// user named it: a named key is required of the server too.
int primary_key(std::string *key, bool *chosen) {
  key->clear();
  const std::string &named = option_text(Option::kReplicaKey);
  *chosen = !named.empty();
  if (*chosen) return load_replica_key(named, key);
  const std::string fallback = default_replica_key();
  if (fallback.empty() || !prim::path_exists(fallback)) return HM_OK;
  return load_replica_key(fallback, key);
}

// Connects and authenticates: the server greets with its mode ('A': keyed, 'O': open) and a nonce;
// against a keyed server the primary answers with its nonce and its proof, and checks the
// server's proof in return.
int connect_to(const std::string &where, std::unique_ptr<Stream> *out) {
  std::string host, why, key;
  int port = 0, fd = -1;
  bool chosen = false;
  if (!parse_remote(where, &host, &port))
    return fail(HM_EINVAL, "replica '%s': a remote replica is tcp://HOST:PORT", where.c_str());
  if (int rc = primary_key(&key, &chosen); rc != HM_OK) return rc;
  if (prim::tcp_connect(host, port, &fd, &why) != HM_OK)
    return fail(HM_EIO, "replica server %s cannot be reached: %s", where.c_str(), why.c_str());
  auto s = std::make_unique<Stream>(fd);
  char mode = 0;
  unsigned char server_nonce[kNonce], client_nonce[kNonce];
  if (!s->get(&mode) || !s->get_bytes(server_nonce, kNonce))
    return fail(HM_EIO, "replica server %s closed the connection before greeting (not a hetmem-replica?)", where.c_str());
  if (mode == 'B')
    return fail(HM_EBUSY, "replica server %s is serving as many connections as it takes (%d); try again later",
                where.c_str(), kMaxConnections);
  if (mode == 'O') {
    if (chosen)
      return fail(HM_EAUTH, "replica server %s does not check keys, but HM_REPLICA_KEY is set: start it without "
                  "--unauthenticated (a primary with a key sends only to a server that proves it holds it)",
                  where.c_str());
  } else if (mode == 'A') {
    if (key.empty())
      return fail(HM_EAUTH, "replica server %s requires a key: set HM_REPLICA_KEY to the key file it was started with "
                  "(by default the server's ~/%s)", where.c_str(), kDefaultKeyInHome);
    const Crypto *c = crypto();
    if (!c) return HM_EIO;
    if (c->random_bytes(client_nonce, kNonce) != 1) return fail(HM_EIO, "no random bytes for the replica handshake");
    const Proof mine = prove(*c, key, "hetmem-replica primary", server_nonce, client_nonce);
    if (!s->put_bytes(client_nonce, kNonce) || !s->put_bytes(mine.data(), kProof))
      return fail(HM_EIO, "replica server %s: the connection broke", where.c_str());
    if (int rc = s->status(where); rc != HM_OK) return rc;
    Proof theirs{};
    if (!s->get_bytes(theirs.data(), kProof)) return fail(HM_EIO, "replica server %s closed the connection", where.c_str());
    const Proof expected = prove(*c, key, "hetmem-replica server", client_nonce, server_nonce);
    if (c->equal(theirs.data(), expected.data(), kProof) != 0)
      return fail(HM_EAUTH, "replica server %s did not prove it holds the key; nothing was sent", where.c_str());
  } else {
    return fail(HM_EIO, "replica server %s greeted with something else (not a hetmem-replica?)", where.c_str());
  }
  *out = std::move(s);
  return HM_OK;
}

// The hello: the pool's content tag and capacity, answered with the replica's last version.
int say_hello(Stream &s, const std::string &where, const Pool &primary, uint64_t *sequence) {
  char content[kContent] = {};
  const std::string c = primary.content();
  std::memcpy(content, c.data(), std::min(c.size(), kContent - 1));
  if (!s.put('H') || !s.put_bytes(content, sizeof content) || !s.put(primary.capacity()))
    return fail(HM_EIO, "replica server %s: the connection broke", where.c_str());
  if (int rc = s.status(where); rc != HM_OK) return rc;
  if (!s.get(sequence)) return fail(HM_EIO, "replica server %s closed the connection", where.c_str());
  return HM_OK;
}

class RemoteReplica final : public ReplicaSink {
 public:
  RemoteReplica(std::string where, std::unique_ptr<Stream> s, uint64_t sequence)
      : where_(std::move(where)), stream_(std::move(s)), sequence_(sequence) {}
  uint64_t sequence() const override { return sequence_; }
  // A connection that broke (the server restarted, or closed it after a long idle time) is made
  // again once; a replica that then lacks the version before this one gets everything below the top.
  int send(const Pool &primary, const Ranges &ranges, uint64_t root, uint64_t top, uint64_t sequence) override {
    int rc = transmit(primary, ranges, root, top, sequence);
    if (rc == HM_OK || !stream_->broken()) return rc;
    std::unique_ptr<Stream> again;
    uint64_t theirs = 0;
    if (connect_to(where_, &again) != HM_OK || say_hello(*again, where_, primary, &theirs) != HM_OK) return rc;
    stream_ = std::move(again);
    sequence_ = theirs;
    if (theirs + 1 == sequence) return transmit(primary, ranges, root, top, sequence);
    return transmit(primary, Ranges{{kHeaderBytes, top - kHeaderBytes}}, root, top, sequence);
  }

 private:
  int transmit(const Pool &primary, const Ranges &ranges, uint64_t root, uint64_t top, uint64_t sequence) {
    const uint32_t n = static_cast<uint32_t>(ranges.size());
    bool ok = stream_->put('D') && stream_->put(sequence) && stream_->put(root) && stream_->put(top) && stream_->put(n);
    for (size_t i = 0; ok && i < ranges.size(); ++i)
      ok = stream_->put(ranges[i].first) && stream_->put(ranges[i].second) &&
           stream_->put_bytes(primary.at<char>(ranges[i].first), ranges[i].second);
    if (!ok) return fail(HM_EIO, "replica server %s: the connection broke while sending version %llu", where_.c_str(),
                         static_cast<unsigned long long>(sequence));
    int rc = stream_->status(where_);
    if (rc == HM_OK) sequence_ = sequence;
    return rc;
  }

  std::string where_;
  std::unique_ptr<Stream> stream_;
  uint64_t sequence_;
};

}  // namespace

bool is_remote_replica(const std::string &where) { return where.rfind("tcp://", 0) == 0; }

int ReplicaSink::open(const std::string &where, const Pool &primary, std::unique_ptr<ReplicaSink> *out) {
  if (!is_remote_replica(where)) {
    std::unique_ptr<Pool> pool;
    int rc = open_or_create(where, primary.content(), primary.capacity(), &pool);
    if (rc != HM_OK) return rc;
    *out = std::make_unique<LocalReplica>(std::move(pool));
    return HM_OK;
  }
  std::unique_ptr<Stream> s;
  int rc = connect_to(where, &s);
  if (rc != HM_OK) return rc;
  uint64_t sequence = 0;
  if ((rc = say_hello(*s, where, primary, &sequence)) != HM_OK) return rc;
  *out = std::make_unique<RemoteReplica>(where, std::move(s), sequence);
  return HM_OK;
}

// Writes a pool file at `path` from its used part: `used` bytes (header and committed data) read
// by `next` in pieces, the rest left as a hole, the whole `capacity` long; owner-only (0600) like
// every pool, synced, then renamed into place.
template <class Next>
int write_pool_file(const std::string &path, uint64_t capacity, uint64_t used, const Next &next) {
  const std::string tmp = path + ".fetch";
  prim::remove_path(tmp);  // a fetch interrupted before
  int fd = -1;
  if (prim::create_private_file(tmp, &fd) != HM_OK)
    return fail(HM_EIO, "persistent pool '%s': cannot create %s: %s", path.c_str(), tmp.c_str(), std::strerror(errno));
  std::string piece;
  int rc = prim::set_file_size(fd, capacity);
  for (uint64_t at = 0; rc == HM_OK && at < used; at += piece.size()) {
    piece.resize(static_cast<size_t>(std::min<uint64_t>(kChunk, used - at)));
    rc = next(piece.data(), piece.size());
    if (rc == HM_OK && prim::write_at(fd, piece.data(), piece.size(), at) != HM_OK)
      rc = fail(HM_EIO, "persistent pool '%s': writing %s failed (disk full?)", path.c_str(), tmp.c_str());
  }
  if (rc == HM_OK && prim::sync_fd(fd) != HM_OK) rc = fail(HM_EIO, "persistent pool '%s': sync failed", path.c_str());
  prim::close_fd(fd);
  if (rc == HM_OK && prim::rename_path(tmp, path) != HM_OK)
    rc = fail(HM_EIO, "persistent pool '%s': cannot rename %s into place", path.c_str(), tmp.c_str());
  if (rc != HM_OK) prim::remove_path(tmp);
  return rc;
}

int ReplicaSink::fetch(const std::string &where, const std::string &path) {
  if (!is_remote_replica(where)) {
    std::unique_ptr<Pool> replica;
    if (Pool::open(where, &replica) != HM_OK)
      return fail(HM_EIO, "replica '%s' cannot be read: %s", where.c_str(), hm_last_error());
    const char *from = replica->at<char>(0);
    uint64_t done = 0;
    return write_pool_file(path, replica->capacity(), replica->committed_top(), [&](char *to, size_t bytes) {
      std::memcpy(to, from + done, bytes);
      done += bytes;
      return HM_OK;
    });
  }
  std::unique_ptr<Stream> s;
  int rc = connect_to(where, &s);
  if (rc != HM_OK) return rc;
  if (!s->put('F')) return fail(HM_EIO, "replica server %s: the connection broke", where.c_str());
  if ((rc = s->status(where)) != HM_OK) return rc;
  uint64_t capacity = 0, used = 0;
  if (!s->get(&capacity) || !s->get(&used) || used > capacity || capacity > kMaxCapacity)
    return fail(HM_EIO, "replica server %s sent no pool", where.c_str());
  return write_pool_file(path, capacity, used, [&](char *to, size_t bytes) {
    return s->get_bytes(to, bytes) ? HM_OK : fail(HM_EIO, "replica server %s: the pool arrived truncated", where.c_str());
  });
}

int ReplicaSink::fetch_if_missing(const std::string &where, const std::string &path) {
  if (where.empty() || prim::path_exists(path)) return HM_OK;
  int rc = fetch(where, path);
  if (rc != HM_OK)
    return fail(rc, "persistent pool '%s' is missing and its replica could not be fetched: %s", path.c_str(),
                hm_last_error());
  return HM_OK;
}

int load_replica_key(const std::string &path, std::string *key) {
  bool others = true;
  if (prim::readable_by_others(path, &others) != HM_OK)
    return fail(HM_EIO, "replica key file '%s' cannot be read: %s", path.c_str(), std::strerror(errno));
  if (others)
    return fail(HM_EAUTH, "replica key file '%s' is readable by others; make it the owner's alone (chmod 600 %s)",
                path.c_str(), path.c_str());
  if (!prim::read_text(path, key)) return fail(HM_EIO, "replica key file '%s' cannot be read", path.c_str());
  if (key->size() < kMinKey)
    return fail(HM_EAUTH, "replica key file '%s' holds %zu bytes; a key is at least %zu (make one with: head -c 32 "
                "/dev/urandom > %s)", path.c_str(), key->size(), kMinKey, path.c_str());
  return HM_OK;
}

std::string default_replica_key() {
  const char *home = prim::env("HOME");
  return home && *home ? std::string(home) + "/" + kDefaultKeyInHome : "";
}

int ensure_replica_key(const std::string &path, bool *created) {
  *created = false;
  if (prim::path_exists(path)) return HM_OK;
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0 && prim::make_private_dir(path.substr(0, slash)) != HM_OK)
    return fail(HM_EIO, "cannot make the directory of the replica key file '%s': %s", path.c_str(), std::strerror(errno));
  const Crypto *c = crypto();
  if (!c) return HM_EIO;
  unsigned char key[32];
  if (c->random_bytes(key, sizeof key) != 1) return fail(HM_EIO, "no random bytes for a replica key");
  int fd = -1;
  if (prim::create_private_file(path, &fd) != HM_OK)
    return fail(HM_EIO, "cannot create the replica key file '%s': %s", path.c_str(), std::strerror(errno));
  int rc = prim::write_at(fd, key, sizeof key, 0) == HM_OK && prim::sync_fd(fd) == HM_OK ? HM_OK : HM_EIO;
  prim::close_fd(fd);
  if (rc != HM_OK) {
    prim::remove_path(path);
    return fail(HM_EIO, "cannot write the replica key file '%s'", path.c_str());
  }
  *created = true;
  return HM_OK;
}

ReplicaServer::ReplicaServer(std::string path, std::string key) : path_(std::move(path)), key_(std::move(key)) {}
ReplicaServer::~ReplicaServer() = default;

// One connection: its stream, whether its hello was answered, and its scratch file for deltas.
struct ReplicaServer::Session {
  explicit Session(int fd) : s(fd) {}
  ~Session() {
    if (scratch >= 0) prim::close_fd(scratch);
  }
  Stream s;
  bool greeted = false;
  int scratch = -1;
};

namespace {

// Ends a connection over a malformed request: the message goes to the peer (if it still listens)
// and is the error the server logs.
int refuse(Stream &s, int rc) {
  if (s.answer(rc)) s.finish();
  return rc;
}

// Why a connection ended without the peer closing it between requests.
int broken(const Stream &s, const char *while_doing) {
  return fail(HM_EIO, "the connection %s while %s", s.timed_out() ? "was too slow" : "broke", while_doing);
}

}  // namespace

int ReplicaServer::serve(int fd) {
  Session session(fd);
  Stream &s = session.s;
  s.set_deadline(kHandshakeSeconds);
  unsigned char server_nonce[kNonce], client_nonce[kNonce];
  const Crypto *c = crypto();
  if (!c) return HM_EIO;
  if (c->random_bytes(server_nonce, kNonce) != 1) return fail(HM_EIO, "no random bytes for the replica handshake");
  if (!s.put(key_.empty() ? 'O' : 'A') || !s.put_bytes(server_nonce, kNonce)) return broken(s, "greeting");
  if (!key_.empty()) {
    Proof theirs{};
    if (!s.get_bytes(client_nonce, kNonce) || !s.get_bytes(theirs.data(), kProof)) return broken(s, "authenticating");
    const Proof expected = prove(*c, key_, "hetmem-replica primary", server_nonce, client_nonce);
    if (c->equal(theirs.data(), expected.data(), kProof) != 0)
      return refuse(s, fail(HM_EAUTH, "the primary did not prove it holds the key (HM_REPLICA_KEY differs from --key)"));
    const Proof mine = prove(*c, key_, "hetmem-replica server", client_nonce, server_nonce);
    if (!s.answer(HM_OK) || !s.put_bytes(mine.data(), kProof)) return broken(s, "authenticating");
  }
  for (;;) {
    s.set_deadline(kIdleSeconds);
    char request = 0;
    if (!s.get(&request)) return s.timed_out() ? broken(s, "idle") : HM_OK;  // else the primary closed it
    s.set_deadline(kRequestSeconds);
    int rc = HM_OK;
    if (request == 'H') rc = hello(session);
    else if (request == 'D') rc = session.greeted ? delta(session) : refuse(s, fail(HM_EINVAL, "a delta came before the hello"));
    else if (request == 'F') rc = fetch(s);
    else rc = refuse(s, fail(HM_EFORMAT, "unknown request %d", request));
    if (rc != HM_OK) return rc;
  }
}

int ReplicaServer::hello(Session &session) {
  Stream &s = session.s;
  char content[kContent];
  uint64_t capacity = 0;
  if (!s.get_bytes(content, sizeof content) || !s.get(&capacity)) return broken(s, "reading a hello");
  content[kContent - 1] = '\0';
  if (capacity < kHeaderBytes || capacity > kMaxCapacity)
    return refuse(s, fail(HM_EFORMAT, "a hello names a pool of %llu bytes; a replica holds %llu to %llu",
                          static_cast<unsigned long long>(capacity), static_cast<unsigned long long>(kHeaderBytes),
                          static_cast<unsigned long long>(kMaxCapacity)));
  uint64_t sequence = 0;
  int rc = HM_OK;
  {
    std::unique_lock lock(mutex_);
    if (!pool_) rc = open_or_create(path_, content, capacity, &pool_);
    else rc = matches(*pool_, content, capacity, path_);
    if (rc == HM_OK) sequence = pool_->sequence();
  }
  if (rc != HM_OK) return refuse(s, rc);
  session.greeted = true;
  return s.answer(HM_OK) && s.put(sequence) ? HM_OK : broken(s, "answering a hello");
}

// A delta arrives whole in a nameless scratch file beside the replica before any of it reaches the
// pool: a request that breaks off, or names a range outside the new top, leaves the replica as it
// was. Only then, under the lock, is it copied in and committed.
int ReplicaServer::delta(Session &session) {
  Stream &s = session.s;
  int &scratch = session.scratch;
  uint64_t sequence = 0, root = 0, top = 0, capacity = 0;
  uint32_t n = 0;
  if (!s.get(&sequence) || !s.get(&root) || !s.get(&top) || !s.get(&n)) return broken(s, "reading a delta");
  {
    std::shared_lock lock(mutex_);
    capacity = pool_->capacity();
  }
  if (top < kHeaderBytes || top > capacity || (root != 0 && (root < kHeaderBytes || root >= top)) || n > kMaxRanges)
    return refuse(s, fail(HM_EFORMAT, "a delta names top %llu, root %llu and %u ranges for a replica of %llu bytes",
                          static_cast<unsigned long long>(top), static_cast<unsigned long long>(root), n,
                          static_cast<unsigned long long>(capacity)));
  if (scratch < 0 && prim::create_scratch_file(scratch_dir(), &scratch) != HM_OK)
    return refuse(s, fail(HM_EIO, "cannot make a scratch file beside the replica '%s': %s", path_.c_str(),
                          std::strerror(errno)));
  // The scratch file holds each range as offset, length and data, so that the server's memory does
  // not grow with the number of ranges a delta claims.
  std::string piece(kChunk, '\0');
  uint64_t staged = 0, written = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t range[2] = {};  // offset, bytes
    if (!s.get(&range[0]) || !s.get(&range[1])) return broken(s, "reading a delta");
    const uint64_t off = range[0], bytes = range[1];
    if (off < kHeaderBytes || off > top || bytes > top - off || bytes > capacity - staged)
      return refuse(s, fail(HM_EFORMAT, "a delta range [%llu, +%llu) lies outside the new version (%llu..%llu)",
                            static_cast<unsigned long long>(off), static_cast<unsigned long long>(bytes),
                            static_cast<unsigned long long>(kHeaderBytes), static_cast<unsigned long long>(top)));
    s.extend_deadline(static_cast<double>(bytes) / kMinRate);
    bool stored = prim::write_at(scratch, range, sizeof range, written) == HM_OK;
    written += sizeof range;
    for (uint64_t done = 0; stored && done < bytes;) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(kChunk, bytes - done));
      if (!s.get_bytes(piece.data(), take)) return broken(s, "reading a delta");
      stored = prim::write_at(scratch, piece.data(), take, written) == HM_OK;
      done += take, written += take;
    }
    if (!stored)
      return refuse(s, fail(HM_EIO, "the scratch file beside the replica '%s' cannot be written (disk full?)",
                            path_.c_str()));
    staged += bytes;
  }
  int rc = HM_OK;
  {
    std::unique_lock lock(mutex_);
    Pool &pool = *pool_;
    rc = pool.set_top(std::max(top, pool.committed_top()));
    for (uint64_t at = 0; rc == HM_OK && at < written;) {
      uint64_t range[2] = {};
      if (prim::read_at(scratch, range, sizeof range, at) != HM_OK ||
          prim::read_at(scratch, pool.at<char>(range[0]), range[1], at + sizeof range) != HM_OK)
        rc = fail(HM_EIO, "the replica '%s' cannot take a delta (disk full?)", path_.c_str());
      else pool.written(pool.at<char>(range[0]), range[1]);
      at += sizeof range + range[1];
    }
    if (rc == HM_OK) rc = pool.commit(root, sequence);
    else pool.rollback();
  }
  return s.answer(rc) ? HM_OK : broken(s, "answering a delta");
}

// The used part only (header and committed data), streamed from the mapping: never the whole file,
// never all of it in memory.
int ReplicaServer::fetch(Stream &s) {
  int rc = HM_OK;
  {
    std::unique_lock lock(mutex_);  // a fetch before any hello opens the replica for every connection
    if (!pool_ && Pool::open(path_, &pool_) != HM_OK) {
      pool_.reset();
      rc = fail(HM_EIO, "the replica '%s' cannot be read: %s", path_.c_str(), hm_last_error());
    }
  }
  std::shared_lock lock(mutex_);
  const Pool *from = pool_.get();
  if (!s.answer(rc)) return broken(s, "answering a fetch");
  if (rc != HM_OK) return HM_OK;
  const uint64_t used = from->committed_top();
  s.extend_deadline(static_cast<double>(used) / kMinRate);
  if (!s.put(from->capacity()) || !s.put(used)) return broken(s, "sending the replica");
  for (uint64_t at = 0; at < used; at += kChunk)
    if (!s.put_bytes(from->at<char>(at), static_cast<size_t>(std::min<uint64_t>(kChunk, used - at))))
      return broken(s, "sending the replica");
  return HM_OK;
}

std::string ReplicaServer::scratch_dir() const {
  const size_t slash = path_.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
}

int serve_replica(int fd, const std::string &path, const std::string &key) {
  ReplicaServer server(path, key);
  return server.serve(fd);
}

int serve_replicas(const std::string &listen, const std::string &path, const std::string &key_file, bool unauthenticated,
                   const std::function<void(const std::string &, int)> &ready) {
  const size_t colon = listen.rfind(':');
  std::string address = colon == std::string::npos ? "" : listen.substr(0, colon);
  char *end = nullptr;
  const long port = colon == std::string::npos ? -1 : std::strtol(listen.c_str() + colon + 1, &end, 10);
  if (address.size() > 2 && address.front() == '[' && address.back() == ']') address = address.substr(1, address.size() - 2);
  if (address.empty() || port < 0 || port > 65535 || !end || *end || colon + 1 == listen.size())
    return fail(HM_EINVAL, "--listen wants ADDRESS:PORT (127.0.0.1:7070, [::1]:0, 0.0.0.0:7070), got '%s'", listen.c_str());
  if (path.empty()) return fail(HM_EINVAL, "a replica pool path is needed");
  std::string key, why;
  if (unauthenticated) {
    if (!key_file.empty()) return fail(HM_EINVAL, "--unauthenticated and --key contradict each other");
    bool loopback = false;
    if (prim::is_loopback(address, &loopback, &why) != HM_OK)
      return fail(HM_EIO, "--listen %s: the address does not resolve: %s", listen.c_str(), why.c_str());
    if (!loopback)
      return fail(HM_EAUTH, "--listen %s is reachable from other hosts: an unauthenticated server listens on loopback "
                  "(127.0.0.1) only; leave out --unauthenticated to require a key", listen.c_str());
  } else {
    const std::string file = key_file.empty() ? default_replica_key() : key_file;
    if (file.empty())
      return fail(HM_EAUTH, "no key file: HOME is not set, so there is no default ~/%s; give --key FILE", kDefaultKeyInHome);
    bool created = false;
    if (key_file.empty() && ensure_replica_key(file, &created) != HM_OK) return HM_EIO;
    if (int rc = load_replica_key(file, &key); rc != HM_OK) return rc;
  }
  int listener = -1, bound = 0;
  if (prim::tcp_listen(address, static_cast<int>(port), &listener, &bound, &why) != HM_OK)
    return fail(HM_EIO, "cannot listen on %s: %s", listen.c_str(), why.c_str());
  ready(address, bound);
  // One thread per connection, at most kMaxConnections at once; the replica pool is shared under
  // the server's lock, and whatever happens in one connection (a malformed request, an exception)
  // ends that connection only. The server and the count are never freed: detached connection
  // threads use them, and the loop below never ends.
  auto *server = new ReplicaServer(path, key);
  auto *active = new std::atomic<int>(0);
  for (;;) {
    int fd = -1;
    if (prim::tcp_accept(listener, &fd) != HM_OK) {  // out of descriptors, say: wait for some to close
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (active->load() >= kMaxConnections) {
      const char busy = 'B';
      prim::send_all(fd, &busy, 1, prim::now_ns() + 1000000000ull);
      prim::close_fd(fd);
      log(0, "hetmem-replica: a connection was turned away: %d are being served", kMaxConnections);
      continue;
    }
    ++*active;
    try {
      std::thread([server, active, fd] {
        int rc = HM_OK;
        try {
          rc = server->serve(fd);
        } catch (const std::exception &e) {
          rc = fail(HM_ENOMEM, "%s", e.what());
        }
        if (rc != HM_OK) log(0, "hetmem-replica: a connection ended: %s", hm_last_error());
        --*active;
      }).detach();
    } catch (const std::exception &e) {  // no thread for it: this connection is refused, not the server
      --*active;
      prim::close_fd(fd);
      log(0, "hetmem-replica: a connection was turned away: %s", e.what());
    }
  }
}

}  // namespace hm::persist
