// OS primitives: the only place that calls mmap, mbind, move_pages, sysfs and getenv.
// Every function returns 0 or a negative HM_E* code; results go to out-parameters.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace hm::prim {

constexpr size_t kPageSize = 4096;
constexpr size_t kHugePage2M = size_t{2} << 20;
constexpr size_t kHugePage1G = size_t{1} << 30;

// Anonymous private mapping of `size` bytes whose start is aligned to `align` (a power of two,
// >= page size). `huge_page` != 0 asks for MAP_HUGETLB pages of that size (2 MiB or 1 GiB).
int map_anon(size_t size, size_t align, size_t huge_page, void **out);
// Reserves address space only (PROT_NONE), aligned.
int reserve(size_t size, size_t align, void **out);
int unmap(void *addr, size_t size);
// Per-thread memory too large for the static TLS block, which every library loaded after start-up
// shares (a large block makes the next library that needs static TLS fail to load: FDB's plugin
// beside libhetmem in one Python process did). A purpose's key is one static ThreadBlockKey; its
// block is mapped (zeroed) on a thread's first call, returned again to that thread, and unmapped
// when the thread ends. nullptr when it cannot be mapped. No malloc: callable from allocation hooks.
struct ThreadBlockKey {
  int state = 0;  // 0: no key yet, 1: the key exists, 2: none could be made (blocks then stay)
  unsigned key = 0;
};
void *thread_block(ThreadBlockKey *key, size_t bytes);
// As map_anon, with an inaccessible page right before and right after the mapping, so the kernel
// keeps it a VMA of its own (per-object Referenced counts in smaps). Free with unmap_guarded.
int map_anon_guarded(size_t size, size_t align, void **out);
int unmap_guarded(void *addr, size_t size);
// Resizes a guarded mapping of `size` bytes at `addr` to `new_size`, keeping its pages up to the
// smaller of the two (none copied) and its flags (huge-page advice, NUMA binding), still one
// mapping between two inaccessible pages, 2 MiB-aligned: in place where it shrinks or the address
// space after it is free, else moved to a new place (*out). On failure the mapping is as it was.
int resize_guarded(void *addr, size_t size, size_t new_size, void **out);
// Moves the pages of the guarded mapping of `size` bytes at `addr` onto `target`, a guarded
// mapping of `new_size` bytes (map_anon_guarded), none copied: the mapping, grown to `new_size`
// (what is new reads as zeros), replaces the target's data and keeps its own flags (huge-page
// advice, NUMA binding); the old address range and its guards are returned. On failure both are
// as they were.
int move_guarded(void *addr, size_t size, void *target, size_t new_size);
// Maps `len` bytes of file `fd` at `offset` exactly at `addr` (MAP_FIXED, shared). Tries MAP_SYNC
// first when `try_sync`; *synced says whether it took.
int map_file_fixed(void *addr, size_t len, int fd, uint64_t offset, bool try_sync, bool *synced);
// Moves the pages of [from, from+len) to `to` (anonymous memory), replacing what was there.
int remap_fixed(void *from, size_t len, void *to);
int advise_huge(void *addr, size_t len, bool on);
// Zeroes [addr, addr+len) of private anonymous memory by dropping its pages (MADV_DONTNEED): the
// next touch maps a zero page; pages never touched cost nothing, where memset would fault each in.
// Falls back to memset where the kernel refuses.
void zero_pages(void *addr, size_t len);
// Maps in the pages of [addr, addr+len) of a file mapping now, in one call (MADV_POPULATE_READ,
// Linux 5.14; else MADV_WILLNEED, which only starts the reads), instead of one fault per page.
int prefault(void *addr, size_t len);
// Gives [addr, addr+len) of private anonymous memory its pages now, writable, in one call
// (MADV_POPULATE_WRITE, Linux 5.14; else a write to each page): one fault per page where a read
// before the first write would take two (the zero page, then its copy).
int populate_write(void *addr, size_t len);
// Gives [offset, offset+len) of file `fd` its blocks (fallocate): HM_ECAPACITY when the medium is
// full, where a store into a hole of a mapping would be a SIGBUS; HM_ENOTSUP when the file system
// cannot preallocate (the range stays as it was).
int back_file(int fd, uint64_t offset, size_t len);

// NUMA. `node` < 0 means "no binding" for bind_node.
// libnuma is loaded (RTLD_LOCAL) the first time a machine with two nodes or more needs it, not
// linked: on a machine with one node there is nothing to bind, and every process the preload
// library starts in would pay for loading it and running its constructor (about 0.2 ms).
int numa_node_count();               // nodes with memory (the online nodes' count where libnuma is not loaded)
const std::vector<int> &online_nodes();  // the kernel's online nodes (sysfs, read once); empty if unknown
bool numa_available();               // whether libnuma could be loaded (loads it)
int bind_node(void *addr, size_t len, int node, bool move_existing);  // a no-op on one node
int page_node(const void *addr, int *node);  // node of the page holding addr (touches nothing; loads libnuma)
int node_size(int node, uint64_t *total, uint64_t *free_bytes);
bool node_has_cpus(int node);
int node_distance(int a, int b);
int current_node();

// Files.
// Opens (creating if needed) `path` and makes it at least `size` bytes (0 = keep the existing
// size, which must be non-zero). *actual gets the resulting size.
int open_pool_file(const std::string &path, uint64_t size, int *fd, uint64_t *actual);
// A file being created under a private name (a pool before its first version): opened or created,
// locked (HM_EBUSY if another process holds it), emptied of anything a killed creator left and
// given `size` bytes of holes.
int create_staging_file(const std::string &path, uint64_t size, int *fd);
// Makes a staged file visible under `to`: its data and size on the medium, the rename, and the
// directory entry on the medium, in that order. HM_EIO if any step fails (`from` is then intact).
int publish_file(int fd, const std::string &from, const std::string &to);
int close_fd(int fd);
// Opens an existing file read-write (HM_EIO if it cannot be opened); *size gets its size.
int open_existing(const std::string &path, int *fd, uint64_t *size);
// Opens an existing file for reading only (HM_EIO if it cannot be opened); *size gets its size.
int open_readonly(const std::string &path, int *fd, uint64_t *size);
// The size of an open file now (HM_EIO if it cannot be told).
int file_size(int fd, uint64_t *size);
// Maps a whole file shared, MAP_SYNC when the file system allows it (*synced says which).
int map_file(int fd, uint64_t size, bool try_sync, void **out, bool *synced);
// An exclusive advisory lock on the file, without waiting: HM_EBUSY if another holder has it.
int lock_file(int fd);
// Cache-line write-back of [addr, addr+len) (clwb, else clflushopt, else clflush) and the
// store fence that orders it: the persistence primitives of a MAP_SYNC mapping.
void flush_lines(const void *addr, size_t len);
void store_fence();

// Processor features, as the C library's loader found them at start-up (glibc's
// <sys/platform/x86.h>): no CPUID of hetmem's own, which in a virtual machine exits to the
// hypervisor (several microseconds each; the compiler's __builtin_cpu_supports runs about a
// dozen in a constructor of every process the library is loaded into). False off x86-64.
enum class CpuFeature { kAvx2, kClwb, kClflushopt, kInvariantTsc };
bool cpu_has(CpuFeature feature);

// x rounded to the nearest integer, halves up, for 0 <= x < 2^64; 0 for a negative x or NaN.
// libhetmem does not link the C math library (llround): every process the preload library starts
// in would load it.
inline uint64_t round_to_u64(double x) { return x > 0 ? static_cast<uint64_t>(x + 0.5) : 0; }

// A whole file (sysfs, /proc), read `piece` bytes at a time; false if it cannot be read.
bool read_text(const std::string &path, std::string *out, size_t piece = 4096);
std::vector<int> parse_id_list(const std::string &text);    // a kernel list of node or CPU ids, "0-1,3"
// The pieces of `text` between separators, as std::getline gives them ("a\n\nb\n": "a", "", "b"),
// and its whitespace-separated words (" a  b\t": "a", "b"). Without a string stream: the first
// stream a process makes builds the C++ locale, which start-up paths (sysfs, options, rules) need not pay.
std::vector<std::string> split(const std::string &text, char separator);
std::vector<std::string> words(const std::string &text);
// A number as text and back, whatever the locale, without a string stream: the shortest text that
// reads back as the same double ("2.5", "1e-06"), and the whole of `text` as one number (false if
// anything else is in it).
std::string format_number(double x);
bool parse_number(const std::string &text, double *x);
// The first `bytes` bytes of a file (fewer if it is shorter: *got says how many). HM_EIO if it
// cannot be opened.
int read_head(const std::string &path, void *data, size_t bytes, size_t *got);
bool path_exists(const std::string &path);
// Writes all of `data` to a descriptor, best effort (diagnostics: standard error, a stats fd).
void write_fd(int fd, const void *data, size_t bytes);
// printf to a descriptor (hm_stats_print's tables).
void print_fd(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool write_text_atomic(const std::string &path, const std::string &text);  // any bytes; fsync, then rename
bool list_dir(const std::string &path, std::string *names);  // newline-separated entries
bool make_dirs(const std::string &path);
// A new file only its owner can read and write (0600), failing if `path` exists; filled with
// write_at (what is never written stays a hole), given its size by set_file_size, made durable by
// sync_fd, and published by rename_path.
int create_private_file(const std::string &path, int *fd);
// A nameless owner-only file for reading and writing in directory `dir` (O_TMPFILE): it is gone
// when closed, whatever happens to the process.
int create_scratch_file(const std::string &dir, int *fd);
// Reads `bytes` at `offset` (a short file is HM_EIO).
int read_at(int fd, void *data, size_t bytes, uint64_t offset);
// Reads `a_bytes` into `a` and the next `b_bytes` into `b` from `offset` in one call (preadv): a
// record and its data into two places. A short file is HM_EIO.
int read_two_at(int fd, void *a, size_t a_bytes, void *b, size_t b_bytes, uint64_t offset);
// mkdir with owner-only permissions (0700); HM_OK when it exists already.
int make_private_dir(const std::string &path);
int write_at(int fd, const void *data, size_t bytes, uint64_t offset);
// Writes `a` and then `b` at `offset` in one call (pwritev). Both writers return HM_ECAPACITY when
// the medium is full, HM_EIO for any other failure.
int write_two_at(int fd, const void *a, size_t a_bytes, const void *b, size_t b_bytes, uint64_t offset);
int set_file_size(int fd, uint64_t bytes);
int sync_fd(int fd);
// The file's data on its medium (fdatasync): every dirty page, written through the file or a
// shared mapping of it, without the timestamps' journal commit an fsync or msync also makes.
int sync_data(int fd);
// Starts writing the file's dirty pages in [offset, offset + bytes) to its medium and returns
// without waiting (sync_file_range with SYNC_FILE_RANGE_WRITE): a later sync_data finds them
// written or on their way. Nothing on a file system without writeback (tmpfs). A failure to
// write shows at that sync_data, so none is returned here.
void start_writeback(int fd, uint64_t offset, uint64_t bytes);
int rename_path(const std::string &from, const std::string &to);
int remove_path(const std::string &path);
// Writes the pieces in order with one system call (writev); HM_EIO unless all were written.
struct Piece {
  const void *data;
  size_t bytes;
};
int write_pieces(int fd, const Piece *pieces, int count);

// A file of records a library appends to from inside a program that is not its own. The program
// may close every descriptor (a launcher's child does before it execs) or give the number to a
// file of its own (dup2, or the lowest free number an open takes), so each write first checks
// that the descriptor is still this file, and otherwise reopens the file by its path: records
// never land in the program's files, and none are lost while the file itself is there. "This
// file" is its device and inode number, which the file keeps while a page of it stays mapped (a
// number freed by a removed and closed file is given to the next file created). The descriptor
// is close-on-exec and kept above the numbers programs use. Writes from several threads are safe
// (each record lands whole, at the end).
class AppendFile {
 public:
  AppendFile() = default;
  AppendFile(const AppendFile &) = delete;
  AppendFile &operator=(const AppendFile &) = delete;
  // Creates `path`, a new file in place of an older regular one (a FIFO, a device or a link's
  // target is opened and truncated); HM_EIO with errno set if it cannot.
  int create(const std::string &path);
  // HM_EIO with errno set when the write fails, or when the file can no longer be reopened
  // (errno ENOENT: it was removed, or replaced by another file under its name).
  int write(const Piece *pieces, int count);
  // Closes the descriptor if it is still this file's; never one the program has taken over.
  void close();
  bool is_open() const { return fd_.load(std::memory_order_relaxed) >= 0; }
  const std::string &path() const { return path_; }

 private:
  bool owns(int fd) const;
  int reopen(int stale);
  std::atomic<int> fd_{-1};
  void *pin_ = nullptr;  // the page mapped to keep the inode
  uint64_t device_ = 0, inode_ = 0;
  std::string path_;
};
// A whole file mapped read-only and private; release with unmap(*data, *len).
int map_file_readonly(const std::string &path, void **data, size_t *len);

// Loaded objects (the dynamic linker's list).
struct LoadedObject {
  const char *path;  // the main program's from /proc/self/exe
  uintptr_t bias;    // ELF address = runtime address - bias
  struct Segment {
    uintptr_t start, end;  // runtime addresses of an executable PT_LOAD segment
  } code[8];
  int code_segments;
};
// Calls fn(object, ctx) for every loaded object.
void for_each_loaded_object(void (*fn)(const LoadedObject &, void *), void *ctx);
// The object holding `addr` (dladdr): its path and load base. false when none does.
bool object_at(const void *addr, const char **path, uintptr_t *base);
// A library loaded on first use (dlopen, kept for the process's life) and one of its functions:
// nullptr (and dlerror's text in *why when given) when either is missing.
void *library_open(const char *soname, std::string *why = nullptr);
void *library_symbol(void *library, const char *name, std::string *why = nullptr);
// A table of a library's functions, loaded on first use: HM_LIBRARY_FUNCTIONS(Table, loader,
// soname, LIST) defines `struct Table` with a typed pointer per function that the X-macro LIST
// names, and `const Table *loader()`, which opens the library the first time it is called and
// gives nullptr when the library or any of the functions is missing.
#define HM_LIBRARY_FUNCTION_POINTER(name) decltype(&::name) name = nullptr;
#define HM_LIBRARY_FUNCTION_RESOLVE(name)                                                       \
  table.name = reinterpret_cast<decltype(table.name)>(::hm::prim::library_symbol(library, #name)); \
  all = all && table.name;
#define HM_LIBRARY_FUNCTIONS(Table, loader, soname, LIST)          \
  struct Table {                                                   \
    LIST(HM_LIBRARY_FUNCTION_POINTER)                              \
  };                                                               \
  const Table *loader() {                                          \
    static const Table *loaded = [] {                              \
      static Table table;                                          \
      void *library = ::hm::prim::library_open(soname);            \
      if (!library) return static_cast<const Table *>(nullptr);    \
      bool all = true;                                             \
      LIST(HM_LIBRARY_FUNCTION_RESOLVE)                            \
      return all ? static_cast<const Table *>(&table) : nullptr;   \
    }();                                                           \
    return loaded;                                                 \
  }

// TCP byte streams (replicas on another host). HM_OK or HM_EIO (errno's text in *why when given).
int tcp_connect(const std::string &host, int port, int *fd, std::string *why = nullptr);
// Listens on `address` ("127.0.0.1", "::1", "0.0.0.0", "::", a host name) and `port` (0: any free
// one, told in *bound_port).
int tcp_listen(const std::string &address, int port, int *fd, int *bound_port, std::string *why = nullptr);
// Whether every address `host` resolves to is a loopback address (127.0.0.0/8, ::1). HM_EIO if it
// does not resolve.
int is_loopback(const std::string &host, bool *loopback, std::string *why = nullptr);
// Whether `path` can be read by anyone but its owner (group or other permission bits).
int readable_by_others(const std::string &path, bool *others);
int tcp_accept(int listen_fd, int *fd);
// Whole buffers over a stream. HM_EIO when the peer closed early or the connection broke; with a
// `deadline` (now_ns() time, 0: none) also when it passes first, with errno ETIMEDOUT.
int send_all(int fd, const void *data, size_t bytes, uint64_t deadline = 0);  // never raises SIGPIPE
int recv_all(int fd, void *data, size_t bytes, uint64_t deadline = 0);
// Ends the sending side of a stream, then reads and drops what the peer still sends (up to
// `max_bytes`, until `deadline`), so that a last message reaches a peer that was still sending.
void finish_stream(int fd, size_t max_bytes, uint64_t deadline);

// Environment (the only getenv in the library).
const char *env(const char *name);
// The process's environment, NAME=VALUE entries up to a null one (environ).
char *const *environment();

// Huge pages.
uint64_t hugetlb_free_pages(size_t page_size);  // from sysfs, 0 if absent
bool thp_available();

// Process introspection: /proc/self/clear_refs (1 = clear referenced bits) and smaps.
int clear_referenced();
struct MappingUse {
  uintptr_t start, end;
  uint64_t referenced_bytes;
  uint64_t anon_huge_bytes;  // of it, transparent huge pages (AnonHugePages:)
};
// Calls fn(use) for every mapping of the process, from /proc/self/smaps. `buffer`, when given,
// holds the text and is kept by the caller for the next call: smaps is hundreds of KiB, and a
// fresh buffer each time faults its pages in again (a profiled LAMMPS process: 4 samples).
template <class Fn>
int for_each_mapping(Fn fn, std::string *buffer = nullptr);
int read_smaps(std::string *text);
// Loads libunwind (once) for stack_trace, with per-thread caches of unwind information. HM_OK, or
// HM_ENOTSUP with the loader's reason in *why.
int stack_trace_start(std::string *why = nullptr);
// Call stack of the caller: up to `depth` return addresses (libunwind). Returns the count; 0
// before stack_trace_start succeeded.
int stack_trace(void **frames, int depth);
int thread_id();
int process_id();
// The program's name as it was started (the last part of argv[0]).
const char *program_name();

// Time.
uint64_t now_ns();
// Seconds since 1970 (CLOCK_REALTIME): for records of when something was made.
int64_t wall_seconds();
uint64_t wall_ns();  // the same, in nanoseconds
uint64_t process_cpu_ns();  // CPU time of every thread of the process (CLOCK_PROCESS_CPUTIME_ID)
// A lock held for a few instructions by code that must not call into the C library (the
// profiler's, taken inside malloc): it spins.
inline void spin_lock(std::atomic<int> &lock) {
  while (lock.exchange(1, std::memory_order_acquire)) {
  }
}
inline void spin_unlock(std::atomic<int> &lock) { lock.store(0, std::memory_order_release); }

// A cheaper monotonic clock for per-event timestamps: the invariant TSC scaled to nanoseconds
// (its rate measured against CLOCK_MONOTONIC over the first 5 ms of use, CLOCK_MONOTONIC itself
// until then), or now_ns() where there is no invariant TSC.
uint64_t fast_now_ns();
void spin_until_ns(uint64_t deadline);
int cpu_count();

template <class Fn>
int for_each_mapping(Fn fn, std::string *buffer) {
  std::string own;
  std::string &text = buffer ? *buffer : own;
  int rc = read_smaps(&text);
  if (rc != 0) return rc;
  MappingUse cur{0, 0, 0, 0};
  bool have = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const char *line = text.c_str() + pos;
    // A mapping's first line is "start-end perms ..."; its fields are "Name:   value kB".
    char *dash = nullptr;
    unsigned long lo = std::strtoul(line, &dash, 16);
    if (dash != line && *dash == '-') {
      if (have) fn(cur);
      cur = MappingUse{lo, std::strtoul(dash + 1, nullptr, 16), 0, 0};
      have = true;
    } else if (have && std::strncmp(line, "Referenced:", 11) == 0) {
      cur.referenced_bytes = std::strtoull(line + 11, nullptr, 10) * 1024;
    } else if (have && std::strncmp(line, "AnonHugePages:", 14) == 0) {
      cur.anon_huge_bytes = std::strtoull(line + 14, nullptr, 10) * 1024;
    }
    pos = eol + 1;
  }
  if (have) fn(cur);
  return 0;
}

}  // namespace hm::prim
