"""numpy arrays on hetmem's tiers (hetmem.arrays, NEP 49): placed blocks, per-tier accounting,
arrays that keep their allocator after the block (in-place resize, freed in another thread),
moves at the same address, classes, and bad names refused with the known ones listed."""

import os
import threading
import time

import numpy as np
import pytest

from hetmem import HetmemError

os.environ.setdefault("HM_CALIBRATION", os.path.join(os.path.dirname(__file__), "..", "..", "build", "calibration.test"))
ha = pytest.importorskip("hetmem.arrays")


@pytest.fixture(scope="module", autouse=True)
def built():
    try:
        ha._extension()
    except HetmemError as exc:
        pytest.skip(str(exc))


def in_use(tier):
    return ha.stats()[tier]["in_use"]


def test_arrays_made_in_a_block_live_on_its_tier_and_are_counted():
    before = in_use("emul:optane")
    with ha.placed("capacity"):
        a = np.zeros((1000, 1000))
        small = np.arange(10.0)
    outside = np.ones(1000)
    assert ha.tier_of(a) == "emul:optane" and ha.tier_of(small) == "emul:optane"
    assert ha.tier_of(outside) is None, "numpy's own allocator outside the block"
    assert in_use("emul:optane") - before >= a.nbytes
    assert a.sum() == 0 and small[9] == 9.0
    del a, small
    assert in_use("emul:optane") - before < 8000 * 1000, "freed to hetmem"


def test_arrays_keep_their_allocator_after_the_block():
    with ha.placed("capacity"):
        a = np.arange(100000, dtype=np.float64)
    a.resize((200000,), refcheck=False)   # in place, outside the block: the array's own handler
    assert ha.tier_of(a) == "emul:optane" and a[99999] == 99999.0
    before = in_use("emul:optane")
    t = threading.Thread(target=lambda: a.__setitem__(slice(None), 1.0))
    t.start()
    t.join()
    holder = [a]
    del a
    t = threading.Thread(target=holder.clear)   # freed by another thread
    t.start()
    t.join()
    # That thread may keep the block for reuse (a scratch array of 1.6 MB) until it ends, a moment
    # after join returns (its key destructors run then).
    deadline = time.monotonic() + 10
    while before - in_use("emul:optane") < 200000 * 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert before - in_use("emul:optane") >= 200000 * 8


def test_helpers_move_access_and_classes():
    f = ha.zeros((256, 256), tier="fast")
    assert ha.tier_of(f) == "dram" and f.shape == (256, 256)
    e = ha.empty(100000, tier="capacity")
    e[:] = 3.0
    ha.move(e, "fast")
    assert ha.tier_of(e) == "dram" and e[-1] == 3.0, "same address, same data, another tier"
    ha.access(e, "rw")
    cls = ha.define_class("test.arrays.hot", "hot")
    with ha.placed(cls):
        h = np.zeros(100000)
    assert ha.tier_of(h) is not None
    with pytest.raises(HetmemError, match="only arrays of 64 KiB"):
        ha.move(ha.zeros(10, tier="capacity"), "fast")
    with pytest.raises(HetmemError, match="not allocated by hetmem"):
        ha.move(np.zeros(100000), "fast")


def test_bad_names_are_refused_with_the_known_ones():
    with pytest.raises(HetmemError, match=r"unknown tier 'nosuch' \(known: dram"):
        with ha.placed("nosuch"):
            pass
    with pytest.raises(HetmemError, match="tier name"):
        with ha.placed(1.5):
            pass
    with pytest.raises(HetmemError, match="r, w or rw"):
        ha.access(np.zeros(4), "x")
    with pytest.raises(HetmemError, match="class kind 'warm'"):
        ha.define_class("x", "warm")


def test_the_numpy_example_runs_with_its_arrays_where_it_says():
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env["HM_CALIBRATION"] = str(root / "build" / "calibration.test")
    r = subprocess.run([sys.executable, str(root / "examples" / "numpy_stencil.py")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "heat conserved: 1000.000000" in r.stdout
    assert "u: 31 MiB on dram" in r.stdout and "history[0]: 31 MiB on emul:optane" in r.stdout


def test_the_profiler_names_an_array_by_the_python_line_that_made_it(tmp_path):
    """Under `hetmem profile`, arrays made through hetmem.arrays are recorded under their Python file
    and line (not libpython's C frames), past numpy's and hetmem.arrays' own Python code; the plan
    says such a site is placed in the program, not by a rule."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    prog = tmp_path / "prog.py"
    prog.write_text("import numpy as np\nimport hetmem.arrays as ha\n"
                    "with ha.placed('capacity'):\n    big = np.zeros((1000, 1000))\n"
                    "f = ha.zeros(300000, tier='fast')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env["HM_CALIBRATION"] = str(root / "build" / "calibration.test")
    env["PYTHONPATH"] = str(root / "python")
    trace = tmp_path / "p.hmtrace"
    hetmem = [sys.executable, "-m", "hetmem"]
    r = subprocess.run(hetmem + ["profile", "-o", str(trace), "--", sys.executable, str(prog)], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(hetmem + ["report", str(trace), "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    import json
    sites = json.loads(r.stdout)["sites"]
    named = {(s["file"], s["line"]) for s in sites if s["function"] == "<python>"}
    assert (str(prog), 4) in named and (str(prog), 5) in named, named
    plan = tmp_path / "p.plan"
    r = subprocess.run(hetmem + ["plan", str(trace), "-o", str(plan)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"site {prog}" not in plan.read_text(), "a named site is not a rule target"


def test_small_arrays_reuse_a_block_of_their_tier_and_a_thread_gives_its_blocks_back():
    """The handler keeps a few freed small blocks per size and thread (as numpy's own handler
    does; up to 8 KiB, 64 KiB of those over 1 KiB at most), and a few scratch blocks of 64 KiB to
    4 MiB by page count (as the C library's heap reuses them): an array dropped and made again gets
    the same block, on the same tier; a thread that ends returns its blocks to hetmem."""
    def churn(out):
        with ha.placed("capacity"):
            a = np.empty(7, dtype=np.uint8)
            first = a.ctypes.data
            del a
            b = np.zeros(5, dtype=np.uint8)     # same 16-byte bucket, zeroed although reused
            out.append((first, b.ctypes.data, ha.tier_of(b), int(b.sum())))
            scratch = np.empty(1 << 20, dtype=np.uint8)    # a scratch array: kept by page count
            where = scratch.ctypes.data
            del scratch
            again = np.ones((1 << 20) - 100, dtype=np.uint8)
            out.append((where, again.ctypes.data, ha.tier_of(again), int(again.sum())))
            del again
            kept = [np.empty(n, dtype=np.uint8) for n in range(1, 1025)]
            out.append(in_use("emul:optane"))
            del kept
            mid = np.empty(4000, dtype=np.uint8)        # up to 8 KiB: buckets of 256 bytes
            where = mid.ctypes.data
            del mid
            again = np.zeros(3900, dtype=np.uint8)
            out.append((where, again.ctypes.data, ha.tier_of(again), int(again.sum())))
            del again
            held = in_use("emul:optane")
            many = [np.empty(8192 - 256 * (i % 8), dtype=np.uint8) for i in range(40)]  # 8 sizes, 1.2 MiB
            del many
            out.append(in_use("emul:optane") - held)
            del b

    before = in_use("emul:optane")
    seen = []
    t = threading.Thread(target=churn, args=(seen,))
    t.start()
    t.join()
    first, again, tier, total = seen[0]
    assert again == first and tier == "emul:optane" and total == 0
    where, again, tier, total = seen[1]
    assert again == where and tier == "emul:optane" and total == (1 << 20) - 100
    assert seen[2] - before >= sum(range(1, 1025)), "the small arrays were on the tier"
    where, again, tier, total = seen[3]
    assert again == where and tier == "emul:optane" and total == 0
    # 4 blocks of each of the 8 sizes would be 230 KiB: the thread keeps at most 64 KiB of arrays over
    # 1 KiB, which the heap holds in blocks of its size classes (at most 1.25x a request's size).
    assert 0 < seen[4] <= 80 << 10, f"the thread kept {seen[4]} bytes of arrays over 1 KiB"
    # Thread.join returns when Python is done with the thread, a moment before the C library runs
    # the thread's key destructors (which give the blocks back).
    deadline = time.monotonic() + 10
    while in_use("emul:optane") != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert in_use("emul:optane") == before, "the thread's cached blocks went back to hetmem when it ended"


def test_a_refused_array_says_why_beside_numpys_memory_error():
    """numpy's MemoryError carries no reason; the handler says hetmem's on stderr."""
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    script = ("import numpy as np, hetmem.arrays as ha\n"
              "try:\n"
              "    with ha.placed('fast'):\n"
              "        np.ones(10**8)\n"
              "except MemoryError:\n"
              "    print('MemoryError')\n")
    env = dict(os.environ, PYTHONPATH=str(root / "python"), HM_TIERS="capacity=emul:cxl", HM_FAST_BUDGET="64M",
               HM_CAPACITY_BUDGET="64M")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "MemoryError", r.stdout + r.stderr
    assert "hetmem.arrays: an array of 800000000 bytes was refused: " in r.stderr and "budget" in r.stderr, r.stderr
