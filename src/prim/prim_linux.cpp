// Linux implementation of the OS primitives.
#include "prim/prim.h"

#include <arpa/inet.h>
#if defined(__x86_64__)
#include <sys/platform/x86.h>
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <locale.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <numa.h>
#include <numaif.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <time.h>
#include <pthread.h>
#include <unistd.h>
// Local unwinding only (libunwind's _UL* functions, in libunwind.so itself); its types only:
// the library is loaded by stack_trace_start.
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <nlohmann/json.hpp>

#include "hetmem/hetmem.h"

#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif

namespace hm::prim {

static int errno_code(int e) { return e == ENOMEM ? HM_ENOMEM : (e == EINVAL ? HM_EINVAL : HM_EIO); }

int map_anon(size_t size, size_t align, size_t huge_page, void **out) {
  if (size == 0) return HM_EINVAL;
  if (huge_page) {
    int shift = huge_page == kHugePage1G ? 30 : 21;
    void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (shift << MAP_HUGE_SHIFT), -1, 0);
    if (p == MAP_FAILED) return HM_ENOMEM;
    *out = p;  // hugetlb mappings are aligned to their page size by the kernel
    return HM_OK;
  }
  if (align < kPageSize) align = kPageSize;
  size_t span = size + (align > kPageSize ? align : 0);
  void *p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return errno_code(errno);
  uintptr_t start = reinterpret_cast<uintptr_t>(p);
  uintptr_t aligned = (start + align - 1) & ~(uintptr_t)(align - 1);
  if (aligned > start) munmap(p, aligned - start);
  uintptr_t end = aligned + size, span_end = start + span;
  if (span_end > end) munmap(reinterpret_cast<void *>(end), span_end - end);
  *out = reinterpret_cast<void *>(aligned);
  return HM_OK;
}

int map_anon_guarded(size_t size, size_t align, void **out) {
  // The data starts on a 2 MiB boundary: its transparent huge pages then cover the object exactly
  // (the kernel's referenced bytes are exact in 2 MiB units), and no other guarded mapping can
  // start inside the 2 MiB unit it starts in (the allocator keeps one owner per unit). The guard
  // page sits just below it, the surplus of the reservation is returned.
  size = (size + kPageSize - 1) & ~(kPageSize - 1);
  size_t data_align = kHugePage2M;
  if (align > data_align) data_align = align;
  size_t total = size + data_align + 2 * kPageSize;
  void *p = nullptr;
  int rc = map_anon(total, kPageSize, 0, &p);
  if (rc != HM_OK) return rc;
  uintptr_t base = reinterpret_cast<uintptr_t>(p);
  uintptr_t data = (base + kPageSize + data_align - 1) & ~(data_align - 1);
  uintptr_t lead = data - kPageSize, tail = data + size + kPageSize;
  if (lead > base) munmap(p, lead - base);
  if (base + total > tail) munmap(reinterpret_cast<void *>(tail), base + total - tail);
  mprotect(reinterpret_cast<void *>(lead), kPageSize, PROT_NONE);
  mprotect(reinterpret_cast<void *>(data + size), kPageSize, PROT_NONE);
  *out = reinterpret_cast<void *>(data);
  return HM_OK;
}

int unmap_guarded(void *addr, size_t size) {
  size = (size + kPageSize - 1) & ~(kPageSize - 1);
  return unmap(static_cast<char *>(addr) - kPageSize, size + 2 * kPageSize);
}

int resize_guarded(void *addr, size_t size, size_t new_size, void **out) {
  size = (size + kPageSize - 1) & ~(kPageSize - 1);
  new_size = (new_size + kPageSize - 1) & ~(kPageSize - 1);
  char *data = static_cast<char *>(addr);
  *out = addr;
  if (new_size == size) return HM_OK;
  if (new_size < size) {
    // The page after the new end becomes the guard; the old tail and its guard are returned.
    if (munmap(data + new_size + kPageSize, size - new_size) != 0) return errno_code(errno);
    madvise(data + new_size, kPageSize, MADV_DONTNEED);
    mprotect(data + new_size, kPageSize, PROT_NONE);
    return HM_OK;
  }
  // Growing: the trailing guard goes, the mapping grows over it (one mapping, the same flags).
  if (munmap(data + size, kPageSize) != 0) return errno_code(errno);
  if (mremap(data, size, new_size + kPageSize, 0) != MAP_FAILED) {  // in place, with a page for the guard
    mprotect(data + new_size, kPageSize, PROT_NONE);
    return HM_OK;
  }
  // Elsewhere: a place laid out as map_anon_guarded lays one out, the pages moved onto it.
  void *moved = nullptr;
  int rc = map_anon_guarded(new_size, kHugePage2M, &moved);
  if (rc == HM_OK && mremap(data, size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, moved) == MAP_FAILED) {
    rc = errno_code(errno);
    unmap_guarded(moved, new_size);
  }
  if (rc != HM_OK) {  // as it was: the guard back (unless something was mapped there meanwhile)
    mmap(data + size, kPageSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    return rc;
  }
  munmap(data - kPageSize, kPageSize);  // the old leading guard
  *out = moved;
  return HM_OK;
}

int move_guarded(void *addr, size_t size, void *target, size_t new_size) {
  size = (size + kPageSize - 1) & ~(kPageSize - 1);
  new_size = (new_size + kPageSize - 1) & ~(kPageSize - 1);
  char *data = static_cast<char *>(addr);
  // One mapping, grown where the target's data was: its flags and NUMA policy go with it.
  if (mremap(data, size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target) == MAP_FAILED) return errno_code(errno);
  munmap(data - kPageSize, kPageSize);  // the old guards
  munmap(data + size, kPageSize);
  return HM_OK;
}

int reserve(size_t size, size_t align, void **out) {
  int rc = map_anon(size, align, 0, out);
  if (rc == HM_OK) mprotect(*out, size, PROT_NONE);
  return rc;
}

int unmap(void *addr, size_t size) { return munmap(addr, size) == 0 ? HM_OK : errno_code(errno); }

int map_file_fixed(void *addr, size_t len, int fd, uint64_t offset, bool try_sync, bool *synced) {
  *synced = false;
  if (try_sync) {
    void *p = mmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC | MAP_FIXED, fd,
                   static_cast<off_t>(offset));
    if (p != MAP_FAILED) {
      *synced = true;
      return HM_OK;
    }
  }
  void *p = mmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(offset));
  return p == MAP_FAILED ? errno_code(errno) : HM_OK;
}

int remap_fixed(void *from, size_t len, void *to) {
  void *p = mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  return p == MAP_FAILED ? errno_code(errno) : HM_OK;
}

int advise_huge(void *addr, size_t len, bool on) {
  return madvise(addr, len, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0 ? HM_OK : HM_ENOTSUP;
}

void zero_pages(void *addr, size_t len) {
  if (madvise(addr, len, MADV_DONTNEED) != 0) std::memset(addr, 0, len);
}

int prefault(void *addr, size_t len) {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
  if (madvise(addr, len, MADV_POPULATE_READ) == 0) return HM_OK;
  return madvise(addr, len, MADV_WILLNEED) == 0 ? HM_OK : HM_ENOTSUP;
}

int populate_write(void *addr, size_t len) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
  if (madvise(addr, len, MADV_POPULATE_WRITE) == 0) return HM_OK;
  volatile char *p = static_cast<volatile char *>(addr);
  for (size_t off = 0; off < len; off += kPageSize) p[off] = 0;
  return HM_OK;
}

int back_file(int fd, uint64_t offset, size_t len) {
  if (fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(len)) == 0) return HM_OK;
  return errno == ENOSPC ? HM_ECAPACITY : (errno == EOPNOTSUPP ? HM_ENOTSUP : errno_code(errno));
}

namespace {
// The functions hetmem uses of libnuma (HM_NUMA_SONAME, the library this was compiled against).
#define HM_NUMA_FUNCTIONS(X) \
  X(numa_available) X(numa_num_configured_nodes) X(numa_node_size64) X(numa_distance) X(mbind) X(move_pages)
HM_LIBRARY_FUNCTIONS(Numa, libnuma, HM_NUMA_SONAME, HM_NUMA_FUNCTIONS)

// libnuma where it can be loaded and the kernel has NUMA support, else nullptr.
const Numa *numa() {
  static const Numa *usable = [] {
    const Numa *n = libnuma();
    return n && n->numa_available() >= 0 ? n : nullptr;
  }();
  return usable;
}

// libnuma where the machine has two nodes or more, else nullptr.
const Numa *numa_of_several_nodes() {
  static const bool several = online_nodes().size() > 1;
  return several ? numa() : nullptr;
}
}  // namespace

const std::vector<int> &online_nodes() {
  static const std::vector<int> ids = [] {
    std::string online;
    return read_text("/sys/devices/system/node/online", &online) ? parse_id_list(online) : std::vector<int>{};
  }();
  return ids;
}

std::vector<int> parse_id_list(const std::string &text) {
  std::vector<int> out;
  for (const std::string &part : split(text, ',')) {
    if (part.empty() || !std::isdigit(static_cast<unsigned char>(part[0]))) continue;
    int a = std::atoi(part.c_str()), b = a;
    size_t dash = part.find('-');
    if (dash != std::string::npos) b = std::atoi(part.c_str() + dash + 1);
    for (int i = a; i <= b; ++i) out.push_back(i);
  }
  return out;
}

bool numa_available() { return numa() != nullptr; }

int numa_node_count() {
  const Numa *n = numa_of_several_nodes();
  return n ? n->numa_num_configured_nodes() : 1;
}

int bind_node(void *addr, size_t len, int node, bool move_existing) {
  const Numa *n = numa_of_several_nodes();
  if (node < 0 || !n) return HM_OK;  // one node: everything is on it
  unsigned long mask[16] = {};
  if (node >= static_cast<int>(sizeof(mask) * 8)) return HM_EINVAL;
  mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
  unsigned flags = move_existing ? MPOL_MF_MOVE | MPOL_MF_STRICT : 0;
  if (n->mbind(addr, len, MPOL_BIND, mask, sizeof(mask) * 8, flags) != 0) return errno_code(errno);
  return HM_OK;
}

int page_node(const void *addr, int *node) {
  void *page = reinterpret_cast<void *>(reinterpret_cast<uintptr_t>(addr) & ~(uintptr_t)(kPageSize - 1));
  int status = -1;
  const Numa *n = numa();
  if (!n) return HM_ENOTSUP;
  if (n->move_pages(0, 1, &page, nullptr, &status, 0) != 0) return errno_code(errno);
  if (status < 0) return HM_EINVAL;  // -ENOENT: page not yet touched
  *node = status;
  return HM_OK;
}

int node_size(int node, uint64_t *total, uint64_t *free_bytes) {
  const Numa *n = numa_of_several_nodes();
  if (!n) {
    // One sysinfo call for both (sysconf's _SC_PHYS_PAGES and _SC_AVPHYS_PAGES make one each).
    struct sysinfo si {};
    if (sysinfo(&si) != 0) return errno_code(errno);
    *total = static_cast<uint64_t>(si.totalram) * si.mem_unit;
    *free_bytes = static_cast<uint64_t>(si.freeram) * si.mem_unit;
    return HM_OK;
  }
  long long fr = 0;
  long long t = n->numa_node_size64(node, &fr);
  if (t < 0) return HM_EINVAL;
  *total = static_cast<uint64_t>(t);
  *free_bytes = static_cast<uint64_t>(fr);
  return HM_OK;
}

bool node_has_cpus(int node) {
  std::string s;
  if (!read_text("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist", &s)) return node == 0;
  return s.find_first_of("0123456789") != std::string::npos;
}

int node_distance(int a, int b) {
  const Numa *n = numa_of_several_nodes();
  return n ? n->numa_distance(a, b) : (a == b ? 10 : 20);
}

int current_node() {
  unsigned cpu = 0, node = 0;
  if (getcpu(&cpu, &node) != 0) return 0;
  return static_cast<int>(node);
}

int open_pool_file(const std::string &path, uint64_t size, int *fd, uint64_t *actual) {
  int f = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (f < 0) return HM_EIO;
  struct stat st;
  if (fstat(f, &st) != 0) {
    close(f);
    return HM_EIO;
  }
  uint64_t have = static_cast<uint64_t>(st.st_size);
  if (size > have) {
    if (ftruncate(f, static_cast<off_t>(size)) != 0) {
      close(f);
      return HM_EIO;
    }
    have = size;
  }
  if (have == 0) {
    close(f);
    return HM_EINVAL;
  }
  *fd = f;
  *actual = have;
  return HM_OK;
}

int close_fd(int fd) { return close(fd) == 0 ? HM_OK : HM_EIO; }

int create_staging_file(const std::string &path, uint64_t size, int *fd) {
  // Whoever removes abandoned staging files takes a file's lock before removing it, and may come
  // between this open and this lock: it then holds the lock for a moment (tried again), or has
  // removed the file this descriptor names (the lock is taken on a file no path leads to: tried
  // again, with a new file). Only a lock held for the whole 50 ms is another creator's.
  for (int attempt = 0; attempt < 50; ++attempt) {
    int f = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0) return HM_EIO;
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      close(f);
      if (error != EWOULDBLOCK) return HM_EIO;
      usleep(1000);
      continue;
    }
    struct stat held, named;
    if (fstat(f, &held) != 0) {
      close(f);
      return HM_EIO;
    }
    if (stat(path.c_str(), &named) != 0 || named.st_ino != held.st_ino || named.st_dev != held.st_dev) {
      close(f);
      continue;
    }
    if (ftruncate(f, 0) != 0 || ftruncate(f, static_cast<off_t>(size)) != 0) {
      close(f);
      return HM_EIO;
    }
    *fd = f;
    return HM_OK;
  }
  return HM_EBUSY;
}

int publish_file(int fd, const std::string &from, const std::string &to) {
  if (fsync(fd) != 0 || rename(from.c_str(), to.c_str()) != 0) return HM_EIO;
  const size_t slash = to.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : to.substr(0, slash);
  int d = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0) return HM_EIO;
  const bool synced = fsync(d) == 0;
  close(d);
  return synced ? HM_OK : HM_EIO;
}

namespace {
int open_sized(const std::string &path, int flags, int *fd, uint64_t *size) {
  int f = open(path.c_str(), flags | O_CLOEXEC);
  if (f < 0) return HM_EIO;
  if (file_size(f, size) != HM_OK) {
    close(f);
    return HM_EIO;
  }
  *fd = f;
  return HM_OK;
}
}  // namespace

int open_existing(const std::string &path, int *fd, uint64_t *size) { return open_sized(path, O_RDWR, fd, size); }

int open_readonly(const std::string &path, int *fd, uint64_t *size) { return open_sized(path, O_RDONLY, fd, size); }

int file_size(int fd, uint64_t *size) {
  struct stat st;
  if (fstat(fd, &st) != 0) return HM_EIO;
  *size = static_cast<uint64_t>(st.st_size);
  return HM_OK;
}

int map_file(int fd, uint64_t size, bool try_sync, void **out, bool *synced) {
  *synced = false;
  void *p = MAP_FAILED;
  if (try_sync) {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
    *synced = p != MAP_FAILED;
  }
  if (p == MAP_FAILED) p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno_code(errno);
  *out = p;
  return HM_OK;
}

int tcp_connect(const std::string &host, int port, int *fd, std::string *why) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    if (why) *why = gai_strerror(rc);
    return HM_EIO;
  }
  int s = -1;
  for (addrinfo *a = found; a && s < 0; a = a->ai_next) {
    s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s >= 0 && connect(s, a->ai_addr, a->ai_addrlen) != 0) {
      if (why) *why = std::strerror(errno);
      close(s);
      s = -1;
    }
  }
  freeaddrinfo(found);
  if (s < 0) return HM_EIO;
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *fd = s;
  return HM_OK;
}

int tcp_listen(const std::string &address, int port, int *fd, int *bound_port, std::string *why) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int rc = getaddrinfo(address.empty() ? nullptr : address.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    if (why) *why = gai_strerror(rc);
    return HM_EIO;
  }
  int s = -1;
  for (addrinfo *a = found; a && s < 0; a = a->ai_next) {
    s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (s < 0) continue;
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, a->ai_addr, a->ai_addrlen) != 0 || listen(s, 4) != 0) {
      if (why) *why = std::strerror(errno);
      close(s);
      s = -1;
    }
  }
  freeaddrinfo(found);
  if (s < 0) return HM_EIO;
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(s, reinterpret_cast<sockaddr *>(&bound), &len);
  *bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6 *>(&bound)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in *>(&bound)->sin_port);
  *fd = s;
  return HM_OK;
}

int is_loopback(const std::string &host, bool *loopback, std::string *why) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), "1", &hints, &found);
  if (rc != 0) {
    if (why) *why = gai_strerror(rc);
    return HM_EIO;
  }
  bool all = found != nullptr;
  for (addrinfo *a = found; a; a = a->ai_next) {
    if (a->ai_family == AF_INET)
      all = all && (ntohl(reinterpret_cast<sockaddr_in *>(a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
    else if (a->ai_family == AF_INET6)
      all = all && IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<sockaddr_in6 *>(a->ai_addr)->sin6_addr);
    else
      all = false;
  }
  freeaddrinfo(found);
  *loopback = all;
  return HM_OK;
}

int readable_by_others(const std::string &path, bool *others) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return HM_EIO;
  *others = (st.st_mode & (S_IRWXG | S_IRWXO)) != 0;
  return HM_OK;
}

int tcp_accept(int listen_fd, int *fd) {
  int s = -1;
  do s = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
  while (s < 0 && errno == EINTR);
  if (s < 0) return HM_EIO;
  int one = 1;
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *fd = s;
  return HM_OK;
}

// Waits until `fd` is ready for `events` or `deadline` (now_ns() time, 0: none) passes.
static bool ready_by(int fd, short events, uint64_t deadline) {
  if (deadline == 0) return true;
  for (;;) {
    const uint64_t now = now_ns();
    if (now >= deadline) {
      errno = ETIMEDOUT;
      return false;
    }
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<uint64_t>((deadline - now) / 1000000 + 1, 1u << 30)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

int send_all(int fd, const void *data, size_t bytes, uint64_t deadline) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    if (!ready_by(fd, POLLOUT, deadline)) return HM_EIO;
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | (deadline ? MSG_DONTWAIT : 0));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return HM_EIO;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return HM_OK;
}

int recv_all(int fd, void *data, size_t bytes, uint64_t deadline) {
  char *p = static_cast<char *>(data);
  while (bytes > 0) {
    if (!ready_by(fd, POLLIN, deadline)) return HM_EIO;
    ssize_t n = recv(fd, p, bytes, deadline ? MSG_DONTWAIT : 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return HM_EIO;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return HM_OK;
}

void finish_stream(int fd, size_t max_bytes, uint64_t deadline) {
  shutdown(fd, SHUT_WR);
  char sink[4096];
  for (size_t dropped = 0; dropped < max_bytes && ready_by(fd, POLLIN, deadline);) {
    const ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return;
    if (n > 0) dropped += static_cast<size_t>(n);
  }
}

int lock_file(int fd) {
  if (flock(fd, LOCK_EX | LOCK_NB) == 0) return HM_OK;
  return errno == EWOULDBLOCK ? HM_EBUSY : HM_EIO;
}

bool cpu_has(CpuFeature feature) {
#if defined(__x86_64__)
  switch (feature) {
    case CpuFeature::kAvx2: return CPU_FEATURE_ACTIVE(AVX2);
    case CpuFeature::kClwb: return CPU_FEATURE_ACTIVE(CLWB);
    case CpuFeature::kClflushopt: return CPU_FEATURE_ACTIVE(CLFLUSHOPT);
    case CpuFeature::kInvariantTsc: return CPU_FEATURE_PRESENT(INVARIANT_TSC);
  }
#endif
  (void)feature;
  return false;
}

void flush_lines(const void *addr, size_t len) {
#if defined(__x86_64__)
  static const bool clwb = cpu_has(CpuFeature::kClwb), clflushopt = cpu_has(CpuFeature::kClflushopt);
  uintptr_t p = reinterpret_cast<uintptr_t>(addr) & ~uintptr_t{63}, end = reinterpret_cast<uintptr_t>(addr) + len;
  for (; p < end; p += 64) {
    if (clwb) __asm__ volatile("clwb %0" : "+m"(*reinterpret_cast<volatile char *>(p)));
    else if (clflushopt) __asm__ volatile("clflushopt %0" : "+m"(*reinterpret_cast<volatile char *>(p)));
    else __asm__ volatile("clflush %0" : "+m"(*reinterpret_cast<volatile char *>(p)));
  }
#else
  (void)addr;
  (void)len;
#endif
}

void store_fence() {
#if defined(__x86_64__)
  __asm__ volatile("sfence" ::: "memory");
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

bool read_text(const std::string &path, std::string *out, size_t piece) {
  int f = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) return false;
  // Most files read here are a line or a few (sysfs, a rules file): read on the stack, so that they
  // take no `piece`-byte text (zeroed by resize: pages every process would fault in at its start).
  // Past the first buffer full, the rest goes straight into the text, `piece` bytes a read.
  char first[512];
  out->clear();
  size_t used = 0;
  ssize_t n = 0;
  do {
    if (used < sizeof first) {
      n = read(f, first, sizeof first);
      if (n > 0) out->append(first, static_cast<size_t>(n));
    } else {
      if (out->size() < used + piece) out->resize(used + piece);
      n = read(f, out->data() + used, piece);
    }
    if (n > 0) used += static_cast<size_t>(n);
  } while (n > 0 || (n < 0 && errno == EINTR));
  close(f);
  out->resize(used);
  return n == 0;
}

std::vector<std::string> split(const std::string &text, char separator) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(separator, at);
    if (end == std::string::npos) end = text.size();
    out.emplace_back(text, at, end - at);
    at = end + 1;
  }
  return out;
}

std::vector<std::string> words(const std::string &text) {
  std::vector<std::string> out;
  const char *space = " \t\n\r\v\f";
  size_t at = text.find_first_not_of(space);
  while (at != std::string::npos) {
    size_t end = text.find_first_of(space, at);
    out.emplace_back(text, at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? end : text.find_first_not_of(space, end);
  }
  return out;
}

std::string format_number(double x) {
  // The shortest text that reads back as x, in any locale: nlohmann-json's printer (std::to_chars
  // would link libm, which libhetmem does not), without the ".0" it gives a whole number.
  if (!std::isfinite(x)) return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
  std::string text = nlohmann::json(x).dump();
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text;
}

bool parse_number(const std::string &text, double *x) {
  // strtod_l in the "C" locale, held to std::from_chars's grammar (no leading space, '+' or hex
  // digits): libstdc++'s from_chars sets the rounding mode through libm, which libhetmem does not
  // link.
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
  const char *s = text.c_str(), *digits = s + (*s == '-');
  if (text.empty() || !c_locale || std::isspace(static_cast<unsigned char>(*s)) || *s == '+' ||
      (digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')))
    return false;
  char *end = nullptr;
  errno = 0;
  const double v = strtod_l(s, &end, c_locale);
  // Out of range: an overflow, or an underflow to zero (a subnormal result stands, as in from_chars).
  if (end != s + text.size() || (errno == ERANGE && (std::isinf(v) || v == 0))) return false;
  *x = v;
  return true;
}

int read_head(const std::string &path, void *data, size_t bytes, size_t *got) {
  int f = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) return HM_EIO;
  size_t done = 0;
  while (done < bytes) {
    ssize_t n = read(f, static_cast<char *>(data) + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(f);
  *got = done;
  return HM_OK;
}

bool path_exists(const std::string &path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

void write_fd(int fd, const void *data, size_t bytes) {
  for (size_t done = 0; done < bytes;) {
    ssize_t n = write(fd, static_cast<const char *>(data) + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void print_fd(int fd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vdprintf(fd, fmt, ap);
  va_end(ap);
}

bool write_text_atomic(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  int f = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f < 0) return false;
  // All of it written and on the medium before the rename makes it visible under `path`.
  bool ok = true;
  for (size_t done = 0; ok && done < text.size();) {
    ssize_t n = write(f, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  ok = ok && fsync(f) == 0;
  ok = (close(f) == 0) && ok;
  if (ok) ok = rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) unlink(tmp.c_str());
  return ok;
}

bool list_dir(const std::string &path, std::string *names) {
  DIR *d = opendir(path.c_str());
  if (!d) return false;
  names->clear();
  while (struct dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    names->append(e->d_name);
    names->push_back('\n');
  }
  closedir(d);
  return true;
}

bool make_dirs(const std::string &path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  }
  return true;
}

int create_private_file(const std::string &path, int *fd) {
  *fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  return *fd >= 0 ? HM_OK : HM_EIO;
}

int create_scratch_file(const std::string &dir, int *fd) {
  *fd = open(dir.c_str(), O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
  return *fd >= 0 ? HM_OK : HM_EIO;
}

// Moves the vector `v` of `count` parts past the `done` bytes a short read or write transferred.
static void advance(iovec *&v, int &count, size_t done) {
  while (count > 0 && done) {
    const size_t take = std::min(done, v->iov_len);
    v->iov_base = static_cast<char *>(v->iov_base) + take;
    v->iov_len -= take;
    done -= take;
    if (v->iov_len == 0) ++v, --count;
  }
}

int read_at(int fd, void *data, size_t bytes, uint64_t offset) {
  return read_two_at(fd, data, bytes, nullptr, 0, offset);
}

int read_two_at(int fd, void *a, size_t a_bytes, void *b, size_t b_bytes, uint64_t offset) {
  iovec parts[2] = {{a, a_bytes}, {b, b_bytes}};
  iovec *v = parts;
  int count = b_bytes ? 2 : 1;
  if (!a_bytes) ++v, --count;
  while (count > 0) {
    ssize_t n = preadv(fd, v, count, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return HM_EIO;
    offset += static_cast<uint64_t>(n);
    advance(v, count, static_cast<size_t>(n));
  }
  return HM_OK;
}

int make_private_dir(const std::string &path) {
  return mkdir(path.c_str(), 0700) == 0 || errno == EEXIST ? HM_OK : HM_EIO;
}

static int write_failure() { return errno == ENOSPC || errno == EDQUOT || errno == EFBIG ? HM_ECAPACITY : HM_EIO; }

int write_at(int fd, const void *data, size_t bytes, uint64_t offset) {
  return write_two_at(fd, data, bytes, nullptr, 0, offset);
}

int write_two_at(int fd, const void *a, size_t a_bytes, const void *b, size_t b_bytes, uint64_t offset) {
  iovec parts[2] = {{const_cast<void *>(a), a_bytes}, {const_cast<void *>(b), b_bytes}};
  iovec *v = parts;
  int count = b_bytes ? 2 : 1;
  while (count > 0) {
    ssize_t n = pwritev(fd, v, count, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return write_failure();
    if (n == 0) return HM_EIO;
    offset += static_cast<uint64_t>(n);
    advance(v, count, static_cast<size_t>(n));  // a short write: on past what was written
  }
  return HM_OK;
}

int set_file_size(int fd, uint64_t bytes) { return ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? HM_OK : HM_EIO; }
int sync_fd(int fd) { return fsync(fd) == 0 ? HM_OK : HM_EIO; }
int sync_data(int fd) { return fdatasync(fd) == 0 ? HM_OK : HM_EIO; }
void start_writeback(int fd, uint64_t offset, uint64_t bytes) {
  (void)sync_file_range(fd, static_cast<off64_t>(offset), static_cast<off64_t>(bytes), SYNC_FILE_RANGE_WRITE);
}
int rename_path(const std::string &from, const std::string &to) {
  return rename(from.c_str(), to.c_str()) == 0 ? HM_OK : HM_EIO;
}
int remove_path(const std::string &path) { return unlink(path.c_str()) == 0 ? HM_OK : HM_EIO; }

int write_pieces(int fd, const Piece *pieces, int count) {
  iovec iov[8];
  if (count > 8) return HM_EINVAL;
  size_t total = 0;
  for (int i = 0; i < count; ++i) {
    iov[i] = {const_cast<void *>(pieces[i].data), pieces[i].bytes};
    total += pieces[i].bytes;
  }
  ssize_t w;
  do w = writev(fd, iov, count);
  while (w < 0 && errno == EINTR);
  return w == static_cast<ssize_t>(total) ? HM_OK : HM_EIO;
}

namespace {
// Descriptors from this number up are left alone by the programs hetmem runs in (shells take 10
// and 255, most programs the lowest free ones).
constexpr int kHighDescriptor = 300;

// `fd` moved above kHighDescriptor when the limit allows (else left where it is).
int moved_high(int fd) {
  if (fd < 0 || fd >= kHighDescriptor) return fd;
  int high = fcntl(fd, F_DUPFD_CLOEXEC, kHighDescriptor);
  if (high < 0) return fd;
  ::close(fd);
  return high;
}
}  // namespace

int AppendFile::create(const std::string &path) {
  // An older regular file of that name is unlinked, not truncated: ext4 (auto_da_alloc, its
  // default) writes a truncated file out when it is closed, 0.2-0.3 ms at the exit of every
  // profiled process on this VM's disk, against 0.03 ms for a new file. A FIFO, a device or a
  // link's target is written through as before.
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) unlink(path.c_str());
  // Read-write: a mapping needs a readable descriptor. The page is never touched (the file may
  // be shorter than it); it only holds the file.
  int fd = moved_high(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
  if (fd < 0) return HM_EIO;
  void *pin = MAP_FAILED;
  if (fstat(fd, &st) != 0 || (pin = mmap(nullptr, kPageSize, PROT_NONE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return HM_EIO;
  }
  pin_ = pin;
  device_ = st.st_dev;
  inode_ = st.st_ino;
  path_ = path;
  fd_.store(fd);
  return HM_OK;
}

bool AppendFile::owns(int fd) const {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == device_ && st.st_ino == inode_;
}

// The descriptor `stale` is no longer this file's: the file opened again by its path, if it is
// still the same file. The stale number is not closed: it is the program's now, or nothing.
// Threads that find it stale together each open one; the first to swap it in wins and the others
// close theirs (no lock: a forked child may not inherit one held).
int AppendFile::reopen(int stale) {
  int fd = moved_high(open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC));
  int why = errno;  // the open's, when it failed
  if (fd >= 0 && !owns(fd)) {
    ::close(fd);
    fd = -1;
    why = ENOENT;  // another file under its name
  }
  int current = stale;
  if (!fd_.compare_exchange_strong(current, fd)) {
    if (fd >= 0) ::close(fd);
    fd = current;  // another thread's reopen, or the file closed
    why = EBADF;
  }
  if (fd < 0) errno = why;
  return fd;
}

int AppendFile::write(const Piece *pieces, int count) {
  int fd = fd_.load(std::memory_order_acquire);
  if (fd < 0) {
    errno = EBADF;
    return HM_EIO;
  }
  if (!owns(fd) && (fd = reopen(fd)) < 0) return HM_EIO;
  return write_pieces(fd, pieces, count);
}

void AppendFile::close() {
  int fd = fd_.exchange(-1);
  if (owns(fd)) ::close(fd);
  if (pin_) munmap(pin_, kPageSize);
  pin_ = nullptr;
}

int map_file_readonly(const std::string &path, void **data, size_t *len) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return HM_EIO;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return HM_EIO;
  }
  void *map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return HM_EIO;
  *data = map;
  *len = static_cast<size_t>(st.st_size);
  return HM_OK;
}

void for_each_loaded_object(void (*fn)(const LoadedObject &, void *), void *ctx) {
  struct Call {
    void (*fn)(const LoadedObject &, void *);
    void *ctx;
  } call{fn, ctx};
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) {
        auto *c = static_cast<Call *>(data);
        char exe[512] = {};
        LoadedObject o{};
        o.path = info->dlpi_name;
        if (!o.path || !*o.path) {
          ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
          o.path = n > 0 ? exe : "";
        }
        o.bias = info->dlpi_addr;
        for (int i = 0; i < info->dlpi_phnum && o.code_segments < 8; ++i) {
          const ElfW(Phdr) &ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
            o.code[o.code_segments++] = {info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz};
        }
        c->fn(o, c->ctx);
        return 0;
      },
      &call);
}

namespace {
// The main program as for_each_loaded_object names it (/proc/self/exe, symbolic links resolved),
// where dladdr gives the name it was started by (/usr/bin/python3 for /usr/bin/python3.11).
struct MainProgram {
  char path[512] = {};
  uintptr_t text = 0;  // an address inside it: the first object dl_iterate_phdr reports
};
const MainProgram &main_program() {
  static MainProgram m;
  static std::once_flag once;
  std::call_once(once, [] {
    ssize_t n = readlink("/proc/self/exe", m.path, sizeof m.path - 1);
    if (n <= 0) m.path[0] = '\0';
    dl_iterate_phdr(
        [](dl_phdr_info *info, size_t, void *data) {
          auto *mp = static_cast<MainProgram *>(data);
          for (int i = 0; i < info->dlpi_phnum; ++i)
            if (info->dlpi_phdr[i].p_type == PT_LOAD) {
              mp->text = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
              break;
            }
          return 1;  // the first object only
        },
        &m);
  });
  return m;
}
}  // namespace

bool object_at(const void *addr, const char **path, uintptr_t *base) {
  const MainProgram &m = main_program();
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
  // _dl_find_object finds the object's link map from the address in a sorted table; dladdr also
  // searches the object's whole symbol table for the nearest symbol (microseconds in a library
  // with tens of thousands of symbols, for every call site a plan's rules look up).
  dl_find_object found;
  if (_dl_find_object(const_cast<void *>(addr), &found) != 0 || !found.dlfo_link_map) return false;
  const link_map *map = found.dlfo_link_map;
  // The load bias (0 for a program not built position-independent), as the trace's module
  // records have it, not the address the object's first page is mapped at.
  *base = static_cast<uintptr_t>(map->l_addr);
  *path = map->l_name;
  dl_find_object main_found;
  if (m.path[0] && m.text && _dl_find_object(reinterpret_cast<void *>(m.text), &main_found) == 0 &&
      main_found.dlfo_link_map == map)
    *path = m.path;
  return **path != '\0';
#else
  Dl_info info;
  link_map *map = nullptr;
  if (!dladdr1(addr, &info, reinterpret_cast<void **>(&map), RTLD_DL_LINKMAP) || !info.dli_fname) return false;
  *path = info.dli_fname;
  *base = map ? static_cast<uintptr_t>(map->l_addr) : reinterpret_cast<uintptr_t>(info.dli_fbase);
  Dl_info main_info;
  if (m.path[0] && m.text && dladdr(reinterpret_cast<void *>(m.text), &main_info) &&
      main_info.dli_fbase == info.dli_fbase)
    *path = m.path;
  return true;
#endif
}

void *library_open(const char *soname, std::string *why) {
  void *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!library && why) *why = dlerror();
  return library;
}

void *library_symbol(void *library, const char *name, std::string *why) {
  dlerror();
  void *symbol = dlsym(library, name);
  if (!symbol && why) {
    const char *e = dlerror();
    *why = e ? e : std::string(name) + " is null";
  }
  return symbol;
}

const char *env(const char *name) { return getenv(name); }
char *const *environment() { return environ; }

uint64_t hugetlb_free_pages(size_t page_size) {
  std::string s;
  std::string dir = "/sys/kernel/mm/hugepages/hugepages-" + std::to_string(page_size / 1024) + "kB/free_hugepages";
  if (!read_text(dir, &s)) return 0;
  return std::strtoull(s.c_str(), nullptr, 10);
}

bool thp_available() {
  std::string s;
  return read_text("/sys/kernel/mm/transparent_hugepage/enabled", &s) && s.find("[never]") == std::string::npos;
}

int clear_referenced() {
  int f = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (f < 0) return HM_ENOTSUP;
  bool ok = write(f, "1", 1) == 1;
  close(f);
  return ok ? HM_OK : HM_ENOTSUP;
}

int read_smaps(std::string *text) {
  // Each read() of smaps takes the process's mmap lock and finds its place again, and returns only
  // the whole mappings that fit: read in large pieces (4 KiB at a time, a profiled numpy run's 300
  // mappings took 3-6 ms a read where they now take 2.3-4).
  return read_text("/proc/self/smaps", text, 256 << 10) ? HM_OK : HM_ENOTSUP;
}

namespace {
constexpr size_t kThreadBlockHead = 16;  // the mapping's size, before the block

void thread_block_release(void *block) {
  char *mapping = static_cast<char *>(block) - kThreadBlockHead;
  munmap(mapping, *reinterpret_cast<size_t *>(mapping));
}

std::mutex g_thread_block_mutex;
}  // namespace

void *thread_block(ThreadBlockKey *key, size_t bytes) {
  int state = __atomic_load_n(&key->state, __ATOMIC_ACQUIRE);
  if (state == 1) {
    if (void *block = pthread_getspecific(key->key)) return block;
  } else if (state == 0) {
    std::lock_guard<std::mutex> lock(g_thread_block_mutex);
    if (__atomic_load_n(&key->state, __ATOMIC_RELAXED) == 0) {
      pthread_key_t k;
      const bool made = pthread_key_create(&k, thread_block_release) == 0;
      key->key = made ? static_cast<unsigned>(k) : 0;
      __atomic_store_n(&key->state, made ? 1 : 2, __ATOMIC_RELEASE);
    }
    state = __atomic_load_n(&key->state, __ATOMIC_ACQUIRE);
  }
  const size_t size = (kThreadBlockHead + bytes + kPageSize - 1) / kPageSize * kPageSize;
  void *mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  *static_cast<size_t *>(mapping) = size;
  void *block = static_cast<char *>(mapping) + kThreadBlockHead;
  if (state == 1) pthread_setspecific(key->key, block);
  return block;
}

namespace {
// libunwind, loaded (RTLD_LOCAL) by the first profile rather than linked: every process the
// preload library starts in would pay for loading it and liblzma, and a linked libunwind.so
// interposes its own _Unwind_Backtrace and backtrace on the program's.
using BacktraceFn = int (*)(void **, int);
std::atomic<BacktraceFn> g_backtrace{nullptr};
}  // namespace

int stack_trace_start(std::string *why) {
  if (g_backtrace.load(std::memory_order_acquire)) return HM_OK;
  void *library = library_open(HM_UNWIND_SONAME, why);
  if (!library) return HM_ENOTSUP;
  // libunwind.h's names are macros for the architecture's symbols (UNW_LOCAL_ONLY: _UL<arch>_...);
  // unw_backtrace is exported under its own name.
#define HM_SYMBOL_NAME(name) HM_SYMBOL_TEXT(name)
#define HM_SYMBOL_TEXT(name) #name
  auto backtrace = reinterpret_cast<BacktraceFn>(library_symbol(library, "unw_backtrace", why));
  auto set_caching = reinterpret_cast<int (*)(unw_addr_space_t, unw_caching_policy_t)>(
      library_symbol(library, HM_SYMBOL_NAME(unw_set_caching_policy), why));
  auto local = static_cast<unw_addr_space_t *>(library_symbol(library, HM_SYMBOL_NAME(unw_local_addr_space), why));
#undef HM_SYMBOL_NAME
#undef HM_SYMBOL_TEXT
  if (!backtrace || !set_caching || !local) return HM_ENOTSUP;
  // Per-thread caches of unwind information: no lock taken per trace.
  set_caching(*local, UNW_CACHE_PER_THREAD);
  g_backtrace.store(backtrace, std::memory_order_release);
  return HM_OK;
}

int stack_trace(void **frames, int depth) {
  BacktraceFn backtrace = g_backtrace.load(std::memory_order_relaxed);
  return backtrace ? backtrace(frames, depth) : 0;
}

int thread_id() { return static_cast<int>(syscall(SYS_gettid)); }
int process_id() { return static_cast<int>(getpid()); }
const char *program_name() { return program_invocation_short_name; }

namespace {
uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

uint64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }

int64_t wall_seconds() { return static_cast<int64_t>(clock_ns(CLOCK_REALTIME) / 1000000000ull); }

uint64_t process_cpu_ns() { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

uint64_t wall_ns() { return clock_ns(CLOCK_REALTIME); }

namespace {
// The TSC's rate against CLOCK_MONOTONIC, measured over the first 5 ms in which the clock is read,
// never by waiting for them (a profiled short process would pay the wait whole): until then
// fast_now_ns() is now_ns() itself, and the first call after 5 ms fixes the rate. Only with an
// invariant TSC (CPUID 0x80000007 EDX bit 8: constant rate, running in every C-state).
class TscClock {
 public:
  TscClock() {
#if defined(__x86_64__)
    if (!cpu_has(CpuFeature::kInvariantTsc)) {
      state_.store(kUnusable);
      return;
    }
    ns0_ = now_ns();
    tsc0_ = __builtin_ia32_rdtsc();
#else
    state_.store(kUnusable);
#endif
  }
  uint64_t now() {
    const int state = state_.load(std::memory_order_acquire);
#if defined(__x86_64__)
    if (state == kReady)
      return ns1_ + static_cast<uint64_t>(static_cast<double>(__builtin_ia32_rdtsc() - tsc1_) * rate_);
    const uint64_t n = now_ns();
    if (state == kMeasuring && n - ns0_ >= kMeasureNs && !finishing_.test_and_set()) {
      const uint64_t t = __builtin_ia32_rdtsc();
      if (t > tsc0_) {
        rate_ = static_cast<double>(n - ns0_) / static_cast<double>(t - tsc0_);
        tsc1_ = t;
        ns1_ = n;
        state_.store(kReady, std::memory_order_release);
      } else {
        state_.store(kUnusable, std::memory_order_release);
      }
    }
    return n;
#else
    (void)state;
    return now_ns();
#endif
  }

 private:
  static constexpr int kMeasuring = 0, kReady = 1, kUnusable = 2;
  static constexpr uint64_t kMeasureNs = 5000000;
  std::atomic<int> state_{kMeasuring};
  std::atomic_flag finishing_ = ATOMIC_FLAG_INIT;
  uint64_t ns0_ = 0, tsc0_ = 0;           // the first reading
  uint64_t ns1_ = 0, tsc1_ = 0;           // the reading that fixed the rate
  double rate_ = 0;                        // ns per tick
};
}  // namespace

uint64_t fast_now_ns() {
  static TscClock clock;
  return clock.now();
}

void spin_until_ns(uint64_t deadline) {
  while (now_ns() < deadline) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

int cpu_count() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace hm::prim
