"""The workloads `hetmem compare` runs under each policy: the reference applications and any
program with a plan. Each says how to run it for N iterations with the run summary written to a
file, and how to describe it.

Adding an application: a class with `describe(doc)` and `command(iterations, tmp, tag, summary)`,
and one row in WORKLOADS (the first word of `hetmem compare`'s workload arguments selects it).
"""

from __future__ import annotations

import os
import shutil

from .lib import HetmemError, Library, find_program, preload_value


class PicWorkload:
    """The PIC code: a preset or input file with key=value overrides; each step is an iteration."""

    def __init__(self, args: list[str]):
        self.args = args or ["preset:L1"]

    def describe(self, doc: dict) -> str:
        return f"hetmem-pic {self.args[0]}: {doc['cells']} cells, {doc['particles']} particles, " \
               f"{doc['threads']} thread(s)"

    def command(self, iterations: int, tmp: str, tag: str, summary: str) -> tuple[list[str], dict]:
        return ([find_program("hetmem-pic"), *self.args, f"max_step={iterations}", "diag.progress=0",
                 f"diag.directory={tmp}/out-{tag}", f"diag.summary={summary}", "diag.interval=0"], {})


class MgWorkload:
    """hetmem-mg (`hetmem compare mg [key=value ...]`): each time step (domain update + pressure solve)
    is an iteration; the preload library it links writes the run summary."""

    def __init__(self, args: list[str]):
        self.args = args or ["preset=S"]

    def describe(self, doc: dict) -> str:
        return f"hetmem-mg {' '.join(self.args)}"

    def command(self, iterations: int, tmp: str, tag: str, summary: str) -> tuple[list[str], dict]:
        return [find_program("hetmem-mg"), *self.args, f"mg.steps={iterations}"], {"HM_SUMMARY": summary}


class PlanWorkload:
    """Any program with a plan (`hetmem plan`), run unchanged through the preload library; its
    iterations are those it marks with hm_iteration_next, or those inferred at a function's calls
    (--iteration-at); with time windows the whole run is compared."""

    def __init__(self, plan: str, cmd: list[str], iteration_env: dict | None = None):
        self.iteration_env = iteration_env or {}
        if not cmd:
            raise HetmemError("--plan needs a program: hetmem compare --plan PLAN -- PROGRAM ARGS")
        if not shutil.which(cmd[0]):
            raise HetmemError(f"{cmd[0]}: program not found (or not executable)")
        self.plan = os.path.abspath(plan)
        if problem := Library().check_rules(self.plan):
            raise HetmemError(problem)
        self.cmd = cmd

    def describe(self, doc: dict) -> str:
        return f"{' '.join(self.cmd)} with plan {self.plan}"

    def command(self, iterations: int, tmp: str, tag: str, summary: str) -> tuple[list[str], dict]:
        return self.cmd, {"LD_PRELOAD": preload_value(os.environ.get("LD_PRELOAD")), "HM_RULES": self.plan,
                          "HM_SUMMARY": summary, **self.iteration_env}


# The applications `hetmem compare NAME [key=value ...]` runs; without a name, the PIC code.
WORKLOADS = {"pic": PicWorkload, "mg": MgWorkload}


def workload_for(args: list[str]):
    """The workload named by the first argument (pic, mg), the PIC code otherwise (a preset or
    input file and key=value overrides)."""
    if args and args[0] in WORKLOADS:
        return WORKLOADS[args[0]](args[1:])
    return PicWorkload(args)
