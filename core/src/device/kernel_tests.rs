//! Tests of the SDK's reduction kernels against the core's CPU kernels
//! (`crate::reduce`), and on a GPU when there is one.

use super::testdata::{compare, gen, Rng};
use crate::types::{DataType, RedOp};
use ferrocx_sdk::cuda;
use ferrocx_sdk::kernels::nvrtc::Nvrtc;
use ferrocx_sdk::kernels::*;
use std::fmt::Write as _;

/// Without a GPU: an error value naming the reason, never a panic.
#[test]
fn without_gpu_new_is_an_error() {
    match cuda::available() {
        Err(why) => {
            let e = Kernels::for_device(0).unwrap_err();
            assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
            let m = e.to_string();
            assert!(m.contains("CUDA") && m.contains(&why), "{m}");
            ferrocx_sdk::cuda::skip_notice(&format!("no CUDA ({m})"));
        }
        Ok(_) => match Kernels::for_device(0) {
            Ok(k) => eprintln!("{k:?}"),
            Err(e) => {
                assert!(e.to_string().contains("NVRTC"), "{e}");
                ferrocx_sdk::cuda::skip_notice(&e.to_string());
            }
        },
    }
    // An unknown device is an error too, with or without CUDA.
    assert!(Kernels::for_device(12345).is_err());
}

#[test]
fn sources_are_complete() {
    for dtype in DataType::ALL {
        for op in RedOp::ALL {
            let s = reduce_source(dtype, op);
            let name = kernel_name(dtype, Kind::of(op));
            assert!(s.contains(&format!("{name}(elem_t* dst")), "{s}");
            assert!(s.contains("fx_op(") && !s.contains("FX_NAME"));
        }
        let s = finish_source(dtype);
        assert!(
            s.contains(&format!("ferrocx_finish_{}(", dtype.name())),
            "{s}"
        );
        assert!(s.contains("fx_fin("));
    }
    assert!(reduce_source(DataType::Bf16, RedOp::Avg).contains("ferrocx_reduce_bfloat16_sum("));
}

/// The generated element functions, compiled as host C++ with the
/// system's compiler (`c++`; skipped without one), against the CPU
/// kernels of `crate::reduce`: checks the translation of every type ×
/// operator (and avg's division) without a GPU. For f16/bf16 every one of
/// the 65536 values of `a` is covered.
#[test]
fn element_functions_match_cpu_kernels() {
    let dir = std::env::temp_dir().join(format!("ferrocx-kern-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut src = String::from(PRELUDE);
    for dtype in DataType::ALL {
        for kind in [Kind::Sum, Kind::Prod, Kind::Min, Kind::Max, Kind::Finish] {
            let k = slot(dtype, kind);
            let body = if kind == Kind::Finish {
                "D[i] = fx_fin(D[i], si, ui, f, dd);"
            } else {
                "D[i] = fx_op(A[i], B[i]);"
            };
            let _ = write!(
                src,
                "namespace fx_{k} {{\n{}\nextern \"C\" void fx_host_{k}(void* d, const void* a, const void* b, unsigned long long n, long long si, unsigned long long ui, float f, double dd) {{\n  elem_t* D = (elem_t*)d; const elem_t* A = (const elem_t*)a; const elem_t* B = (const elem_t*)b;\n  (void)A; (void)B; (void)si; (void)ui; (void)f; (void)dd;\n  for (unsigned long long i = 0; i < n; ++i) {{ {body} }}\n}}\n}}\n",
                element_source(dtype, kind)
            );
        }
    }
    let cpp = dir.join("elements.cpp");
    let so = dir.join("libelements.so");
    std::fs::write(&cpp, &src).unwrap();
    let out = std::process::Command::new("c++")
        .args([
            "-O2",
            "-std=c++17",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-fPIC",
            "-shared",
            "-w",
            "-o",
        ])
        .arg(&so)
        .arg(&cpp)
        .output();
    let out = match out {
        Err(e) => {
            ferrocx_sdk::cuda::skip_notice(&format!("no C++ compiler (c++): {e}"));
            return;
        }
        Ok(o) => o,
    };
    assert!(
        out.status.success(),
        "c++ failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    type HostFn = unsafe extern "C" fn(*mut u8, *const u8, *const u8, u64, i64, u64, f32, f64);
    // SAFETY: the library just built from our own source.
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut failures = Vec::new();
    for dtype in DataType::ALL {
        let n = 200_000;
        let mut a = gen(dtype, n, &mut rng);
        let mut b = gen(dtype, n, &mut rng);
        if dtype.size() == 2 {
            // Every 16-bit pattern as `a` (and as `b`, shifted).
            for i in 0..65536usize {
                a[2 * i..2 * i + 2].copy_from_slice(&(i as u16).to_le_bytes());
                let j = i.wrapping_mul(40503) & 0xffff;
                b[2 * (65536 + i)..2 * (65536 + i) + 2].copy_from_slice(&(j as u16).to_le_bytes());
            }
        }
        for op in RedOp::ALL {
            let kind = Kind::of(op);
            let host = |kind: Kind| -> libloading::Symbol<'_, HostFn> {
                let name = format!("fx_host_{}\0", slot(dtype, kind));
                // SAFETY: the function of that name in the library has
                // the `HostFn` signature.
                unsafe { lib.get::<HostFn>(name.as_bytes()) }.unwrap()
            };
            let mut want = vec![0u8; a.len()];
            let mut got = vec![0u8; a.len()];
            // SAFETY: three distinct buffers of `n` elements, aligned (Vec<u8>
            // data is at least 8-aligned from the allocator for these sizes).
            unsafe {
                crate::reduce::reduce(dtype, op, want.as_mut_ptr(), a.as_ptr(), b.as_ptr(), n);
                host(kind)(
                    got.as_mut_ptr(),
                    a.as_ptr(),
                    b.as_ptr(),
                    n as u64,
                    0,
                    0,
                    0.0,
                    0.0,
                );
            }
            let crate::device::testdata::Cmp { bad, first, .. } = compare(dtype, op, &want, &got);
            if bad > 0 {
                failures.push(format!("{dtype} {op}: {bad} mismatches:{first}"));
            }
            if op == RedOp::Avg {
                for nranks in [2usize, 3, 7, 1000] {
                    let mut w = want.clone();
                    let mut g = want.clone();
                    // SAFETY: `n` elements each.
                    unsafe {
                        crate::reduce::finish(dtype, op, w.as_mut_ptr(), n, nranks);
                        host(Kind::Finish)(
                            g.as_mut_ptr(),
                            std::ptr::null(),
                            std::ptr::null(),
                            n as u64,
                            nranks as i64,
                            nranks as u64,
                            nranks as f32,
                            nranks as f64,
                        );
                    }
                    let crate::device::testdata::Cmp { bad, first, .. } =
                        compare(dtype, op, &w, &g);
                    if bad > 0 {
                        failures.push(format!("{dtype} avg /{nranks}: {bad} mismatches:{first}"));
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every source compiles with NVRTC, when it is here (skipped otherwise):
/// CUBIN and PTX for sm_90; the PTX of reductions uses 16-byte vector
/// accesses, no local memory, no fused multiply-add, IEEE division.
#[test]
fn sources_compile_with_nvrtc() {
    let nvrtc = match Nvrtc::get() {
        Ok(n) => n,
        Err(e) => {
            ferrocx_sdk::cuda::skip_notice(&e.to_string());
            return;
        }
    };
    let archs = nvrtc.supported_archs().unwrap_or_default();
    eprintln!("{nvrtc:?}, archs {archs:?}");
    let cc = if archs.is_empty() || archs.contains(&90) {
        90
    } else {
        *archs.iter().max().unwrap()
    };
    for dtype in DataType::ALL {
        for kind in [Kind::Sum, Kind::Prod, Kind::Min, Kind::Max, Kind::Finish] {
            let name = kernel_name(dtype, kind);
            let ptx = compile(nvrtc, cc, Image::Ptx, dtype, kind).unwrap_or_else(|e| panic!("{e}"));
            let text = String::from_utf8_lossy(&ptx.bytes);
            assert!(text.contains(&format!(".entry {name}(")), "{name}: {text}");
            // The LL exchange kernel rides in every module but the finish step's.
            match ll_name(dtype, kind) {
                Some(ll) => assert!(text.contains(&format!(".entry {ll}(")), "{ll}: {text}"),
                None => assert!(!text.contains(".entry ferrocx_ll_"), "{name}"),
            }
            // So does the Simple one.
            match simple_name(dtype, kind) {
                Some(sp) => assert!(text.contains(&format!(".entry {sp}(")), "{sp}: {text}"),
                None => assert!(!text.contains(".entry ferrocx_simple_"), "{name}"),
            }
            // The point-to-point kernel rides in u8 sum's module alone.
            match p2p_name(dtype, kind) {
                Some(p) => assert!(text.contains(&format!(".entry {p}(")), "{p}: {text}"),
                None => assert!(!text.contains(".entry ferrocx_p2p"), "{name}"),
            }
            assert!(
                !text.contains("__local_depot"),
                "{name} uses local memory:\n{text}"
            );
            assert!(!text.contains("fma."), "{name} has an FMA:\n{text}");
            let wide = |op: &str| {
                text.contains(&format!("{op}.global.v4."))
                    || ["u64", "s64", "b64", "f64"]
                        .iter()
                        .any(|t| text.contains(&format!("{op}.global.v2.{t}")))
            };
            let v4 = wide("ld") && wide("st");
            assert!(v4, "{name}: no 16-byte vector accesses:\n{text}");
            if kind == Kind::Finish && dtype == DataType::F32 {
                assert!(text.contains("div.rn.f32"), "{name}:\n{text}");
            }
            if nvrtc.has_cubin() {
                let c = compile(nvrtc, cc, Image::Auto, dtype, kind).unwrap();
                assert!(c.what.starts_with("CUBIN"), "{}", c.what);
                assert_eq!(&c.bytes[..4], b"\x7fELF");
            }
        }
    }
    // An architecture newer than any this NVRTC knows falls back to PTX.
    let c = compile(nvrtc, 999, Image::Auto, DataType::F32, Kind::Sum).unwrap();
    assert!(c.what.starts_with("PTX"), "{}", c.what);
}

/// NVRTC 12+ compiles from several threads at once (`Kernels::prepare_all`
/// compiles a communicator's modules 8 wide): the same sources compiled on
/// four threads give the very images compiled one by one.
#[test]
fn concurrent_compiles_give_the_same_images() {
    let nvrtc = match Nvrtc::get() {
        Ok(n) => n,
        Err(e) => {
            ferrocx_sdk::cuda::skip_notice(&e.to_string());
            return;
        }
    };
    let sources: Vec<String> = DataType::ALL
        .iter()
        .flat_map(|&d| [RedOp::Sum, RedOp::Max].map(|o| reduce_source(d, o)))
        .collect();
    let opts = ["--gpu-architecture=compute_80"];
    let one_by_one: Vec<Vec<u8>> = sources
        .iter()
        .map(|s| nvrtc.compile(s, "k.cu", &opts).unwrap())
        .collect();
    let at_once: Vec<Vec<u8>> = std::thread::scope(|sc| {
        let handles: Vec<_> = sources
            .chunks(sources.len().div_ceil(4))
            .map(|part| {
                sc.spawn(move || {
                    part.iter()
                        .map(|s| nvrtc.compile(s, "k.cu", &opts).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert_eq!(one_by_one.len(), at_once.len());
    for (i, (a, b)) in one_by_one.iter().zip(&at_once).enumerate() {
        assert!(
            a == b,
            "source {i}: the image differs when compiled alongside others"
        );
    }
}
