//! The CUDA device header (`include/ferrocx_ibgda.h`): its record encoders,
//! compiled on the host, write the very bytes the proxy decodes; and the
//! whole header, device functions included, compiles with NVRTC. Both skip
//! with a notice where the compiler is missing. (Nothing here runs a GPU.)

use ferrocx_ibgda::queue::{SignalOp, WorkRecord, RECORD_BYTES};

const HEADER: &str = include_str!("../include/ferrocx_ibgda.h");

/// A small deterministic generator (xorshift), so the records vary.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn records() -> Vec<WorkRecord> {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut v = vec![WorkRecord::Quiet];
    for i in 0..60 {
        let window = rng.next() as u32;
        let dst = rng.next();
        let src = rng.next();
        let bytes = rng.next() as u32;
        v.push(match i % 3 {
            0 => WorkRecord::Put {
                window,
                dst,
                src,
                bytes,
            },
            1 => WorkRecord::PutSignal {
                window,
                dst,
                src,
                bytes,
                signal: rng.next() & !7,
                value: rng.next(),
                op: if i % 2 == 0 {
                    SignalOp::Set
                } else {
                    SignalOp::Add
                },
            },
            _ => WorkRecord::FetchAdd {
                window,
                dst: dst & !7,
                add: src,
            },
        });
    }
    v
}

/// The C call that encodes `r` into `b`.
fn c_call(r: &WorkRecord) -> String {
    match *r {
        WorkRecord::Put {
            window,
            dst,
            src,
            bytes,
        } => format!("fxg_encode_put(b, {window}u, {dst}ull, {src}ull, {bytes}u);"),
        WorkRecord::PutSignal {
            window,
            dst,
            src,
            bytes,
            signal,
            value,
            op,
        } => {
            let op = match op {
                SignalOp::Set => "FXG_SIGNAL_SET",
                SignalOp::Add => "FXG_SIGNAL_ADD",
            };
            format!(
                "fxg_encode_put_signal(b, {window}u, {dst}ull, {src}ull, {bytes}u, {signal}ull, {value}ull, {op});"
            )
        }
        WorkRecord::FetchAdd { window, dst, add } => {
            format!("fxg_encode_fetch_add(b, {window}u, {dst}ull, {add}ull);")
        }
        WorkRecord::Quiet => "fxg_encode_quiet(b);".to_string(),
    }
}

#[test]
fn host_encoders_write_what_the_proxy_decodes() {
    let recs = records();
    let mut src =
        format!("{HEADER}\n#include <stdio.h>\nint main(void) {{\n    unsigned char b[64];\n");
    for r in &recs {
        // Stale bytes in the buffer must not leak into the next record.
        src.push_str("    for (int i = 0; i < 64; ++i) b[i] = 0xa5;\n    ");
        src.push_str(&c_call(r));
        src.push_str(
            "\n    for (int i = 8; i < 64; ++i) printf(\"%02x\", b[i]);\n    printf(\"\\n\");\n",
        );
    }
    src.push_str("    return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("fxg-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("enc.c"), dir.join("enc"));
    std::fs::write(&c, &src).unwrap();
    let built = std::process::Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&c)
        .output();
    let built = match built {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipping: no C compiler (cc): {e}");
            return;
        }
    };
    assert!(
        built.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = std::process::Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), recs.len());
    for (r, line) in recs.iter().zip(lines) {
        let want: String = r.encode()[8..].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(line, want, "{r:?}");
        // And the proxy's decoder reads the C bytes back as the same request.
        let mut bytes = [0u8; RECORD_BYTES];
        for (i, b) in bytes[8..].iter_mut().enumerate() {
            *b = u8::from_str_radix(&line[2 * i..2 * i + 2], 16).unwrap();
        }
        assert_eq!(WorkRecord::decode(&bytes).unwrap(), *r);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn device_functions_compile_with_nvrtc() {
    let nvrtc = match ferrocx_sdk::kernels::nvrtc::Nvrtc::get() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("skipping: {e}");
            return;
        }
    };
    let src = format!(
        "{HEADER}\n\
         extern \"C\" __global__ void fxg_probe(fxg_u8* ring, fxg_u64* claimed, const volatile fxg_u64* sig, fxg_u64* out) {{\n\
             struct fxg_queue q = {{ ring, claimed }};\n\
             out[0] = fxg_put(q, 1u, 64ull, 0ull, 4096u, 1000000ull);\n\
             out[1] = fxg_put_signal(q, 1u, 64ull, 0ull, 4096u, 8ull, 1ull, FXG_SIGNAL_ADD, 1000000ull);\n\
             out[2] = fxg_fetch_add(q, 1u, 16ull, 1ull, 1000000ull);\n\
             out[3] = fxg_post_quiet(q, 1000000ull);\n\
             out[4] = (fxg_u64)fxg_signal_wait_until(sig, FXG_CMP_GE, 1ull, 1000000ull);\n\
         }}\n"
    );
    let ptx = nvrtc
        .compile(&src, "fxg_probe.cu", &["--gpu-architecture=compute_80"])
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&ptx);
    assert!(text.contains(".entry fxg_probe("), "{text}");
    // The post claims with a CAS and publishes with a 64-bit max.
    assert!(
        text.contains("atom.global.cas.b64") || text.contains("atom.cas.b64"),
        "{text}"
    );
    assert!(
        text.contains("atom.global.max.u64") || text.contains("atom.max.u64"),
        "{text}"
    );
}
