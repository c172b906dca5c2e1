"""The package on CUDA tensors (PyTorch), queued on torch's current stream; skipped
without torch or a GPU. Under fxrun with ranks sharing one GPU, run MPS first.

    fxrun -n 2 -- python -m pytest -q python/tests/test_cuda.py

CUDA_MODULE_LOADING=EAGER is set before torch starts CUDA: with PyTorch's LAZY, torch's
first launch of a kernel (a new dtype's conversion, here) while a ferrocx operation is in
flight stalls it until FERROCX_TIMEOUT (docs/ENV.md)."""
import os

os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
try:
    import pytest

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device", allow_module_level=True)
except ImportError:  # run as a script where pytest is missing (GPU hosts)
    import torch

import ferrocx  # noqa: E402

comm = ferrocx.Communicator.from_env()
me, n = comm.rank, comm.nranks
dev = torch.device("cuda", comm.device if comm.device is not None else 0)


def test_collectives_on_cuda_tensors_on_a_side_stream():
    s = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(s):
        for dt in [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64]:
            x = (torch.arange(1 << 16, device=dev) % 97 + me).to(dt)
            y = comm.all_reduce(x)  # queued on s, the current stream
            g = comm.all_gather(torch.full((1000,), me, dtype=dt, device=dev))
            b = comm.broadcast(torch.full((333,), 7 if me == 0 else -1, dtype=dt, device=dev), root=0)
        s.synchronize()
    comm.device_error()
    want = ((torch.arange(1 << 16, device=dev) % 97) * n + n * (n - 1) // 2).to(torch.int64)
    assert torch.equal(y.to(torch.int64), want)
    assert torch.equal(g.to(torch.int64).cpu(), torch.arange(n).repeat_interleave(1000))
    assert torch.equal(b.to(torch.int64).cpu(), torch.full((333,), 7))


def test_cuda_in_place_and_send_recv():
    x = torch.full((4096,), float(me + 1), device=dev)
    comm.all_reduce(x, out=x)
    torch.cuda.current_stream(dev).synchronize()
    assert torch.all(x == n * (n + 1) / 2)
    y = torch.empty(4096, device=dev)
    if me == 0:
        comm.send(x * 2, 1)
    elif me == 1:
        comm.recv(y, 0)
        torch.cuda.current_stream(dev).synchronize()
        assert torch.all(y == n * (n + 1))
    torch.cuda.synchronize()
    comm.device_error()


def test_sendrecv_on_cuda_tensors_around_the_ring():
    right, left = (me + 1) % n, (me + n - 1) % n
    for count in [2, 1 << 20]:
        x = torch.arange(count, device=dev, dtype=torch.int64) * n + me
        y = torch.full((count,), -1, device=dev, dtype=torch.int64)
        assert comm.sendrecv(x, right, y, left) is y  # queued on the current stream
        torch.cuda.current_stream(dev).synchronize()
        assert torch.equal(y.cpu(), torch.arange(count) * n + left)
    try:  # (no pytest.raises: this file also runs as a script)
        comm.sendrecv(torch.zeros(2, device=dev), right, torch.zeros(2), left)
    except ferrocx.InvalidArgument as e:
        assert "must both be in host memory or both on a GPU" in str(e), e
    else:
        raise AssertionError("a CUDA send with a host receive was accepted")
    comm.device_error()


if __name__ == "__main__":
    test_collectives_on_cuda_tensors_on_a_side_stream()
    test_cuda_in_place_and_send_recv()
    test_sendrecv_on_cuda_tensors_around_the_ring()
    comm.destroy()
    print(f"PASS rank {me}: CUDA tensors checked")
