// Replicas of a persistent pool (seed 003 §3.4): after each commit the primary sends what the
// version wrote (byte ranges at the same offsets) and the replica commits the same root under the
// same sequence number. A replica is a second pool file (a path, on any mounted file system) or a
// `hetmem-replica` server on another host (`tcp://HOST:PORT`).
//
// Wire protocol (little-endian, one request at a time, each answered by an int32 status, then
// on failure a uint32 length and the message):
//   'H' content[16] capacity:u64            -> status, sequence:u64 (the replica's last version)
//   'D' sequence:u64 root:u64 top:u64 n:u32, n x (offset:u64 bytes:u64 data) -> status
//   'F'                                      -> status, size:u64, the pool file's bytes
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "persist/pool.h"

namespace hm::persist {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // [offset, bytes)

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

// The server side: answers requests on a connected stream `fd`, keeping its replica in the pool
// file `path` (created on the first hello if missing), until the peer closes. HM_OK when it did.
int serve_replica(int fd, const std::string &path);

bool is_remote_replica(const std::string &where);

}  // namespace hm::persist
