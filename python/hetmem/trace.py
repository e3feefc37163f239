"""Reads hetmem trace files (format versions 1 to 5, docs/trace-format.md)."""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zstandard

MAGIC = b"HMTRACE\0"
VERSION = 5  # also reads 1 (every phase instance sampled), 2 (no record checksums), 3 (sites one by one),
             # 4 (every allocation recorded)
PHASE_SAMPLED = 1 << 16
HEADER = struct.Struct("<8sIIQQIIQQ8s")  # 64 bytes
RECORD = struct.Struct("<IIII")     # version 3: type, bytes, CRC-32, reserved
RECORD_V2 = struct.Struct("<II")    # versions 1 and 2: type, bytes
EVENTS_HEADER = struct.Struct("<IIII")
SITE_HEADER = struct.Struct("<II")
PHASE_HEADER = struct.Struct("<IIQQII")
OBJECT = struct.Struct("<QQQ")
ITERATION = struct.Struct("<IIQ")
MODULE = struct.Struct("<QQQII")
EXEC = struct.Struct("<QII")

EVENTS, SITE, PHASE_NAME, PHASE, ITERATION_MARK, MODULES, END, THREAD_NAME, EXEC_MARK, SITES, SITE_NAME = range(1, 12)
SITES_HEADER = struct.Struct("<IIII")
# No record the writer makes comes near this: a longer one announced is damage, not data.
MAX_RECORD = 64 << 20
ALLOC, FREE = 1, 2
FUNCTIONS = {1: "malloc", 2: "calloc", 3: "realloc", 4: "reallocarray", 5: "posix_memalign", 6: "aligned_alloc",
             7: "memalign", 8: "valloc", 9: "pvalloc", 10: "free", 11: "new", 12: "new[]", 13: "delete",
             14: "delete[]", 15: "hetmem API"}

EVENT_DTYPE = np.dtype([("time_ns", "<u8"), ("ptr", "<u8"), ("size", "<u8"), ("site", "<u4"), ("phase", "<u2"),
                        ("op", "u1"), ("fn", "u1")])


COLUMNS = [("time_ns", "<u8"), ("ptr", "<u8"), ("size", "<u8"), ("site", "<u4"), ("phase", "<u2"), ("op", "u1"),
           ("fn", "u1")]


def unpack_columns(raw: bytes, count: int) -> np.ndarray:
    """An events block: the columns one after another, each as byte planes; times and pointers as
    differences from the previous event (docs/trace-format.md)."""
    block = np.zeros(count, dtype=EVENT_DTYPE)
    buf = np.frombuffer(raw, dtype=np.uint8)
    off = 0
    for name, dtype in COLUMNS:
        width = np.dtype(dtype).itemsize
        planes = buf[off:off + width * count].reshape(width, count)
        block[name] = np.ascontiguousarray(planes.T).view(dtype).reshape(count)
        off += width * count
    block["time_ns"] = np.cumsum(block["time_ns"], dtype=np.uint64)
    block["ptr"] = np.cumsum(block["ptr"], dtype=np.uint64)
    return block


def unpack_sites(raw: bytes, count: int) -> dict[int, list[int]]:
    """A block of call sites (version 4): ids, depths, then every return address as its difference
    from the address at the same depth of the site before it, in byte planes (docs/trace-format.md)."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    ids = np.ascontiguousarray(buf[:4 * count].reshape(4, count).T).view("<u4").reshape(count)
    depths = buf[4 * count:5 * count].astype(np.int64)
    total = int(depths.sum())
    planes = buf[5 * count:5 * count + 8 * total].reshape(8, total)
    deltas = np.ascontiguousarray(planes.T).view("<u8").reshape(total).tolist()
    sites, prev, k = {}, [0] * 64, 0
    for site, depth in zip(ids.tolist(), depths.tolist()):
        frames = []
        for d in range(depth):
            value = (deltas[k] + prev[d]) & 0xFFFFFFFFFFFFFFFF
            frames.append(value)
            prev[d] = value
            k += 1
        for d in range(depth, len(prev)):
            prev[d] = 0
        sites[site] = frames
    return sites


class TraceError(Exception):
    """A trace that cannot be read at all: the message says what and where."""


@dataclass
class Trace:
    path: str
    pid: int
    start_unix_ns: int
    stack_depth: int
    large_threshold: int
    events: np.ndarray                      # EVENT_DTYPE plus "thread", sorted by time
    sample_bytes: int = 0                   # 0: every allocation recorded (see allocation_weights)
    sites: dict[int, list[int]] = field(default_factory=dict)
    site_names: dict[int, str] = field(default_factory=dict)   # sites named by hm_profile_site_name
    phase_names: dict[int, str] = field(default_factory=dict)
    phases: list[dict] = field(default_factory=list)
    iterations: list[tuple[int, int]] = field(default_factory=list)   # (iteration, time_ns)
    modules: list[tuple[int, int, int, str]] = field(default_factory=list)
    complete: bool = False
    execs: list[tuple[int, str]] = field(default_factory=list)   # (time_ns, program) of exec calls
    problems: list[str] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        return not self.complete or bool(self.problems)

    @property
    def sampled(self) -> bool:
        """Whether small allocations were sampled (HM_PROFILE_SAMPLE), so that counts are estimates."""
        return self.sample_bytes > 0

    def allocation_weights(self, sizes: np.ndarray) -> np.ndarray:
        """How many allocations an allocation of each size recorded stands for: 1 when every
        allocation was recorded or when it is at least sample_bytes or large_threshold, else
        1 / (1 - exp(-size / sample_bytes)), the inverse of its chance to be sampled."""
        sizes = np.asarray(sizes, dtype=np.float64)
        if not self.sample_bytes:
            return np.ones(len(sizes))
        every_from = min(self.sample_bytes, self.large_threshold or self.sample_bytes)
        chance = -np.expm1(-np.maximum(sizes, 1.0) / self.sample_bytes)
        return np.where(sizes >= every_from, 1.0, 1.0 / chance)


def _sealed(data: bytes, pos: int) -> int:
    """The length of the version-3 record at pos if its head is plausible and its checksum holds,
    else 0."""
    if pos + RECORD.size > len(data):
        return 0
    rtype, rbytes, crc, _ = RECORD.unpack_from(data, pos)
    if not 1 <= rtype <= 64 or rbytes < RECORD.size or rbytes > MAX_RECORD or pos + rbytes > len(data):
        return 0
    check = zlib.crc32(data[pos + RECORD.size:pos + rbytes], zlib.crc32(data[pos:pos + 8]))
    return rbytes if check == crc else 0


def _next_sealed(data: bytes, start: int) -> int:
    """The position of the first record at or after start whose checksum holds, or -1."""
    for pos in range(start, len(data) - RECORD.size + 1):
        if _sealed(data, pos):
            return pos
    return -1


def read_trace(path: str | os.PathLike) -> Trace:
    path = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc.strerror}") from None
    if len(data) < len(MAGIC) and MAGIC.startswith(data) and data:
        raise TraceError(f"{path}: truncated header: the trace ends after {len(data)} of its {HEADER.size} header "
                         "bytes (the program was stopped as it started)")
    if len(data) < 8 or data[:8] != MAGIC:
        raise TraceError(f"{path}: not a hetmem trace (the file does not start with {MAGIC[:7].decode()})")
    if len(data) < 12:
        raise TraceError(f"{path}: truncated header: the trace ends after {len(data)} of its {HEADER.size} header "
                         "bytes")
    version = struct.unpack_from("<I", data, 8)[0]
    if version not in (1, 2, 3, 4, VERSION):
        raise TraceError(f"{path}: trace format version {version}; this hetmem reads versions 1 to {VERSION} "
                         f"(record it again with this hetmem, or report it with the hetmem that wrote it)")
    if len(data) < HEADER.size:
        raise TraceError(f"{path}: truncated header: the trace ends after {len(data)} of its {HEADER.size} header "
                         "bytes")
    _, _, header_bytes, _, start_unix, pid, depth, large, sample, _ = HEADER.unpack_from(data, 0)
    if version < 5:
        sample = 0  # reserved bytes before
    if header_bytes < HEADER.size or header_bytes > len(data):
        raise TraceError(f"{path}: damaged header: it announces {header_bytes} header bytes")
    trace = Trace(path=path, pid=pid, start_unix_ns=start_unix, stack_depth=depth, large_threshold=large,
                  events=np.zeros(0, dtype=EVENT_DTYPE), sample_bytes=sample)
    blocks, threads = [], []
    decompressor = zstandard.ZstdDecompressor()
    head = RECORD if version >= 3 else RECORD_V2
    pos = header_bytes
    while pos < len(data):
        if pos + head.size > len(data):
            trace.problems.append(f"truncated: the trace ends inside a record head at byte {pos}")
            break
        rtype, rbytes = RECORD_V2.unpack_from(data, pos)
        if version >= 3 and not _sealed(data, pos):
            # Damage or truncation: a later record whose checksum holds tells them apart.
            resume = _next_sealed(data, pos + 1)
            if resume < 0 and pos + rbytes > len(data) and rbytes <= MAX_RECORD:
                trace.problems.append(f"truncated: the trace ends inside a record at byte {pos} (type {rtype}, "
                                      f"{rbytes} bytes announced, {len(data) - pos} present)")
                break
            where = f"bytes {pos}..{resume - 1}" if resume >= 0 else f"bytes {pos}..{len(data) - 1} (the end)"
            trace.problems.append(f"damaged: {where} fail their checksums and were skipped; "
                                  f"{sum(len(b) for b in blocks)} events before them were read"
                                  + (", reading went on after them" if resume >= 0 else ""))
            if resume < 0:
                break
            pos = resume
            continue
        if rbytes < head.size or (version < 3 and rbytes > MAX_RECORD):
            trace.problems.append(f"damaged: the record at byte {pos} announces {rbytes} bytes (type {rtype}); "
                                  f"{sum(len(b) for b in blocks)} events before it were read, the rest skipped")
            break
        if pos + rbytes > len(data):
            trace.problems.append(f"truncated: the trace ends inside a record at byte {pos} (type {rtype}, "
                                  f"{rbytes} bytes announced, {len(data) - pos} present)")
            break
        body = data[pos + head.size:pos + rbytes]
        try:
            if rtype == EVENTS:
                thread, count, packed, _ = EVENTS_HEADER.unpack_from(body, 0)
                raw = decompressor.decompress(body[EVENTS_HEADER.size:EVENTS_HEADER.size + packed],
                                              max_output_size=count * EVENT_DTYPE.itemsize)
                blocks.append(unpack_columns(raw, count))
                threads.append(np.full(count, thread, dtype=np.uint32))
            elif rtype == SITE:
                site, n = SITE_HEADER.unpack_from(body, 0)
                trace.sites[site] = list(struct.unpack_from(f"<{n}Q", body, SITE_HEADER.size))
            elif rtype == SITES:
                count, raw_bytes, packed, _ = SITES_HEADER.unpack_from(body, 0)
                raw = decompressor.decompress(body[SITES_HEADER.size:SITES_HEADER.size + packed],
                                              max_output_size=raw_bytes)
                trace.sites.update(unpack_sites(raw, count))
            elif rtype == SITE_NAME:
                trace.site_names[struct.unpack_from("<I", body, 0)[0]] = body[4:].decode(errors="replace")
            elif rtype == PHASE_NAME:
                pid_ = struct.unpack_from("<I", body, 0)[0]
                trace.phase_names[pid_] = body[4:].decode(errors="replace")
            elif rtype == PHASE:
                word, iteration, begin, end, thread, n = PHASE_HEADER.unpack_from(body, 0)
                objects = [OBJECT.unpack_from(body, PHASE_HEADER.size + i * OBJECT.size) for i in range(n)]
                trace.phases.append({"phase": word & 0xFFFF, "iteration": iteration, "begin_ns": begin,
                                     "end_ns": end, "thread": thread, "objects": objects,
                                     "sampled": version == 1 or bool(word & PHASE_SAMPLED)})
            elif rtype == ITERATION_MARK:
                iteration, _, t = ITERATION.unpack_from(body, 0)
                trace.iterations.append((iteration, t))
            elif rtype == MODULES:
                off = 0
                while off + MODULE.size <= len(body):
                    start, end, bias, n, _ = MODULE.unpack_from(body, off)
                    name = body[off + MODULE.size:off + MODULE.size + n].decode(errors="replace")
                    trace.modules.append((start, end, bias, name))
                    off += MODULE.size + n
            elif rtype == EXEC_MARK:
                t, n, _ = EXEC.unpack_from(body, 0)
                trace.execs.append((t, body[EXEC.size:EXEC.size + n].decode(errors="replace")))
            elif rtype == END:
                trace.complete = True
        except (struct.error, zstandard.ZstdError, ValueError) as exc:
            trace.problems.append(f"record at byte {pos} (type {rtype}) is damaged: {exc}")
        pos += rbytes
    if trace.execs and not trace.complete:
        trace.complete = True  # the process replaced itself; everything before was written out
    if not trace.complete and not trace.problems:
        trace.problems.append("no end record: the program did not stop cleanly (killed, _exit or a crash); "
                              "events still in its buffers are missing")
    if blocks:
        events = np.concatenate(blocks)
        thread = np.concatenate(threads)
        full = np.zeros(len(events), dtype=EVENT_DTYPE.descr + [("thread", "<u4")])
        for name in EVENT_DTYPE.names:
            full[name] = events[name]
        full["thread"] = thread
        trace.events = full[np.argsort(full["time_ns"], kind="stable")]
    else:
        trace.events = np.zeros(0, dtype=EVENT_DTYPE.descr + [("thread", "<u4")])
    trace.iterations.sort(key=lambda it: it[1])
    # Keep one entry per module segment (the map is written at start and at stop).
    trace.modules = sorted(set(trace.modules))
    return trace
