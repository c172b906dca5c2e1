//! The ce plugin through its C table, on any machine: the header, and
//! `comm_init` deciding alike on every rank (ranks as threads of this
//! process, with an in-memory out-of-band all_gather/barrier).
//!
//! Without CUDA every rank's setup fails and every rank says so, naming all
//! of them. With a GPU the flag buffers are really allocated, exported and
//! exchanged, and opening them fails (CUDA refuses to open a handle of the
//! process itself), so the second exchange makes every rank sit out and
//! tear down in order (close, barrier, free) — never a panic, never a rank
//! left waiting.

use ferrocx_ce::Ce;
use ferrocx_sdk::abi::*;
use ferrocx_sdk::collective::collective_table;
use ferrocx_sdk::testing::ThreadOob;
use std::sync::Arc;

fn last_error(t: &FxCollectiveV1) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a buffer of buf.len() bytes.
    let n = unsafe { (t.last_error.unwrap())(buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(n.min(buf.len()));
    String::from_utf8_lossy(&buf)
        .trim_end_matches('\0')
        .to_string()
}

fn peers(n: usize, hosts: &[u64], gpu: bool) -> Vec<FxPeerInfo> {
    let pci = if gpu {
        ferrocx_sdk::cuda::pci_id(0).unwrap_or(0)
    } else {
        0
    };
    (0..n)
        .map(|r| {
            let mut p = ferrocx_sdk::testing::peer(r as i32, std::process::id() as i32);
            p.nranks = n as i32;
            p.host_hash = hosts[r];
            p.cuda_device = if gpu { 0 } else { -1 };
            p.cuda_pci = pci;
            p
        })
        .collect()
}

/// comm_init on `n` threads; every rank's (code, message).
fn comm_init_all(peers: Vec<FxPeerInfo>) -> Vec<(i32, String)> {
    let n = peers.len();
    let group = ThreadOob::new(n);
    let peers = Arc::new(peers);
    let threads: Vec<_> = (0..n)
        .map(|rank| {
            let (group, peers) = (group.clone(), peers.clone());
            std::thread::spawn(move || {
                static TABLE: FxCollectiveV1 = collective_table::<Ce>();
                let t = &TABLE;
                let (_host, table) = ferrocx_sdk::testing::host();
                let mut ctx = std::ptr::null_mut();
                // SAFETY: a valid host table that outlives the context.
                assert_eq!(unsafe { (t.init.unwrap())(table, &mut ctx) }, FX_OK);
                let member = group.member(rank);
                let oob = member.table();
                let info = FxCommInfo {
                    rank: rank as i32,
                    nranks: peers.len() as i32,
                    local_rank: rank as i32,
                    cuda_device: peers[rank].cuda_device,
                    comm_hash: 1,
                    peers: peers.as_ptr(),
                };
                let mut comm = std::ptr::null_mut();
                // SAFETY: live context, info (its peers) and oob across the call.
                let code = unsafe { (t.comm_init.unwrap())(ctx, &info, &oob, &mut comm) };
                let msg = last_error(t);
                if code == FX_OK {
                    // SAFETY: the comm just made.
                    assert_eq!(unsafe { (t.comm_destroy.unwrap())(comm) }, FX_OK);
                }
                // SAFETY: the context made above, every comm destroyed.
                assert_eq!(unsafe { (t.finalize.unwrap())(ctx) }, FX_OK);
                drop(member);
                (code, msg)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn the_table_describes_ce() {
    let t = collective_table::<Ce>();
    assert_eq!(t.abi_version, FX_COLL_ABI_VERSION_1);
    assert_eq!(&t.name[..3], b"ce\0".map(|c| c as _).as_slice());
    assert_eq!(
        t.caps,
        FX_COLL_CAP_CUDA_MEM | FX_COLL_CAP_WINDOWS | FX_COLL_CAP_GRAPHS | FX_COLL_CAP_P2P_SELF
    );
    assert_eq!(t.caps & FX_COLL_CAP_HOST_MEM, 0);
}

#[test]
fn several_hosts_or_a_rank_without_gpu_sit_out_without_an_exchange() {
    // No exchange happens (the oob would deadlock a single caller): answers
    // come from what every rank knows.
    for r in comm_init_all(peers(2, &[1, 2], true)) {
        assert_eq!(r.0, FX_UNSUPPORTED, "{}", r.1);
        assert!(r.1.contains("one host"), "{}", r.1);
    }
    let mut p = peers(3, &[1, 1, 1], true);
    p[2].cuda_device = -1;
    for r in comm_init_all(p) {
        assert_eq!(r.0, FX_UNSUPPORTED, "{}", r.1);
        assert!(r.1.contains("rank 2 has no GPU"), "{}", r.1);
    }
}

#[test]
fn every_rank_sits_out_alike_when_setup_fails() {
    let gpu = ferrocx_sdk::cuda::available().is_ok();
    for r in comm_init_all(peers(3, &[7, 7, 7], true)) {
        assert_eq!(r.0, FX_UNSUPPORTED, "{}", r.1);
        assert!(r.1.contains("ce sits this communicator out"), "{}", r.1);
        if !gpu {
            for rank in 0..3 {
                assert!(r.1.contains(&format!("rank {rank}: ")), "{}", r.1);
            }
        }
    }
}
