//! The CUDA device header (`include/ferrocx_ibgda.h`): its record encoders,
//! compiled on the host, write the very bytes the proxy decodes; and the
//! whole header, device functions included, compiles with NVRTC. Both skip
//! with a notice where the compiler is missing. (Nothing here runs a GPU.)

use ferrocx_ibgda::health::PeerId;
use ferrocx_ibgda::queue::{
    CompletionQueue, CqEntry, CqStatus, PathSet, SignalOp, WorkRecord, RECORD_BYTES,
};

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

/// Build `src` (C99 with the header) into an executable in a fresh temporary
/// directory and run it with `args`: its stdout, or `None` without a C compiler.
fn build_and_run(name: &str, src: &str, args: &[&std::path::Path]) -> Option<String> {
    let dir = std::env::temp_dir().join(format!("fxg-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join(format!("{name}.c")), dir.join(name));
    std::fs::write(&c, src).unwrap();
    let built = match std::process::Command::new("cc")
        .args(["-std=c99", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&c)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipping: no C compiler (cc): {e}");
            return None;
        }
    };
    assert!(
        built.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = std::process::Command::new(&exe)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    Some(String::from_utf8(out.stdout).unwrap())
}

/// The header's completion poll, compiled for the host, takes exactly the
/// completions the proxy published (across the ring's wrap), stops at one
/// whose stamp has not landed, and leaves the consumer index where the Rust
/// side reads it.
#[test]
fn host_poll_takes_what_the_proxy_published() {
    let cq = CompletionQueue::new(8).unwrap();
    let mut mem = vec![0u8; cq.ring().bytes()];
    cq.ring().init(&mut mem).unwrap();
    let entry = |i: u64| CqEntry {
        req_id: 1000 + i * 7,
        status: [CqStatus::Ok, CqStatus::PeerUnreachable, CqStatus::BadRecord][(i % 3) as usize],
        peer: PeerId(i as u32 % 5),
        paths: PathSet((i % 4) as u8),
        value: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
    };
    // Six published and taken by the Rust model of the GPU side, then seven
    // more (the ring wraps); the last one's stamp has not landed yet.
    for i in 0..6 {
        cq.push(&mut mem, &entry(i)).unwrap();
        assert!(cq.pop(&mut mem).unwrap().is_some());
    }
    for i in 6..13 {
        cq.push(&mut mem, &entry(i)).unwrap();
    }
    let last = cq.ring().offset_of(12);
    mem[last..last + 8].copy_from_slice(&5u64.to_le_bytes()); // a stale lap's stamp
    let dir = std::env::temp_dir().join(format!("fxg-cq-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("cq.bin"), dir.join("cq.out"));
    std::fs::write(&input, &mem).unwrap();
    let src = format!(
        "{HEADER}\n#include <stdio.h>\n#include <stdlib.h>\n\
         int main(int argc, char** argv) {{\n\
             (void)argc;\n\
             static fxg_u64 words[4096];\n\
             FILE* f = fopen(argv[1], \"rb\");\n\
             size_t n = fread(words, 1, sizeof words, f);\n\
             fclose(f);\n\
             struct fxg_completion c;\n\
             /* Bounded: a poll that never stops fails the test, not hangs it. */\n\
             for (int polls = 0; polls < 100 && fxg_cq_poll((fxg_u8*)words, &c); ++polls)\n\
                 printf(\"%llu %llu %u %u %u\\n\", c.req_id, c.value, c.peer, c.status, c.paths);\n\
             f = fopen(argv[2], \"wb\");\n\
             fwrite(words, 1, n, f);\n\
             fclose(f);\n\
             return 0;\n\
         }}\n"
    );
    let Some(text) = build_and_run("poll", &src, &[&input, &output]) else {
        return;
    };
    let got: Vec<String> = text.lines().map(str::to_string).collect();
    let want: Vec<String> = (6..12)
        .map(|i| {
            let e = entry(i);
            format!(
                "{} {} {} {} {}",
                e.req_id, e.value, e.peer.0, e.status as u8, e.paths.0
            )
        })
        .collect();
    assert_eq!(got, want, "entries 6..12 in order, not the unstamped 12th");
    let after = std::fs::read(&output).unwrap();
    assert_eq!(after.len(), mem.len());
    assert_eq!(cq.ring().indices(&after).unwrap(), (13, 12));
    let _ = std::fs::remove_dir_all(&dir);
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
    let Some(text) = build_and_run("enc", &src, &[]) else {
        return;
    };
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
         extern \"C\" __global__ void fxg_probe(fxg_u8* ring, fxg_u64* claimed, fxg_u8* cq, const volatile fxg_u64* sig, fxg_u64* out) {{\n\
             struct fxg_queue q = {{ ring, claimed }};\n\
             out[0] = fxg_put(q, 1u, 64ull, 0ull, 4096u, 1000000ull);\n\
             out[1] = fxg_put_signal(q, 1u, 64ull, 0ull, 4096u, 8ull, 1ull, FXG_SIGNAL_ADD, 1000000ull);\n\
             out[2] = fxg_fetch_add(q, 1u, 16ull, 1ull, 1000000ull);\n\
             out[3] = fxg_post_quiet(q, 1000000ull);\n\
             out[4] = (fxg_u64)fxg_signal_wait_until(sig, FXG_CMP_GE, 1ull, 1000000ull);\n\
             struct fxg_completion c;\n\
             int others = 0;\n\
             out[5] = (fxg_u64)fxg_wait_completion(cq, out[2], &c, &others, 1000000ull);\n\
             out[6] = c.value + (fxg_u64)others;\n\
             out[7] = (fxg_u64)fxg_quiet(q, cq, 1000000ull);\n\
             fxg_u8 w[64];\n\
             fxg_mlx5_write(w, 7u, (fxg_u32)out[0], FXG_MLX5_CQ_UPDATE, 64ull, 1u, (fxg_u64)ring, 2u, 4096u);\n\
             fxg_mlx5_place(ring, 8u, (fxg_u32)out[0], w);\n\
             fxg_mlx5_ring((volatile fxg_u32*)claimed, (volatile fxg_u64*)(claimed + 2), (fxg_u32)out[0] + 1u, w);\n\
             out[8] = fxg_put_warp(q, 1u, 0ull, 0ull, 8u, 1000ull) + fxg_put_signal_warp(q, 1u, 0ull, 0ull, 8u, 8ull, 1ull, FXG_SIGNAL_SET, 1000ull);\n\
             out[9] = (fxg_u64)fxg_quiet_warp(q, cq, 1000ull) + (fxg_u64)fxg_quiet_block(q, cq, 1000ull);\n\
             out[10] = fxg_put_block(q, 1u, 0ull, 0ull, 8u, 1000ull) + fxg_put_signal_block(q, 1u, 0ull, 0ull, 8u, 8ull, 1ull, FXG_SIGNAL_ADD, 1000ull);\n\
             fxg_u32 wc = 0, sy = 0;\n\
             out[11] = (fxg_u64)fxg_mlx5_cqe_poll(cq, 3u, 4u, &wc, &sy) + wc + sy + fxg_mlx5_cq_dbrec(5u);\n\
             struct fxg_health hh;\n\
             fxg_health_init(&hh, 1u, 10ull, 80ull);\n\
             out[12] = (fxg_u64)fxg_health_mark_bad(&hh, 0u, out[0]) + fxg_health_route(&hh) + fxg_health_restore_due(&hh, 100ull) + fxg_health_next_restore(&hh);\n\
             fxg_u32 why = 0, failovers = 0;\n\
             out[13] = (fxg_u64)fxg_mlx5_put_sync((struct fxg_mlx5_peer*)(out + 16), 0ull, (fxg_u64)ring, 8u, &why, &failovers) + why + failovers;\n\
         }}\n"
    );
    let ptx = nvrtc
        .compile(&src, "fxg_probe.cu", &["--gpu-architecture=compute_80"])
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&ptx);
    assert!(text.contains(".entry fxg_probe("), "{text}");
    // The post claims with a CAS and publishes by the stamp alone: no atomic
    // max (or any max reduction) on the ring's producer index.
    assert!(
        text.contains("atom.global.cas.b64") || text.contains("atom.cas.b64"),
        "{text}"
    );
    let maxes: Vec<&str> = text
        .lines()
        .filter(|l| {
            // The opcode, past a predicate guard (`@%p1`).
            let op = l.split_whitespace().find(|t| !t.starts_with('@'));
            op.is_some_and(|op| {
                (op.starts_with("atom.") || op.starts_with("red.")) && op.contains(".max.")
            })
        })
        .collect();
    assert!(maxes.is_empty(), "{maxes:?}");
}

/// The header's mlx5 WQE writers (what a GPU thread of the mlx5 handler will
/// write), compiled for the host, produce byte for byte what `wqe::encode`
/// does for random writes, writes with immediate and fetch-adds with random
/// flags; placed into an 8-block send queue across several wraps they leave
/// the buffer `SendQueue` leaves, and the doorbell record's word has its
/// bytes in the order `SendQueue::doorbell_record` gives.
#[test]
fn host_mlx5_writers_match_the_wqe_encoder() {
    use ferrocx_ibgda::wqe::{encode, Local, Remote, SendQueue, WorkRequest, WqeFlags, BB_BYTES};
    let mut rng = Rng(0x0b5e_55ed_cafe_f00d);
    let qpn = (rng.next() as u32) & 0x00ff_ffff;
    let mut sq = SendQueue::new(qpn, 8).unwrap();
    let mut src = format!(
        "{HEADER}\n#include <stdio.h>\nint main(void) {{\n    unsigned char w[64];\n    static unsigned char sq[8 * 64];\n"
    );
    let mut want = Vec::new();
    let n = 29u32; // more than three laps of the 8 blocks
    for i in 0..n {
        let flags = WqeFlags {
            signaled: rng.next() & 1 == 1,
            solicited: rng.next() & 1 == 1,
            fence: rng.next() & 1 == 1,
        };
        let remote = Remote {
            addr: rng.next(),
            rkey: rng.next() as u32,
        };
        let (wr, call) = match i % 3 {
            0 | 1 => {
                let local = Local {
                    addr: rng.next(),
                    lkey: rng.next() as u32,
                    len: (rng.next() as u32) & 0x7fff_ffff,
                };
                let args = format!(
                    "w, {qpn}u, {i}u, {}u, {}ull, {}u, {}ull, {}u, {}u",
                    flags.fm_ce_se(),
                    remote.addr,
                    remote.rkey,
                    local.addr,
                    local.lkey,
                    local.len
                );
                if i % 3 == 0 {
                    (
                        WorkRequest::Write { local, remote },
                        format!("fxg_mlx5_write({args});"),
                    )
                } else {
                    let imm = rng.next() as u32;
                    (
                        WorkRequest::WriteImm { local, remote, imm },
                        format!("fxg_mlx5_write_imm({args}, {imm}u);"),
                    )
                }
            }
            _ => {
                let remote = Remote {
                    addr: remote.addr & !7,
                    ..remote
                };
                let (add, result, lkey) = (rng.next(), rng.next(), rng.next() as u32);
                (
                    WorkRequest::FetchAdd {
                        remote,
                        add,
                        result: Local {
                            addr: result,
                            lkey,
                            len: 8,
                        },
                    },
                    format!(
                        "fxg_mlx5_fetch_add(w, {qpn}u, {i}u, {}u, {}ull, {}u, {add}ull, {result}ull, {lkey}u);",
                        flags.fm_ce_se(),
                        remote.addr,
                        remote.rkey
                    ),
                )
            }
        };
        let mut block = [0u8; BB_BYTES];
        encode(&wr, qpn, i as u16, flags, &mut block).unwrap();
        want.push(block.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let posted = sq.post(&wr, flags).unwrap();
        assert_eq!(u32::from(posted.wqe_index), i);
        sq.retire(posted.wqe_index).unwrap();
        src.push_str(&format!(
            "    for (int i = 0; i < 64; ++i) w[i] = 0xa5;\n    {call}\n    fxg_mlx5_place(sq, 8u, {i}u, w);\n    for (int i = 0; i < 64; ++i) printf(\"%02x\", w[i]);\n    printf(\"\\n\");\n"
        ));
    }
    src.push_str(&format!(
        "    for (int i = 0; i < 8 * 64; ++i) printf(\"%02x\", sq[i]);\n    printf(\"\\n\");\n    \
         fxg_u32 rec = fxg_mlx5_dbrec({n}u);\n    unsigned char* r = (unsigned char*)&rec;\n    \
         printf(\"%02x%02x%02x%02x\\n\", r[0], r[1], r[2], r[3]);\n    return 0;\n}}\n"
    ));
    let Some(text) = build_and_run("mlx5", &src, &[]) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), n as usize + 2);
    for (i, (got, want)) in lines.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "WQE {i}");
    }
    let buf: String = sq.bytes().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(lines[n as usize], buf, "the send queue after {n} posts");
    let rec: String = sq
        .doorbell_record()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(lines[n as usize + 1], rec, "the doorbell record");
}

/// The header's CQ poll reads what `cqe::poll` reads: a CQ of 8 entries
/// filled lap by lap with completions and errors (random counters,
/// syndromes, responder or requester) as `cqe::written` lays them out, then
/// polled at every consumer index of three laps, entries of the current lap
/// taken and the previous lap's seen as empty; and the CQ doorbell record's
/// word has the bytes `CompletionRing::doorbell_record` gives.
#[test]
fn host_mlx5_cq_poll_matches_the_cqe_parser() {
    use ferrocx_ibgda::cqe::{poll, written, CompletionRing, Cqe, Syndrome, CQE_BYTES, OPCODE_REQ};
    let mut rng = Rng(0xc0ff_ee00_1234_5678);
    let (entries, log) = (8u32, 3u8);
    let mut buf = CompletionRing::new(entries).unwrap().initial_buffer();
    let mut src = format!("{HEADER}\n#include <stdio.h>\nint main(void) {{\n    static unsigned char cq[8 * 64];\n    fxg_u32 w, s; int k;\n    for (int i = 0; i < 8; ++i) cq[i * 64 + 63] = 0xf0; /* as a CQ starts */\n");
    let mut want = Vec::new();
    let show = |c: &Cqe| match *c {
        Cqe::Empty => "0".to_string(),
        Cqe::Done { wqe_counter, .. } => format!("1 {wqe_counter} 0"),
        Cqe::Failed {
            wqe_counter,
            syndrome,
            ..
        } => format!("2 {wqe_counter} {}", syndrome.to_u8()),
        Cqe::Unexpected {
            wqe_counter,
            opcode,
        } => format!("3 {wqe_counter} {opcode}"),
    };
    for ci in 0..3 * entries {
        let lap = ((ci >> log) & 1) as u8;
        // Before the NIC writes entry ci: the previous lap's bytes (or the
        // initial ones) read as empty.
        let slot = (ci % entries) as usize * CQE_BYTES;
        let before: &[u8; CQE_BYTES] = buf[slot..slot + CQE_BYTES].try_into().unwrap();
        assert_eq!(poll(before, ci, log), Cqe::Empty);
        let c = if rng.next().is_multiple_of(7) {
            Cqe::Unexpected {
                wqe_counter: rng.next() as u16,
                opcode: [0x1u8, 0x2, 0x5, 0xc][(rng.next() % 4) as usize],
            }
        } else if rng.next().is_multiple_of(4) {
            Cqe::Failed {
                wqe_counter: rng.next() as u16,
                syndrome: Syndrome::from_u8(rng.next() as u8),
                vendor: rng.next() as u8,
                responder: rng.next() & 1 == 1,
            }
        } else {
            Cqe::Done {
                wqe_counter: rng.next() as u16,
                opcode: OPCODE_REQ,
                byte_cnt: rng.next() as u32,
            }
        };
        let src_poll = format!("    k = fxg_mlx5_cqe_poll(cq, {ci}u, {log}u, &w, &s);\n    if (k) printf(\"%d %u %u\\n\", k, w, s); else printf(\"0\\n\");\n");
        let e = written(&c, lap);
        let bytes: Vec<String> = e.iter().map(|b| format!("{b}")).collect();
        // The previous lap's entry first (empty), then the new one.
        src.push_str(&src_poll);
        want.push("0".to_string());
        buf[slot..slot + CQE_BYTES].copy_from_slice(&e);
        src.push_str(&format!(
            "    {{ static const unsigned char e[64] = {{{}}}; for (int i = 0; i < 64; ++i) cq[{slot} + i] = e[i]; }}\n",
            bytes.join(",")
        ));
        src.push_str(&src_poll);
        let now: &[u8; CQE_BYTES] = buf[slot..slot + CQE_BYTES].try_into().unwrap();
        assert_eq!(poll(now, ci, log), c);
        want.push(show(&c));
    }
    // Taking the 8 entries of lap 2 (they read as lap 0's) leaves the
    // consumer index at 8.
    let mut ring = CompletionRing::new(entries).unwrap();
    while ring.next(&buf[..]) != Cqe::Empty {}
    let n = ring.consumer_index();
    assert_eq!(n, entries);
    src.push_str(&format!(
        "    fxg_u32 rec = fxg_mlx5_cq_dbrec({n}u);\n    unsigned char* r = (unsigned char*)&rec;\n    \
         printf(\"%02x%02x%02x%02x\\n\", r[0], r[1], r[2], r[3]);\n    \
         rec = fxg_mlx5_cq_dbrec(0x1234567u);\n    printf(\"%02x%02x%02x%02x\\n\", r[0], r[1], r[2], r[3]);\n    return 0;\n}}\n"
    ));
    let Some(text) = build_and_run("mlx5-cq", &src, &[]) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), want.len() + 2, "{text}");
    for (i, (got, want)) in lines.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "poll {i}");
    }
    let rec: String = ring
        .doorbell_record()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(lines[want.len()], rec, "the CQ doorbell record");
    assert_eq!(lines[want.len() + 1], "00234567", "24 bits, big-endian");
}

/// The header's GPU-side path health (`fxg_health_*`) decides as
/// `health::PathHealth` does: 40 random scripts (with and without a backup,
/// fixed and growing windows) of failures on either path, restores, routes,
/// next-restore times and windows at random times, often within a window of
/// the last switch back (so paths flap and windows double to their cap),
/// run through both; every answer compared.
#[test]
fn host_path_health_matches_the_health_machine() {
    use ferrocx_ibgda::health::{
        HealthConfig, Nanos, Path, PathFault, PathHealth, PathStatus, PeerId, Seq,
    };
    use std::time::Duration;
    let mut rng = Rng(0x4ea1_7e57_0dd5_eed5);
    let mut src =
        format!("{HEADER}\n#include <stdio.h>\nint main(void) {{\n    struct fxg_health h;\n");
    let mut want: Vec<String> = Vec::new();
    for script in 0..40 {
        let has_backup = script % 4 != 3;
        // Most scripts: small windows. Some: a cap below the window (taken
        // as the window), and windows near the end of time (sums saturate).
        let (recovery, max) = match script % 10 {
            7 => {
                let r = 1_000 + rng.next() % 5_000;
                (r, r / 2)
            }
            8 => (
                u64::MAX / 3 + rng.next() % 1_000,
                u64::MAX - rng.next() % 1_000,
            ),
            _ => {
                let r = 1_000 + rng.next() % 5_000;
                let m = if script % 3 == 0 {
                    r
                } else {
                    r * (2 + rng.next() % 10)
                };
                (r, m)
            }
        };
        let cfg = HealthConfig {
            timeout: Duration::from_nanos(recovery / 2),
            recovery: Duration::from_nanos(recovery),
            max_recovery: Duration::from_nanos(max),
        };
        let mut h = PathHealth::new(PeerId(1), has_backup, &cfg);
        src.push_str(&format!(
            "    fxg_health_init(&h, {}u, {recovery}ull, {max}ull);\n",
            has_backup as u32
        ));
        let mut now = 0u64;
        for step in 0..120u64 {
            // Mostly forward; now and then a report of an earlier failure.
            if rng.next().is_multiple_of(6) {
                now = now.saturating_sub(rng.next() % recovery.min(1 << 40));
            } else {
                now = now.saturating_add(rng.next() % (recovery / 2));
            }
            let path = if rng.next().is_multiple_of(3) {
                Path::Backup
            } else {
                Path::Primary
            };
            let p = if path == Path::Backup { 1 } else { 0 };
            match rng.next() % 5 {
                0 | 1 => {
                    let why = PathFault::Timeout {
                        seq: Seq(step),
                        atomic: false,
                        waited: Duration::ZERO,
                    };
                    let took = h.mark_bad(path, why, Nanos(now));
                    want.push(format!("m{}", took as u32));
                    src.push_str(&format!(
                        "    printf(\"m%d\\n\", fxg_health_mark_bad(&h, {p}u, {now}ull));\n"
                    ));
                }
                2 => {
                    let back = h.restore_due(Nanos(now));
                    let bits: u32 = back
                        .iter()
                        .map(|(q, _)| if *q == Path::Backup { 2 } else { 1 })
                        .sum();
                    want.push(format!("r{bits}"));
                    src.push_str(&format!(
                        "    printf(\"r%u\\n\", fxg_health_restore_due(&h, {now}ull));\n"
                    ));
                }
                3 => {
                    let r = match h.route() {
                        Ok(Path::Primary) => 0,
                        Ok(Path::Backup) => 1,
                        Err(_) => 2,
                    };
                    want.push(format!("p{r}"));
                    src.push_str("    printf(\"p%u\\n\", fxg_health_route(&h));\n");
                    let next = h.next_restore().map_or(u64::MAX, |n| n.0);
                    want.push(format!("n{next}"));
                    src.push_str(
                        "    printf(\"n%llu\\n\", (unsigned long long)fxg_health_next_restore(&h));\n",
                    );
                }
                _ => {
                    // A window and a state, where the path exists.
                    if let (Some(w), Some(st)) = (h.window(path), h.status(path)) {
                        let down = matches!(st, PathStatus::Down { .. }) as u32;
                        want.push(format!("w{} {down}", w.as_nanos()));
                        src.push_str(&format!(
                            "    printf(\"w%llu %u\\n\", (unsigned long long)h.p[{p}].window, h.p[{p}].down);\n"
                        ));
                    }
                }
            }
        }
    }
    src.push_str("    return 0;\n}\n");
    // The scripts reach what they are for: flaps with windows grown past the base.
    assert!(
        want.iter().any(|l| l.starts_with("w")
            && l.split(' ').next().unwrap()[1..].parse::<u64>().unwrap() > 6_000),
        "no window grew"
    );
    assert!(
        want.iter().any(|l| l == "p2"),
        "no script had both paths down"
    );
    assert!(want.iter().any(|l| l == "r1") && want.iter().any(|l| l == "r2"));
    let Some(text) = build_and_run("health", &src, &[]) else {
        return;
    };
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), want.len(), "{text}");
    for (i, (got, want)) in lines.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "answer {i}");
    }
}

/// The header's put with failover (`fxg_mlx5_put_sync`) against a simulated
/// NIC per path, as host C: the NIC reads each WQE the put wrote at the
/// doorbell's producer index (opcode, addresses, length from the mlx5
/// layout), copies the bytes and writes a CQE with the lap's owner bit, or
/// drops the CQE (the bytes landed), or writes an error CQE, or does nothing
/// (dead). Healthy puts stay on the primary; a lost CQE fails over after the
/// timeout and the primary is taken back after its window; a
/// retry-exceeded error fails over at once; a remote-access error is the
/// request's (the path stays up); both paths dead is unreachable within two
/// timeouts; a primary failing right after each switch back doubles its
/// window to the cap. Every byte is checked.
#[test]
fn host_mlx5_put_fails_over_and_switches_back() {
    const PROGRAM: &str = r#"
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static unsigned long long fake_now;
static void nic_idle(void);
#define FXG_HOST_CLOCK() (fake_now)
#define FXG_HOST_IDLE() nic_idle()
"#;
    const BODY: &str = r#"
enum { OK, DROP, ERR_PATH, ERR_REQ, DEAD, LATE, LATE_ERR };
struct nic {
    struct fxg_mlx5_path* p;
    fxg_u32 done, cq_pi;
    int mode, left; /* `left` WQEs get `mode`, then OK again (DEAD: forever) */
    fxg_u8 sq[16 * 64];
    fxg_u8 cq[16 * 64];
    fxg_u32 dbrec, cq_dbrec;
    fxg_u64 uar;
    fxg_u64 late_at; /* LATE, LATE_ERR: when the held CQE is written (0: none held) */
    fxg_u32 late_idx, late_syndrome;
};
static struct nic nics[2];
static int overflow; /* a CQE the NIC had no room for (the CQ doorbell record not kept) */
static int unfenced; /* WRITEs to the signal word posted without the fence flag */
static int max_out;  /* the most WQEs a path held that the NIC had not completed */
static unsigned char window[4096], src[4096];
static fxg_u64 be(const fxg_u8* b, int n) { fxg_u64 v = 0; for (int i = 0; i < n; ++i) v = (v << 8) | b[i]; return v; }
static void cqe(struct nic* n, fxg_u32 idx, fxg_u32 opcode, fxg_u32 syndrome) {
    const fxg_u8* c = (const fxg_u8*)&n->cq_dbrec;
    const fxg_u32 consumed = ((fxg_u32)c[1] << 16) | ((fxg_u32)c[2] << 8) | c[3];
    if (((n->cq_pi - consumed) & 0xffffffu) >= 16u) { overflow = 1; return; }
    fxg_u8* e = n->cq + (n->cq_pi & 15u) * 64;
    memset(e, 0, 64);
    e[55] = (fxg_u8)syndrome;
    e[60] = (fxg_u8)(idx >> 8); e[61] = (fxg_u8)idx;
    e[63] = (fxg_u8)((opcode << 4) | ((n->cq_pi >> 4) & 1u));
    n->cq_pi++;
}
static void nic_step(struct nic* n) {
    const fxg_u8* d = (const fxg_u8*)&n->dbrec;
    const fxg_u32 pi = ((fxg_u32)d[2] << 8) | d[3];
    /* WQEs posted and not read yet: more than the queue's 16 would have
       overwritten some. A dead NIC reads none. */
    const int out = (int)((pi - n->done) & 0xffffu);
    if (out > max_out) max_out = out;
    if (n->mode == DEAD && n->left == 0) return;
    /* The NIC looks at the queue only once the doorbell was rung with the
       last WQE's first 8 bytes. */
    if ((n->done & 0xffffu) != pi && memcmp(&n->uar, n->sq + ((pi - 1u) & 15u) * 64, 8) != 0) return;
    while ((n->done & 0xffffu) != pi) {
        const fxg_u8* w = n->sq + (n->done & 15u) * 64;
        const fxg_u32 idx = (fxg_u32)be(w + 1, 2);
        const fxg_u64 raddr = be(w + 16, 8), laddr = be(w + 40, 8);
        const fxg_u32 len = (fxg_u32)be(w + 32, 4);
        int mode = n->left > 0 || n->mode == DEAD ? n->mode : OK;
        if (n->left > 0) n->left--;
        if (w[3] != FXG_MLX5_OPCODE_RDMA_WRITE) mode = ERR_REQ;
        if (mode == OK || mode == DROP || mode == LATE) memcpy((void*)(size_t)raddr, (const void*)(size_t)laddr, len);
        if (mode == LATE || mode == LATE_ERR) {
            n->late_at = fake_now + 30000;
            n->late_idx = idx;
            n->late_syndrome = mode == LATE ? 0 : 0x15;
        }
        const int signaled = (w[11] & FXG_MLX5_CQ_UPDATE) != 0;
        if (raddr == (fxg_u64)(size_t)(window + 4088) && (w[11] & FXG_MLX5_FENCE) == 0) ++unfenced;
        if (mode == OK && signaled) cqe(n, idx, 0x0u, 0);
        if (mode == ERR_PATH) cqe(n, idx, 0xdu, 0x15);
        if (mode == ERR_REQ) cqe(n, idx, 0xdu, 0x13);
        n->done++;
    }
}
static void nic_idle(void) {
    fake_now += 100;
    for (int i = 0; i < 2; ++i) {
        if (nics[i].late_at && fake_now >= nics[i].late_at) {
            cqe(&nics[i], nics[i].late_idx, nics[i].late_syndrome ? 0xdu : 0x0u, nics[i].late_syndrome);
            nics[i].late_at = 0;
        }
        nic_step(&nics[i]);
    }
}

static struct fxg_mlx5_peer peer;
static void setup_with(fxg_u64 recovery, fxg_u64 most) {
    memset(&nics, 0, sizeof nics);
    memset(&peer, 0, sizeof peer);
    for (int i = 0; i < 2; ++i) {
        struct fxg_mlx5_path* p = &peer.path[i];
        nics[i].p = p;
        p->sq = nics[i].sq; p->slots = 16; p->qpn = 0x100 + i;
        p->dbrec = &nics[i].dbrec; p->uar = &nics[i].uar;
        p->cq = nics[i].cq; p->cq_log = 4; p->cq_dbrec = &nics[i].cq_dbrec;
        p->raddr = (fxg_u64)(size_t)window; p->rkey = 7; p->lkey = 9;
        for (int e = 0; e < 16; ++e) nics[i].cq[e * 64 + 63] = 0xf0;
    }
    peer.timeout_ns = 10000;
    fxg_health_init(&peer.health, 1u, recovery, most);
    memset(window, 0, sizeof window);
    max_out = 0;
}
static void setup(void) { setup_with(50000, 400000); }
/* n puts of 64 bytes, each a new pattern; counts and checks every byte. */
static int put_many(int n, fxg_u32* failovers, int* on_primary, int* bad) {
    int ok = 0;
    for (int i = 0; i < n; ++i) {
        const fxg_u32 off = (fxg_u32)(i % 64) * 64;
        for (int b = 0; b < 64; ++b) src[off + b] = (unsigned char)(i * 7 + b + 1);
        fxg_u32 why = 0;
        if (fxg_health_route(&peer.health) == FXG_PATH_PRIMARY) ++*on_primary;
        const int r = fxg_mlx5_put_sync(&peer, off, (fxg_u64)(size_t)(src + off), 64, &why, failovers);
        if (r != FXG_MLX5_OK) { printf("put %d: %d %u\n", i, r, why); return ok; }
        if (memcmp(window + off, src + off, 64) != 0) ++*bad;
        ++ok;
        fake_now += 1000;
    }
    return ok;
}
int main(void) {
    alarm(20); /* a put that never returns fails the test instead of hanging it */
    fxg_u32 fo = 0; int prim = 0, bad = 0, ok;
    setup();
    ok = put_many(100, &fo, &prim, &bad);
    printf("healthy %d %u %d %d\n", ok, fo, prim, bad);

    /* One lost CQE on the primary (the bytes land): a failover at the
       timeout, the backup until the window passes, then the primary. */
    setup(); fo = 0; prim = 0; bad = 0;
    nics[0].mode = DROP; nics[0].left = 1;
    fxg_u64 t0 = fake_now;
    fxg_u32 why = 0;
    int r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
    printf("lost %d %u waited>=timeout %d route %u\n", r, fo, fake_now - t0 >= 10000, fxg_health_route(&peer.health));
    ok = put_many(100, &fo, &prim, &bad);
    printf("after %d %u back %d bad %d route %u\n", ok, fo, prim > 0 && prim < 100, bad, fxg_health_route(&peer.health));

    /* A CQE that comes after the timeout (the bytes landed): the put fails
       over; once the primary is back, its next put skips the late CQE and
       waits for its own (its bytes checked right after it returns). */
    setup(); fo = 0; prim = 0; bad = 0;
    nics[0].mode = LATE; nics[0].left = 1;
    r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
    ok = put_many(100, &fo, &prim, &bad);
    printf("late %d %u after %d back %d bad %d held %d\n", r, fo, ok, prim > 0 && prim < 100, bad, nics[0].late_at != 0);

    /* The same with a late retry-exceeded error, arriving while the primary
       is down: the drain before each put counts it, so the primary comes
       back later (its window unchanged: no flap), as on the host. */
    setup(); fo = 0; prim = 0; bad = 0;
    nics[0].mode = LATE_ERR; nics[0].left = 1;
    r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
    ok = put_many(100, &fo, &prim, &bad);
    printf("late error %d %u after %d bad %d window %llu primary %d\n", r, fo, ok, bad, peer.health.p[0].window, prim);

    /* Retry exceeded on the primary: a failover at once. */
    setup(); fo = 0;
    nics[0].mode = ERR_PATH; nics[0].left = 1;
    t0 = fake_now;
    r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
    printf("retry %d %u quick %d route %u\n", r, fo, fake_now - t0 < 10000, fxg_health_route(&peer.health));

    /* A remote-access error: the request's; the path stays up. */
    setup(); fo = 0;
    nics[0].mode = ERR_REQ; nics[0].left = 1;
    r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
    printf("request %d why %u %u route %u\n", r, why, fo, fxg_health_route(&peer.health));

    /* Both paths dead: unreachable within two timeouts (plus a poll). */
    setup(); fo = 0;
    nics[0].mode = DEAD; nics[1].mode = DEAD;
    t0 = fake_now;
    r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
    printf("dead %d %u bounded %d\n", r, fo, fake_now - t0 <= 2 * 10000 + 200);

    /* A window shorter than the timeout, both paths dead: each path is tried
       once, so the put still ends. */
    setup_with(5000, 5000); fo = 0;
    nics[0].mode = DEAD; nics[1].mode = DEAD;
    t0 = fake_now;
    r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
    printf("short window %d %u bounded %d\n", r, fo, fake_now - t0 <= 2 * 10000 + 200);

    /* A silent primary (it reads nothing), retried after every short fixed
       window: its queue fills with WQEs the NIC never completes, and it is
       then failed without posting (nothing overwritten: at most 16 unread);
       every put lands through the backup. */
    setup_with(20000, 20000); fo = 0; prim = 0; bad = 0;
    nics[0].mode = DEAD;
    ok = put_many(600, &fo, &prim, &bad);
    printf("silent %d bad %d full %d max %d\n", ok, bad, peer.path[0].pi - peer.path[0].done >= 16, max_out);

    /* 70000 healthy puts: the 16-bit WQE counter wraps; the CQ doorbell
       record is kept (or the NIC would overflow its CQ). */
    setup(); fo = 0; prim = 0; bad = 0;
    int many = 0;
    for (int i = 0; i < 70000; ++i) {
        src[0] = (unsigned char)i; src[1] = (unsigned char)(i >> 8);
        if (fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 8, &why, &fo) == FXG_MLX5_OK
            && window[0] == src[0] && window[1] == src[1]) ++many;
        fake_now += 10;
    }
    printf("many %d %u overflow %d\n", many, fo, overflow);

    /* Puts with a signal set after the data (fenced): 50 healthy ones, the
       data and the signal checked after each; then the primary drops the
       signal's CQE (both WRITEs land): the pair goes again on the backup;
       then a remote-access error on the data WRITE (unsignaled, yet its
       error has a CQE): the request's error. */
    setup(); fo = 0;
    static unsigned char sig[8];
    int sig_ok = 0;
    for (int i = 0; i < 50; ++i) {
        const fxg_u32 off = (fxg_u32)(i % 32) * 64;
        for (int b = 0; b < 64; ++b) src[off + b] = (unsigned char)(i * 3 + b);
        for (int b = 0; b < 8; ++b) sig[b] = (unsigned char)(i + b);
        if (i == 20) { nics[0].mode = DROP; nics[0].left = 2; }
        if (fxg_mlx5_put_signal_sync(&peer, off, (fxg_u64)(size_t)(src + off), 64, 4088, (fxg_u64)(size_t)sig, &why, &fo) == FXG_MLX5_OK
            && memcmp(window + off, src + off, 64) == 0 && memcmp(window + 4088, sig, 8) == 0) ++sig_ok;
        fake_now += 1000;
    }
    fxg_u32 sig_route = fxg_health_route(&peer.health);
    nics[sig_route].mode = ERR_REQ; nics[sig_route].left = 1;
    r = fxg_mlx5_put_signal_sync(&peer, 0, (fxg_u64)(size_t)src, 64, 4088, (fxg_u64)(size_t)sig, &why, &fo);
    printf("signal %d %u request %d why %u unfenced %d\n", sig_ok, fo, r, why, unfenced);

    /* Bad lengths are refused before anything is posted. */
    setup(); fo = 0;
    printf("invalid %d %d posted %u\n", fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 0, &why, &fo),
           fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 0x80000000u, &why, &fo), peer.path[0].pi);

    /* Whom each syndrome blames. */
    for (fxg_u32 sy = 0; sy < 256; ++sy) printf("%d", fxg_mlx5_blames_request(sy));
    printf("\n");

    /* The primary fails right after each switch back: its window doubles to
       the cap (50 -> 100 -> 200 -> 400 us, then 400). */
    setup(); fo = 0; prim = 0; bad = 0;
    fxg_u64 windows[6];
    for (int k = 0; k < 6; ++k) {
        nics[0].mode = DROP; nics[0].left = 1;
        while (fxg_health_route(&peer.health) != FXG_PATH_PRIMARY) { fake_now += 1000; fxg_health_restore_due(&peer.health, fake_now); }
        r = fxg_mlx5_put_sync(&peer, 0, (fxg_u64)(size_t)src, 64, &why, &fo);
        windows[k] = peer.health.p[0].window;
        if (r != FXG_MLX5_OK) break;
    }
    printf("flap %u %llu %llu %llu %llu %llu %llu\n", fo, windows[0], windows[1], windows[2], windows[3], windows[4], windows[5]);
    return 0;
}
"#;
    let src = format!("{PROGRAM}{HEADER}{BODY}");
    let Some(text) = build_and_run("mlx5-put", &src, &[]) else {
        return;
    };
    let blame: String = (0..=255u8)
        .map(|v| {
            let request = ferrocx_ibgda::cqe::Syndrome::from_u8(v).blame()
                == ferrocx_ibgda::cqe::Blame::Request;
            if request {
                '1'
            } else {
                '0'
            }
        })
        .collect();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "healthy 100 0 100 0",
            "lost 0 1 waited>=timeout 1 route 1",
            "after 100 1 back 1 bad 0 route 0",
            "late 0 1 after 100 back 1 bad 0 held 0",
            "late error 0 1 after 100 bad 0 window 50000 primary 33",
            "retry 0 1 quick 1 route 1",
            "request 1 why 19 0 route 1",
            "dead 2 1 bounded 1",
            "short window 2 1 bounded 1",
            "silent 600 bad 0 full 1 max 16",
            "many 70000 0 overflow 0",
            "signal 50 1 request 1 why 19 unfenced 0",
            "invalid 3 3 posted 0",
            blame.as_str(),
            "flap 6 50000 100000 200000 400000 400000 400000",
        ],
        "{text}"
    );
}

/// The mlx5 handler's per-peer entry built in Rust (`mlx5_peer`) is what the
/// header's `struct fxg_mlx5_peer` reads, compiled for the host: sizes and
/// offsets, every field read back, and its health exactly as
/// `fxg_health_init` leaves it.
#[test]
fn host_reads_the_mlx5_peer_entry_rust_builds() {
    use ferrocx_ibgda::mlx5_peer::{LocalQueues, Mlx5Path, Mlx5Peer, PATH_BYTES, PEER_BYTES};
    let q = |k: u64| LocalQueues {
        sq: 0x7f00_0000_0000 + k * 0x10_0000,
        slots: 16 << k,
        qpn: 0xabc + k as u32,
        dbrec: 0x7f10_0000_0040 + k * 0x40,
        uar: 0x7f20_0000_0800 + k * 0x1000,
        cq: 0x7f30_0000_0000 + k * 0x10_0000,
        cq_log: 6 + k as u32,
        cq_dbrec: 0x7f40_0000_0080 + k * 0x40,
        lkey: 0x1234_5600 + k as u32,
    };
    let p = Mlx5Peer {
        paths: [
            Mlx5Path {
                local: q(0),
                raddr: 0x9000_0000,
                rkey: 0x7777,
            },
            Mlx5Path {
                local: q(1),
                raddr: 0xa000_0000,
                rkey: 0x8888,
            },
        ],
        has_backup: true,
        recovery_ns: 3_000_000_000,
        max_recovery_ns: 60_000_000_000,
        timeout_ns: 1_000_000_000,
    };
    p.check().unwrap();
    let dir = std::env::temp_dir().join(format!("fxg-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("peer.bin");
    std::fs::write(&file, p.encode()).unwrap();
    // The mlx5 part of the header is compiled for host C with a clock.
    let src = format!(
        "#define FXG_HOST_CLOCK() 0ull\n#define FXG_HOST_IDLE() ((void)0)\n{HEADER}\n\
#include <stdio.h>\n#include <stddef.h>\n#include <string.h>\n\
int main(int argc, char** argv) {{\n\
    struct fxg_mlx5_peer p; struct fxg_health h;\n\
    FILE* f = fopen(argv[1], \"rb\");\n\
    if (argc < 2 || !f || fread(&p, sizeof p, 1, f) != 1) return 2;\n\
    printf(\"%zu %zu %zu %zu\\n\", sizeof(struct fxg_mlx5_path), sizeof(struct fxg_mlx5_peer),\n\
           offsetof(struct fxg_mlx5_path, cq_dbrec), offsetof(struct fxg_mlx5_peer, timeout_ns));\n\
    for (int i = 0; i < 2; ++i) {{\n\
        const struct fxg_mlx5_path* q = &p.path[i];\n\
        printf(\"%llx %u %x %llx %llx %llx %u %llx %llx %x %x %u %u %u\\n\",\n\
               (unsigned long long)(size_t)q->sq, q->slots, q->qpn, (unsigned long long)(size_t)q->dbrec,\n\
               (unsigned long long)(size_t)q->uar, (unsigned long long)(size_t)q->cq, q->cq_log,\n\
               (unsigned long long)(size_t)q->cq_dbrec, (unsigned long long)q->raddr, q->rkey, q->lkey,\n\
               q->pi, q->done, q->ci);\n\
    }}\n\
    memset(&h, 0, sizeof h);\n\
    fxg_health_init(&h, 1u, 3000000000ull, 60000000000ull);\n\
    printf(\"%d %llu\\n\", memcmp(&h, &p.health, sizeof h) == 0, (unsigned long long)p.timeout_ns);\n\
    /* The table's address in a view (the host writes reserved[0], byte 32). */\n\
    {{ union {{ struct fxg_view v; unsigned char b[64]; }} u; memset(&u, 0, sizeof u);\n\
      printf(\"%d \", fxg_mlx5_peers(&u.v) == NULL);\n\
      unsigned long long t = (unsigned long long)(size_t)&p; memcpy(u.b + 32, &t, 8);\n\
      printf(\"%d %zu\\n\", fxg_mlx5_peers(&u.v) == &p, offsetof(struct fxg_view, reserved)); }}\n\
    return 0;\n\
}}\n"
    );
    let Some(out) = build_and_run("mlx5_peer", &src, &[&file]) else {
        return;
    };
    let _ = std::fs::remove_dir_all(&dir);
    let mut want = format!("{PATH_BYTES} {PEER_BYTES} 48 {}\n", PEER_BYTES - 8);
    for path in &p.paths {
        let l = &path.local;
        want += &format!(
            "{:x} {} {:x} {:x} {:x} {:x} {} {:x} {:x} {:x} {:x} 0 0 0\n",
            l.sq,
            l.slots,
            l.qpn,
            l.dbrec,
            l.uar,
            l.cq,
            l.cq_log,
            l.cq_dbrec,
            path.raddr,
            path.rkey,
            l.lkey
        );
    }
    want += "1 1000000000\n";
    // No table: NULL; the address at byte 32 (lib.rs writes it there): the table.
    want += "1 1 32\n";
    assert_eq!(out, want);
}
