//! Drives shm contexts ("rank 0" sends, "rank 1" receives) through the
//! `Transport` trait, on the SDK's test helpers. Shared by every test file.

#![allow(dead_code)]

pub use ferrocx_sdk::testing::*;
use ferrocx_sdk::{Blob, ConnectState, MemKind, PluginResult, Transport};
use ferrocx_shm::{Config, Shm, ShmConn, ShmMem};

/// A plugin context with `cfg`.
pub fn context(cfg: Config) -> Shm {
    ferrocx_shm::with_config(host().0, cfg).expect("shm context")
}

/// Small rings so that multi-chunk pipelining is exercised with small messages.
pub fn small_ring() -> Config {
    Config {
        chunk_size: 4096,
        nslots: 4,
        ..ferrocx_shm::config::defaults()
    }
}

/// Rank `rank` of the test host in process `pid`.
pub fn peer_info(rank: i32, pid: i32) -> ferrocx_sdk::abi::FxPeerInfo {
    peer(rank, pid)
}

/// Both ends of one connection rank 0 → rank 1.
pub struct Link {
    /// Rank 0's context.
    pub tx_shm: Shm,
    /// Rank 1's context.
    pub rx_shm: Shm,
    /// Rank 0's sending end.
    pub tx: ShmConn,
    /// Rank 1's receiving end.
    pub rx: ShmConn,
}

impl Link {
    /// Free both ends.
    pub fn free(self) {
        free_pair(&self.tx_shm, self.tx, &self.rx_shm, self.rx);
    }
}

/// Set up both ends; the blobs are returned unconnected.
pub fn setup(
    tx_shm: Shm,
    rx_shm: Shm,
    tx_pid: i32,
    rx_pid: i32,
) -> (Shm, Shm, ShmConn, Blob, ShmConn, Blob) {
    let (p0, p1) = (peer(0, tx_pid), peer(1, rx_pid));
    let (tx, tx_blob, rx, rx_blob) = setup_pair(&tx_shm, &rx_shm, p0, p1, next_conn_id());
    (tx_shm, rx_shm, tx, tx_blob, rx, rx_blob)
}

/// Connect ends made by [`setup`] (the receiver waits for the sender).
pub fn connect(
    (tx_shm, rx_shm, mut tx, tx_blob, mut rx, rx_blob): (Shm, Shm, ShmConn, Blob, ShmConn, Blob),
) -> Link {
    assert_eq!(
        rx_shm.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::InProgress,
        "receiver waits for the sender"
    );
    assert_eq!(
        tx_shm.connect(&mut tx, &rx_blob).unwrap(),
        ConnectState::Done
    );
    assert_eq!(
        rx_shm.connect(&mut rx, &tx_blob).unwrap(),
        ConnectState::Done
    );
    Link {
        tx_shm,
        rx_shm,
        tx,
        rx,
    }
}

/// A connected link with the given configurations and pids.
pub fn link_with(tx_cfg: Config, rx_cfg: Config, tx_pid: i32, rx_pid: i32) -> Link {
    connect(setup(context(tx_cfg), context(rx_cfg), tx_pid, rx_pid))
}

/// A connected link, both ends in this process.
pub fn link(cfg: Config) -> Link {
    link_with(cfg.clone(), cfg, my_pid(), my_pid())
}

/// Result of one receive.
#[derive(Debug)]
pub struct Received {
    /// nbytes or the error.
    pub result: PluginResult<usize>,
    /// The whole posted buffer after completion.
    pub buf: Vec<u8>,
}

/// Send `msgs` and receive into buffers of `recv_sizes` concurrently (two
/// threads, everything posted up front), registering the receive buffers when
/// `register` is set. Returns the send results and the receives.
pub fn exchange(
    l: &mut Link,
    msgs: &[Vec<u8>],
    recv_sizes: &[usize],
    register: bool,
) -> (Vec<PluginResult<usize>>, Vec<Received>) {
    let Link {
        tx_shm,
        rx_shm,
        tx,
        rx,
    } = l;
    let (tx_shm, rx_shm) = (&*tx_shm, &*rx_shm);
    std::thread::scope(|s| {
        let sender = s.spawn(move || {
            // SAFETY: `msgs` outlives the requests, which all finish in run_all.
            run_all(tx_shm, msgs.len(), |i| unsafe {
                tx_shm.isend(tx, msgs[i].as_ptr(), msgs[i].len(), None)
            })
        });
        let mut bufs: Vec<Vec<u8>> = recv_sizes.iter().map(|&n| vec![0xEEu8; n]).collect();
        let handles: Vec<Option<ShmMem>> = bufs
            .iter_mut()
            .map(|b| {
                register.then(|| {
                    // SAFETY: the buffer lives until after deregistration below.
                    unsafe {
                        rx_shm.register(b.as_mut_ptr(), b.len(), MemKind::Host, &mut Blob::new())
                    }
                    .unwrap()
                })
            })
            .collect();
        let ptrs: Vec<(*mut u8, usize)> =
            bufs.iter_mut().map(|b| (b.as_mut_ptr(), b.len())).collect();
        // SAFETY: the buffers are neither moved nor touched until every request finished.
        let results = run_all(rx_shm, ptrs.len(), |i| unsafe {
            rx_shm.irecv(rx, ptrs[i].0, ptrs[i].1, handles[i].as_ref())
        });
        for h in handles.into_iter().flatten() {
            rx_shm.deregister(h).unwrap();
        }
        let received = results
            .into_iter()
            .zip(bufs)
            .map(|(result, buf)| Received { result, buf })
            .collect();
        (sender.join().expect("sender thread"), received)
    })
}
