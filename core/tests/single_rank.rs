//! A one-rank communicator: every collective degenerates to local copies,
//! which makes the API's validation and bookkeeping testable in-process.

use ferrocx::{Bf16, CollKind, CollSpec, Communicator, DataType, Error, RedOp, VCounts};

fn comm() -> Communicator {
    // A free port for the rendezvous (rank 0 listens there).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    Communicator::new(&format!("127.0.0.1:{port}"), 0, 1).expect("one-rank communicator")
}

fn invalid(r: ferrocx::Result<()>, needle: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(needle), "'{m}' lacks '{needle}'"),
        other => panic!("expected InvalidArgument containing '{needle}', got {other:?}"),
    }
}

#[test]
fn every_collective_copies_on_one_rank() {
    let c = comm();
    let a: Vec<f32> = (0..1000).map(|i| i as f32 - 3.5).collect();
    let mut b = vec![0f32; 1000];
    for op in RedOp::ALL {
        b.fill(0.0);
        c.all_reduce(&a, &mut b, op).unwrap();
        assert_eq!(a, b, "{op}");
    }
    c.all_gather(&a, &mut b).unwrap();
    assert_eq!(a, b);
    c.reduce_scatter(&a, &mut b, RedOp::Max).unwrap();
    assert_eq!(a, b);
    c.broadcast(&a, &mut b, 0).unwrap();
    assert_eq!(a, b);
    c.reduce(&a, &mut b, RedOp::Min, 0).unwrap();
    assert_eq!(a, b);
    c.all_to_all(&a, &mut b).unwrap();
    assert_eq!(a, b);
    c.gather(&a, &mut b, 0).unwrap();
    assert_eq!(a, b);
    c.scatter(&a, &mut b, 0).unwrap();
    assert_eq!(a, b);
    let v = VCounts {
        send_counts: vec![600],
        send_displs: vec![100],
        recv_counts: vec![600],
        recv_displs: vec![0],
    };
    b.fill(0.0);
    c.all_to_allv(&a, &mut b, &v).unwrap();
    assert_eq!(a[100..700], b[..600]);
    let mut h: Vec<Bf16> = (0..64).map(|i| Bf16::from_f32(i as f32)).collect();
    c.all_reduce_in_place(&mut h, RedOp::Avg).unwrap();
    assert_eq!(h[63].to_f32(), 63.0);
    c.barrier().unwrap();
    let s = c.stats();
    assert_eq!((s.live_plans, s.queued_ops), (0, 0), "{s:?}");
    c.destroy().unwrap();
}

#[test]
fn typed_slices_must_have_the_exact_length() {
    let c = comm();
    let a = vec![1u32; 10];
    let mut short = vec![0u32; 9];
    invalid(c.all_reduce(&a, &mut short, RedOp::Sum), "needs exactly 10");
    invalid(c.all_gather(&a, &mut short), "receive buffer has 9");
    invalid(c.broadcast(&a, &mut short, 0), "send buffer has 10");
    invalid(c.broadcast(&a, &mut short, 1), "root 1 out of range");
    invalid(c.reduce(&a, &mut short, RedOp::Sum, 0), "receive buffer");
    // Still usable after rejected calls.
    let mut ok = vec![0u32; 10];
    c.all_reduce(&a, &mut ok, RedOp::Prod).unwrap();
    assert_eq!(ok, a);
}

#[test]
fn byte_buffers_are_validated() {
    let c = comm();
    let spec = CollSpec::new(CollKind::AllReduce, DataType::F64, 4);
    let sb = [0u8; 16];
    // Vec<u8> is not guaranteed 8-aligned: take an aligned window of it.
    let mut big = [0u8; 48];
    let boff = big.as_ptr().align_offset(8);
    invalid(
        c.collective(&spec, &sb[..16], &mut big[boff..boff + 32]),
        "send buffer holds 16 bytes",
    );
    let huge = CollSpec::new(CollKind::AllGather, DataType::F64, usize::MAX / 2);
    invalid(c.collective(&huge, &[], &mut []), "overflow");
    assert!(
        matches!(DataType::parse("float8").map_err(Error::from), Err(Error::InvalidArgument(m)) if m.contains("float8"))
    );
    c.destroy().unwrap();
    invalid_destroyed(c.collective(&spec, &[], &mut []));
}

fn invalid_destroyed(r: ferrocx::Result<()>) {
    assert!(matches!(r, Err(Error::Destroyed(_))), "{r:?}");
}

/// Without a GPU (CI) the device API answers `Unsupported` with the reason; with one
/// (the GPU host), host memory passed to it is refused by name.
#[test]
fn device_api_refuses_what_it_cannot_do() {
    let c = comm();
    let spec = CollSpec::new(CollKind::AllReduce, DataType::F32, 4);
    let host = [0u8; 64];
    let p = host.as_ptr() as u64;
    // SAFETY: the calls fail before anything is queued (no GPU, or host memory).
    let (r1, r2) = unsafe {
        (
            c.collective_on(&spec, p, p, std::ptr::null_mut()),
            c.register_device(p, 64).map(|_| ()),
        )
    };
    match c.device() {
        None => {
            for r in [r1, r2] {
                let e = r.expect_err("no GPU");
                assert!(matches!(e, Error::Unsupported(_)), "{e}");
                assert!(
                    e.to_string().contains("CUDA") || e.to_string().contains("GPU"),
                    "{e}"
                );
            }
        }
        Some(_) => {
            for r in [r1, r2] {
                let e = r.expect_err("host memory");
                assert!(e.to_string().contains("not CUDA device memory"), "{e}");
            }
        }
    }
    c.destroy().unwrap();
}

#[test]
fn sends_to_itself_in_a_group_are_local_copies() {
    let c = comm();
    let a: Vec<u8> = (0..=255).collect();
    let z: Vec<u8> = (0..64).map(|i| 255 - i).collect();
    let (mut b, mut y) = (vec![0u8; 256], vec![0u8; 64]);
    let mut g = c.group_start();
    g.recv(&mut b, 0).unwrap();
    g.send(&a, 0).unwrap();
    g.send(&z, 0).unwrap();
    g.recv(&mut y, 0).unwrap();
    g.group_end().unwrap();
    assert_eq!((a, z), (b, y), "paired in posting order");
    // Alone, or with a receive of another size: an error, nothing copied.
    invalid(c.send(&[1, 2, 3], 0), "needs its receive in the same group");
    let mut small = [9u8; 2];
    let mut g = c.group_start();
    g.send(&[1, 2, 3], 0).unwrap();
    g.recv(&mut small, 0).unwrap();
    invalid(
        g.group_end(),
        "has 3 bytes but its receive #0 from itself has 2",
    );
    assert_eq!(small, [9, 9]);
    invalid(c.transport_to(0).map(|_| ()), "local copies");
}
