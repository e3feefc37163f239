"""hetmem-amr from the command line: a run persists every step and restores exactly what it
persisted, --restore continues from the last step, and bad input gets a clear message."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
AMR = BUILD / "apps" / "amr" / "hetmem-amr"


def amr(*args, home=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    if home:
        env["HOME"] = str(home)
    return subprocess.run([str(AMR), *args], capture_output=True, text=True, env=env, timeout=300)


def test_run_persists_every_step_and_restore_continues(tmp_path):
    pool, out = tmp_path / "amr.pool", tmp_path / "amr.json"
    r = amr("--dim", "2", "--steps", "6", "--level", "5", "--spheres", "2", "--pool", str(pool),
            "--json", str(out), "--progress", "3")
    assert r.returncode == 0, r.stderr
    assert "step     3/6" in r.stdout and "step     6/6" in r.stdout
    assert "restore returned exactly the persisted tree" in r.stdout
    for routine in ("construct", "refine/coarsen", "balance", "persist", "restore"):
        assert routine in r.stdout
    figures = json.loads(out.read_text())
    assert figures["version"] == 8, "version 1 from create, 2 after construction, one per step"
    assert figures["leaves"] > 4 ** 3
    assert set(figures["seconds"]) == {"construct", "refine_coarsen", "balance", "solve", "persist", "restore"}
    assert figures["tiers"]["emulated"] is False and figures["tiers"]["pool_writes"] > 0

    r = amr("--dim", "2", "--steps", "2", "--level", "5", "--spheres", "2", "--pool", str(pool), "--restore",
            "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "restored" in r.stdout and "version 8 (step 6)" in r.stdout
    assert json.loads(out.read_text())["version"] == 10


def test_bad_input_is_named():
    r = amr("--dim", "4")
    assert r.returncode == 2 and "--dim wants an integer in 2..3, got '4'" in r.stderr
    r = amr("--radius", "0.7")
    assert r.returncode == 2 and "--radius wants 0 < R < 0.5" in r.stderr
    r = amr("--frobnicate")
    assert r.returncode == 2 and "unknown option '--frobnicate'" in r.stderr
    r = amr("--steps")
    assert r.returncode == 2 and "--steps needs a value" in r.stderr
    r = amr("--threads", "3")
    assert r.returncode == 2 and "--threads wants an integer in 1..2, got '3'" in r.stderr


def test_two_threads_run_the_same_steps_and_restore_them(tmp_path):
    """--threads 2 (balance's ripple and the restore's check on two threads) makes the same trees
    step by step as one thread: the same leaves and the same family writes, and each run's pool
    restores on either thread count."""
    runs = {}
    for threads in ("1", "2"):
        pool, out = tmp_path / f"t{threads}.pool", tmp_path / f"t{threads}.json"
        r = amr("--steps", "4", "--level", "7", "--threads", threads, "--pool", str(pool), "--json", str(out))
        assert r.returncode == 0, r.stderr
        assert "restore returned exactly the persisted tree" in r.stdout
        runs[threads] = json.loads(out.read_text())
        r = amr("--steps", "1", "--level", "7", "--threads", "1" if threads == "2" else "2", "--pool", str(pool),
                "--restore")
        assert r.returncode == 0 and "version 6 (step 4)" in r.stdout, r.stdout + r.stderr
    assert runs["1"]["leaves"] == runs["2"]["leaves"] > 10000
    assert runs["1"]["tiers"]["pool_writes"] == runs["2"]["tiers"]["pool_writes"]


def test_paths_are_checked_before_the_first_step(tmp_path):
    """A pool that is a directory, a replica that is the pool itself, a JSON file that cannot be
    written: each named at once with status 2, before any step runs or any file is made."""
    pool = tmp_path / "p.pool"
    cases = [
        (["--pool", str(tmp_path)], "is a directory; name the pool file"),
        (["--pool", str(pool), "--replica", str(tmp_path / ".." / tmp_path.name / "p.pool")], "is the pool itself"),
        (["--pool", str(pool), "--json", str(tmp_path / "missing" / "t.json")], "cannot be written (no directory"),
        (["--pool", str(pool), "--json", str(tmp_path)], "is a directory; name a file"),
    ]
    for args, message in cases:
        r = amr("--dim", "2", "--steps", "2", "--level", "4", *args)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        assert "step" not in r.stdout and "constructed" not in r.stdout
        assert not pool.exists(), "nothing was created"


def test_c0_is_never_silently_on_a_slower_tier(tmp_path):
    env_budget = dict(os.environ, HM_FAST_BUDGET="64K")
    r = subprocess.run([str(AMR), "--dim", "2", "--steps", "1", "--level", "4", "--fast-kib", "1024", "--pool",
                        str(tmp_path / "p.pool")], capture_output=True, text=True, env=env_budget, timeout=300)
    assert r.returncode != 0 and "no room for C0" in r.stderr and "HM_FAST_BUDGET" in r.stderr, r.stderr
    assert not (tmp_path / "p.pool").exists()


def test_restore_refuses_missing_pool_and_other_dimension(tmp_path):
    r = amr("--restore", "--pool", str(tmp_path / "none.pool"))
    assert r.returncode == 1 and "cannot be opened" in r.stderr
    pool = tmp_path / "quad.pool"
    assert amr("--dim", "2", "--steps", "1", "--level", "3", "--pool", str(pool)).returncode == 0
    r = amr("--restore", "--dim", "3", "--pool", str(pool))
    assert r.returncode == 2 and "holds a 2D tree; run with --dim 2" in r.stderr


def test_restore_refuses_a_damaged_family_by_name_and_leaves_the_pool_as_it_was(tmp_path):
    """A flipped byte in a committed family (past the 4 KiB header and the root object): --restore
    refuses before any step, naming the pool and the family, and writes nothing."""
    pool = tmp_path / "amr.pool"
    r = amr("--dim", "2", "--steps", "2", "--level", "5", "--pool", str(pool), "--pool-mib", "2", "--progress", "0")
    assert r.returncode == 0, r.stderr
    with open(pool, "r+b") as f:
        f.seek(4096 + 128 * 5 + 20)  # the sixth 128-byte slot: a family of this tree
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x5A]))
    damaged = pool.read_bytes()
    r = amr("--restore", "--steps", "1", "--pool", str(pool))
    assert r.returncode == 1, r.stdout
    assert "hetmem-amr: --restore: persistent pool" in r.stderr and "a family fails its seal" in r.stderr, r.stderr
    assert "step" not in r.stdout
    assert pool.read_bytes() == damaged


def test_a_long_run_reuses_pool_space(tmp_path):
    # 100 steps of a 22,000-leaf tree fit in 2 MiB: each persist frees what only the previous
    # version used, so the pool holds about two versions, not a hundred.
    pool = tmp_path / "small.pool"
    r = amr("--steps", "100", "--level", "7", "--pool", str(pool), "--pool-mib", "2", "--progress", "0")
    assert r.returncode == 0, r.stderr
    assert "final: version 102" in r.stdout


def test_full_pool_stops_with_the_last_version_intact(tmp_path):
    pool = tmp_path / "small.pool"
    r = amr("--steps", "5", "--level", "8", "--pool", str(pool), "--pool-mib", "1", "--progress", "0")
    assert r.returncode == 1 and "is full" in r.stderr and "the committed version is intact" in r.stderr
    r = amr("--restore", "--steps", "1", "--level", "5", "--pool", str(pool), "--progress", "0")
    assert r.returncode == 2 and "--level 5 differs from the run's 8 kept in" in r.stderr, r.stderr
    r = amr("--restore", "--steps", "1", "--pool", str(pool), "--progress", "0")
    assert ": version 1 (its run stopped before constructing the tree" in r.stdout, r.stdout + r.stderr
    assert r.returncode == 1 and "is full" in r.stderr, "the same problem, the same pool: full again"


def test_restore_continues_the_runs_own_problem(tmp_path):
    """--restore takes --level, --spheres, --radius, --shape and --dim from the pool: the tree is
    not re-adapted to the defaults in one step."""
    pool = tmp_path / "own.pool"
    r = amr("--dim", "2", "--steps", "3", "--level", "7", "--spheres", "3", "--radius", "0.1", "--shape", "spheres",
            "--pool", str(pool), "--progress", "1")
    assert r.returncode == 0, r.stderr
    leaves = int(r.stdout.split("step     3/3: ")[1].split(" leaves")[0])
    r = amr("--restore", "--steps", "1", "--pool", str(pool), "--progress", "1")
    assert r.returncode == 0, r.stderr
    after = int(r.stdout.split("step     4/4: ")[1].split(" leaves")[0])
    assert abs(after - leaves) < 0.1 * leaves, (leaves, after)
    r = amr("--restore", "--steps", "1", "--spheres", "3", "--pool", str(pool))
    assert r.returncode == 0, "an option given with the run's own value is accepted"
    for flag, value in (("--spheres", "2"), ("--radius", "0.2"), ("--shape", "droplet"), ("--dim", "3")):
        r = amr("--restore", "--steps", "1", flag, value, "--pool", str(pool))
        assert r.returncode == 2 and flag in r.stderr and ("differs from the run's" in r.stderr or "2D" in r.stderr), \
            (flag, r.stderr)


def test_a_kill_in_the_first_100_ms_never_leaves_a_pool_nobody_can_use(tmp_path):
    """hetmem-amr killed at any instant of its first 100 ms (creating the pool, constructing the
    tree, the first steps): the path holds nothing or a pool with a committed version, and a restart
    script's --restore then either continues it or starts afresh, never refuses."""
    pool = tmp_path / "k.pool"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    outcomes = []
    for i in range(26):
        for stale in (pool, Path(str(pool) + ".creating")):
            stale.unlink(missing_ok=True)
        p = subprocess.Popen([str(AMR), "--steps", "100", "--level", "7", "--pool", str(pool), "--progress", "0"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        time.sleep(i * 0.004)
        p.kill()
        p.wait()
        if not pool.exists() and not Path(str(pool) + ".creating").exists():
            # Killed before it made anything: there is no run to continue (--restore says the pool
            # is missing, as for a mistyped path) and a new run starts.
            r = amr("--steps", "1", "--pool", str(pool), "--progress", "0")
            outcomes.append("not started")
        else:
            r = amr("--restore", "--steps", "1", "--pool", str(pool), "--progress", "0")
            outcomes.append("afresh" if "starting afresh" in r.stdout or "constructed" in r.stdout else "continued")
        assert r.returncode == 0, (i * 4, "ms", r.stdout, r.stderr)
        assert "restore returned exactly the persisted tree" in r.stdout
        assert not Path(str(pool) + ".creating").exists()
    assert "continued" in outcomes, ("some kills came after the first version", outcomes)
    print(outcomes)


def test_an_existing_pool_is_never_overwritten_unasked(tmp_path):
    pool = tmp_path / "run.pool"
    assert amr("--dim", "2", "--steps", "2", "--level", "3", "--pool", str(pool)).returncode == 0
    r = amr("--dim", "2", "--steps", "2", "--level", "3", "--pool", str(pool))
    assert r.returncode == 2 and "exists; --restore continues it, --overwrite starts over" in r.stderr
    r = amr("--dim", "2", "--restore", "--steps", "1", "--level", "3", "--pool", str(pool))
    assert "version 4 (step 2)" in r.stdout, "the refused run left the pool as it was"
    r = amr("--dim", "2", "--steps", "1", "--level", "3", "--pool", str(pool), "--overwrite")
    assert r.returncode == 0 and "final: version 3," in r.stdout
    r = amr("--restore", "--overwrite", "--pool", str(pool))
    assert r.returncode == 2 and "exclude each other" in r.stderr


def test_baselines_and_the_droplet_run_and_restore(tmp_path):
    for store in ("incore", "sqlite"):
        out = tmp_path / f"{store}.json"
        r = amr("--store", store, "--steps", "12", "--level", "5", "--snapshot-every", "5",
                "--pool", str(tmp_path / store), "--progress", "0", "--json", str(out))
        assert r.returncode == 0, r.stderr
        assert "restore returned exactly the persisted tree" in r.stdout
        assert ("snapshot" if store == "incore" else "sqlite commit") in r.stdout
        assert json.loads(out.read_text())["store"] == store
    assert (tmp_path / "incore.snap").exists() and (tmp_path / "sqlite.sqlite").exists()
    r = amr("--store", "sqlite", "--restore", "--pool", str(tmp_path / "x"))
    assert r.returncode == 2 and "need --store pm" in r.stderr
    r = amr("--shape", "droplet", "--steps", "5", "--level", "5", "--pool", str(tmp_path / "drop.pool"),
            "--replica", str(tmp_path / "drop.replica"), "--progress", "0")
    assert r.returncode == 0, r.stderr
    assert "replica" in r.stdout and (tmp_path / "drop.replica").exists()
    r = amr("--shape", "bubble")
    assert r.returncode == 2 and "--shape is spheres or droplet" in r.stderr


def test_octree_benchmark_quick(tmp_path):
    out = tmp_path / "octree.json"
    r = subprocess.run([sys.executable, "-m", "hetmem", "bench", "octree", "--quick", "--out", str(out)],
                       capture_output=True, text=True, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    figures = json.loads(out.read_text())
    core = figures["core"]
    assert core["restart"]["speedup"] > 1 and core["persist"]["refine_changed_fraction"] <= 0.05
    assert {t["tree"] for t in core["adapt"]} == {"sphere", "droplet", "random"}
    for tree in core["adapt"]:
        if "same_tree_as_p4est" in tree:  # p4est built in
            assert tree["same_tree_as_p4est"], f"{tree['tree']}: the same balanced tree as p4est's"
            assert tree["balance_again_2_threads_octants_per_s"] > 0
            # Both first refinements go into memory new to them: neither finds its pages mapped.
            assert tree["refine_new_pages"] > 0 and tree["p4est_refine_new_pages"] > 0, tree["tree"]
    for name, ranks in figures["balance_on_ranks"].items():  # p4est on 2 MPI ranks, where mpirun is
        assert ranks["same_tree"], f"{name}: p4est on 2 ranks balances to the same tree"
        assert ranks["verdict"] in ("MET", "NOT MET", "cannot tell") and len(ranks["p4est_balance_s"]) == 5
    assert set(figures["per_step"]) == {"PM-octree (nvbm emulated)", "in-core + snapshot every 10",
                                        "SQLite B-tree (Etree-like)"}
    assert "dynamic transformation" in r.stdout and "C0 merged out " in r.stdout
    for shape, t in figures["transformation"].items():
        # The census: the features' prediction (the interface one step ahead) is what the step writes.
        assert t["step_writes"] > 0 and 0 < t["c0_share_bound"] <= 1, shape
        assert t["hit_rate"] is not None and t["hit_rate"] > 0.9, (shape, t["hit_rate"])
        assert t["c0_share_with"] > 0, shape


def start_replica(tmp_path, *args):
    """hetmem-replica with a home of its own (where its default key is made)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home)}
    server = subprocess.Popen([str(BUILD / "apps" / "replica" / "hetmem-replica"), "--pool",
                               str(tmp_path / "replica.pool"), *args], stdout=subprocess.PIPE, text=True, env=env)
    lines = [server.stdout.readline()]
    while " port " not in lines[-1] and lines[-1]:
        lines.append(server.stdout.readline())
    assert " port " in lines[-1], lines
    return server, "".join(lines), "tcp://127.0.0.1:" + lines[-1].split(" port ")[1].split(",")[0]


def test_a_replica_on_another_host_restores_a_lost_pool(tmp_path):
    # hetmem-replica stands in for the other host; localhost carries the deltas. With no options it
    # makes its default key, which a primary sharing the home directory finds by itself.
    server, line, where = start_replica(tmp_path)
    home = tmp_path / "home"
    key = home / ".hetmem" / "replica.key"
    try:
        assert "made the key file" in line and "primaries must hold the key" in line, line
        assert key.stat().st_mode & 0o777 == 0o600 and key.stat().st_size == 32
        assert (home / ".hetmem").stat().st_mode & 0o777 == 0o700
        pool = tmp_path / "run.pool"
        r = amr("--steps", "5", "--level", "5", "--pool", str(pool), "--replica", where, "--progress", "0")
        assert r.returncode == 1 and "requires a key" in r.stderr, "another home, no key: " + r.stderr
        pool.unlink(missing_ok=True)
        r = amr("--steps", "5", "--level", "5", "--pool", str(pool), "--replica", where, "--progress", "0", home=home)
        assert r.returncode == 0, r.stderr
        assert "KiB sent" in r.stdout
        pool.unlink()
        r = amr("--restore", "--steps", "1", "--level", "5", "--pool", str(pool), "--replica", where,
                "--progress", "0", home=home)
        assert r.returncode == 0, r.stderr
        assert ": version 7 (step 5)" in r.stdout, r.stdout
        # The fetch sent the used part only: the 1 GiB pool comes back sparse and owner-only.
        st = pool.stat()
        assert st.st_size == 1 << 30 and st.st_blocks * 512 < 64 << 20, (st.st_size, st.st_blocks)
        assert st.st_mode & 0o777 == 0o600
    finally:
        server.terminate()
        server.wait(timeout=10)
    # The key stays: a second start uses it rather than making another.
    server, line, where = start_replica(tmp_path)
    server.terminate()
    server.wait(timeout=10)
    assert "made the key file" not in line and str(key) in line, line
    r = amr("--steps", "1", "--pool", str(tmp_path / "other.pool"), "--replica", "tcp://127.0.0.1:1")
    assert r.returncode == 1 and "cannot be reached" in r.stderr
    replica = str(BUILD / "apps" / "replica" / "hetmem-replica")
    r = subprocess.run([replica, "--port", "70000", "--pool", "x"], capture_output=True, text=True)
    assert r.returncode == 2 and "--port wants 0..65535" in r.stderr
    r = subprocess.run([replica, "--listen", "0.0.0.0:0", "--unauthenticated", "--pool", "x"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "reachable from other hosts" in r.stderr and "--unauthenticated" in r.stderr, r.stderr
    r = subprocess.run([replica, "--unauthenticated", "--key", "k", "--pool", "x"], capture_output=True, text=True)
    assert r.returncode == 2 and "contradict" in r.stderr, r.stderr
    r = subprocess.run([replica, "--listen", "nonsense", "--pool", "x"], capture_output=True, text=True)
    assert r.returncode == 2 and "ADDRESS:PORT" in r.stderr


def test_an_unauthenticated_replica_server_only_when_asked_and_only_on_loopback(tmp_path):
    server, line, where = start_replica(tmp_path, "--unauthenticated")
    try:
        assert "UNAUTHENTICATED" in line and "127.0.0.1" in line, line
        assert not (tmp_path / "home" / ".hetmem").exists(), "no key is made for a server that uses none"
        r = amr("--steps", "2", "--level", "4", "--pool", str(tmp_path / "run.pool"), "--replica", where,
                "--progress", "0", home=tmp_path / "nowhere")
        assert r.returncode == 0 and "KiB sent" in r.stdout, r.stderr
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_keyed_replica_server_on_every_interface(tmp_path):
    key = tmp_path / "replica.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)
    replica = str(BUILD / "apps" / "replica" / "hetmem-replica")
    r = subprocess.run([replica, "--listen", "0.0.0.0:0", "--key", str(key), "--pool", "x"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "readable by others" in r.stderr and "chmod 600" in r.stderr
    key.chmod(0o600)
    server, line, where = start_replica(tmp_path, "--listen", "0.0.0.0:0", "--key", str(key))
    try:
        assert "primaries must hold the key" in line, line
        pool = tmp_path / "run.pool"
        r = amr("--steps", "2", "--level", "4", "--pool", str(pool), "--replica", where, "--progress", "0",
                home=tmp_path / "nowhere")
        assert r.returncode == 1 and "requires a key" in r.stderr and "HM_REPLICA_KEY" in r.stderr, r.stderr
        env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
        env["HM_REPLICA_KEY"] = str(key)
        r = subprocess.run([str(AMR), "--steps", "2", "--level", "4", "--pool", str(pool), "--replica", where,
                            "--progress", "0", "--overwrite"], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0 and "KiB sent" in r.stdout, r.stderr
    finally:
        server.terminate()
        server.wait(timeout=10)
