"""A numpy heat-diffusion stencil whose large arrays live on the capacity tier and whose working
array is on the fast tier (docs/python.md). Run: .venv/bin/python examples/numpy_stencil.py

The two history arrays (read once per step, written once) go to the capacity tier; the array the
stencil updates in place stays fast. Each step declares its traffic, so the emulated capacity tier
charges it, and hetmem's accounting shows where the bytes are."""

import time

import numpy as np

import hetmem.arrays as ha

N, STEPS = 160, 10

with ha.placed("capacity"):
    history = [np.zeros((N, N, N)) for _ in range(2)]      # large, touched once per step
u = ha.zeros((N, N, N), tier="fast")                        # the working array
u[N // 2, N // 2, N // 2] = 1000.0

t0 = time.perf_counter()
for step in range(STEPS):
    ha.access(u, "rw")
    u[1:-1, 1:-1, 1:-1] += 0.1 * (u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1] + u[1:-1, :-2, 1:-1]
                                  + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6 * u[1:-1, 1:-1, 1:-1])
    target = history[step % 2]
    ha.access(target, "w")
    target[...] = u
elapsed = time.perf_counter() - t0

print(f"{STEPS} steps of a {N}^3 stencil in {elapsed:.2f} s; heat conserved: {u.sum():.6f} (started at 1000)")
for array, name in ((u, "u"), (history[0], "history[0]")):
    print(f"{name}: {array.nbytes >> 20} MiB on {ha.tier_of(array)}")
for tier, s in ha.stats().items():
    print(f"tier {tier}: {s['in_use'] >> 20} MiB in use")
