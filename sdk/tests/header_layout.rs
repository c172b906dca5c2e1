//! Compiles `include/ferrocx_plugin.h`, `ferrocx_collective.h` and `ferrocx_devnet.h` into a small C program that prints the
//! size and alignment of every struct, the offset and size of every field and
//! the value of every `#define`, and compares each number with the Rust ABI in
//! `ferrocx_sdk::abi`. Any difference fails the test with the full list.
//!
//! Completeness is enforced too: the Rust structs are destructured
//! exhaustively (a new field breaks the build of this test until it is listed
//! here), and every `#define FX_*`, every `typedef struct` of the header and
//! every `pub const FX_*` / `pub struct` of `src/abi/` must be covered.

mod common;

use ferrocx_sdk::abi::*;
use std::collections::{BTreeMap, BTreeSet};
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;

/// One number (or string) to compare.
struct Check {
    /// Printed name, also the key of the C program's output line.
    key: String,
    /// C expression printing the value.
    c_expr: String,
    /// `printf` conversion for the value.
    c_fmt: &'static str,
    /// Expected text, from Rust.
    rust: String,
}

impl Check {
    fn num(key: String, c_expr: String, rust: impl Into<i128>) -> Check {
        Check {
            key,
            c_expr: format!("(long long)({c_expr})"),
            c_fmt: "%lld",
            rust: rust.into().to_string(),
        }
    }
}

fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

fn usize_i128(v: usize) -> i128 {
    v as i128
}

/// Size, alignment, and per field offset and size of one struct.
macro_rules! layout {
    ($out:ident, $structs:ident, $cty:literal, $rty:ident { $($cf:ident => $rf:ident),* $(,)? }) => {{
        // Exhaustive on purpose: a field added to the Rust struct must be added here.
        #[allow(dead_code)]
        fn exhaustive(v: &$rty) {
            let $rty { $($rf: _),* } = v;
        }
        $structs.push(($cty, stringify!($rty)));
        $out.push(Check::num(format!("sizeof({})", $cty), format!("sizeof({})", $cty), usize_i128(size_of::<$rty>())));
        $out.push(Check::num(
            format!("alignof({})", $cty),
            format!("offsetof(struct {{ char c; {} t; }}, t)", $cty),
            usize_i128(align_of::<$rty>()),
        ));
        $(
            $out.push(Check::num(
                format!("offsetof({}, {})", $cty, stringify!($cf)),
                format!("offsetof({}, {})", $cty, stringify!($cf)),
                usize_i128(offset_of!($rty, $rf)),
            ));
            $out.push(Check::num(
                format!("sizeof({}.{})", $cty, stringify!($cf)),
                format!("sizeof((({} *)0)->{})", $cty, stringify!($cf)),
                usize_i128(field_size(|s: &$rty| &s.$rf)),
            ));
        )*
    }};
}

/// A `#define` compared by value.
macro_rules! konst {
    ($out:ident, $names:ident, $name:ident) => {{
        $names.push(stringify!($name));
        $out.push(Check::num(
            stringify!($name).into(),
            stringify!($name).into(),
            $name as i128,
        ));
    }};
    // Also compare the width of the C constant's type with the Rust type.
    ($out:ident, $names:ident, $name:ident, typed) => {{
        konst!($out, $names, $name);
        $out.push(Check::num(
            format!("sizeof({})", stringify!($name)),
            format!("sizeof({})", stringify!($name)),
            usize_i128(std::mem::size_of_val(&$name)),
        ));
    }};
}

struct Expected {
    checks: Vec<Check>,
    /// (C typedef, Rust struct) pairs covered.
    structs: Vec<(&'static str, &'static str)>,
    /// Constants covered (C macro names, equal to the Rust names).
    constants: Vec<&'static str>,
    /// Rust-only constants, checked against C expressions.
    rust_only: Vec<&'static str>,
}

fn expected() -> Expected {
    let mut out: Vec<Check> = Vec::new();
    let mut structs = Vec::new();
    let mut names = Vec::new();

    layout!(out, structs, "fx_blob_t", FxBlob { len => len, reserved => reserved, bytes => bytes });
    layout!(out, structs, "fx_peer_info_t", FxPeerInfo {
        rank => rank,
        nranks => nranks,
        local_rank => local_rank,
        pid => pid,
        host_hash => host_hash,
        comm_hash => comm_hash,
        cuda_device => cuda_device,
        cuda_pci => cuda_pci,
        host_name => host_name,
    });
    layout!(out, structs, "fx_conn_req_t", FxConnReq {
        me => me,
        peer => peer,
        direction => direction,
        channel => channel,
        conn_id => conn_id,
    });
    layout!(out, structs, "fx_host_v1_t", FxHostV1 {
        abi_version => abi_version,
        struct_size => struct_size,
        host_ctx => host_ctx,
        log => log,
        getenv => getenv,
        timeout_ms => timeout_ms,
        abort_flag => abort_flag,
    });
    layout!(out, structs, "fx_transport_v1_t", FxTransportV1 {
        abi_version => abi_version,
        struct_size => struct_size,
        name => name,
        caps => caps,
        init => init,
        finalize => finalize,
        can_connect => can_connect,
        setup => setup,
        connect => connect,
        proxy_setup => proxy_setup,
        proxy_connect => proxy_connect,
        proxy_progress => proxy_progress,
        reg => reg,
        deregister => deregister,
        isend => isend,
        irecv => irecv,
        test => test,
        free => free,
        last_error => last_error,
    });

    layout!(out, structs, "fx_comm_info_t", FxCommInfo {
        rank => rank,
        nranks => nranks,
        local_rank => local_rank,
        cuda_device => cuda_device,
        comm_hash => comm_hash,
        peers => peers,
    });
    layout!(out, structs, "fx_comm_oob_t", FxCommOob {
        oob_ctx => oob_ctx,
        all_gather => all_gather,
        barrier => barrier,
    });
    layout!(out, structs, "fx_window_desc_t", FxWindowDesc {
        base => base,
        bytes => bytes,
        mem_kind => mem_kind,
        reserved => reserved,
        peer_bases => peer_bases,
        peer_addrs => peer_addrs,
    });
    layout!(out, structs, "fx_coll_desc_t", FxCollDesc {
        coll => coll,
        dtype => dtype,
        op => op,
        root => root,
        count => count,
        mem_kind => mem_kind,
        flags => flags,
        send => send,
        recv => recv,
        send_win => send_win,
        recv_win => recv_win,
        send_offset => send_offset,
        recv_offset => recv_offset,
        seq => seq,
    });
    layout!(out, structs, "fx_collective_v1_t", FxCollectiveV1 {
        abi_version => abi_version,
        struct_size => struct_size,
        name => name,
        caps => caps,
        init => init,
        finalize => finalize,
        comm_init => comm_init,
        comm_destroy => comm_destroy,
        can_run => can_run,
        window_register => window_register,
        window_deregister => window_deregister,
        launch => launch,
        status => status,
        last_error => last_error,
        p2p_can_run => p2p_can_run,
        p2p_launch => p2p_launch,
        launch_bounded => launch_bounded,
        describe => describe,
    });
    layout!(out, structs, "fx_p2p_op_t", FxP2pOp {
        kind => kind,
        peer => peer,
        bytes => bytes,
        buf => buf,
    });
    layout!(out, structs, "fx_p2p_desc_t", FxP2pDesc {
        ops => ops,
        nops => nops,
        mem_kind => mem_kind,
        flags => flags,
        reserved => reserved,
    });
    konst!(out, names, FX_P2P_SEND, typed);
    konst!(out, names, FX_P2P_RECV, typed);

    konst!(out, names, FX_COLL_ABI_VERSION_1, typed);
    konst!(out, names, FX_COLL_CORE_PRIORITY, typed);
    for (name, v) in [
        ("FX_COLL_BROADCAST", FX_COLL_BROADCAST),
        ("FX_COLL_REDUCE", FX_COLL_REDUCE),
        ("FX_COLL_ALL_GATHER", FX_COLL_ALL_GATHER),
        ("FX_COLL_REDUCE_SCATTER", FX_COLL_REDUCE_SCATTER),
        ("FX_COLL_ALL_REDUCE", FX_COLL_ALL_REDUCE),
        ("FX_COLL_ALL_TO_ALL", FX_COLL_ALL_TO_ALL),
        ("FX_COLL_GATHER", FX_COLL_GATHER),
        ("FX_COLL_SCATTER", FX_COLL_SCATTER),
        ("FX_TYPE_I8", FX_TYPE_I8),
        ("FX_TYPE_U8", FX_TYPE_U8),
        ("FX_TYPE_I32", FX_TYPE_I32),
        ("FX_TYPE_U32", FX_TYPE_U32),
        ("FX_TYPE_I64", FX_TYPE_I64),
        ("FX_TYPE_U64", FX_TYPE_U64),
        ("FX_TYPE_F16", FX_TYPE_F16),
        ("FX_TYPE_BF16", FX_TYPE_BF16),
        ("FX_TYPE_F32", FX_TYPE_F32),
        ("FX_TYPE_F64", FX_TYPE_F64),
        ("FX_TYPE_F8E4M3", FX_TYPE_F8E4M3),
        ("FX_TYPE_F8E5M2", FX_TYPE_F8E5M2),
        ("FX_OP_SUM", FX_OP_SUM),
        ("FX_OP_PROD", FX_OP_PROD),
        ("FX_OP_MIN", FX_OP_MIN),
        ("FX_OP_MAX", FX_OP_MAX),
        ("FX_OP_AVG", FX_OP_AVG),
    ] {
        names.push(name);
        out.push(Check::num(name.into(), name.into(), v));
    }
    for (name, v) in [
        ("FX_COLL_IN_PLACE", FX_COLL_IN_PLACE),
        ("FX_COLL_SEND_WINDOW", FX_COLL_SEND_WINDOW),
        ("FX_COLL_RECV_WINDOW", FX_COLL_RECV_WINDOW),
        ("FX_COLL_CAPTURING", FX_COLL_CAPTURING),
    ] {
        names.push(name);
        out.push(Check::num(name.into(), name.into(), v));
    }
    for (name, v) in [
        ("FX_COLL_CAP_HOST_MEM", FX_COLL_CAP_HOST_MEM),
        ("FX_COLL_CAP_CUDA_MEM", FX_COLL_CAP_CUDA_MEM),
        ("FX_COLL_CAP_WINDOWS", FX_COLL_CAP_WINDOWS),
        ("FX_COLL_CAP_GRAPHS", FX_COLL_CAP_GRAPHS),
        ("FX_COLL_CAP_CHECKS_CALLS", FX_COLL_CAP_CHECKS_CALLS),
        ("FX_COLL_CAP_P2P_SELF", FX_COLL_CAP_P2P_SELF),
        ("FX_COLL_CAP_SHAPE_BIDS", FX_COLL_CAP_SHAPE_BIDS),
    ] {
        names.push(name);
        out.push(Check::num(name.into(), name.into(), v));
        out.push(Check::num(
            format!("sizeof({name})"),
            format!("sizeof({name})"),
            8i128,
        ));
    }
    names.push("FX_COLL_SYMBOL_V1");
    out.push(Check {
        key: "FX_COLL_SYMBOL_V1".into(),
        c_expr: "FX_COLL_SYMBOL_V1".into(),
        c_fmt: "%s",
        rust: FX_COLL_SYMBOL_V1.into(),
    });
    names.push("FX_COLLECTIVE_V1_MIN_SIZE");
    out.push(Check::num(
        "FX_COLLECTIVE_V1_MIN_SIZE".into(),
        "FX_COLLECTIVE_V1_MIN_SIZE".into(),
        usize_i128(FX_COLLECTIVE_V1_MIN_SIZE),
    ));

    layout!(out, structs, "fx_devnet_stats_t", FxDevnetStats {
        requests => requests,
        completed => completed,
        failed => failed,
        failovers => failovers,
        paths_down => paths_down,
        paths_restored => paths_restored,
        peers_unreachable => peers_unreachable,
        reserved => reserved,
    });
    layout!(out, structs, "fx_devnet_v1_t", FxDevnetV1 {
        abi_version => abi_version,
        struct_size => struct_size,
        name => name,
        caps => caps,
        init => init,
        finalize => finalize,
        comm_init => comm_init,
        comm_destroy => comm_destroy,
        window_register => window_register,
        window_deregister => window_deregister,
        device_view => device_view,
        status => status,
        stats => stats,
        describe => describe,
        last_error => last_error,
    });
    konst!(out, names, FX_DEVNET_ABI_VERSION_1, typed);
    for (name, v) in [
        ("FX_DEVNET_CAP_CUDA_MEM", FX_DEVNET_CAP_CUDA_MEM),
        ("FX_DEVNET_CAP_HOST_MEM", FX_DEVNET_CAP_HOST_MEM),
    ] {
        names.push(name);
        out.push(Check::num(name.into(), name.into(), v));
        out.push(Check::num(
            format!("sizeof({name})"),
            format!("sizeof({name})"),
            8i128,
        ));
    }
    names.push("FX_DEVNET_SYMBOL_V1");
    out.push(Check {
        key: "FX_DEVNET_SYMBOL_V1".into(),
        c_expr: "FX_DEVNET_SYMBOL_V1".into(),
        c_fmt: "%s",
        rust: FX_DEVNET_SYMBOL_V1.into(),
    });

    konst!(out, names, FX_ABI_VERSION_1, typed);
    konst!(out, names, FX_NAME_BYTES);
    konst!(out, names, FX_BLOB_BYTES);
    konst!(out, names, FX_HOST_NAME_BYTES);
    konst!(out, names, FX_OK, typed);
    konst!(out, names, FX_IN_PROGRESS, typed);
    konst!(out, names, FX_INVALID_ARGUMENT, typed);
    konst!(out, names, FX_UNSUPPORTED, typed);
    konst!(out, names, FX_SYSTEM, typed);
    konst!(out, names, FX_REMOTE, typed);
    konst!(out, names, FX_TIMEOUT, typed);
    konst!(out, names, FX_INTERNAL, typed);
    konst!(out, names, FX_DIR_SEND, typed);
    konst!(out, names, FX_DIR_RECV, typed);
    konst!(out, names, FX_MEM_HOST, typed);
    konst!(out, names, FX_MEM_CUDA, typed);
    konst!(out, names, FX_CAP_HOST_MEM, typed);
    konst!(out, names, FX_CAP_CUDA_MEM, typed);
    konst!(out, names, FX_CAP_REGISTER, typed);
    konst!(out, names, FX_CAP_CROSS_HOST, typed);
    konst!(out, names, FX_LOG_ERROR, typed);
    konst!(out, names, FX_LOG_WARN, typed);
    konst!(out, names, FX_LOG_INFO, typed);
    konst!(out, names, FX_LOG_DEBUG, typed);
    konst!(out, names, FX_LOG_TRACE, typed);

    names.push("FX_SYMBOL_V1");
    out.push(Check {
        key: "FX_SYMBOL_V1".into(),
        c_expr: "FX_SYMBOL_V1".into(),
        c_fmt: "%s",
        rust: FX_SYMBOL_V1.into(),
    });

    // Rust-only constants that describe C sizes.
    out.push(Check::num(
        "FX_TRANSPORT_V1_MIN_SIZE".into(),
        "sizeof(fx_transport_v1_t)".into(),
        usize_i128(FX_TRANSPORT_V1_MIN_SIZE),
    ));
    out.push(Check::num(
        "FX_HOST_V1_MIN_SIZE".into(),
        "sizeof(fx_host_v1_t)".into(),
        usize_i128(FX_HOST_V1_MIN_SIZE),
    ));

    Expected {
        checks: out,
        structs,
        constants: names,
        rust_only: vec![
            "FX_TRANSPORT_V1_MIN_SIZE",
            "FX_HOST_V1_MIN_SIZE",
            "FX_COLLECTIVE_V1_MIN_SIZE",
        ],
    }
}

fn c_program(checks: &[Check]) -> String {
    let mut s = String::from(
        "/* generated by sdk/tests/header_layout.rs */\n\
         #include <stddef.h>\n#include <stdio.h>\n#include \"ferrocx_devnet.h\"\n\n\
         int main(void) {\n",
    );
    for c in checks {
        s.push_str(&format!(
            "  printf(\"%s\\t{}\\n\", \"{}\", {});\n",
            c.c_fmt, c.key, c.c_expr
        ));
    }
    s.push_str("  return 0;\n}\n");
    s
}

/// Words following `prefix` at the start of lines (after trimming), up to a non-identifier char.
fn idents_after(text: &str, prefix: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix(prefix))
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Names closing `typedef struct ... { ... } name;` in the header.
fn header_typedefs(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('}'))
        .filter_map(|rest| rest.trim().strip_suffix(';'))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

fn coverage_problems(e: &Expected, header: &str, abi_rs: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let constants: BTreeSet<&str> = e.constants.iter().copied().collect();
    for d in idents_after(header, "#define ") {
        if d.starts_with("FX_") && !constants.contains(d.as_str()) {
            problems.push(format!(
                "header #define {d} is not checked against Rust (add it to header_layout.rs)"
            ));
        }
    }
    for c in idents_after(abi_rs, "pub const ") {
        if !constants.contains(c.as_str()) && !e.rust_only.contains(&c.as_str()) {
            problems.push(format!("abi.rs constant {c} is not checked against the header (add it to header_layout.rs)"));
        }
    }
    let c_structs: BTreeSet<&str> = e.structs.iter().map(|(c, _)| *c).collect();
    for t in header_typedefs(header) {
        if !c_structs.contains(t.as_str()) {
            problems.push(format!(
                "header struct {t} is not checked against Rust (add it to header_layout.rs)"
            ));
        }
    }
    let rust_structs: BTreeSet<&str> = e.structs.iter().map(|(_, r)| *r).collect();
    for s in idents_after(abi_rs, "pub struct ") {
        if !rust_structs.contains(s.as_str()) {
            problems.push(format!(
                "abi.rs struct {s} is not checked against the header (add it to header_layout.rs)"
            ));
        }
    }
    problems
}

/// Compile the C program against the header in `include_dir` and return every
/// difference from Rust (empty = all match).
fn compare_with_c(cc: &common::CCompiler, e: &Expected, include_dir: &Path) -> Vec<String> {
    let dir = common::TempDir::new("header-layout");
    let src = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    std::fs::write(&src, c_program(&e.checks)).expect("writing layout.c");
    let include = format!("-I{}", include_dir.display());
    // -pedantic: the header must be plain C99 that a vendor's strict build accepts.
    cc.run(&[
        "-std=c99",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-pedantic",
        &include,
        "-o",
        exe.to_str().unwrap(),
        src.to_str().unwrap(),
    ]);
    let out = std::process::Command::new(&exe)
        .output()
        .expect("running the layout program");
    assert!(out.status.success(), "layout program failed: {out:?}");
    let stdout = String::from_utf8(out.stdout).expect("layout output is UTF-8");
    let c_values: BTreeMap<&str, &str> =
        stdout.lines().filter_map(|l| l.split_once('\t')).collect();
    let mut problems = Vec::new();
    for c in &e.checks {
        match c_values.get(c.key.as_str()) {
            None => problems.push(format!("{}: missing from the C program's output", c.key)),
            Some(v) if *v != c.rust => problems.push(format!("{}: C {v}, Rust {}", c.key, c.rust)),
            Some(_) => {}
        }
    }
    problems
}

const HEADERS: [&str; 3] = [
    "ferrocx_plugin.h",
    "ferrocx_collective.h",
    "ferrocx_devnet.h",
];

/// Both headers and both Rust ABI files, each pair concatenated.
fn read_sources() -> (String, String) {
    let read = |p: &Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
    };
    let header = HEADERS
        .iter()
        .map(|h| read(&common::include_dir().join(h)))
        .collect::<Vec<_>>()
        .join("\n");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/abi");
    let abi_rs = read(&src.join("mod.rs"))
        + "\n"
        + &read(&src.join("collective.rs"))
        + "\n"
        + &read(&src.join("devnet.rs"));
    (header, abi_rs)
}

#[test]
fn header_matches_rust_abi() {
    let (header, abi_rs) = read_sources();
    let e = expected();
    let mut problems = coverage_problems(&e, &header, &abi_rs);
    let Some(cc) = common::CCompiler::find() else {
        assert!(
            problems.is_empty(),
            "header/ABI coverage problems:\n  {}",
            problems.join("\n  ")
        );
        common::skip_no_compiler("header_matches_rust_abi");
        return;
    };
    problems.extend(compare_with_c(&cc, &e, &common::include_dir()));
    assert!(
        problems.is_empty(),
        "ferrocx_plugin.h and ferrocx_sdk::abi differ ({} problems):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
    println!("header_layout: {} items match", e.checks.len());
}

#[test]
fn a_drifted_header_is_reported_item_by_item() {
    // Prove the comparison really fails, and names each item, on a header that drifted.
    let Some(cc) = common::CCompiler::find() else {
        common::skip_no_compiler("a_drifted_header_is_reported_item_by_item");
        return;
    };
    let header = std::fs::read_to_string(common::include_dir().join("ferrocx_plugin.h")).unwrap();
    let drifted = header
        .replacen(
            "  uint32_t reserved;\n  uint8_t bytes[FX_BLOB_BYTES];",
            "  uint64_t reserved;\n  uint8_t bytes[FX_BLOB_BYTES];",
            1,
        )
        .replacen("#define FX_REMOTE 5", "#define FX_REMOTE 9", 1);
    assert_ne!(
        drifted, header,
        "the header changed shape: update this test's edits"
    );
    let dir = common::TempDir::new("header-drift");
    std::fs::write(dir.path().join("ferrocx_plugin.h"), drifted).unwrap();
    for h in ["ferrocx_collective.h", "ferrocx_devnet.h"] {
        std::fs::copy(common::include_dir().join(h), dir.path().join(h)).unwrap();
    }
    let problems = compare_with_c(&cc, &expected(), dir.path());
    let text = problems.join("\n");
    for needle in [
        "sizeof(fx_blob_t.reserved): C 8, Rust 4",
        "offsetof(fx_blob_t, bytes): C 16, Rust 8",
        "sizeof(fx_blob_t): C 272, Rust 264",
        "FX_REMOTE: C 9, Rust 5",
    ] {
        assert!(text.contains(needle), "expected '{needle}' among:\n{text}");
    }
}

#[test]
fn coverage_scanner_sees_everything() {
    // The text scanners above must actually find the items, or the coverage check is vacuous.
    let (header, abi_rs) = read_sources();
    let defines = idents_after(&header, "#define ");
    assert!(
        defines.iter().any(|d| d == "FX_CAP_CROSS_HOST"),
        "{defines:?}"
    );
    assert!(header_typedefs(&header)
        .iter()
        .any(|t| t == "fx_transport_v1_t"));
    assert!(header_typedefs(&header)
        .iter()
        .any(|t| t == "fx_coll_desc_t"));
    assert!(idents_after(&abi_rs, "pub const ")
        .iter()
        .any(|c| c == "FX_COLL_CAP_GRAPHS"));
    assert!(idents_after(&abi_rs, "pub const ")
        .iter()
        .any(|c| c == "FX_LOG_TRACE"));
    assert!(idents_after(&abi_rs, "pub struct ")
        .iter()
        .any(|s| s == "FxHostV1"));
    let e = expected();
    let fake_header = format!("{header}\n#define FX_NEW_THING 9\n");
    let p = coverage_problems(&e, &fake_header, &abi_rs);
    assert!(p.len() == 1 && p[0].contains("FX_NEW_THING"), "{p:?}");
}
