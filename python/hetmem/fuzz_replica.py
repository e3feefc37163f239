"""Protocol fuzzing of the replica server (``hetmem fuzz-replica``, docs/replica.md).

A `hetmem-replica` server with its default key (made in a home of the fuzzer's own) receives the
versions of a `hetmem-amr` run, then a stream of hostile connections, one at a time:

- **noise**: random bytes (0 to 70,000 of them) with no handshake;
- **wrong key**: a handshake with a key of the right length that is not the server's, then noise;
- **replay**: the nonce and proof of an earlier, successful handshake sent again;
- **keyed noise**: a correct handshake, then random bytes;
- **keyed malformed**: a correct handshake, then one request that is wrong in one way: a hello
  naming another size or tree, a delta before the hello, a delta whose top, root, range count,
  range offset or length lies outside the replica, a delta that breaks off half-way, an unknown
  request, a fetch that stops reading.

Meanwhile a few clients connect and stay silent. Each hostile connection must end (the server
answers with an error or closes) within a few seconds. At the end the server must be alive, its
replica byte-identical to the last version the run committed (fetched through the protocol) and
restorable by `hetmem-amr --restore`, the silent clients dropped once the handshake's deadline has
passed, and the server's resident memory within a bound of where it started.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import re
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from .lib import HetmemError, find_program

NONCE = 32
HANDSHAKE_DEADLINE_S = 10   # the server's (src/persist/replica.cpp: kHandshakeSeconds)
CONNECTION_LIMIT_S = 5.0    # a hostile connection must be over within this
MEMORY_BOUND = 64 << 20     # resident memory the server may gain over the whole fuzz
SILENT_CLIENTS = 4
KINDS = ("noise", "wrong key", "replay", "keyed noise", "keyed malformed")


class Client:
    """One connection speaking the replica protocol (src/persist/replica.h)."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECTION_LIMIT_S)
        self.mode = self.read(1)
        self.server_nonce = self.read(NONCE)

    def read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            piece = self.sock.recv(n - len(out))
            if not piece:
                raise EOFError("closed")
            out += piece
        return out

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def handshake(self, key: bytes, nonce: bytes | None = None, proof: bytes | None = None) -> tuple[bytes, bytes]:
        nonce = nonce or os.urandom(NONCE)
        proof = proof or hmac.new(key, b"hetmem-replica primary" + self.server_nonce + nonce, hashlib.sha256).digest()
        self.send(nonce + proof)
        return nonce, proof

    def status(self) -> int:
        (rc,) = struct.unpack("<i", self.read(4))
        if rc != 0:
            (n,) = struct.unpack("<I", self.read(4))
            self.message = self.read(n).decode(errors="replace")
        return rc

    def authenticated(self, key: bytes) -> bool:
        nonce, _ = self.handshake(key)
        if self.status() != 0:
            return False
        theirs = self.read(32)
        return hmac.compare_digest(theirs, hmac.new(key, b"hetmem-replica server" + nonce + self.server_nonce,
                                                    hashlib.sha256).digest())

    def hello(self, content: bytes, capacity: int) -> int:
        self.send(b"H" + content.ljust(16, b"\0")[:16] + struct.pack("<Q", capacity))
        rc = self.status()
        if rc == 0:
            self.read(8)
        return rc

    def fetch(self) -> tuple[int, bytes]:
        self.send(b"F")
        if self.status() != 0:
            raise HetmemError(f"the replica server refused a fetch: {self.message}")
        capacity, used = struct.unpack("<QQ", self.read(16))
        return capacity, self.read(used)

    def finish(self) -> str:
        """Waits for the server to answer or close: 'answered', 'closed' or 'held' (a finding)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        deadline = time.monotonic() + CONNECTION_LIMIT_S
        got = b""
        try:
            while time.monotonic() < deadline:
                piece = self.sock.recv(65536)
                if not piece:
                    return "answered" if got else "closed"
                got += piece
        except socket.timeout:
            return "held"
        except OSError:
            return "closed"
        finally:
            self.sock.close()
        return "held"


def delta(sequence: int, root: int, top: int, ranges: list[tuple[int, int]], data: bytes = b"") -> bytes:
    out = b"D" + struct.pack("<QQQI", sequence, root, top, len(ranges))
    for off, n in ranges:
        out += struct.pack("<QQ", off, n)
    return out + data


def malformed(rng: random.Random, content: bytes, capacity: int, top: int) -> tuple[str, bytes, bool]:
    """One request wrong in one way: (what, bytes after the handshake, whether a hello precedes it)."""
    header = 4096
    choices = [
        ("hello, another size", b"H" + content.ljust(16, b"\0") + struct.pack("<Q", capacity + 4096), False),
        ("hello, a huge size", b"H" + content.ljust(16, b"\0") + struct.pack("<Q", rng.choice([2**63, 2**64 - 1, 2**51])), False),
        ("hello, a tiny size", b"H" + content.ljust(16, b"\0") + struct.pack("<Q", rng.randrange(0, 4096)), False),
        ("hello, another tree", b"H" + os.urandom(15) + b"\0" + struct.pack("<Q", capacity), False),
        ("hello, cut short", b"H" + content[:rng.randrange(0, 16)], False),
        ("delta before the hello", delta(99, 0, top, [(header, 8)], b"x" * 8), False),
        ("delta, top past the pool", delta(99, 0, capacity + 4096, [(header, 8)], b"x" * 8), True),
        ("delta, root outside", delta(99, top + 64, top, [(header, 8)], b"x" * 8), True),
        ("delta, 2^32-1 ranges", b"D" + struct.pack("<QQQIQQ", 99, 0, top, 2**32 - 1, header, 8) + b"x" * 8, True),
        ("delta, range past the top", delta(99, 0, top, [(top, 1 << 20)]), True),
        ("delta, range in the header", delta(99, 0, top, [(0, 64)], b"x" * 64), True),
        ("delta, a 2^63-byte range", delta(99, 0, top, [(header, 2**63)]), True),
        ("delta, offset + length wraps", delta(99, 0, top, [(2**64 - 8, 16)]), True),
        ("delta broken off", delta(99, 0, top, [(header, top - header)], os.urandom(rng.randrange(0, top - header))), True),
        ("unknown request", bytes([rng.choice([c for c in range(256) if c not in b"HDF"])]) + os.urandom(rng.randrange(0, 64)), True),
        ("fetch, not read", b"F", True),
    ]
    return rng.choice(choices)


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def fuzz(connections: int, seed: int, say=lambda *_: None) -> dict:
    rng = random.Random(seed)
    replica_bin, amr_bin = find_program("hetmem-replica"), find_program("hetmem-amr")
    with tempfile.TemporaryDirectory(prefix="hetmem-fuzz-replica-") as tmp:
        tmp = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
        env["HOME"] = str(tmp / "home")
        (tmp / "home").mkdir()
        log = tmp / "server.log"  # a file, not a pipe: the server logs each connection it ends
        with open(log, "w") as err:
            server = subprocess.Popen([replica_bin, "--pool", str(tmp / "replica.pool")], env=env,
                                      stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            result = _against(server, tmp, env, amr_bin, connections, rng, say)
        finally:
            server.kill()
            server.wait()
        result["server_log_lines"] = len(log.read_text(errors="replace").splitlines())
        return result


def _against(server, tmp: Path, env: dict, amr_bin: str, connections: int, rng: random.Random, say) -> dict:
    line = ""
    while " port " not in line:
        line = server.stdout.readline()
        if not line:
            raise HetmemError(f"hetmem-replica did not start: {(tmp / 'server.log').read_text().strip()[-300:]}")
    port = int(line.split(" port ")[1].split(",")[0])
    where = f"tcp://127.0.0.1:{port}"
    key = (tmp / "home" / ".hetmem" / "replica.key").read_bytes()
    run = subprocess.run([amr_bin, "--steps", "3", "--level", "4", "--pool", str(tmp / "run.pool"), "--replica", where,
                          "--progress", "0"], capture_output=True, text=True, env=env, timeout=300)
    if run.returncode != 0:
        raise HetmemError(f"hetmem-amr could not send its versions to the replica: {run.stderr.strip()[-300:]}")

    def fetch() -> tuple[int, bytes]:
        c = Client(port)
        if not c.authenticated(key):
            raise HetmemError("the replica server refused its own key")
        out = c.fetch()
        c.sock.close()
        return out

    capacity, before = fetch()
    found = re.search(rb"octree[23]\.[^\0]{0,7}", before[:4096])
    if not found:
        raise HetmemError("the replica's header names no tree")
    content = found.group(0)
    top = len(before)
    memory_start = resident_bytes(server.pid)
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(SILENT_CLIENTS)]
    silent_since = time.monotonic()
    recorded = Client(port)
    replay = recorded.handshake(key)
    recorded.sock.close()

    counts = {k: {"connections": 0, "answered": 0, "closed": 0} for k in KINDS}
    findings: list[dict] = []
    started = time.monotonic()
    for i in range(connections):
        kind = KINDS[rng.randrange(len(KINDS))]
        what = kind
        try:
            c = Client(port)
            if kind == "noise":
                c.send(os.urandom(rng.randrange(0, 70000)))
            elif kind == "wrong key":
                c.handshake(os.urandom(32))
                c.send(os.urandom(rng.randrange(0, 4096)))
            elif kind == "replay":
                c.handshake(key, *replay)
            else:
                if not c.authenticated(key):
                    raise HetmemError("a correct handshake was refused")
                if kind == "keyed noise":
                    c.send(os.urandom(rng.randrange(0, 70000)))
                else:
                    what, request, needs_hello = malformed(rng, content, capacity, top)
                    if needs_hello and c.hello(content, capacity) != 0:
                        raise HetmemError(f"the replica's own hello was refused: {c.message}")
                    c.send(request)
            ending = c.finish()
        except (OSError, EOFError) as e:  # the server closed while we were still sending: an ending too
            ending = "closed" if not isinstance(e, socket.timeout) else "held"
        counts[kind]["connections"] += 1
        if ending == "held":
            findings.append({"connection": i, "kind": what, "why": f"not over within {CONNECTION_LIMIT_S:g} s"})
        else:
            counts[kind][ending] += 1
        if server.poll() is not None:
            findings.append({"connection": i, "kind": what, "why": f"the server ended (status {server.returncode}): "
                             + (tmp / "server.log").read_text(errors="replace").strip()[-300:]})
            break
        if (i + 1) % 1000 == 0:
            say(f"  {i + 1}/{connections} connections, {len(findings)} findings")
    seconds = time.monotonic() - started

    alive = server.poll() is None
    unchanged = restored = False
    if alive:
        capacity_after, after = fetch()
        unchanged = capacity_after == capacity and after == before
        if not unchanged:
            findings.append({"kind": "replica", "why": "the replica's committed bytes changed"})
        back = subprocess.run([amr_bin, "--restore", "--steps", "1", "--level", "4", "--pool", str(tmp / "back.pool"),
                               "--replica", where, "--progress", "0"], capture_output=True, text=True, env=env,
                              timeout=300)
        restored = back.returncode == 0
        if not restored:
            findings.append({"kind": "replica", "why": "hetmem-amr --restore failed: " + back.stderr.strip()[-300:]})
    else:
        findings.append({"kind": "server", "why": "the server is not alive at the end"})
    memory_end = resident_bytes(server.pid) if alive else 0
    if alive and memory_end > memory_start + MEMORY_BOUND:
        findings.append({"kind": "memory", "why": f"resident memory grew by {(memory_end - memory_start) >> 20} MiB "
                         f"(bound {MEMORY_BOUND >> 20} MiB)"})
    # The silent clients: dropped once the handshake's deadline passed.
    time.sleep(max(0.0, silent_since + HANDSHAKE_DEADLINE_S + 2 - time.monotonic()))
    waited = time.monotonic() - silent_since
    silent_dropped = None
    if alive:
        silent_dropped = 0
        for s in silent:
            s.settimeout(1.0)
            try:
                s.recv(64)  # the greeting
                silent_dropped += s.recv(1) == b""
            except OSError:
                silent_dropped += 1
        if silent_dropped < len(silent):
            findings.append({"kind": "silent", "why": f"{len(silent) - silent_dropped} of {len(silent)} silent "
                             f"clients still connected after {waited:.0f} s"})
    for s in silent:
        s.close()
    return {"connections": connections, "seconds": seconds, "counts": counts, "findings": findings,
            "alive": alive, "replica_unchanged": unchanged, "restored": restored, "replica_bytes": top,
            "memory_start_bytes": memory_start, "memory_end_bytes": memory_end, "memory_bound_bytes": MEMORY_BOUND,
            "silent_clients": len(silent), "silent_dropped": silent_dropped, "silent_waited_s": waited}


def main(connections: int, seed: int, out: str, console) -> int:
    from rich.table import Table
    console.print(f"hetmem fuzz-replica: {connections} hostile connections to a keyed hetmem-replica (seed {seed})")
    result = fuzz(connections, seed, console.print)
    table = Table(title="Connections by kind (each must end with an answer or a close)", title_justify="left")
    for col in ("kind", "connections", "answered with an error", "closed"):
        table.add_column(col)
    for kind, c in result["counts"].items():
        table.add_row(kind, str(c["connections"]), str(c["answered"]), str(c["closed"]))
    console.print(table)
    grown = (result["memory_end_bytes"] - result["memory_start_bytes"]) / 2**20
    silent = ("not judged (no server)" if result["silent_dropped"] is None
              else f"{result['silent_dropped']} of {result['silent_clients']} dropped after "
              f"{result['silent_waited_s']:.0f} s")
    console.print(f"server alive: {'yes' if result['alive'] else 'NO'}; replica unchanged: "
                  f"{'yes' if result['replica_unchanged'] else 'NO'}; restored: {'yes' if result['restored'] else 'NO'}; "
                  f"resident memory {grown:+.1f} MiB (bound {MEMORY_BOUND >> 20} MiB); silent clients: {silent}; "
                  f"{result['seconds']:.1f} s")
    for f in result["findings"][:20]:
        console.print(f"FINDING: {f['kind']}: {f['why']}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"results: {out}")
    return 1 if result["findings"] else 0
