import numpy as np
rng = np.random.default_rng(7)
grid = rng.random((96, 96, 96))
for step in range(8):                     # a 7-point stencil, new arrays every step
    grid = 0.5 * grid + (np.roll(grid, 1, 0) + np.roll(grid, -1, 0) + np.roll(grid, 1, 1)
                         + np.roll(grid, -1, 1) + np.roll(grid, 1, 2) + np.roll(grid, -1, 2)) / 12.0
    spectrum = np.fft.rfftn(grid)
parts = np.empty(0)
for k in range(40):                       # an array grown piece by piece (reallocated)
    parts = np.append(parts, rng.random(20000))
a = rng.random((400, 400))
print(repr(float(grid.sum())), repr(float(np.abs(spectrum).max())), repr(float(parts.sum())),
      repr(float(np.linalg.norm(a @ a))))
