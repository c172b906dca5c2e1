//! Reading a DLPack capsule (`__dlpack__()`), declared from the DLPack
//! specification: the buffer's address, bytes, element type and device. The
//! capsule is only borrowed (not renamed "used_dltensor"): its producer's
//! destructor frees the tensor when the capsule goes.

use crate::InvalidArgument;
use ferrocx::DataType;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyCapsule, PyType};
use std::ffi::c_void;

#[repr(C)]
#[allow(dead_code)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// `DLManagedTensor` starts with its `DLTensor` (the rest is the producer's).
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
}

const KDL_CPU: i32 = 1;
const KDL_CUDA: i32 = 2;
const KDL_CUDA_HOST: i32 = 3;

/// A borrowed tensor.
pub struct Tensor {
    pub ptr: usize,
    pub bytes: usize,
    pub dtype: DataType,
    pub cuda: bool,
    /// The capsule, kept while the buffer is in use.
    pub capsule: PyObject,
}

fn dtype_of(t: &DlDataType) -> PyResult<DataType> {
    if t.lanes != 1 {
        return Err(InvalidArgument::new_err(format!(
            "vector elements ({} lanes) are not supported",
            t.lanes
        )));
    }
    Ok(match (t.code, t.bits) {
        (0, 8) => DataType::I8,
        (1, 8) => DataType::U8,
        (0, 32) => DataType::I32,
        (1, 32) => DataType::U32,
        (0, 64) => DataType::I64,
        (1, 64) => DataType::U64,
        (2, 16) => DataType::F16,
        (4, 16) => DataType::Bf16,
        (2, 32) => DataType::F32,
        (2, 64) => DataType::F64,
        // DLPack 1.0's kDLFloat8_e4m3fn and kDLFloat8_e5m2 (torch.float8_e4m3fn, float8_e5m2).
        (10, 8) => DataType::F8E4M3,
        (12, 8) => DataType::F8E5M2,
        (c, b) => {
            return Err(InvalidArgument::new_err(format!(
                "element type (DLPack code {c}, {b} bits) is not supported"
            )))
        }
    })
}

impl Tensor {
    /// Read a `dltensor` capsule.
    pub fn of(py: Python<'_>, capsule: &PyObject) -> PyResult<Tensor> {
        let cap = capsule
            .downcast_bound::<PyCapsule>(py)
            .map_err(|_| InvalidArgument::new_err("not a DLPack capsule"))?;
        let name = cap.name()?;
        if name != Some(c"dltensor") {
            let name = name.map(|n| n.to_string_lossy()).unwrap_or_default();
            return Err(InvalidArgument::new_err(format!(
                "a capsule named '{name}', not 'dltensor' (already consumed?)"
            )));
        }
        // SAFETY: a live "dltensor" capsule holds a DLManagedTensor* (DLPack's contract).
        let t = unsafe { &(*(cap.pointer() as *const DlManagedTensor)).dl_tensor };
        let dtype = dtype_of(&t.dtype)?;
        let n = usize::try_from(t.ndim).map_err(|_| InvalidArgument::new_err("negative ndim"))?;
        // SAFETY: shape and strides hold ndim entries (strides may be null: compact).
        let (shape, strides) = unsafe {
            (
                if n == 0 {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(t.shape, n)
                },
                if t.strides.is_null() || n == 0 {
                    None
                } else {
                    Some(std::slice::from_raw_parts(t.strides, n))
                },
            )
        };
        let mut elems: usize = 1;
        for &d in shape {
            elems = elems
                .checked_mul(
                    usize::try_from(d)
                        .map_err(|_| InvalidArgument::new_err("negative dimension"))?,
                )
                .ok_or_else(|| InvalidArgument::new_err("the tensor's size overflows"))?;
        }
        if let Some(st) = strides {
            // Row-major contiguous (dimensions of size 1 may have any stride).
            let mut want = 1i64;
            for i in (0..n).rev() {
                if shape[i] != 1 && st[i] != want {
                    return Err(InvalidArgument::new_err(
                        "the tensor is not contiguous (make it so first, e.g. .contiguous())",
                    ));
                }
                want *= shape[i];
            }
        }
        let cuda = match t.device.device_type {
            KDL_CPU | KDL_CUDA_HOST => false,
            KDL_CUDA => true,
            d => {
                return Err(InvalidArgument::new_err(format!(
                    "DLPack device type {d} is not supported (CPU or CUDA)"
                )))
            }
        };
        Ok(Tensor {
            ptr: t.data as usize + t.byte_offset as usize,
            bytes: elems * dtype.size(),
            dtype,
            cuda,
            capsule: capsule.clone_ref(py),
        })
    }

    /// Read a host tensor through `obj`'s own DLPack methods. `None` when the
    /// Python layer must prepare it: no `__dlpack_device__` (it raises the
    /// error there), or a CUDA tensor (its stream is resolved there). Doing
    /// this here, not in Python, was most of a small call's cost in the
    /// package (issue 18).
    pub fn from_object(obj: &Bound<'_, PyAny>) -> PyResult<Option<Tensor>> {
        let py = obj.py();
        let kind = if is_ndarray(obj) {
            KDL_CPU // NumPy's arrays live in host memory: no need to ask
        } else {
            let Ok(dev) = obj.call_method0(intern!(py, "__dlpack_device__")) else {
                return Ok(None);
            };
            let Ok((kind, _)) = dev.extract::<(i32, i32)>() else {
                return Ok(None);
            };
            kind
        };
        if kind == KDL_CUDA {
            return Ok(None);
        }
        let capsule = obj.call_method0(intern!(py, "__dlpack__"))?;
        Tensor::of(py, &capsule.unbind()).map(Some)
    }

    /// Elements.
    pub fn numel(&self) -> usize {
        self.bytes / self.dtype.size()
    }
}

/// NumPy's array type, once NumPy is loaded (it is not imported here: an
/// array exists only once the program imported it).
static NDARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// Whether `obj` is exactly a NumPy array.
fn is_ndarray(obj: &Bound<'_, PyAny>) -> bool {
    let py = obj.py();
    let t = match NDARRAY.get(py) {
        Some(t) => t,
        None => {
            let found = py
                .import("sys")
                .and_then(|sys| sys.getattr("modules"))
                .and_then(|m| m.get_item("numpy"))
                .and_then(|np| np.getattr("ndarray"))
                .and_then(|t| Ok(t.downcast_into::<PyType>()?.unbind()));
            match found {
                Ok(t) => NDARRAY.get_or_init(py, || t),
                Err(_) => return false,
            }
        }
    };
    obj.get_type().is(t.bind(py))
}

/// `numpy.empty`, looked up once (only after an array was seen).
static NP_EMPTY: GILOnceCell<PyObject> = GILOnceCell::new();

/// A new 1-D NumPy array of `n` elements of `like`'s type, if `like` is a
/// NumPy array (`None` otherwise: the Python layer allocates then).
pub fn empty_like<'py>(like: &Bound<'py, PyAny>, n: usize) -> PyResult<Option<Bound<'py, PyAny>>> {
    if !is_ndarray(like) {
        return Ok(None);
    }
    let py = like.py();
    let empty = NP_EMPTY.get_or_try_init(py, || {
        py.import("numpy")?.getattr("empty").map(Bound::unbind)
    })?;
    let dtype = like.getattr(intern!(py, "dtype"))?;
    empty.bind(py).call1((n, dtype)).map(Some)
}
