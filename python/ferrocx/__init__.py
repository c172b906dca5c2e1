"""ferrocx: collectives and point-to-point between ranks holding host or GPU memory.

    import numpy as np, ferrocx
    comm = ferrocx.Communicator.from_env()      # under fxrun, mpirun, srun or torchrun
    x = np.full(4, comm.rank, dtype=np.float32)
    y = comm.all_reduce(x)                       # a new array: the sum over the ranks
    comm.all_reduce(x, out=x)                    # in place

Buffers are NumPy arrays or any object with ``__dlpack__`` (PyTorch tensors on the CPU
or on CUDA; CUDA calls are queued on the current torch stream, or on ``stream=``).
Outputs are written into ``out=`` when given, else a new array/tensor like the input.
Calls with ``nonblocking=True`` return a :class:`Request` (host memory) to ``wait()`` on.
Errors raise :class:`Error` subclasses carrying ferrocx's message (which rank, which call).

With CUDA tensors, set ``CUDA_MODULE_LOADING=EAGER`` before CUDA starts: under PyTorch's
default (lazy loading) a torch kernel launched for the first time while a ferrocx operation
is in flight stalls that operation until ``FERROCX_TIMEOUT``.
"""
from __future__ import annotations

from typing import Any, Optional

from ._ferrocx import (  # noqa: F401
    AuthError,
    Comm as _Comm,
    Destroyed,
    Error,
    Hang,
    InvalidArgument,
    Mismatch,
    RemoteError,
    Request,
    Timeout,
    Unsupported,
)

__all__ = [
    "Communicator", "Request", "Error", "InvalidArgument", "Mismatch", "Timeout", "Hang",
    "RemoteError", "Destroyed", "Unsupported", "AuthError",
]
__version__ = "0.1.0"


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def _is_cuda(x: Any) -> bool:
    dev = getattr(x, "__dlpack_device__", None)
    return dev is not None and dev()[0] == 2


def _stream_of(x: Any, stream: Optional[int]) -> int:
    """The CUstream for a CUDA tensor: `stream`, else torch's current one."""
    if stream is not None:
        return int(stream)
    if _is_torch(x) and _is_cuda(x):
        import torch

        return int(torch.cuda.current_stream(x.device).cuda_stream)
    return 0


def _capsule(x: Any, stream: int) -> Any:
    if x is None:
        return None
    if not hasattr(x, "__dlpack__"):
        raise InvalidArgument(f"{type(x).__name__} has no __dlpack__ (use a NumPy array or a tensor)")
    if _is_cuda(x):
        return x.__dlpack__(stream=stream if stream else None)
    return x.__dlpack__()


def _numel(x: Any) -> int:
    if not hasattr(x, "__dlpack__"):
        raise InvalidArgument(f"{type(x).__name__} has no __dlpack__ (use a NumPy array or a tensor)")
    n = getattr(x, "size", None)
    if callable(n):  # torch: .numel()
        return int(x.numel())
    return int(n)


def _empty_like(x: Any, numel: int) -> Any:
    if _is_torch(x):
        import torch

        return torch.empty(numel, dtype=x.dtype, device=x.device)
    import numpy as np

    return np.empty(numel, dtype=x.dtype)


class Communicator:
    """A set of ranks exchanging data. Every collective is called by every rank."""

    def __init__(self, root: str, rank: int, nranks: int) -> None:
        self._c = _Comm(root, rank, nranks)

    @classmethod
    def from_env(cls) -> "Communicator":
        """From the launcher's variables (fxrun, mpirun, srun, torchrun)."""
        self = cls.__new__(cls)
        self._c = _Comm.from_env()
        return self

    @property
    def rank(self) -> int:
        return self._c.rank

    @property
    def nranks(self) -> int:
        return self._c.nranks

    @property
    def device(self) -> Optional[int]:
        """The CUDA device this rank uses, or None."""
        return self._c.device

    def _coll(self, kind: str, send: Any, out: Any, div: int, mul: int, op: str = "sum",
              root: int = 0, stream: Optional[int] = None, nonblocking: bool = False) -> Any:
        """`kind` of `send`'s elements ÷ `div` into `out` (that count × `mul` elements)."""
        # Host arrays go straight to the native layer, which reads their DLPack
        # (and makes a NumPy output) itself; CUDA tensors (their stream) and
        # outputs like other inputs are prepared here.
        r = self._c.coll(kind, send, out, div, mul, op, root, nonblocking)
        if r is not NotImplemented:
            return r
        n = _numel(send) // div
        if out is None:
            out = _empty_like(send, n * mul)
        in_place = send is out
        s = _stream_of(send, stream)
        req = self._c.collective(kind, None if in_place else _capsule(send, s), _capsule(out, s), n, op,
                                 root, in_place, s, nonblocking)
        return (out, req) if nonblocking else out

    def all_reduce(self, send: Any, out: Any = None, op: str = "sum", stream: Optional[int] = None,
                   nonblocking: bool = False) -> Any:
        """Every rank's `send` reduced (sum, prod, min, max, avg) into `out` on every rank."""
        return self._coll("all_reduce", send, out, 1, 1, op, 0, stream, nonblocking)

    def all_gather(self, send: Any, out: Any = None, stream: Optional[int] = None, nonblocking: bool = False) -> Any:
        """Every rank's `send` (n elements) into `out` (nranks*n), in rank order."""
        return self._coll("all_gather", send, out, 1, self.nranks, "sum", 0, stream, nonblocking)

    def reduce_scatter(self, send: Any, out: Any = None, op: str = "sum", stream: Optional[int] = None,
                       nonblocking: bool = False) -> Any:
        """Block r (n elements) of every rank's `send` (nranks*n) reduced into rank r's `out`."""
        return self._coll("reduce_scatter", send, out, self.nranks, 1, op, 0, stream, nonblocking)

    def broadcast(self, send: Any, out: Any = None, root: int = 0, stream: Optional[int] = None,
                  nonblocking: bool = False) -> Any:
        """The root's `send` into every rank's `out` (non-roots' `send` gives the size and type)."""
        return self._coll("broadcast", send, out, 1, 1, "sum", root, stream, nonblocking)

    def reduce(self, send: Any, out: Any = None, op: str = "sum", root: int = 0, stream: Optional[int] = None,
               nonblocking: bool = False) -> Any:
        """Every rank's `send` reduced into the root's `out`."""
        return self._coll("reduce", send, out, 1, 1, op, root, stream, nonblocking)

    def all_to_all(self, send: Any, out: Any = None, stream: Optional[int] = None, nonblocking: bool = False) -> Any:
        """Block p of `send` to rank p; block p of `out` from rank p."""
        return self._coll("all_to_all", send, out, self.nranks, self.nranks, "sum", 0, stream, nonblocking)

    def gather(self, send: Any, out: Any = None, root: int = 0, stream: Optional[int] = None,
               nonblocking: bool = False) -> Any:
        """Every rank's `send` into the root's `out` (nranks*n), in rank order."""
        return self._coll("gather", send, out, 1, self.nranks, "sum", root, stream, nonblocking)

    def scatter(self, send: Any, out: Any = None, root: int = 0, stream: Optional[int] = None,
                nonblocking: bool = False) -> Any:
        """Block r of the root's `send` (nranks*n) into rank r's `out` (n)."""
        return self._coll("scatter", send, out, self.nranks, 1, "sum", root, stream, nonblocking)

    def send(self, buf: Any, peer: int, stream: Optional[int] = None) -> None:
        """Send `buf` to `peer` (returns when `buf` may be reused, or once queued on CUDA)."""
        if self._c.p2p_buf(True, buf, peer) is NotImplemented:
            s = _stream_of(buf, stream)
            self._c.p2p(True, _capsule(buf, s), peer, s)

    def recv(self, buf: Any, peer: int, stream: Optional[int] = None) -> Any:
        """Receive exactly `buf`'s bytes from `peer` into `buf`."""
        if self._c.p2p_buf(False, buf, peer) is NotImplemented:
            s = _stream_of(buf, stream)
            self._c.p2p(False, _capsule(buf, s), peer, s)
        return buf

    def sendrecv(self, send: Any, dest: int, recv: Any, src: int, stream: Optional[int] = None) -> Any:
        """Send `send` to `dest` and receive exactly `recv`'s bytes from `src` into `recv`,
        together (MPI_Sendrecv): ranks that all send and receive around a ring cannot
        deadlock, as they can with a blocking `send` of a large buffer first. Both
        buffers in host memory, or both CUDA tensors (ordered on `stream`)."""
        if self._c.sendrecv_buf(send, dest, recv, src) is NotImplemented:
            s = _stream_of(send, stream)
            self._c.sendrecv(_capsule(send, s), dest, _capsule(recv, s), src, s)
        return recv

    def split(self, color: int, key: int = 0) -> Optional["Communicator"]:
        """New communicators of the ranks passing the same color, ordered by key; None for color < 0."""
        c = self._c.split(color, key)
        if c is None:
            return None
        new = Communicator.__new__(Communicator)
        new._c = c
        return new

    def barrier(self) -> None:
        self._c.barrier()

    def status_report(self) -> str:
        """Where every rank is: its last operation and whether it waits in it.

        For a job that seems stuck; changes nothing. A wait that times out raises
        :class:`Hang` with the same report."""
        return self._c.status_report()

    def device_error(self) -> None:
        """Raise the error of a CUDA call that failed after it returned, if any."""
        self._c.device_error()

    def destroy(self) -> None:
        self._c.destroy()

    def abort(self) -> None:
        self._c.abort()
