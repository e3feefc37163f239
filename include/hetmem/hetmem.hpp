// hetmem.hpp - the C++ API of hetmem (namespace hm), a thin layer over hetmem.h.
//
// - hm::Tier            a tier handle: find by name or role, budget, stats
// - hm::TierAllocator   an allocator for standard containers (std::vector<T, hm::TierAllocator<T>>)
// - hm::resource()      a std::pmr::memory_resource per tier or role
// - hm::Allocator       named allocators looked up by string, as Umpire's "HOST"/"DEVICE"
// - hm::Buffer<T>       an owning array on a tier (RAII); hm::unique_ptr<T> for single objects
// - hm::ModeScope       RAII for hm_mode_push/hm_mode_pop;  hm::Arena  RAII iteration arena
// - hm::Phase           RAII for hm_phase_begin/hm_phase_end; hm::next_iteration()
// - hm::TileStream      a streamed tile container (hm_stream_*): sweeps batch by batch, tiles
//                       staged in the migration space by helper threads under the hetmem policy
//
// Errors throw hm::Error (code + hetmem's message); allocation failures throw hm::BadAlloc, a
// std::bad_alloc whose what() is hetmem's message,
// from allocator interfaces, as the standard requires.
#pragma once

#include <hetmem/hetmem.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace hm {

class Error : public std::runtime_error {
 public:
  explicit Error(int code) : std::runtime_error(message(code)), code_(code) {}
  int code() const noexcept { return code_; }

 private:
  static std::string message(int code) {
    std::string detail = hm_last_error();
    return std::string(hm_strerror(code)) + (detail.empty() ? "" : ": " + detail);
  }
  int code_;
};

inline void check(int rc) {
  if (rc != HM_OK) throw Error(rc);
}

// An allocation hetmem refused: a std::bad_alloc (as containers expect) whose what() is hetmem's
// message (which tier, class or policy, how many bytes, what budget).
class BadAlloc : public std::bad_alloc {
 public:
  BadAlloc() : message_(std::string("allocation refused: ") + hm_last_error()) {}
  const char *what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

enum class Role { fast = HM_FAST, capacity = HM_CAPACITY, persistent = HM_PERSISTENT };

class Tier {
 public:
  constexpr explicit Tier(hm_tier_t id = 0) : id_(id) {}
  // "dram", "emul:optane", "numa:1", "file:/path", or a role name ("fast", "capacity", ...).
  static Tier find(const std::string &name) {
    hm_tier_t t;
    check(hm_tier_find(name.c_str(), &t));
    return Tier(t);
  }
  static Tier of(Role role) {
    hm_tier_t t;
    check(hm_role_tier(static_cast<hm_role_t>(role), &t));
    return Tier(t);
  }
  hm_tier_t id() const { return id_; }
  hm_tier_info_t info() const {
    hm_tier_info_t i;
    check(hm_tier_info(id_, &i));
    return i;
  }
  std::string name() const { return info().name; }
  hm_tier_stats_t stats() const {
    hm_tier_stats_t s;
    check(hm_tier_stats(id_, &s));
    return s;
  }
  void set_budget(uint64_t bytes) const { check(hm_tier_set_budget(id_, bytes)); }
  friend bool operator==(Tier a, Tier b) { return a.id_ == b.id_; }

 private:
  hm_tier_t id_;
};

// What a data object is for (hm_class_define); the active policy decides its tier.
enum class ClassKind {
  metadata = HM_CLASS_METADATA,
  temporary = HM_CLASS_TEMPORARY,
  hot = HM_CLASS_HOT,
  streaming = HM_CLASS_STREAMING,
  cold = HM_CLASS_COLD
};

class Class {
 public:
  constexpr explicit Class(hm_class_t id = -1) : id_(id) {}
  static Class define(const std::string &name, ClassKind kind, int priority = 0) {
    hm_class_t c;
    check(hm_class_define(name.c_str(), static_cast<hm_class_kind_t>(kind), priority, &c));
    return Class(c);
  }
  static Class find(const std::string &name) {
    hm_class_t c;
    check(hm_class_find(name.c_str(), &c));
    return Class(c);
  }
  hm_class_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Each object of the class split `fast_percent`% on the fast tier, the rest on the capacity
  // tier (hm_class_interleave); -1: none.
  const Class &interleave(int fast_percent) const {
    check(hm_class_interleave(id_, fast_percent));
    return *this;
  }
  hm_class_info_t info() const {
    hm_class_info_t i;
    check(hm_class_info(id_, &i));
    return i;
  }
  friend bool operator==(Class a, Class b) { return a.id_ == b.id_; }

 private:
  hm_class_t id_;
};

// Allocator for standard containers, on a tier or for an object class (placed by the active
// policy). Preferred placement by default on a tier (falls back when over budget); pass
// HM_STRICT to fail with std::bad_alloc instead. A class's placement flags are its policy's.
template <class T>
class TierAllocator {
 public:
  using value_type = T;
  // A container assigned or swapped from another takes that one's allocator with its memory, so
  // its data stays where the other's tier or class put it (without these, moving a class-placed
  // vector into a default-constructed one would copy the data to the default tier).
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;
  explicit TierAllocator(Tier tier = Tier::of(Role::fast), unsigned flags = HM_PREFERRED) noexcept
      : tier_(tier), flags_(flags) {}
  explicit TierAllocator(Class cls, unsigned flags = 0) noexcept : tier_(Tier(-1)), cls_(cls), flags_(flags) {}
  template <class U>
  TierAllocator(const TierAllocator<U> &o) noexcept : tier_(o.tier()), cls_(o.object_class()), flags_(o.flags()) {}
  T *allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    std::size_t align = alignof(T) > 16 ? alignof(T) : 16;
    void *p = cls_.valid() ? hm_class_alloc(cls_.id(), n * sizeof(T), align, flags_)
                           : hm_tier_alloc(tier_.id(), n * sizeof(T), align, flags_);
    if (!p) throw BadAlloc();
    return static_cast<T *>(p);
  }
  void deallocate(T *p, std::size_t) noexcept { hm_free(p); }
  Tier tier() const noexcept { return tier_; }        // Tier(-1) for a class allocator
  Class object_class() const noexcept { return cls_; }
  unsigned flags() const noexcept { return flags_; }
  template <class U>
  bool operator==(const TierAllocator<U> &o) const noexcept {
    return tier_ == o.tier() && cls_ == o.object_class();  // any instance frees any hetmem pointer
  }

 private:
  Tier tier_;
  Class cls_;
  unsigned flags_;
};

// std::pmr resource on one tier.
class MemoryResource final : public std::pmr::memory_resource {
 public:
  explicit MemoryResource(Tier tier, unsigned flags = HM_PREFERRED) : tier_(tier), flags_(flags) {}
  Tier tier() const { return tier_; }

 private:
  void *do_allocate(std::size_t bytes, std::size_t align) override {
    void *p = hm_tier_alloc(tier_.id(), bytes, align > 16 ? align : 16, flags_);
    if (!p) throw BadAlloc();
    return p;
  }
  void do_deallocate(void *p, std::size_t, std::size_t) override { hm_free(p); }
  bool do_is_equal(const std::pmr::memory_resource &o) const noexcept override {
    auto *m = dynamic_cast<const MemoryResource *>(&o);
    return m && m->tier_ == tier_;
  }
  Tier tier_;
  unsigned flags_;
};

// One long-lived resource per tier (valid until hm_finalize).
inline MemoryResource *resource(Tier tier) {
  static std::mutex mutex;
  static std::map<hm_tier_t, std::unique_ptr<MemoryResource>> table;
  std::lock_guard<std::mutex> lock(mutex);
  auto &slot = table[tier.id()];
  if (!slot) slot = std::make_unique<MemoryResource>(tier);
  return slot.get();
}
inline MemoryResource *resource(Role role) { return resource(Tier::of(role)); }

// Named allocators, looked up by string. Every tier is registered under its name and every role
// under its name in capitals ("FAST", "CAPACITY", "PERSISTENT"); applications add their own
// ("samrai::temporary_data_allocator") with Allocator::define.
class Allocator {
 public:
  Allocator(std::string name, Tier tier, unsigned flags) : name_(std::move(name)), tier_(tier), flags_(flags) {}
  void *allocate(std::size_t bytes, std::size_t align = 16) const {
    void *p = hm_tier_alloc(tier_.id(), bytes, align, flags_);
    if (!p) throw Error(hm_last_error_code());
    return p;
  }
  void deallocate(void *p) const noexcept { hm_free(p); }
  const std::string &name() const { return name_; }
  Tier tier() const { return tier_; }
  unsigned flags() const { return flags_; }

  static Allocator get(const std::string &name) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto &reg = registry();
    auto it = reg.find(name);
    if (it != reg.end()) return it->second;
    std::string upper = name;
    for (auto &c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const char *roles[] = {"FAST", "CAPACITY", "PERSISTENT"};
    for (int r = 0; r < HM_ROLE_COUNT; ++r)
      if (upper == roles[r]) return reg.emplace(name, Allocator(name, Tier::of(Role(r)), HM_PREFERRED)).first->second;
    hm_tier_t t;
    int rc = hm_tier_find(name.c_str(), &t);
    if (rc != HM_OK) throw Error(rc);  // the message lists the known tiers
    return reg.emplace(name, Allocator(name, Tier(t), HM_PREFERRED)).first->second;
  }
  // Defines (or redefines) a named allocator.
  static Allocator define(const std::string &name, Tier tier, unsigned flags = HM_PREFERRED) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().insert_or_assign(name, Allocator(name, tier, flags));
    return registry().at(name);
  }

 private:
  static std::map<std::string, Allocator> &registry() {
    static std::map<std::string, Allocator> r;
    return r;
  }
  static std::mutex &registry_mutex() {
    static std::mutex m;
    return m;
  }
  std::string name_;
  Tier tier_;
  unsigned flags_;
};

struct Deleter {
  template <class T>
  void operator()(T *p) const noexcept {
    if (p) {
      p->~T();
      hm_free(p);
    }
  }
};
template <class T>
using unique_ptr = std::unique_ptr<T, Deleter>;

template <class T, class... Args>
unique_ptr<T> make_unique_on(Tier tier, Args &&...args) {
  void *p = hm_tier_alloc(tier.id(), sizeof(T), alignof(T) > 16 ? alignof(T) : 16, HM_PREFERRED);
  if (!p) throw Error(hm_last_error_code());
  try {
    return unique_ptr<T>(new (p) T(std::forward<Args>(args)...));
  } catch (...) {
    hm_free(p);
    throw;
  }
}

// An owning array of trivially copyable T on one tier (fields, particle arrays).
template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "hm::Buffer holds trivially copyable elements");

 public:
  Buffer() = default;
  Buffer(Tier tier, std::size_t n, unsigned flags = HM_PREFERRED | HM_ZERO) : n_(n) {
    data_ = static_cast<T *>(hm_tier_alloc(tier.id(), n * sizeof(T), alignof(T) > 64 ? alignof(T) : 64, flags));
    if (!data_ && n) throw Error(hm_last_error_code());
  }
  Buffer(Buffer &&o) noexcept : data_(std::exchange(o.data_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer &operator=(Buffer &&o) noexcept {
    if (this != &o) {
      hm_free(data_);
      data_ = std::exchange(o.data_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  ~Buffer() { hm_free(data_); }

  T *data() noexcept { return data_; }
  const T *data() const noexcept { return data_; }
  std::size_t size() const noexcept { return n_; }
  T &operator[](std::size_t i) noexcept { return data_[i]; }
  const T &operator[](std::size_t i) const noexcept { return data_[i]; }
  T *begin() noexcept { return data_; }
  T *end() noexcept { return data_ + n_; }
  Tier tier() const {
    hm_tier_t t;
    check(hm_ptr_tier(data_, &t));
    return Tier(t);
  }
  // Moves the buffer to another tier keeping its address (allocate with HM_MOVABLE or >= 1 MiB).
  void move_to(Tier tier) { check(hm_move(data_, tier.id())); }

 private:
  T *data_ = nullptr;
  std::size_t n_ = 0;
};

// Steers hm_malloc (and the preload library) to a role or tier for the scope's lifetime.
class ModeScope {
 public:
  explicit ModeScope(Role role) { check(hm_mode_push(static_cast<hm_role_t>(role))); }
  explicit ModeScope(Tier tier) { check(hm_mode_push_tier(tier.id())); }
  ~ModeScope() { hm_mode_pop(); }
  ModeScope(const ModeScope &) = delete;
  ModeScope &operator=(const ModeScope &) = delete;
};

// A phase of the main loop for the lifetime of the guard (hm_phase_begin/hm_phase_end):
//   { hm::Phase phase("push"); push_particles(); }   ...   hm::next_iteration();
class Phase {
 public:
  explicit Phase(const char *name) { check(hm_phase_begin(name)); }
  ~Phase() { hm_phase_end(); }
  Phase(const Phase &) = delete;
  Phase &operator=(const Phase &) = delete;
};
inline void next_iteration() { check(hm_iteration_next()); }

// Declared accesses (hm_access): what a kernel did in place to data on a tier, so that an
// emulated tier charges it (a lookup on real tiers). Counts are in elements of T.
enum class Access : unsigned { read = HM_ACCESS_READ, write = HM_ACCESS_WRITE, read_write = HM_ACCESS_RW };
template <class T>
inline void access(const T *p, std::size_t count, Access how) {
  if (p && count) hm_access(p, count * sizeof(T), static_cast<unsigned>(how));
}
// The whole of a contiguous container (std::vector with any allocator, std::span, ...).
template <class C>
inline auto access(const C &c, Access how) -> decltype(c.data(), c.size(), void()) {
  access(c.data(), c.size(), how);
}
// `count` scattered accesses of `size` bytes each to the allocation holding p (gathers, lookups).
inline void access_scattered(const void *p, std::uint64_t count, std::size_t size, Access how, bool dependent = false) {
  if (p && count) hm_access_scattered(p, count, size, static_cast<unsigned>(how) | (dependent ? HM_ACCESS_DEPENDENT : 0u));
}

// RAII iteration arena.
class Arena {
 public:
  explicit Arena(Tier tier, std::size_t initial_bytes = 0, unsigned flags = 0) {
    check(hm_arena_create(tier.id(), initial_bytes, flags, &arena_));
  }
  // An arena for the temporaries of a class: placed by the active policy (hm_arena_create_class).
  explicit Arena(Class cls, std::size_t initial_bytes = 0, unsigned flags = 0) {
    check(hm_arena_create_class(cls.id(), initial_bytes, flags, &arena_));
  }
  ~Arena() { hm_arena_destroy(arena_); }
  Arena(const Arena &) = delete;
  Arena &operator=(const Arena &) = delete;
  void *allocate(std::size_t bytes, std::size_t align = 16) {
    void *p = hm_arena_alloc(arena_, bytes, align);
    if (!p) throw BadAlloc();
    return p;
  }
  template <class T>
  T *allocate_array(std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    return static_cast<T *>(allocate(n * sizeof(T), alignof(T)));
  }
  void reset() noexcept { hm_arena_reset(arena_); }
  hm_arena_stats_t stats() const {
    hm_arena_stats_t s;
    check(hm_arena_stats(arena_, &s));
    return s;
  }
  hm_arena_t *get() const noexcept { return arena_; }

 private:
  hm_arena_t *arena_ = nullptr;
};

// A streamed tile container (hm_stream_*, docs/streaming.md): tiles of one class, each one
// allocation; a kernel sweeps them batch by batch:
//
//   stream.sweep(0, stream.tiles());
//   for (std::size_t first, last; stream.next(first, last);) {
//     #pragma omp parallel for
//     for (std::size_t t = first; t < last; ++t) {
//       void *tile = stream.acquire(t);   // the working copy: staged, or the home
//       ... compute on the tile ...
//       stream.release(t, /*modified=*/true);
//     }
//   }
class TileStream {
 public:
  TileStream(Class cls, std::size_t tiles) { check(hm_stream_create(cls.id(), tiles, &s_)); }
  // Tiles pinned to one tier: never staged.
  TileStream(Tier tier, std::size_t tiles) { check(hm_stream_create_on_tier(tier.id(), tiles, &s_)); }
  ~TileStream() { hm_stream_destroy(s_); }
  TileStream(const TileStream &) = delete;
  TileStream &operator=(const TileStream &) = delete;
  std::size_t tiles() const noexcept { return hm_stream_tiles(s_); }
  // realloc-like: keeps the first min(old, new) bytes. Throws BadAlloc when refused.
  void *resize(std::size_t tile, std::size_t bytes) {
    void *p = hm_stream_resize(s_, tile, bytes);
    if (!p && bytes) throw BadAlloc();
    return p;
  }
  void *home(std::size_t tile) const noexcept { return hm_stream_home(s_, tile); }
  std::size_t bytes(std::size_t tile) const noexcept { return hm_stream_bytes(s_, tile); }
  void sweep(std::size_t first, std::size_t last) { check(hm_stream_sweep(s_, first, last)); }
  // The next batch [first, last); false once the sweep is over (everything written back).
  bool next(std::size_t &first, std::size_t &last) {
    int rc = hm_stream_next(s_, &first, &last);
    if (rc < 0) throw Error(rc);
    return rc == 1;
  }
  void *acquire(std::size_t tile) {
    void *p = nullptr;
    check(hm_stream_acquire(s_, tile, &p));
    return p;
  }
  void release(std::size_t tile, bool modified) { check(hm_stream_release(s_, tile, modified ? 1 : 0)); }
  void end() { check(hm_stream_sweep_end(s_)); }
  hm_stream_stats_t stats() const {
    hm_stream_stats_t st;
    check(hm_stream_stats(s_, &st));
    return st;
  }
  hm_stream_t *get() const noexcept { return s_; }

 private:
  hm_stream_t *s_ = nullptr;
};

}  // namespace hm
