use super::*;
use std::mem::{offset_of, size_of};

/// Every declared field's offset and every struct's size, as Rust lays
/// them out, with the C expression giving the same number from rdma-core's
/// headers.
fn layout() -> Vec<(&'static str, usize)> {
    macro_rules! off {
        ($c:literal, $t:ty, $($f:tt).+) => {
            (concat!("offsetof(", $c, ")"), offset_of!($t, $($f).+))
        };
    }
    vec![
        off!("struct ibv_port_attr, state", IbvPortAttr, state),
        off!("struct ibv_port_attr, active_mtu", IbvPortAttr, active_mtu),
        off!(
            "struct ibv_port_attr, gid_tbl_len",
            IbvPortAttr,
            gid_tbl_len
        ),
        off!("struct ibv_port_attr, lid", IbvPortAttr, lid),
        off!("struct ibv_port_attr, lmc", IbvPortAttr, lmc),
        off!("struct ibv_port_attr, phys_state", IbvPortAttr, phys_state),
        off!("struct ibv_port_attr, link_layer", IbvPortAttr, link_layer),
        off!("struct ibv_port_attr, flags", IbvPortAttr, flags),
        off!("struct ibv_qp_init_attr, send_cq", IbvQpInitAttr, send_cq),
        off!("struct ibv_qp_init_attr, recv_cq", IbvQpInitAttr, recv_cq),
        off!("struct ibv_qp_init_attr, srq", IbvQpInitAttr, srq),
        off!("struct ibv_qp_init_attr, cap", IbvQpInitAttr, cap),
        off!(
            "struct ibv_qp_init_attr, cap.max_inline_data",
            IbvQpInitAttr,
            cap.max_inline_data
        ),
        off!("struct ibv_qp_init_attr, qp_type", IbvQpInitAttr, qp_type),
        off!(
            "struct ibv_qp_init_attr, sq_sig_all",
            IbvQpInitAttr,
            sq_sig_all
        ),
        (
            "sizeof(struct ibv_qp_init_attr)",
            size_of::<IbvQpInitAttr>(),
        ),
        off!("struct ibv_qp_attr, path_mtu", IbvQpAttr, path_mtu),
        off!("struct ibv_qp_attr, rq_psn", IbvQpAttr, rq_psn),
        off!("struct ibv_qp_attr, sq_psn", IbvQpAttr, sq_psn),
        off!("struct ibv_qp_attr, dest_qp_num", IbvQpAttr, dest_qp_num),
        off!(
            "struct ibv_qp_attr, qp_access_flags",
            IbvQpAttr,
            qp_access_flags
        ),
        off!("struct ibv_qp_attr, cap", IbvQpAttr, cap),
        off!("struct ibv_qp_attr, ah_attr", IbvQpAttr, ah_attr),
        off!(
            "struct ibv_qp_attr, ah_attr.grh.dgid",
            IbvQpAttr,
            ah_attr.grh.dgid
        ),
        off!(
            "struct ibv_qp_attr, ah_attr.grh.sgid_index",
            IbvQpAttr,
            ah_attr.grh.sgid_index
        ),
        off!(
            "struct ibv_qp_attr, ah_attr.grh.hop_limit",
            IbvQpAttr,
            ah_attr.grh.hop_limit
        ),
        off!("struct ibv_qp_attr, ah_attr.dlid", IbvQpAttr, ah_attr.dlid),
        off!(
            "struct ibv_qp_attr, ah_attr.is_global",
            IbvQpAttr,
            ah_attr.is_global
        ),
        off!(
            "struct ibv_qp_attr, ah_attr.port_num",
            IbvQpAttr,
            ah_attr.port_num
        ),
        off!("struct ibv_qp_attr, alt_ah_attr", IbvQpAttr, alt_ah_attr),
        off!("struct ibv_qp_attr, pkey_index", IbvQpAttr, pkey_index),
        off!(
            "struct ibv_qp_attr, max_rd_atomic",
            IbvQpAttr,
            max_rd_atomic
        ),
        off!(
            "struct ibv_qp_attr, max_dest_rd_atomic",
            IbvQpAttr,
            max_dest_rd_atomic
        ),
        off!(
            "struct ibv_qp_attr, min_rnr_timer",
            IbvQpAttr,
            min_rnr_timer
        ),
        off!("struct ibv_qp_attr, port_num", IbvQpAttr, port_num),
        off!("struct ibv_qp_attr, timeout", IbvQpAttr, timeout),
        off!("struct ibv_qp_attr, retry_cnt", IbvQpAttr, retry_cnt),
        off!("struct ibv_qp_attr, rnr_retry", IbvQpAttr, rnr_retry),
        off!("struct ibv_qp_attr, rate_limit", IbvQpAttr, rate_limit),
        ("sizeof(struct ibv_qp_attr)", size_of::<IbvQpAttr>()),
        off!("struct ibv_qp, pd", IbvQp, pd),
        off!("struct ibv_qp, qp_num", IbvQp, qp_num),
        off!("struct ibv_mr, addr", IbvMr, addr),
        off!("struct ibv_mr, length", IbvMr, length),
        off!("struct ibv_mr, lkey", IbvMr, lkey),
        off!("struct ibv_mr, rkey", IbvMr, rkey),
        ("sizeof(struct ibv_mr)", size_of::<IbvMr>()),
        off!("struct mlx5dv_qp, dbrec", Mlx5dvQp, dbrec),
        off!("struct mlx5dv_qp, sq.buf", Mlx5dvQp, sq.buf),
        off!("struct mlx5dv_qp, sq.wqe_cnt", Mlx5dvQp, sq.wqe_cnt),
        off!("struct mlx5dv_qp, sq.stride", Mlx5dvQp, sq.stride),
        off!("struct mlx5dv_qp, rq.buf", Mlx5dvQp, rq.buf),
        off!("struct mlx5dv_qp, bf.reg", Mlx5dvQp, bf.reg),
        off!("struct mlx5dv_qp, bf.size", Mlx5dvQp, bf.size),
        off!("struct mlx5dv_qp, comp_mask", Mlx5dvQp, comp_mask),
        off!(
            "struct mlx5dv_qp, uar_mmap_offset",
            Mlx5dvQp,
            uar_mmap_offset
        ),
        off!("struct mlx5dv_qp, tirn", Mlx5dvQp, tirn),
        off!("struct mlx5dv_qp, sqn", Mlx5dvQp, sqn),
        off!("struct mlx5dv_qp, tir_icm_addr", Mlx5dvQp, tir_icm_addr),
        off!("struct mlx5dv_cq, buf", Mlx5dvCq, buf),
        off!("struct mlx5dv_cq, dbrec", Mlx5dvCq, dbrec),
        off!("struct mlx5dv_cq, cqe_cnt", Mlx5dvCq, cqe_cnt),
        off!("struct mlx5dv_cq, cqe_size", Mlx5dvCq, cqe_size),
        off!("struct mlx5dv_cq, cq_uar", Mlx5dvCq, cq_uar),
        off!("struct mlx5dv_cq, cqn", Mlx5dvCq, cqn),
        off!("struct mlx5dv_cq, comp_mask", Mlx5dvCq, comp_mask),
        ("sizeof(struct mlx5dv_cq)", size_of::<Mlx5dvCq>()),
        off!("struct mlx5dv_obj, qp.in", Mlx5dvObj, qp.input),
        off!("struct mlx5dv_obj, qp.out", Mlx5dvObj, qp.out),
        off!("struct mlx5dv_obj, cq.in", Mlx5dvObj, cq.input),
        off!("struct mlx5dv_obj, cq.out", Mlx5dvObj, cq.out),
    ]
}

/// The offsets written out by hand from the public headers (x86-64 and
/// aarch64 Linux: 8-byte pointers, 4-byte enums), so the check runs where
/// rdma-core is not installed.
#[test]
fn declared_structs_have_the_header_s_offsets() {
    let expected = [
        0, 8, 12, 34, 38, 45, 46, 47, // port attr
        8, 16, 24, 32, 48, 52, 56, 64, // qp init attr
        8, 20, 24, 28, 32, 36, 56, 56, 76, 77, 80, 85, 86, 88, 120, 126, 127, 128, 129, 130, 131,
        132, 136, 144, // qp attr (144: the GID's u64s align it to 8)
        16, 52, // qp
        16, 24, 36, 40, 48, // mr
        0, 8, 16, 20, 24, 40, 48, 56, 64, 72, 84, 88, // mlx5dv_qp
        0, 8, 16, 20, 24, 32, 40, 48, // mlx5dv_cq
        0, 8, 16, 24, // mlx5dv_obj
    ];
    let got: Vec<usize> = layout().iter().map(|x| x.1).collect();
    assert_eq!(got.len(), expected.len());
    for ((c, g), e) in layout().iter().zip(expected) {
        assert_eq!(*g, e, "{c}");
    }
    assert!(
        size_of::<IbvPortAttr>() >= 56,
        "room for the newest port attrs"
    );
    assert!(size_of::<Mlx5dvQp>() >= 96);
    assert!(size_of::<Mlx5dvObj>() >= 7 * 16);
}

/// Against the installed headers, where `libibverbs-dev` is (CI installs
/// it; skipped with the reason otherwise): a C program prints every number.
#[test]
fn declared_structs_match_the_installed_headers() {
    let header = std::path::Path::new("/usr/include/infiniband/mlx5dv.h");
    if !header.exists() {
        eprintln!(
            "skipped declared_structs_match_the_installed_headers: {} is absent (apt-get install libibverbs-dev)",
            header.display()
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("fx-ibgda-verbs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n#include <infiniband/mlx5dv.h>\nint main(void) {\n",
    );
    for (expr, _) in layout() {
        c.push_str(&format!("    printf(\"%zu\\n\", (size_t){expr});\n"));
    }
    c.push_str("    return 0;\n}\n");
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match std::process::Command::new(&cc)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "skipped declared_structs_match_the_installed_headers: no C compiler ({cc}: {e})"
            );
            return;
        }
    };
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = std::process::Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let wrong: Vec<String> = layout()
        .iter()
        .zip(text.lines())
        .filter(|((_, r), c)| c.parse::<usize>().ok() != Some(*r))
        .map(|((e, r), c)| format!("{e}: C {c}, Rust {r}"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Loading fails with the loader's message where a library is missing (this
/// machine has no rdma-core: the real dlopen failing).
#[test]
fn a_missing_library_is_named_with_the_loader_s_reason() {
    let e = Verbs::load_from("libfx-no-such-verbs.so.1", LIBMLX5)
        .err()
        .unwrap();
    assert!(e.starts_with("libfx-no-such-verbs.so.1 not found: "), "{e}");
    assert!(
        e.len() > "libfx-no-such-verbs.so.1 not found: ".len(),
        "{e}"
    );
    match Verbs::load() {
        Ok(_) => eprintln!("rdma-core is installed here: libibverbs and libmlx5 loaded"),
        Err(e) => assert!(
            e.starts_with("libibverbs.so.1 not found: ")
                || e.starts_with("libmlx5.so.1 not found: "),
            "{e}"
        ),
    }
}
