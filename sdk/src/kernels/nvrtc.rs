//! NVRTC (the CUDA run-time compiler) loaded at run time.
//!
//! Nothing is needed at build time: `libnvrtc` is `dlopen`ed (through
//! `libloading`) the first time [`Nvrtc::get`] is called, and a machine
//! without it gets an error value saying what was tried, never a panic. (We do
//! not use `cudarc`'s NVRTC module: with the `cuda-12080` feature its list of
//! library names misses `libnvrtc.so.13`, and it panics when the library is
//! missing.)
//!
//! ## Where the library is looked for
//!
//! In this order, the first that loads and exports every required function
//! wins:
//! 1. `$FERROCX_NVRTC_LIB`, when set (a file path or a library name). When it
//!    is set and fails to load, nothing else is tried: the error says why.
//! 2. `libnvrtc.so`, `libnvrtc.so.13`, `libnvrtc.so.12`, `libnvrtc.so.11.2`
//!    through the dynamic loader's search (`LD_LIBRARY_PATH`, `ldconfig`).
//! 3. The same names under `$CUDA_HOME/lib64/` (when `CUDA_HOME` is set), then
//!    under `/usr/local/cuda/lib64/`.
//!
//! NVRTC loads its companion `libnvrtc-builtins.so.*` by itself; when a compile
//! fails saying it cannot find it, put the directory holding both on
//! `LD_LIBRARY_PATH`.
//!
//! ## Environment
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FERROCX_NVRTC_LIB` | unset | Path (or name) of the NVRTC library to load instead of searching; when set, only it is tried. |
//!
//! ## Functions used
//!
//! Required: `nvrtcVersion`, `nvrtcCreateProgram`, `nvrtcCompileProgram`,
//! `nvrtcGetProgramLogSize`, `nvrtcGetProgramLog`, `nvrtcGetPTXSize`,
//! `nvrtcGetPTX`, `nvrtcDestroyProgram`, `nvrtcGetErrorString`. Optional
//! (used when present): `nvrtcGetCUBINSize`/`nvrtcGetCUBIN` (CUDA 11.1+, for
//! [`Nvrtc::compile_cubin`]) and `nvrtcGetNumSupportedArchs`/
//! `nvrtcGetSupportedArchs` (CUDA 11.2+, for [`Nvrtc::supported_archs`]).

use libloading::Library;
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

/// The environment variable naming the NVRTC library to load.
pub const ENV_LIB: &str = "FERROCX_NVRTC_LIB";

/// Library names tried, in order (through the loader, then in the CUDA
/// directories).
pub const LIB_NAMES: [&str; 4] = [
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];

type Prog = *mut c_void;
type NvrtcResult = c_int;
const NVRTC_SUCCESS: NvrtcResult = 0;

type FnVersion = unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult;
type FnCreate = unsafe extern "C" fn(
    *mut Prog,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> NvrtcResult;
type FnCompile = unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> NvrtcResult;
type FnSize = unsafe extern "C" fn(Prog, *mut usize) -> NvrtcResult;
type FnGet = unsafe extern "C" fn(Prog, *mut c_char) -> NvrtcResult;
type FnDestroy = unsafe extern "C" fn(*mut Prog) -> NvrtcResult;
type FnErrStr = unsafe extern "C" fn(NvrtcResult) -> *const c_char;
type FnNumArchs = unsafe extern "C" fn(*mut c_int) -> NvrtcResult;
type FnArchs = unsafe extern "C" fn(*mut c_int) -> NvrtcResult;

/// A loaded NVRTC library and the functions resolved from it.
pub struct Nvrtc {
    path: String,
    version: (i32, i32),
    create: FnCreate,
    compile: FnCompile,
    log_size: FnSize,
    log: FnGet,
    ptx_size: FnSize,
    ptx: FnGet,
    cubin_size: Option<FnSize>,
    cubin: Option<FnGet>,
    destroy: FnDestroy,
    err_str: FnErrStr,
    num_archs: Option<FnNumArchs>,
    archs: Option<FnArchs>,
    /// Compiles by NVRTC before 12 are serialized: they were not
    /// documented as thread-safe.
    lock: Mutex<()>,
    // Last: the function pointers above point into it (they are never used
    // after it is dropped, since they are dropped together).
    _lib: Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Nvrtc({} {}.{})",
            self.path, self.version.0, self.version.1
        )
    }
}

/// What a compile produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Output {
    Ptx,
    Cubin,
}

impl Nvrtc {
    /// The process-wide NVRTC, loaded on first use (see the module docs for
    /// where it is looked for), or why it cannot be used. The outcome is
    /// computed once per process.
    pub fn get() -> Result<&'static Nvrtc, String> {
        static STATE: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
        STATE
            .get_or_init(|| Self::load(&Self::candidates()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The candidates [`Nvrtc::get`] tries, in order, given the current
    /// environment.
    pub fn candidates() -> Vec<String> {
        if let Some(p) = std::env::var_os(ENV_LIB) {
            return vec![p.to_string_lossy().into_owned()];
        }
        let mut v: Vec<String> = LIB_NAMES.iter().map(|s| s.to_string()).collect();
        let mut dirs = Vec::new();
        if let Some(h) = std::env::var_os("CUDA_HOME") {
            let h = h.to_string_lossy().into_owned();
            if !h.is_empty() {
                dirs.push(format!("{}/lib64", h.trim_end_matches('/')));
            }
        }
        dirs.push("/usr/local/cuda/lib64".to_string());
        for d in dirs {
            v.extend(LIB_NAMES.iter().map(|n| format!("{d}/{n}")));
        }
        v
    }

    /// Load the first of `candidates` that opens and exports the required
    /// functions (not cached: [`Nvrtc::get`] is the process-wide one). The
    /// error lists every candidate with the reason it was rejected.
    pub fn load(candidates: &[String]) -> Result<Nvrtc, String> {
        let mut why = Vec::new();
        for c in candidates {
            match Self::open(c) {
                Ok(n) => return Ok(n),
                Err(e) => why.push(format!("{c}: {e}")),
            }
        }
        let env = if std::env::var_os(ENV_LIB).is_some() {
            format!(" ({ENV_LIB} is set: only it was tried)")
        } else {
            format!(
                " (set {ENV_LIB} to the library's path, or put its directory on LD_LIBRARY_PATH)"
            )
        };
        Err(format!(
            "NVRTC (the CUDA run-time compiler, libnvrtc.so) could not be loaded{env}; tried: {}",
            why.join("; ")
        ))
    }

    fn open(path: &str) -> Result<Nvrtc, String> {
        // SAFETY: loading NVRTC runs its initializers, which have no
        // preconditions; we only load it under names of the NVRTC library
        // (or the one the user named in FERROCX_NVRTC_LIB).
        let lib = unsafe { Library::new(path) }.map_err(|e| e.to_string())?;
        macro_rules! sym {
            ($t:ty, $name:literal) => {{
                // SAFETY: the symbol is NVRTC's function of that name, whose C
                // signature is `$t` (nvrtc.h); the pointer is kept only as long
                // as `lib`, stored in the same struct.
                match unsafe { lib.get::<$t>(concat!($name, "\0").as_bytes()) } {
                    Ok(s) => Ok(*s),
                    Err(e) => Err(format!("missing {}: {e}", $name)),
                }
            }};
        }
        let version: FnVersion = sym!(FnVersion, "nvrtcVersion")?;
        let n = Nvrtc {
            path: path.to_string(),
            version: (0, 0),
            create: sym!(FnCreate, "nvrtcCreateProgram")?,
            compile: sym!(FnCompile, "nvrtcCompileProgram")?,
            log_size: sym!(FnSize, "nvrtcGetProgramLogSize")?,
            log: sym!(FnGet, "nvrtcGetProgramLog")?,
            ptx_size: sym!(FnSize, "nvrtcGetPTXSize")?,
            ptx: sym!(FnGet, "nvrtcGetPTX")?,
            cubin_size: sym!(FnSize, "nvrtcGetCUBINSize").ok(),
            cubin: sym!(FnGet, "nvrtcGetCUBIN").ok(),
            destroy: sym!(FnDestroy, "nvrtcDestroyProgram")?,
            err_str: sym!(FnErrStr, "nvrtcGetErrorString")?,
            num_archs: sym!(FnNumArchs, "nvrtcGetNumSupportedArchs").ok(),
            archs: sym!(FnArchs, "nvrtcGetSupportedArchs").ok(),
            lock: Mutex::new(()),
            _lib: lib,
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion only writes the two ints.
        let r = unsafe { version(&mut major, &mut minor) };
        if r != NVRTC_SUCCESS {
            return Err(format!("nvrtcVersion failed: {}", n.err(r)));
        }
        Ok(Nvrtc {
            version: (major, minor),
            ..n
        })
    }

    /// The file or name it was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// NVRTC's version (`major`, `minor`), e.g. `(13, 0)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// Whether [`Nvrtc::compile_cubin`] is available (NVRTC 11.1+).
    pub fn has_cubin(&self) -> bool {
        self.cubin_size.is_some() && self.cubin.is_some()
    }

    /// The virtual architectures this NVRTC compiles for (e.g. `[75, 80, 86,
    /// 87, 89, 90, 100, 120]`), or `None` when it cannot say (before 11.2).
    pub fn supported_archs(&self) -> Option<Vec<i32>> {
        let (num, get) = (self.num_archs?, self.archs?);
        let mut n: c_int = 0;
        // SAFETY: writes one int.
        if unsafe { num(&mut n) } != NVRTC_SUCCESS || n <= 0 {
            return None;
        }
        let mut v = vec![0 as c_int; n as usize];
        // SAFETY: `v` holds the `n` ints nvrtcGetSupportedArchs writes.
        if unsafe { get(v.as_mut_ptr()) } != NVRTC_SUCCESS {
            return None;
        }
        Some(v)
    }

    /// NVRTC's text for a result code.
    fn err(&self, r: NvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string
        // (or null) for any code.
        let p = unsafe { (self.err_str)(r) };
        if p.is_null() {
            format!("NVRTC error {r}")
        } else {
            // SAFETY: non-null, NUL-terminated, static.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    /// Compile CUDA C++ `source` (the program is called `name` in messages)
    /// with NVRTC `options` (e.g. `--gpu-architecture=compute_90`) to PTX.
    ///
    /// The PTX comes back NUL-terminated, as NVRTC gives it (ready for
    /// `cuModuleLoadData`). The error names the program, NVRTC's result and
    /// the compile log.
    pub fn compile(&self, source: &str, name: &str, options: &[&str]) -> Result<Vec<u8>, String> {
        self.build(source, name, options, Output::Ptx)
    }

    /// Like [`Nvrtc::compile`], but to a CUBIN for a real architecture
    /// (options must name one, e.g. `--gpu-architecture=sm_90`): loads
    /// without the driver's PTX JIT, whatever PTX version the driver accepts.
    /// An error when this NVRTC has no CUBIN output (before 11.1).
    pub fn compile_cubin(
        &self,
        source: &str,
        name: &str,
        options: &[&str],
    ) -> Result<Vec<u8>, String> {
        self.build(source, name, options, Output::Cubin)
    }

    fn build(
        &self,
        source: &str,
        name: &str,
        options: &[&str],
        out: Output,
    ) -> Result<Vec<u8>, String> {
        let (size_fn, get_fn) = match out {
            Output::Ptx => (self.ptx_size, self.ptx),
            Output::Cubin => match (self.cubin_size, self.cubin) {
                (Some(s), Some(g)) => (s, g),
                _ => {
                    return Err(format!(
                        "NVRTC {}.{} ({}) cannot produce CUBIN (nvrtcGetCUBIN missing)",
                        self.version.0, self.version.1, self.path
                    ))
                }
            },
        };
        let nul = |what: &str, s: &str| {
            CString::new(s).map_err(|_| format!("{what} of program {name} contains a NUL byte"))
        };
        let src = nul("source", source)?;
        let cname = nul("name", name)?;
        let opts = options
            .iter()
            .map(|o| nul("an option", o))
            .collect::<Result<Vec<_>, _>>()?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        // NVRTC 12 and later compile different programs from several threads
        // at once (a communicator's first compile of every module runs 8 wide);
        // older ones are serialized, not being documented as thread-safe.
        let _guard = (self.version.0 < 12).then(|| self.lock.lock());
        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated strings that outlive the call; no
        // headers (count 0, null arrays); `prog` is a valid out pointer.
        let r = unsafe {
            (self.create)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != NVRTC_SUCCESS {
            return Err(format!(
                "nvrtcCreateProgram({name}) failed: {}",
                self.err(r)
            ));
        }
        let result = self.compile_prog(prog, name, &opt_ptrs, size_fn, get_fn, out);
        // SAFETY: `prog` was created above and is destroyed once.
        unsafe { (self.destroy)(&mut prog) };
        result
    }

    /// Compile `prog` and fetch its output (the caller destroys `prog`).
    fn compile_prog(
        &self,
        prog: Prog,
        name: &str,
        opts: &[*const c_char],
        size_fn: FnSize,
        get_fn: FnGet,
        out: Output,
    ) -> Result<Vec<u8>, String> {
        // SAFETY: a live program; `opts` holds `opts.len()` valid C strings
        // (owned by the caller for the duration of the call).
        let r = unsafe { (self.compile)(prog, opts.len() as c_int, opts.as_ptr()) };
        if r != NVRTC_SUCCESS {
            return Err(format!(
                "NVRTC {}.{} failed to compile {name}: {}; log:\n{}",
                self.version.0,
                self.version.1,
                self.err(r),
                self.log_of(prog)
            ));
        }
        let mut size = 0usize;
        // SAFETY: a compiled program; `size` is a valid out pointer.
        let r = unsafe { size_fn(prog, &mut size) };
        if r != NVRTC_SUCCESS {
            return Err(format!("NVRTC {out:?} size of {name}: {}", self.err(r)));
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the `size` bytes NVRTC writes.
        let r = unsafe { get_fn(prog, buf.as_mut_ptr().cast()) };
        if r != NVRTC_SUCCESS {
            return Err(format!("NVRTC {out:?} of {name}: {}", self.err(r)));
        }
        if size == 0 {
            return Err(format!("NVRTC produced an empty {out:?} for {name}"));
        }
        Ok(buf)
    }

    /// The program's compile log (empty when there is none).
    fn log_of(&self, prog: Prog) -> String {
        let mut size = 0usize;
        // SAFETY: a live program; valid out pointer.
        if unsafe { (self.log_size)(prog, &mut size) } != NVRTC_SUCCESS || size == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds the `size` bytes (NUL included) NVRTC writes.
        if unsafe { (self.log)(prog, buf.as_mut_ptr().cast()) } != NVRTC_SUCCESS {
            return String::new();
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim_end().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_an_error_naming_what_was_tried() {
        let e = Nvrtc::load(&["/nonexistent/dir/libnvrtc.so.99".to_string()]).unwrap_err();
        assert!(e.contains("/nonexistent/dir/libnvrtc.so.99"), "{e}");
        assert!(e.contains("NVRTC"), "{e}");
        // A library that is not NVRTC is rejected for its missing functions.
        let e = Nvrtc::load(&["libc.so.6".to_string()]).unwrap_err();
        assert!(e.contains("missing nvrtcVersion"), "{e}");
    }

    #[test]
    fn candidates_cover_the_cuda_directories() {
        if std::env::var_os(ENV_LIB).is_some() {
            assert_eq!(Nvrtc::candidates().len(), 1);
            return;
        }
        let c = Nvrtc::candidates();
        assert_eq!(&c[..4], &LIB_NAMES.map(String::from));
        assert!(c.contains(&"/usr/local/cuda/lib64/libnvrtc.so.13".to_string()));
    }

    /// Without NVRTC: an error, not a panic. With it: a trivial program
    /// compiles, a broken one fails with its log.
    #[test]
    fn get_and_compile() {
        let n = match Nvrtc::get() {
            Err(e) => {
                crate::cuda::skip_notice(&e.to_string());
                assert!(e.contains("libnvrtc.so"), "{e}");
                return;
            }
            Ok(n) => n,
        };
        eprintln!("{n:?} archs {:?}", n.supported_archs());
        let src = "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }";
        let ptx = n
            .compile(src, "k.cu", &["--gpu-architecture=compute_75"])
            .unwrap();
        assert_eq!(ptx.last(), Some(&0));
        let text = String::from_utf8_lossy(&ptx);
        assert!(text.contains(".entry k"), "{text}");
        if n.has_cubin() {
            let cubin = n
                .compile_cubin(src, "k.cu", &["--gpu-architecture=sm_75"])
                .unwrap();
            assert_eq!(&cubin[..4], b"\x7fELF");
        }
        let e = n
            .compile(
                "this is not C",
                "bad.cu",
                &["--gpu-architecture=compute_75"],
            )
            .unwrap_err();
        assert!(e.contains("bad.cu") && e.contains("error"), "{e}");
    }
}
