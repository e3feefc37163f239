// Replicas of a persistent pool (Nguyen et al. (SC'17) §3.4): after each commit the primary sends what the
// version wrote (byte ranges at the same offsets) and the replica commits the same root under the
// same sequence number. A replica is a second pool file (a path, on any mounted file system) or a
// `hetmem-replica` server on another host (`tcp://HOST:PORT`).
//
// Wire protocol (little-endian). The server greets: mode:u8 ('O' open, 'A' keyed) nonce[32]. To a
// keyed server the primary sends nonce[32] proof[32] (HMAC-SHA256 of the key over "hetmem-replica
// primary" || server nonce || primary nonce), answered by a status and the server's proof
// ("hetmem-replica server" || primary nonce || server nonce). Then one request at a time, each
// answered by an int32 status, then on failure a uint32 length and the message:
//   'H' content[16] capacity:u64            -> status, sequence:u64 (the replica's last version)
//   'D' sequence:u64 root:u64 top:u64 n:u32, n x (offset:u64 bytes:u64 data) -> status
//   'F'                                      -> status, capacity:u64, used:u64, the pool file's
//                                               first `used` bytes (header and committed data)
// A server serving as many connections as it takes greets with mode 'B' and closes.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "persist/pool.h"

namespace hm::persist {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // [offset, bytes)
class Stream;  // a connection to a replica server or from a primary (replica.cpp)

class ReplicaSink {
 public:
  virtual ~ReplicaSink() = default;
  // The replica's last committed version (0: none).
  virtual uint64_t sequence() const = 0;
  // Copies `ranges` of `primary` to the replica and commits `root`, `top`, `sequence` there.
  virtual int send(const Pool &primary, const Ranges &ranges, uint64_t root, uint64_t top, uint64_t sequence) = 0;

  // A replica of `primary` at `where` (a path, made if missing, or tcp://HOST:PORT). HM_EFORMAT
  // when it holds something else or has another size; HM_EIO when it cannot be reached.
  static int open(const std::string &where, const Pool &primary, std::unique_ptr<ReplicaSink> *out);
  // Writes the replica's pool file to `path` (synced, renamed into place): a restore on a node
  // whose pool is gone.
  static int fetch(const std::string &where, const std::string &path);
  // fetch() when a replica is named ("" : none) and the pool file at `path` is missing.
  static int fetch_if_missing(const std::string &where, const std::string &path);
};

// The server side: keeps the replica in the pool file `path` (created on the first hello if
// missing) for any number of connections at once, each served by serve() in its own thread. Every
// length, count and offset a request carries is checked against the replica and fixed maxima
// before anything is allocated or written; a delta reaches the pool only once it has arrived whole
// and in bounds; a malformed request, a wrong key or a client too slow for its deadline ends that
// connection (the error returned, the message sent to the peer), never the server.
class ReplicaServer {
 public:
  // `key`: the shared key every primary must prove it holds ("": none, the unauthenticated mode).
  ReplicaServer(std::string path, std::string key);
  ~ReplicaServer();
  // Greets, authenticates the primary when keyed (HMAC-SHA256 challenge-response, both ways), then
  // answers requests on the connected stream `fd` (closed on return) until the peer closes. HM_OK
  // when it did; HM_EAUTH when the primary's proof was wrong; HM_EFORMAT/HM_EINVAL for a malformed
  // request; HM_EIO when the connection broke or was too slow.
  int serve(int fd);

 private:
  struct Session;
  int hello(Session &session);
  int delta(Session &session);
  int fetch(Stream &s);
  std::string scratch_dir() const;

  const std::string path_, key_;
  std::shared_mutex mutex_;     // deltas and the first hello exclusive, fetches shared
  std::unique_ptr<Pool> pool_;  // opened (or made) by the first hello
};

// One connection served by a server of its own (tests).
int serve_replica(int fd, const std::string &path, const std::string &key = "");
// Reads a shared key: the file must be the owner's alone (no group or other permissions) and
// hold at least 16 bytes. HM_EAUTH saying which otherwise, HM_EIO when it cannot be read.
int load_replica_key(const std::string &path, std::string *key);
// The key file used when none is named: $HOME/.hetmem/replica.key ("" without HOME).
std::string default_replica_key();
// Makes the key file `path` if it is missing: 32 random bytes, owner-only, in an owner-only
// directory. *created says whether it did.
int ensure_replica_key(const std::string &path, bool *created);

bool is_remote_replica(const std::string &where);

// The server loop (pm_replica_serve): listen ("ADDRESS:PORT"), check the key rules, then accept and
// serve primaries forever; `ready` is told where it listens. With a key (`key_file`, or the default
// key file, made if missing) unless `unauthenticated`, which only a loopback address may be.
int serve_replicas(const std::string &listen, const std::string &path, const std::string &key_file, bool unauthenticated,
                   const std::function<void(const std::string &, int)> &ready);

}  // namespace hm::persist
