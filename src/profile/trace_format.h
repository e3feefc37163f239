// The hetmem trace format, version 4 (documented byte by byte in docs/trace-format.md).
// Little-endian. A 64-byte file header, then records: a 16-byte RecordHead followed by the
// payload. A reader that meets a record it does not know skips it; one whose checksum fails is
// damaged, and the reader looks for the next record whose checksum holds.
#pragma once
#include <cstdint>

namespace hm::trace {

constexpr char kMagic[8] = {'H', 'M', 'T', 'R', 'A', 'C', 'E', '\0'};
constexpr uint32_t kVersion = 5;  // 2: PhaseHeader.phase carries kPhaseSampled; 3: RecordHead.crc;
                                   // 4: call sites in compressed blocks (kSites); 5: sample_bytes

struct FileHeader {  // 64 bytes
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t start_monotonic_ns;  // CLOCK_MONOTONIC at start; event times are relative to it
  uint64_t start_unix_ns;       // CLOCK_REALTIME at start
  uint32_t pid;
  uint32_t stack_depth;
  uint64_t large_threshold;     // objects at least this large get per-phase referenced bytes
  // Version 5: 0 when every allocation is recorded; else allocations smaller than both this and
  // large_threshold were sampled, each recorded with probability 1 - exp(-size / sample_bytes)
  // (with its free), and stand for 1 / that many allocations. Earlier versions: 0 (reserved).
  uint64_t sample_bytes;
  uint8_t reserved[8];
};
static_assert(sizeof(FileHeader) == 64);

enum RecordType : uint32_t {
  kEvents = 1,      // EventsHeader, then zstd-compressed columns (see EventsHeader)
  kSite = 2,        // SiteHeader, then uint64 address[depth]
  kPhaseName = 3,   // uint32 phase id, then the name's bytes (no terminator)
  kPhase = 4,       // PhaseHeader, then ObjectReference[objects]
  kIteration = 5,   // IterationRecord
  kModules = 6,     // repeated ModuleEntry, each followed by path_bytes of path
  kEnd = 7,         // written by a clean stop; a trace without it is partial
  kThreadName = 8,  // reserved
  kExec = 9,        // ExecRecord, then the new program's path: the process replaced itself
  kSites = 10,      // SitesHeader, then a zstd-compressed block of call sites (see SitesHeader)
  kSiteName = 11,   // uint32 site id, then the name's bytes: a site named by hm_profile_site_name
};

// Versions 1 and 2 had an 8-byte head {type, bytes}.
struct RecordHead {
  uint32_t type;
  uint32_t bytes;     // the whole record, this head included
  uint32_t crc;       // CRC-32 (zlib's, as Python's zlib.crc32) of type and bytes, then the payload
  uint32_t reserved;
};
static_assert(sizeof(RecordHead) == 16);

enum Op : uint8_t { kAlloc = 1, kFree = 2 };
// The function that made the event.
enum Fn : uint8_t {
  kMalloc = 1, kCalloc, kRealloc, kReallocarray, kPosixMemalign, kAlignedAlloc, kMemalign, kValloc, kPvalloc,
  kFreeFn, kNew, kNewArray, kDelete, kDeleteArray, kHmApi
};

struct Event {  // 32 bytes
  uint64_t time_ns;  // since the start
  uint64_t ptr;
  uint64_t size;     // allocations: the requested size; frees: 0
  uint32_t site;     // call-site id (0: none recorded)
  uint16_t phase;    // phase id (0: outside any phase)
  uint8_t op;
  uint8_t fn;
};
static_assert(sizeof(Event) == 32);

// An events block, once decompressed, holds the events column by column, in this order: time
// (uint64, as the difference from the previous event's; the first from 0), ptr (uint64, likewise
// as a difference, modulo 2^64), size (uint64), site (uint32), phase (uint16), op (uint8), fn
// (uint8). Each column of count values of width W bytes is stored as W byte planes of count bytes:
// first the least significant byte of every value, then the next byte of every value, and so on.
struct EventsHeader {
  uint32_t thread;           // kernel thread id
  uint32_t count;            // events in the block
  uint32_t compressed_bytes;
  uint32_t reserved;
};

// A block of call sites (version 4; kSite before), in an order that puts sites with common
// callers side by side. Uncompressed, the block holds: uint32 id[count] as 4 byte planes (all low
// bytes, then all second bytes, ...), uint8 depth[count], then every site's return addresses
// (innermost first, depth[i] each), each stored as its difference from the address at the same
// depth of the site before it in the block (0 when that site is shallower), as 8 byte planes.
// Sites called from the same places differ in few frames, so most differences are 0.
struct SitesHeader {
  uint32_t count;       // sites in the block
  uint32_t raw_bytes;   // the block's size before compression
  uint32_t packed_bytes;
  uint32_t reserved;
};
static_assert(sizeof(SitesHeader) == 16);

struct SiteHeader {
  uint32_t site;
  uint32_t depth;
};

// Version 2: bit 16 of PhaseHeader.phase says the instance was sampled (its object references
// are the kernel's referenced bytes); unsampled instances carry no references. Version 1 sampled
// every instance.
constexpr uint32_t kPhaseSampled = 1u << 16;

struct PhaseHeader {
  uint32_t phase;  // phase id in the low 16 bits, kPhaseSampled

  uint32_t iteration;
  uint64_t begin_ns;
  uint64_t end_ns;
  uint32_t thread;
  uint32_t objects;
};

struct ObjectReference {
  uint64_t ptr;
  uint64_t size;
  uint64_t referenced_bytes;  // kernel's Referenced: for the object's mapping during the phase
};

struct IterationRecord {
  uint32_t iteration;  // the iteration that starts now
  uint32_t reserved;
  uint64_t time_ns;
};

struct ExecRecord {
  uint64_t time_ns;
  uint32_t path_bytes;
  uint32_t reserved;
};

struct ModuleEntry {
  uint64_t start, end, load_bias;  // executable segment [start, end); ELF address = addr - load_bias
  uint32_t path_bytes;
  uint32_t reserved;
};

}  // namespace hm::trace
