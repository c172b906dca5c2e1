# 8-byte all_reduce from Python with and without out=, 3 rounds of 50000 calls each:
#   PYTHONPATH=<package dir> fxrun -n 2 --bind core -- python3 py-calls.py
import time, numpy as np, ferrocx
comm = ferrocx.Communicator.from_env()
x = np.array([1, 2], dtype=np.float32); y = np.empty_like(x)
def t(label, f, n=50000):
    for _ in range(1000): f()
    t0 = time.perf_counter()
    for _ in range(n): f()
    dt = (time.perf_counter() - t0) / n * 1e6
    if comm.rank == 0: print(f"{label}: {dt:.2f} us")
for r in range(3):
    t("all_reduce(x, out=y)", lambda: comm.all_reduce(x, out=y))
    t("all_reduce(x)", lambda: comm.all_reduce(x))
comm.destroy()
