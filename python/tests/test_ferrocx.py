"""The Python package under fxrun (every rank runs these tests, in the same order):

    fxrun -n 3 -- python -m pytest -q python/tests

Every collective on NumPy arrays with results checked, in place and not,
non-blocking calls, send/recv, sendrecv, split, and errors as exceptions with ferrocx's
message."""
import re

import numpy as np
import pytest

import ferrocx

comm = ferrocx.Communicator.from_env()
me, n = comm.rank, comm.nranks


def test_all_reduce_every_type_and_op():
    for dt in [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64]:
        x = np.arange(10, dtype=dt) + me
        y = comm.all_reduce(x)
        assert y.dtype == x.dtype
        np.testing.assert_array_equal(y, (np.arange(10) * n + n * (n - 1) // 2).astype(dt))
    x = np.full(7, me + 1, dtype=np.float64)
    np.testing.assert_array_equal(comm.all_reduce(x, op="max"), np.full(7, n))
    np.testing.assert_array_equal(comm.all_reduce(x, op="min"), np.full(7, 1))
    np.testing.assert_allclose(comm.all_reduce(x, op="avg"), np.full(7, (n + 1) / 2))


def test_all_reduce_in_place():
    x = np.full(1000, me, dtype=np.int32)
    out = comm.all_reduce(x, out=x)
    assert out is x
    np.testing.assert_array_equal(x, np.full(1000, n * (n - 1) // 2))


def test_all_gather_reduce_scatter_all_to_all():
    x = np.full(5, me, dtype=np.float32)
    np.testing.assert_array_equal(comm.all_gather(x), np.repeat(np.arange(n, dtype=np.float32), 5))
    s = np.arange(4 * n, dtype=np.int64)
    np.testing.assert_array_equal(comm.reduce_scatter(s), np.arange(4 * me, 4 * me + 4) * n)
    a = np.array([me * 10 + p for p in range(n) for _ in range(3)], dtype=np.int32)
    np.testing.assert_array_equal(comm.all_to_all(a), np.array([p * 10 + me for p in range(n) for _ in range(3)]))


def test_rooted():
    root = n - 1
    b = np.full(6, 42 if me == root else -1, dtype=np.int32)
    np.testing.assert_array_equal(comm.broadcast(b, root=root), np.full(6, 42))
    r = comm.reduce(np.full(3, 2, dtype=np.int32), root=0)
    if me == 0:
        np.testing.assert_array_equal(r, np.full(3, 2 * n))
    g = comm.gather(np.full(2, me, dtype=np.uint8), root=1)
    if me == 1:
        np.testing.assert_array_equal(g, np.repeat(np.arange(n, dtype=np.uint8), 2))
    sc = np.repeat(np.arange(n, dtype=np.float64), 4) * 3
    np.testing.assert_array_equal(comm.scatter(sc, root=0), np.full(4, me * 3.0))


def test_nonblocking():
    x = np.full(100_000, 1.0, dtype=np.float32)
    out, req = comm.all_reduce(x, nonblocking=True)
    req.wait()
    assert req.test()
    np.testing.assert_array_equal(out, np.full(100_000, float(n), dtype=np.float32))


def test_every_collective_into_given_outputs():
    """Host arrays go straight to the native layer (no Python-side DLPack work,
    a new output made there): the same results with `out=` as without, in
    place and not, blocking and not."""
    x = np.arange(4 * n, dtype=np.float32) + me
    cases = [
        ("all_reduce", {}, 4 * n), ("all_gather", {}, 4 * n * n), ("reduce_scatter", {}, 4),
        ("broadcast", {"root": n - 1}, 4 * n), ("reduce", {"root": 0}, 4 * n),
        ("all_to_all", {}, 4 * n), ("gather", {"root": 1}, 4 * n * n), ("scatter", {"root": 0}, 4),
    ]
    for name, kw, out_len in cases:
        f = getattr(comm, name)
        want = f(x, **kw)
        out = np.full(out_len, -7, dtype=np.float32)
        assert f(x, out=out, **kw) is out
        if name not in ("reduce", "gather") or me == kw["root"]:
            np.testing.assert_array_equal(out, want, err_msg=name)
        got, req = f(x, out=np.zeros(out_len, dtype=np.float32), nonblocking=True, **kw)
        req.wait()
        if name not in ("reduce", "gather") or me == kw["root"]:
            np.testing.assert_array_equal(got, want, err_msg=f"{name} nonblocking")
    # Not exactly NumPy's array (a subclass): its device is asked, and a new
    # output is made on the Python side.
    class Sub(np.ndarray):
        pass

    xs = x.view(Sub)
    np.testing.assert_array_equal(comm.all_reduce(xs), comm.all_reduce(x))
    out = np.zeros(4 * n * n, dtype=np.float32).view(Sub)
    assert comm.all_gather(xs, out=out) is out
    np.testing.assert_array_equal(out, comm.all_gather(x))
    y = x.copy()
    comm.broadcast(y, out=y, root=0)
    np.testing.assert_array_equal(y, np.arange(4 * n, dtype=np.float32))
    with pytest.raises(ferrocx.InvalidArgument, match="all_reduce: send is float on cpu, receive int32 on cpu"):
        comm.all_reduce(x, out=np.zeros(4 * n, dtype=np.int32))
    with pytest.raises(ferrocx.InvalidArgument, match="__dlpack__"):
        comm.all_reduce(x, out=[0.0] * (4 * n))
    with pytest.raises(ferrocx.InvalidArgument, match="not contiguous"):
        comm.all_reduce(x, out=np.zeros((4 * n, 2), dtype=np.float32)[:, 0])
    # Still in step after the errors (each failed before anything moved).
    np.testing.assert_array_equal(comm.all_reduce(np.ones(2, dtype=np.int32)), np.full(2, n))


def test_send_recv_ring():
    x = np.arange(1000, dtype=np.int64) + me
    y = np.empty_like(x)
    right, left = (me + 1) % n, (me + n - 1) % n
    if me % 2 == 0:
        comm.send(x, right)
        comm.recv(y, left)
    else:
        comm.recv(y, left)
        comm.send(x, right)
    np.testing.assert_array_equal(y, np.arange(1000) + left)


def test_sendrecv_around_the_ring():
    right, left = (me + 1) % n, (me + n - 1) % n
    # 8 bytes (shm-coll's rings) and 4 MiB (the core's path): every rank sends
    # first, which blocking sends of 4 MiB could not all do at once.
    for count in [1, 1 << 19]:
        x = np.arange(count, dtype=np.int64) * n + me
        y = np.full(count, -1, dtype=np.int64)
        assert comm.sendrecv(x, right, y, left) is y
        np.testing.assert_array_equal(y, np.arange(count) * n + left)
    # With itself: a copy.
    y = np.zeros(3, dtype=np.int32)
    comm.sendrecv(np.array([me, 7, 9], dtype=np.int32), me, y, me)
    np.testing.assert_array_equal(y, [me, 7, 9])
    with pytest.raises(ferrocx.InvalidArgument, match=rf"rank {me}: sendrecv: .*recv: peer rank {n + 1} out of range"):
        comm.sendrecv(np.zeros(2, dtype=np.int32), right, np.zeros(2, dtype=np.int32), n + 1)


def test_split():
    sub = comm.split(me % 2, -me)
    members = sorted((r for r in range(n) if r % 2 == me % 2), reverse=True)
    assert sub.nranks == len(members) and members[sub.rank] == me
    np.testing.assert_array_equal(sub.all_gather(np.array([me], dtype=np.int32)), np.array(members))
    comm.barrier()
    sub.destroy()
    with pytest.raises(ferrocx.Destroyed, match="destroyed"):
        sub.all_reduce(np.zeros(1, dtype=np.int32))
    assert comm.split(-1, 0) is None if me == 0 else comm.split(0, 0) is not None


def test_errors_carry_the_message():
    with pytest.raises(ferrocx.InvalidArgument, match=rf"rank {me}: send: .*out of range"):
        comm.send(np.zeros(4, dtype=np.int32), n + 3)
    with pytest.raises(ferrocx.InvalidArgument, match="not contiguous"):
        comm.all_reduce(np.zeros((4, 4), dtype=np.float32)[:, 1])
    with pytest.raises(ferrocx.InvalidArgument, match="complex|not supported"):
        comm.all_reduce(np.zeros(4, dtype=np.complex64))
    with pytest.raises(ferrocx.InvalidArgument, match="__dlpack__"):
        comm.all_reduce([1, 2, 3])
    assert issubclass(ferrocx.InvalidArgument, ferrocx.Error)
    # Authentication failures (job secrets differ) have their own class.
    assert issubclass(ferrocx.AuthError, ferrocx.Error)
    assert "AuthError" in ferrocx.__all__
    # Still works after the errors.
    np.testing.assert_array_equal(comm.all_reduce(np.ones(2, dtype=np.int32)), np.full(2, n))


def test_status_report_names_every_rank():
    comm.barrier()
    report = comm.status_report()
    # Every rank answered, each just past (or still leaving) the barrier.
    assert "did not answer" not in report, report
    assert "barrier() as op #" in report, report
    named = {int(r) for g in re.findall(r"ranks? ([\d,]+) ", report) for r in g.split(",")}
    assert named == set(range(n)), report
    assert issubclass(ferrocx.Hang, ferrocx.Timeout)
