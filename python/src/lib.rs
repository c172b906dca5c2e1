//! The native half of the `ferrocx` Python package: a communicator and its
//! calls on raw buffers described by DLPack (`ferrocx/__init__.py` turns
//! NumPy arrays and any `__dlpack__` object into those). Errors become
//! `ferrocx.Error` subclasses carrying ferrocx's message.

mod dlpack;

use dlpack::Tensor;
use ferrocx::{CollKind, CollSpec, Communicator, DataType, Error, RedOp};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _ferrocx,
    FerrocxError,
    PyException,
    "A ferrocx error (its message says which rank and call)."
);
create_exception!(
    _ferrocx,
    InvalidArgument,
    FerrocxError,
    "Bad input: buffer, count, rank, type."
);
create_exception!(
    _ferrocx,
    Mismatch,
    InvalidArgument,
    "Ranks made different calls at the same point (FERROCX_CHECK_CALLS)."
);
create_exception!(
    _ferrocx,
    AuthError,
    FerrocxError,
    "A bootstrap connection failed authentication: the ranks' job secrets (FERROCX_SECRET / FERROCX_SECRET_FILE) differ, or only some have one."
);
create_exception!(
    _ferrocx,
    Timeout,
    FerrocxError,
    "A wait exceeded FERROCX_TIMEOUT."
);
create_exception!(
    _ferrocx,
    Hang,
    Timeout,
    "A wait exceeded FERROCX_TIMEOUT; the message says which ranks never reached which operation."
);
create_exception!(
    _ferrocx,
    RemoteError,
    FerrocxError,
    "A peer failed or went away."
);
create_exception!(
    _ferrocx,
    Destroyed,
    FerrocxError,
    "The communicator was destroyed or aborted."
);
create_exception!(
    _ferrocx,
    Unsupported,
    FerrocxError,
    "Not possible here (e.g. CUDA tensors without a GPU)."
);

fn err(rank: Option<usize>, call: &str, e: Error) -> PyErr {
    let msg = match rank {
        Some(r) => format!("rank {r}: {call}: {e}"),
        None => format!("{call}: {e}"),
    };
    match e {
        Error::InvalidArgument(_) | Error::Config { .. } => InvalidArgument::new_err(msg),
        Error::Mismatch { .. } => Mismatch::new_err(msg),
        Error::Timeout { .. } => Timeout::new_err(msg),
        Error::Hang { .. } => Hang::new_err(msg),
        Error::PeerFailed { .. } => RemoteError::new_err(msg),
        Error::Destroyed(_) => Destroyed::new_err(msg),
        Error::Auth(_) => AuthError::new_err(msg),
        Error::Unsupported(_) | Error::NoTransport { .. } => Unsupported::new_err(msg),
        _ => FerrocxError::new_err(msg),
    }
}

fn kind_of(name: &str) -> PyResult<CollKind> {
    Ok(match name {
        "all_reduce" => CollKind::AllReduce,
        "all_gather" => CollKind::AllGather,
        "reduce_scatter" => CollKind::ReduceScatter,
        "broadcast" => CollKind::Broadcast,
        "reduce" => CollKind::Reduce,
        "all_to_all" => CollKind::AllToAll,
        "gather" => CollKind::Gather,
        "scatter" => CollKind::Scatter,
        _ => {
            return Err(InvalidArgument::new_err(format!(
                "unknown collective '{name}'"
            )))
        }
    })
}

fn op_of(name: &str) -> PyResult<RedOp> {
    RedOp::ALL
        .into_iter()
        .find(|o| o.name() == name)
        .ok_or_else(|| {
            InvalidArgument::new_err(format!(
                "unknown reduction '{name}' (sum, prod, min, max, avg)"
            ))
        })
}

/// A started host-memory collective (device calls are stream-ordered: done at once).
#[pyclass(module = "ferrocx._ferrocx")]
struct Request {
    inner: Option<ferrocx::Request>,
    /// Keeps the DLPack capsules (and so the buffers) alive until the request ends.
    _keep: Vec<PyObject>,
    rank: usize,
}

#[pymethods]
impl Request {
    /// Block until done (the GIL is released while waiting).
    fn wait(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(r) = self.inner.take() else {
            return Ok(());
        };
        let rank = self.rank;
        py.allow_threads(move || r.wait())
            .map_err(|e| err(Some(rank), "wait", e))?;
        self._keep.clear();
        Ok(())
    }

    /// Whether it finished (an error if it failed).
    fn test(&mut self) -> PyResult<bool> {
        match &self.inner {
            None => Ok(true),
            Some(r) => r.test().map_err(|e| err(Some(self.rank), "test", e)),
        }
    }
}

/// A communicator (see `ferrocx.Communicator`).
#[pyclass(module = "ferrocx._ferrocx")]
struct Comm {
    comm: Communicator,
}

impl Comm {
    fn call<T>(
        &self,
        py: Python<'_>,
        name: &str,
        f: impl FnOnce(&Communicator) -> ferrocx::Result<T> + Send,
    ) -> PyResult<T>
    where
        T: Send,
    {
        let rank = self.comm.rank();
        let c = &self.comm;
        py.allow_threads(move || f(c))
            .map_err(|e| err(Some(rank), name, e))
    }
}

/// What a collective call asks for, apart from its buffers.
struct Call {
    kind: CollKind,
    count: usize,
    op: RedOp,
    root: usize,
    in_place: bool,
    /// A CUstream for CUDA tensors, else 0.
    stream: usize,
    nonblocking: bool,
}

impl Comm {
    /// Run `call` on tensors `s` (None in place or where unused) and `r`.
    /// A blocking host call starts and waits in one release of the GIL.
    fn run_collective(
        &self,
        py: Python<'_>,
        call: Call,
        s: Option<Tensor>,
        r: Option<Tensor>,
    ) -> PyResult<Option<Request>> {
        let name = call.kind.name();
        let dtype: DataType = r
            .as_ref()
            .or(s.as_ref())
            .map(|t| t.dtype)
            .unwrap_or(DataType::U8);
        if let (Some(a), Some(b)) = (&s, &r) {
            if a.dtype != b.dtype || a.cuda != b.cuda {
                return Err(InvalidArgument::new_err(format!(
                    "{name}: send is {} on {}, receive {} on {}",
                    a.dtype,
                    if a.cuda { "cuda" } else { "cpu" },
                    b.dtype,
                    if b.cuda { "cuda" } else { "cpu" }
                )));
            }
        }
        let cuda = r.as_ref().or(s.as_ref()).is_some_and(|t| t.cuda);
        let spec = CollSpec::new(call.kind, dtype, call.count)
            .op(call.op)
            .root(call.root);
        let (sp, sl) = s.as_ref().map_or((0, 0), |t| (t.ptr, t.bytes));
        let (rp, rl) = r.as_ref().map_or((0, 0), |t| (t.ptr, t.bytes));
        let (in_place, stream) = (call.in_place, call.stream);
        let rank = self.comm.rank();
        let keep = || -> Vec<PyObject> { s.into_iter().chain(r).map(|t| t.capsule).collect() };
        if cuda {
            self.call(py, name, |c| {
                // SAFETY: device buffers of live tensors (kept by the caller), a live stream.
                unsafe {
                    if in_place {
                        c.collective_in_place_on(&spec, rp as u64, stream as ferrocx::RawStream)
                    } else {
                        c.collective_on(&spec, sp as u64, rp as u64, stream as ferrocx::RawStream)
                    }
                }
            })?;
            return Ok(call.nonblocking.then(|| Request {
                inner: None,
                _keep: keep(),
                rank,
            }));
        }
        let (sp, sl) = if in_place { (rp, rl) } else { (sp, sl) };
        // SAFETY: host buffers of tensors kept alive by `s` and `r` (dropped
        // after this returns) or by the request's `keep` until it ends.
        let start = |c: &Communicator| unsafe {
            c.start_raw(&spec, (sp as *const u8, sl), (rp as *mut u8, rl), in_place)
        };
        if !call.nonblocking {
            self.call(py, name, |c| start(c)?.wait())?;
            return Ok(None);
        }
        let req = self.call(py, name, start)?;
        Ok(Some(Request {
            inner: Some(req),
            _keep: keep(),
            rank,
        }))
    }

    /// Send (`send`) or receive `t`'s bytes to/from `peer`, to completion
    /// (host) or queued on `stream` (CUDA).
    fn run_p2p(
        &self,
        py: Python<'_>,
        send: bool,
        t: Tensor,
        peer: usize,
        stream: usize,
    ) -> PyResult<()> {
        let name = if send { "send" } else { "recv" };
        let (p, n, cuda) = (t.ptr, t.bytes, t.cuda);
        self.call(py, name, move |c| {
            // SAFETY: the tensor lives across the call (`t` is held until it returns).
            unsafe {
                if !cuda {
                    return if send {
                        c.send(std::slice::from_raw_parts(p as *const u8, n), peer)
                    } else {
                        c.recv(std::slice::from_raw_parts_mut(p as *mut u8, n), peer)
                    };
                }
                let mut g = c.group_start();
                if send {
                    g.send_on(p as u64, n, peer, stream as ferrocx::RawStream)?;
                } else {
                    g.recv_on(p as u64, n, peer, stream as ferrocx::RawStream)?;
                }
                g.group_end()
            }
        })
    }

    /// `Communicator::sendrecv` on host buffers; on CUDA tensors a group of
    /// the two on `stream`. Both in one kind of memory.
    fn run_sendrecv(
        &self,
        py: Python<'_>,
        (s, dest): (Tensor, usize),
        (r, src): (Tensor, usize),
        stream: usize,
    ) -> PyResult<()> {
        if s.cuda != r.cuda {
            return Err(err(
                Some(self.comm.rank()),
                "sendrecv",
                ferrocx::Error::InvalidArgument(
                    "the send and receive buffers must both be in host memory or both on a GPU"
                        .into(),
                ),
            ));
        }
        let (sp, sn, rp, rn, cuda) = (s.ptr, s.bytes, r.ptr, r.bytes, s.cuda);
        self.call(py, "sendrecv", move |c| {
            // SAFETY: the tensors live across the call (held until it returns).
            unsafe {
                if !cuda {
                    return c.sendrecv(
                        std::slice::from_raw_parts(sp as *const u8, sn),
                        dest,
                        std::slice::from_raw_parts_mut(rp as *mut u8, rn),
                        src,
                    );
                }
                let mut g = c.group_start();
                g.send_on(sp as u64, sn, dest, stream as ferrocx::RawStream)?;
                g.recv_on(rp as u64, rn, src, stream as ferrocx::RawStream)?;
                g.group_end()
            }
        })
    }
}

#[pymethods]
impl Comm {
    /// From the launcher's environment (fxrun, mpirun, srun, torchrun).
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Comm> {
        let comm = py
            .allow_threads(Communicator::from_env)
            .map_err(|e| err(None, "Communicator.from_env", e))?;
        Ok(Comm { comm })
    }

    /// With an explicit rendezvous address `host:port` (rank 0 listens there).
    #[new]
    fn new(py: Python<'_>, root: String, rank: usize, nranks: usize) -> PyResult<Comm> {
        let comm = py
            .allow_threads(move || Communicator::new(&root, rank, nranks))
            .map_err(|e| err(Some(rank), "Communicator", e))?;
        Ok(Comm { comm })
    }

    #[getter]
    fn rank(&self) -> usize {
        self.comm.rank()
    }

    #[getter]
    fn nranks(&self) -> usize {
        self.comm.nranks()
    }

    #[getter]
    fn device(&self) -> Option<i32> {
        self.comm.device()
    }

    /// A collective on DLPack capsules (`send`/`recv` may be None where
    /// unused). `stream`: a CUstream as an int for CUDA tensors, else 0.
    /// Returns the call's `Request` when `nonblocking`, else None once done.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (kind, send, recv, count, op, root, in_place, stream, nonblocking))]
    fn collective(
        &self,
        py: Python<'_>,
        kind: &str,
        send: Option<PyObject>,
        recv: Option<PyObject>,
        count: usize,
        op: &str,
        root: usize,
        in_place: bool,
        stream: usize,
        nonblocking: bool,
    ) -> PyResult<Option<Request>> {
        let s = send.as_ref().map(|o| Tensor::of(py, o)).transpose()?;
        let r = recv.as_ref().map(|o| Tensor::of(py, o)).transpose()?;
        let call = Call {
            kind: kind_of(kind)?,
            count,
            op: op_of(op)?,
            root,
            in_place,
            stream,
            nonblocking,
        };
        self.run_collective(py, call, s, r)
    }

    /// The same on host buffers themselves, as `Communicator`'s methods
    /// return it: `out` (a new NumPy array of the count × `mul` elements when
    /// None), or `(out, request)` when `nonblocking`. The count is `send`'s
    /// elements ÷ `div`; `send is out`: in place. NotImplemented where the
    /// Python layer must prepare the buffers ([`Tensor::from_object`]: CUDA
    /// tensors, objects without DLPack; or a new output like a non-NumPy
    /// `send`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (kind, send, out, div, mul, op, root, nonblocking))]
    fn coll(
        &self,
        py: Python<'_>,
        kind: &str,
        send: &Bound<'_, PyAny>,
        out: Option<&Bound<'_, PyAny>>,
        div: usize,
        mul: usize,
        op: &str,
        root: usize,
        nonblocking: bool,
    ) -> PyResult<PyObject> {
        let in_place = out.is_some_and(|o| send.is(o));
        let Some(s) = Tensor::from_object(send)? else {
            return Ok(py.NotImplemented());
        };
        let count = s.numel() / div.max(1);
        let out = match out {
            Some(o) => o.clone(),
            None => match dlpack::empty_like(send, count * mul)? {
                Some(o) => o,
                None => return Ok(py.NotImplemented()),
            },
        };
        let (s, r) = if in_place {
            (None, s)
        } else {
            match Tensor::from_object(&out)? {
                Some(r) => (Some(s), r),
                None => return Ok(py.NotImplemented()),
            }
        };
        let call = Call {
            kind: kind_of(kind)?,
            count,
            op: op_of(op)?,
            root,
            in_place,
            stream: 0,
            nonblocking,
        };
        Ok(match self.run_collective(py, call, s, Some(r))? {
            Some(req) => (out, Py::new(py, req)?)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            None => out.unbind(),
        })
    }

    /// Send (`send=True`) or receive `capsule`'s bytes to/from `peer`.
    #[pyo3(signature = (send, capsule, peer, stream))]
    fn p2p(
        &self,
        py: Python<'_>,
        send: bool,
        capsule: PyObject,
        peer: usize,
        stream: usize,
    ) -> PyResult<()> {
        let t = Tensor::of(py, &capsule)?;
        self.run_p2p(py, send, t, peer, stream)
    }

    /// The same on a host buffer itself: NotImplemented where the Python
    /// layer must prepare it ([`Tensor::from_object`]), else None once done.
    #[pyo3(signature = (send, buf, peer))]
    fn p2p_buf(
        &self,
        py: Python<'_>,
        send: bool,
        buf: &Bound<'_, PyAny>,
        peer: usize,
    ) -> PyResult<PyObject> {
        let Some(t) = Tensor::from_object(buf)? else {
            return Ok(py.NotImplemented());
        };
        self.run_p2p(py, send, t, peer, 0)?;
        Ok(py.None())
    }

    /// Send `send_capsule`'s bytes to `dest` and receive `recv_capsule`'s
    /// from `src`, together.
    #[pyo3(signature = (send_capsule, dest, recv_capsule, src, stream))]
    fn sendrecv(
        &self,
        py: Python<'_>,
        send_capsule: PyObject,
        dest: usize,
        recv_capsule: PyObject,
        src: usize,
        stream: usize,
    ) -> PyResult<()> {
        let s = Tensor::of(py, &send_capsule)?;
        let r = Tensor::of(py, &recv_capsule)?;
        self.run_sendrecv(py, (s, dest), (r, src), stream)
    }

    /// The same on host buffers themselves: NotImplemented where the Python
    /// layer must prepare them, else None once done.
    #[pyo3(signature = (send, dest, recv, src))]
    fn sendrecv_buf(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        dest: usize,
        recv: &Bound<'_, PyAny>,
        src: usize,
    ) -> PyResult<PyObject> {
        // `from_object` leaves CUDA tensors to the Python layer (None).
        let (Some(s), Some(r)) = (Tensor::from_object(send)?, Tensor::from_object(recv)?) else {
            return Ok(py.NotImplemented());
        };
        self.run_sendrecv(py, (s, dest), (r, src), 0)?;
        Ok(py.None())
    }

    /// New communicators by color (None for a negative color), ordered by key.
    fn split(&self, py: Python<'_>, color: i32, key: i32) -> PyResult<Option<Comm>> {
        Ok(self
            .call(py, "split", |c| c.split(color, key))?
            .map(|comm| Comm { comm }))
    }

    /// Wait until every rank gets here.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, "barrier", |c| c.barrier())
    }

    /// Where every rank is (its last operation, whether it waits in it).
    fn status_report(&self, py: Python<'_>) -> PyResult<String> {
        self.call(py, "status_report", |c| c.status_report())
    }

    /// The error of a stream-ordered operation that failed after its call.
    fn device_error(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, "device_error", |c| c.device_error())
    }

    /// Release everything; later calls raise `Destroyed`.
    fn destroy(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, "destroy", |c| c.destroy())
    }

    /// Tell the peers, stop every wait, release everything.
    fn abort(&self) {
        self.comm.abort()
    }
}

#[pymodule]
fn _ferrocx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Comm>()?;
    m.add_class::<Request>()?;
    m.add("Error", py.get_type::<FerrocxError>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("Mismatch", py.get_type::<Mismatch>())?;
    m.add("Hang", py.get_type::<Hang>())?;
    m.add("AuthError", py.get_type::<AuthError>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("RemoteError", py.get_type::<RemoteError>())?;
    m.add("Destroyed", py.get_type::<Destroyed>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    Ok(())
}
