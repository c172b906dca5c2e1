"""Per-call cost of the Python package: 8-byte all_reduce (float32 × 2), host memory,
into a preallocated output (out=). fxrun -n 2 python3 allreduce_8b.py [iters]"""
import sys
import time

import numpy as np

import ferrocx

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
comm = ferrocx.Communicator.from_env()
x = np.array([1, 2], dtype=np.float32)
y = np.empty_like(x)
for _ in range(1000):
    comm.all_reduce(x, out=y)
t = time.perf_counter()
for _ in range(iters):
    comm.all_reduce(x, out=y)
dt = time.perf_counter() - t
if comm.rank == 0:
    print(f"Python all_reduce 8 B: {dt / iters * 1e6:.2f} us per call ({iters} calls)")
comm.destroy()
