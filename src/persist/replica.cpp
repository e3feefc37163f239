#include "persist/replica.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "hetmem/hetmem.h"
#include "prim/prim.h"

namespace hm::persist {
namespace {

constexpr size_t kContent = 16;

// Copies ranges from the primary into a replica pool and commits there.
int apply(Pool &replica, const Pool &primary, const Ranges &ranges, uint64_t root, uint64_t top, uint64_t sequence) {
  int rc = replica.set_top(std::max(top, replica.committed_top()));
  if (rc != HM_OK) return rc;
  for (const auto &[off, bytes] : ranges) {
    if (&replica != &primary) std::memcpy(replica.at<char>(off), primary.at<char>(off), bytes);
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
  int rc = std::filesystem::exists(path) ? Pool::open(path, out) : Pool::create(path, capacity, out, content);
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

// The stream to a replica server.
class Stream {
 public:
  explicit Stream(int fd) : fd_(fd) {}
  ~Stream() {
    if (fd_ >= 0) prim::close_fd(fd_);
  }
  template <class T>
  bool put(const T &v) {
    return prim::send_all(fd_, &v, sizeof v) == HM_OK;
  }
  bool put_bytes(const void *p, size_t n) { return prim::send_all(fd_, p, n) == HM_OK; }
  template <class T>
  bool get(T *v) {
    return prim::recv_all(fd_, v, sizeof *v) == HM_OK;
  }
  bool get_bytes(void *p, size_t n) { return prim::recv_all(fd_, p, n) == HM_OK; }
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
  int fd_;
};

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

int connect_to(const std::string &where, std::unique_ptr<Stream> *out) {
  std::string host, why;
  int port = 0, fd = -1;
  if (!parse_remote(where, &host, &port))
    return fail(HM_EINVAL, "replica '%s': a remote replica is tcp://HOST:PORT", where.c_str());
  if (prim::tcp_connect(host, port, &fd, &why) != HM_OK)
    return fail(HM_EIO, "replica server %s cannot be reached: %s", where.c_str(), why.c_str());
  *out = std::make_unique<Stream>(fd);
  return HM_OK;
}

class RemoteReplica final : public ReplicaSink {
 public:
  RemoteReplica(std::string where, std::unique_ptr<Stream> s, uint64_t sequence)
      : where_(std::move(where)), stream_(std::move(s)), sequence_(sequence) {}
  uint64_t sequence() const override { return sequence_; }
  int send(const Pool &primary, const Ranges &ranges, uint64_t root, uint64_t top, uint64_t sequence) override {
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

 private:
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
  char content[kContent] = {};
  const std::string c = primary.content();
  std::memcpy(content, c.data(), std::min(c.size(), kContent - 1));
  if (!s->put('H') || !s->put_bytes(content, sizeof content) || !s->put(primary.capacity()))
    return fail(HM_EIO, "replica server %s: the connection broke", where.c_str());
  if ((rc = s->status(where)) != HM_OK) return rc;
  uint64_t sequence = 0;
  if (!s->get(&sequence)) return fail(HM_EIO, "replica server %s closed the connection", where.c_str());
  *out = std::make_unique<RemoteReplica>(where, std::move(s), sequence);
  return HM_OK;
}

int ReplicaSink::fetch(const std::string &where, const std::string &path) {
  std::string bytes;
  if (!is_remote_replica(where)) {
    if (!prim::read_text(where, &bytes)) return fail(HM_EIO, "replica '%s' cannot be read", where.c_str());
  } else {
    std::unique_ptr<Stream> s;
    int rc = connect_to(where, &s);
    if (rc != HM_OK) return rc;
    if (!s->put('F')) return fail(HM_EIO, "replica server %s: the connection broke", where.c_str());
    if ((rc = s->status(where)) != HM_OK) return rc;
    uint64_t size = 0;
    if (!s->get(&size) || size > (uint64_t{1} << 46)) return fail(HM_EIO, "replica server %s sent no pool", where.c_str());
    bytes.resize(size);
    if (!s->get_bytes(bytes.data(), size)) return fail(HM_EIO, "replica server %s: the pool arrived truncated", where.c_str());
  }
  if (!prim::write_text_atomic(path, bytes))
    return fail(HM_EIO, "persistent pool '%s' could not be written from its replica '%s'", path.c_str(), where.c_str());
  return HM_OK;
}

int ReplicaSink::fetch_if_missing(const std::string &where, const std::string &path) {
  if (where.empty() || std::filesystem::exists(path)) return HM_OK;
  int rc = fetch(where, path);
  if (rc != HM_OK)
    return fail(rc, "persistent pool '%s' is missing and its replica could not be fetched: %s", path.c_str(),
                hm_last_error());
  return HM_OK;
}

int serve_replica(int fd, const std::string &path) {
  Stream s(fd);
  std::unique_ptr<Pool> pool;
  for (;;) {
    char request = 0;
    if (!s.get(&request)) return HM_OK;  // the primary closed the connection
    if (request == 'H') {
      char content[kContent];
      uint64_t capacity = 0;
      if (!s.get_bytes(content, sizeof content) || !s.get(&capacity)) return HM_EIO;
      content[kContent - 1] = '\0';
      pool.reset();
      int rc = open_or_create(path, content, capacity, &pool);
      if (rc != HM_OK) pool.reset();
      if (!s.answer(rc) || (rc == HM_OK && !s.put(pool->sequence()))) return HM_EIO;
    } else if (request == 'D') {
      uint64_t sequence = 0, root = 0, top = 0;
      uint32_t n = 0;
      if (!s.get(&sequence) || !s.get(&root) || !s.get(&top) || !s.get(&n)) return HM_EIO;
      // The data lands in the replica's own mapping, at the primary's offsets.
      int rc = pool ? HM_OK : fail(HM_EINVAL, "a delta came before the hello");
      Ranges ranges;
      for (uint32_t i = 0; i < n; ++i) {
        uint64_t off = 0, bytes = 0;
        if (!s.get(&off) || !s.get(&bytes)) return HM_EIO;
        if (rc == HM_OK && (off < kHeaderBytes || bytes > pool->capacity() || off > pool->capacity() - bytes))
          rc = fail(HM_EFORMAT, "a delta range [%llu, +%llu) lies outside the replica", static_cast<unsigned long long>(off),
                    static_cast<unsigned long long>(bytes));
        std::string sink;
        char *to = nullptr;
        if (rc == HM_OK) to = pool->at<char>(off);
        else sink.resize(bytes), to = sink.data();
        if (!s.get_bytes(to, bytes)) return HM_EIO;
        if (rc == HM_OK) ranges.emplace_back(off, bytes);
      }
      if (rc == HM_OK) rc = apply(*pool, *pool, ranges, root, top, sequence);  // the data is in place
      if (!s.answer(rc)) return HM_EIO;
    } else if (request == 'F') {
      std::string bytes;
      int rc = prim::read_text(path, &bytes) ? HM_OK : fail(HM_EIO, "the replica '%s' cannot be read", path.c_str());
      if (!s.answer(rc) || (rc == HM_OK && (!s.put(static_cast<uint64_t>(bytes.size())) || !s.put_bytes(bytes.data(), bytes.size()))))
        return HM_EIO;
    } else {
      return fail(HM_EFORMAT, "unknown request %d from the primary", request);
    }
  }
}

}  // namespace hm::persist
