// OS primitives: the only place that calls mmap, mbind, move_pages, sysfs and getenv.
// Every function returns 0 or a negative HM_E* code; results go to out-parameters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

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
// Maps `len` bytes of file `fd` at `offset` exactly at `addr` (MAP_FIXED, shared). Tries MAP_SYNC
// first when `try_sync`; *synced says whether it took.
int map_file_fixed(void *addr, size_t len, int fd, uint64_t offset, bool try_sync, bool *synced);
// Moves the pages of [from, from+len) to `to` (anonymous memory), replacing what was there.
int remap_fixed(void *from, size_t len, void *to);
int advise_huge(void *addr, size_t len, bool on);
int advise_dontneed(void *addr, size_t len);
int sync_range(void *addr, size_t len);

// NUMA. `node` < 0 means "no binding" for bind_node.
int numa_node_count();               // configured nodes (1 if libnuma is unavailable)
bool numa_available();
int bind_node(void *addr, size_t len, int node, bool move_existing);
int page_node(const void *addr, int *node);  // node of the page holding addr (touches nothing)
int node_size(int node, uint64_t *total, uint64_t *free_bytes);
bool node_has_cpus(int node);
int node_distance(int a, int b);
int current_node();

// Files.
// Opens (creating if needed) `path` and makes it at least `size` bytes (0 = keep the existing
// size, which must be non-zero). *actual gets the resulting size.
int open_pool_file(const std::string &path, uint64_t size, int *fd, uint64_t *actual);
int close_fd(int fd);
bool read_text(const std::string &path, std::string *out);  // whole small file (sysfs)
bool write_text_atomic(const std::string &path, const std::string &text);
bool list_dir(const std::string &path, std::string *names);  // newline-separated entries
bool make_dirs(const std::string &path);

// Environment (the only getenv in the library).
const char *env(const char *name);

// Huge pages.
uint64_t hugetlb_free_pages(size_t page_size);  // from sysfs, 0 if absent
bool thp_available();

// Time.
uint64_t now_ns();
void spin_until_ns(uint64_t deadline);
int cpu_count();

}  // namespace hm::prim
