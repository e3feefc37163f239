"""The README's quick tour, run as written: every command line of its block, in order, in one shell,
on small sizes. The substitutions below are the only changes, each for size or for the machine the
tests run on; the benchmark lines (minutes each, measured by their own runs) are checked to be
commands the `hetmem` command accepts, not run."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("HETMEM_BUILD_DIR", ROOT / "build"))

# (what the README says, what the test runs): sizes, and root's flag for Open MPI.
SMALLER = [
    ("preset:L1", "preset:L0"), ("preset:L2", "preset:L0"), ("preset=W", "preset=S"),
    ("hetmem compare ", "hetmem compare --repeat 1 --iterations 3 "),
    ("--cases 300", "--cases 10"), ("tiers --validate", "tiers --validate --quick"),
    ("/var/tmp/hm.pool:4G", "$TOUR/hm.pool:256M"), ("/var/tmp/hm.pool", "$TOUR/hm.pool"),
    ("write_config('/tmp/wx')", "write_config('$TOUR/wx')"),
]


def tour_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## A quick tour\s+```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no quick tour block"
    lines = []
    for raw in block.group(1).splitlines():
        command = re.split(r"\s{2,}#\s", raw, maxsplit=1)[0].strip()  # the comment after the command
        if command:
            lines.append(command)
    return lines


def _hetmem_args(line: str) -> list[str] | None:
    words = shlex.split(line)
    for i, w in enumerate(words):
        if w.endswith("bin/hetmem"):
            return words[i + 1:]
    return None


def test_every_command_of_the_quick_tour_runs_as_written(tmp_path):
    lines = tour_lines()
    assert len(lines) > 20, lines
    sys.path.insert(0, str(ROOT / "python"))
    from hetmem.cli import build_parser
    script = ["set -euo pipefail", f"export TOUR={tmp_path} TMPDIR={tmp_path}", f"cd {tmp_path}"]
    benchmarks = []
    for line in lines:
        args = _hetmem_args(line)
        if args and args[0] == "bench":
            build_parser().parse_args(args)  # a command the parser accepts (exits 2 otherwise)
            benchmarks.append(line)
            continue
        for written, runs in SMALLER:
            line = line.replace(written, runs)
        if line.startswith("mpirun ") and os.geteuid() == 0:
            line = line.replace("mpirun ", "mpirun --allow-run-as-root ", 1)
        line = re.sub(r"(?<![\w/])\.venv/bin/", f"{ROOT}/.venv/bin/", line)
        line = re.sub(r"(?<![\w/])build/", f"{BUILD}/", line)
        line = re.sub(r"(?<![\w/])examples/", f"{ROOT}/examples/", line)
        script += [f"echo {shlex.quote('== ' + line[:100])} >&2", line]
    assert benchmarks, "the tour shows no benchmark"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HM_") and k != "PYTHONPATH"}
    r = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, env=env, timeout=1200)
    ran = [l for l in r.stderr.splitlines() if l.startswith("== ")]
    assert r.returncode == 0, (f"the tour stopped at {ran[-1] if ran else 'its start'}:\n{r.stderr[-3000:]}\n"
                               f"its output:\n{r.stdout[-2000:]}")
    assert len(ran) == len(lines) - len(benchmarks)
