"""hetmem-pic from the command line: a run with openPMD output that passes openPMD_check_h5 and
reads back with openpmd-api, the energy log, and bad input."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))
PIC = BUILD / "apps" / "pic" / "hetmem-pic"


def pic(*args, env_extra=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_")}
    env.update(env_extra or {})
    return subprocess.run([str(PIC), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def test_single_species_background_is_explicit_and_the_log_is_full_precision(tmp_path):
    out = tmp_path / "diags"
    r = pic("preset:L0", "max_step=4", "diag.interval=0", f"diag.directory={out}", "diag.progress=2")
    assert r.returncode == 0, r.stderr
    assert "neutralising background" in r.stdout
    lines = (out / "energy.csv").read_text().splitlines()
    errors = [float(line.split(",")[-1]) for line in lines[1:] if line.split(",")[-1]]
    assert len(errors) == 2 and max(errors) < 1e-10, errors  # was 0.889 with the background left out
    total = lines[-1].split(",")[-2]
    assert len(total.replace(".", "").replace("-", "").split("e")[0].lstrip("0")) >= 15, total


def test_run_writes_valid_openpmd_and_energy_log(tmp_path):
    out = tmp_path / "diags"
    r = pic("preset:langmuir", "max_step=4", "diag.interval=2", f"diag.directory={out}", "diag.progress=2")
    assert r.returncode == 0, r.stderr
    assert "step      4/4" in r.stdout and "particle-steps/s" in r.stdout
    assert "gather+push+deposit" in r.stdout and "field solve" in r.stdout
    files = sorted(p.name for p in out.glob("openpmd_*.h5"))
    assert files == ["openpmd_000002.h5", "openpmd_000004.h5"]
    lines = (out / "energy.csv").read_text().splitlines()
    assert lines[0] == "step,time_s,field_J,kinetic_electrons_J,kinetic_positrons_J,total_J,charge_error"
    assert len(lines) == 1 + 5
    errors = [float(line.split(",")[-1]) for line in lines[1:] if line.split(",")[-1]]
    assert len(errors) == 2 and max(errors) < 1e-11, errors  # steps 2 and 4: Esirkepov keeps Gauss's law
    check = shutil.which("openPMD_check_h5") or str(Path(sys.executable).parent / "openPMD_check_h5")
    if not Path(check).exists():
        pytest.skip("openPMD_check_h5 is not installed (pip install openpmd-validator)")
    for f in files:
        for mode in ([], ["--EDPIC"]):  # openPMD, and its ED-PIC extension's attributes
            v = subprocess.run([check, "-i", str(out / f), *mode], capture_output=True, text=True)
            assert v.returncode == 0 and "0 Errors" in v.stdout, mode + [v.stdout + v.stderr]
    io = pytest.importorskip("openpmd_api")
    series = io.Series(str(out / "openpmd_%06T.h5"), io.Access.read_only)
    assert sorted(series.iterations) == [2, 4]
    it = series.iterations[4]
    ex = it.meshes["E"]["x"].load_chunk()
    x = it.particles["electrons"]["position"]["x"].load_chunk()
    series.flush()
    assert ex.shape == (32, 32, 32) and x.shape == (32 * 32 * 32,)
    assert abs(ex).max() > 0 and (x >= 0).all() and (x < 20e-6).all()
    assert list(it.meshes["E"]["x"].position) == [0.0, 0.0, 0.5]
    # The leapfrog's momenta lag the positions by half a step.
    assert it.particles["electrons"]["momentum"].time_offset == pytest.approx(-0.5 * it.dt, rel=1e-6)
    assert it.particles["electrons"]["position"].time_offset == 0


@pytest.mark.parametrize("args,message", [
    (["amr.n_cel=8 8 8"], "unknown key 'amr.n_cel' (did you mean 'amr.n_cell'?)"),
    (["warpx.cfl=1.0"], "needs cfl < 1"),
    (["warpx.cfl=1e-300"], "at least 1e-4"),
    (["amr.n_cell=16 9223372036854775807 16"], "from 1 to 16777216"),
    (["electrons.u_th=-1"], "electrons.u_th = '-1': a thermal spread"),
    (["electrons.u_th=1e308"], "at most 1e6 in magnitude"),
    (["particles.species_names=ions"], "'electrons' is not one of particles.species_names"),
    (["electrons.num_particles_per_cell_each_dim=0 0 0"], "with zero particles per cell"),
    (["hetmem.tile_size=5 5 5"], "not divisible by the tile size"),
    (["amr.n_cell=-4 8 8"], "three whole numbers of cells from 1"),
    (["diag.directory=/proc/hetmem-cannot"], "cannot be created or written"),
    (["nonsense"], "command-line overrides are key=value"),
    (["hetmem.seed=abc"], "hetmem.seed = 'abc': a whole number"),
    (["diag.progress=often"], "diag.progress = 'often'"),
    (["hetmem.strict=yes"], "hetmem.strict = 'yes': 1"),
    (["diag.interval=2.5"], "diag.interval = '2.5'"),
    (["hetmem.tile_size=4.5 8 8"], "three positive whole numbers of cells"),
    (["electrons.num_particles_per_cell_each_dim=1.5 2 2"], "three whole numbers"),
])
def test_bad_input_is_named(tmp_path, args, message):
    r = pic("preset:L0", "max_step=1", f"diag.directory={tmp_path}", *args)
    assert r.returncode == 2
    assert message in r.stderr, r.stderr


def test_problem_that_does_not_fit_a_strict_budget_says_how_much(tmp_path):
    r = pic("preset:L0", "max_step=1", "hetmem.strict=1", f"diag.directory={tmp_path}",
            env_extra={"HM_FAST_BUDGET": "4M"})
    assert r.returncode == 2
    assert "does not fit tier 'dram'" in r.stderr and "MiB short" in r.stderr, r.stderr


def test_missing_input_file(tmp_path):
    r = pic(str(tmp_path / "none.in"))
    assert r.returncode == 2 and "cannot read the input file" in r.stderr


def test_a_directory_as_input_is_named(tmp_path):
    r = pic(str(tmp_path))
    assert r.returncode == 2 and "a directory, not an input file" in r.stderr, r.stderr


def test_emulated_run_reports_charges_and_the_emulators_own_time(tmp_path):
    """Everything on the emulated tier: the PIC code declares its accesses, so the charges come from
    declarations (none from sampling), and the zero-charge profile counts the same volume for free."""
    args = ("preset:L0", "max_step=3", f"diag.directory={tmp_path}", "hetmem.fields=capacity",
            "hetmem.particles=capacity")
    r = pic(*args, env_extra={"HM_TIERS": "capacity=emul:optane"})
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if "emul:optane (emulated)" in l)
    declared = float(line.split("declared ")[1].split(" s")[0])
    sampled = float(line.split("sampled ")[1].split(" s")[0])
    assert declared > 0 and sampled == 0, line
    assert "emulator's own time" in r.stdout
    r = pic(*args, env_extra={"HM_TIERS": "capacity=emul:dram"})
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if "emul:dram (emulated)" in l)
    assert "0.000 s device time charged" in line and "bookkeeping only" in line, line
    assert " GiB read" in line


def test_a_full_fast_budget_does_not_stop_the_run(tmp_path):
    """Preferred placement with a fast budget of a quarter of the footprint: tiles and the iteration
    arena's chunks fall back to the capacity tier instead of aborting."""
    r = pic("preset:L0", "max_step=2", f"diag.directory={tmp_path}", "diag.progress=0",
            env_extra={"HM_TIERS": "capacity=emul:optane", "HM_FAST_BUDGET": "6M"})
    assert r.returncode == 0, r.stderr
    assert "particle-step" in r.stdout


def _series_arrays(path):
    """E, B, and every species' positions, momenta and ids of a one-iteration openPMD file."""
    io = pytest.importorskip("openpmd_api")
    series = io.Series(str(path), io.Access.read_only)
    (step, it), = series.iterations.items()
    arrays = {}
    for rec in ("E", "B"):
        for comp in ("x", "y", "z"):
            chunk = it.meshes[rec][comp].load_chunk()
            series.flush()
            arrays[f"{rec}{comp}"] = chunk.copy()
    for name, sp in it.particles.items():
        for rec in ("position", "momentum"):
            for comp in ("x", "y", "z"):
                chunk = sp[rec][comp].load_chunk()
                series.flush()
                arrays[f"{name}.{rec}{comp}"] = chunk.copy()
        ids = sp["id"][io.Mesh_Record_Component.SCALAR].load_chunk()
        series.flush()
        arrays[f"{name}.id"] = ids.copy()
    series.close()
    return step, arrays


def test_restart_continues_bit_for_bit(tmp_path):
    import numpy as np
    whole, first, second = tmp_path / "whole", tmp_path / "first", tmp_path / "second"
    common = ["preset:langmuir", "diag.progress=0", "diag.checkpoint_interval=3"]
    r = pic(*common, "max_step=6", f"diag.directory={whole}")
    assert r.returncode == 0, r.stderr
    r = pic(*common, "max_step=3", f"diag.directory={first}")
    assert r.returncode == 0, r.stderr
    checkpoint = first / "checkpoints" / "checkpoint_000003.h5"
    r = pic(*common, "max_step=6", f"diag.directory={second}", f"restart={checkpoint}")
    assert r.returncode == 0 and "restarted from" in r.stdout and "at step 3" in r.stdout, r.stderr
    step_a, a = _series_arrays(whole / "checkpoints" / "checkpoint_000006.h5")
    step_b, b = _series_arrays(second / "checkpoints" / "checkpoint_000006.h5")
    assert step_a == step_b == 6 and a.keys() == b.keys()
    for key in a:
        assert np.array_equal(a[key], b[key]), key  # bitwise: 3 + restart + 3 steps = 6 steps
    last = (whole / "energy.csv").read_text().splitlines()[-1]
    assert (second / "energy.csv").read_text().splitlines()[-1] == last
    # A checkpoint is an openPMD file too.
    check = shutil.which("openPMD_check_h5") or str(Path(sys.executable).parent / "openPMD_check_h5")
    if Path(check).exists():
        v = subprocess.run([check, "-i", str(checkpoint)], capture_output=True, text=True)
        assert v.returncode == 0 and "0 Errors" in v.stdout, v.stdout


def test_bad_checkpoints_are_refused_before_any_output(tmp_path):
    first = tmp_path / "first"
    r = pic("preset:langmuir", "max_step=2", "diag.progress=0", "diag.checkpoint_interval=2", f"diag.directory={first}")
    assert r.returncode == 0, r.stderr
    good = first / "checkpoints" / "checkpoint_000002.h5"
    out = tmp_path / "out"
    out.mkdir()
    (out / "energy.csv").write_text("an earlier run's log\n")
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    cases = [
        (damaged, "damaged"),
        (tmp_path / "missing.h5", "cannot be read"),
    ]
    for path, message in cases:
        r = pic("preset:langmuir", "max_step=4", "diag.progress=0", f"diag.directory={out}", f"restart={path}")
        assert r.returncode == 2 and message in r.stderr, (path, r.stderr)
    r = pic("preset:langmuir", "max_step=4", "amr.n_cell=16 16 16", "diag.progress=0", f"diag.directory={out}",
            f"restart={good}")
    assert r.returncode == 2 and "another problem" in r.stderr, r.stderr
    r = pic("preset:langmuir", "max_step=2", "diag.progress=0", f"diag.directory={out}", f"restart={good}")
    assert r.returncode == 2 and "nothing to run" in r.stderr
    assert (out / "energy.csv").read_text() == "an earlier run's log\n", "no output was overwritten"
    # A write cut short leaves only PATH.partial; the previous checkpoint is untouched and loads.
    (first / "checkpoints" / "checkpoint_000004.h5.partial").write_bytes(b"cut short")
    r = pic("preset:langmuir", "max_step=3", "diag.progress=0", f"diag.directory={tmp_path / 'again'}",
            f"restart={good}")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("override, message", [
    ("electrons.num_particles_per_cell_each_dim=10000000000 1 1", "num_particles_per_cell_each_dim"),
    ("electrons.num_particles_per_cell_each_dim=1e10 1e10 1e10", "num_particles_per_cell_each_dim"),
    ("electrons.num_particles_per_cell_each_dim=100 100 100", "the tiers can hold"),
    ("electrons.num_particles_per_cell_each_dim=1000 1000 1000", "the tiers can hold"),
    ("electrons.density=1e300", "omega_p dt"),
])
def test_impossible_problems_are_refused_before_anything_is_allocated(tmp_path, override, message):
    out = tmp_path / "out"
    start = time.monotonic()
    r = pic("preset:L0", override, "max_step=2", "diag.progress=0", f"diag.directory={out}")
    assert r.returncode == 2 and message in r.stderr, r.stdout + r.stderr
    assert time.monotonic() - start < 10, "refused only after trying"
    assert not (out / "energy.csv").exists(), "nothing is written for a problem that does not start"


def test_a_run_whose_energy_is_not_finite_stops_there_with_its_log_kept(tmp_path):
    """The input check refuses momenta that overflow the energy; a checkpoint can still carry one
    (here one particle's u set to 1e300 in the file): the run stops at that step, log kept."""
    h5py = pytest.importorskip("h5py")
    first = tmp_path / "first"
    r = pic("preset:L0", "max_step=1", "diag.progress=0", "diag.checkpoint_interval=1", f"diag.directory={first}")
    assert r.returncode == 0, r.stderr
    checkpoint = first / "checkpoints" / "checkpoint_000001.h5"
    with h5py.File(checkpoint, "r+") as f:
        (it,) = f["data"].keys()
        ux = f["data"][it]["hetmem_restart"]["species_0"]["ux"]
        ux[0] = 1e300
    out = tmp_path / "out"
    r = pic("preset:L0", "max_step=5", "diag.progress=0", f"restart={checkpoint}", f"diag.directory={out}")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "non-finite at step 2" in r.stderr, r.stderr  # the first step after the restart
    lines = (out / "energy.csv").read_text().splitlines()
    assert len(lines) == 2 and ",inf," in lines[1], lines


def test_doubtful_but_runnable_problems_are_warned_about_with_the_number(tmp_path):
    """omega_p dt between 0.2 and 2 (resolved, not accurate) and a cell far above the Debye length
    over a plasma period or more are warned about, as WarpX warns; the short default runs are not."""
    common = ("diag.interval=0", f"diag.directory={tmp_path}", "diag.progress=0")
    r = pic("preset:L0", "electrons.density=3e26", "max_step=1", *common)
    assert r.returncode == 0, r.stderr
    assert "warning: omega_p dt = 1.16: the plasma frequency is resolved (< 2) but not accurately" in r.stderr
    r = pic("preset:L0", "max_step=100", *common)
    assert r.returncode == 0, r.stderr
    assert "warning: electrons: the cell (6.25e-07 m) is 11.8 Debye lengths" in r.stderr, r.stderr
    r = pic("preset:L0", "max_step=100", "electrons.u_th=0.2", *common)
    assert "Debye" not in r.stderr, "resolved: 0.59 Debye lengths per cell"
    r = pic("preset:L0", "max_step=4", *common)
    assert "warning" not in r.stderr, "the default problem is a fraction of a plasma period"


def test_the_vectorized_kernel_can_be_held_to_a_narrower_instruction_set(tmp_path):
    args = ("preset:L0", "max_step=1", "diag.progress=0", f"diag.directory={tmp_path}")
    r = pic(*args, "hetmem.simd_target=sse4")
    assert r.returncode == 0 and "particle kernel: simd (SSE4)" in r.stdout, r.stderr + r.stdout[-500:]
    r = pic(*args, "hetmem.simd_target=neon")
    assert r.returncode != 0 and "hetmem.simd_target = 'neon': not a target the kernel is built for" in r.stderr
    assert "this CPU runs: " in r.stderr and "sse4" in r.stderr, r.stderr
    r = pic(*args, "hetmem.kernel=scalar", "hetmem.simd_target=avx2")
    assert r.returncode != 0 and "is for the vectorized kernel" in r.stderr, r.stderr
