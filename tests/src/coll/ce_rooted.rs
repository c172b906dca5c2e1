//! `ce-rooted-own`: broadcast, scatter and gather on device memory where only
//! the buffer every rank uses lies in a window (the arena's, registered by
//! every rank), and the root's own other buffer — a broadcast's or scatter's
//! input, a gather's output — is a separate allocation outside any window;
//! non-roots pass 0 for the buffer they do not use. Every root, blocks from
//! a few bytes to 4 MiB; every rank checks its bytes and that ce ran the call.
//! Run with ce's kernels (the default) and with them off (the barrier routes
//! on windows, where a root once staged while the others did not: session 24).

use super::device::{sync, DevMem};
use super::e2s;
use ferrocx::{CollKind, CollSpec, Communicator, DataType};

/// Byte `i` of rank `r`'s input.
fn byte(r: usize, i: usize) -> u8 {
    (r * 29 + i * 13 + 7) as u8
}

pub fn run() -> Result<String, String> {
    let comm = Communicator::from_env().map_err(e2s)?;
    let (me, n) = (comm.rank(), comm.nranks());
    let stream = ferrocx_sdk::cuda::Stream::new().map_err(|e| e.to_string())?;
    // One window over the arena, which every case carves from its start.
    let (base, len) = super::device::arena()?;
    // SAFETY: the arena stays allocated for the life of this thread.
    unsafe { comm.window_register_device(base, len) }.map_err(e2s)?;
    let mut ran = 0;
    for block in [8usize, 4096, 1 << 20, 4 << 20] {
        for kind in [CollKind::Broadcast, CollKind::Scatter, CollKind::Gather] {
            for root in 0..n {
                let total = n * block;
                // The shared buffer (a block every rank uses), carved alike on
                // every rank: at the same offset of the window.
                let shared_len = block;
                let shared = DevMem::new(shared_len)?;
                // The root's own other buffer, outside the arena's window.
                let own_len = if kind == CollKind::Broadcast {
                    block
                } else {
                    total
                };
                let own = if me == root {
                    Some(DevMem::outside(own_len)?)
                } else {
                    None
                };
                let own_ptr = own.as_ref().map_or(0, |d| d.ptr);
                let poison = vec![0xA5u8; own_len.max(shared_len)];
                let (send, recv) = match kind {
                    CollKind::Gather => {
                        let mine: Vec<u8> = (0..block).map(|i| byte(me, i)).collect();
                        shared.upload(&mine)?;
                        if let Some(o) = &own {
                            o.upload(&poison[..own_len])?;
                        }
                        (shared.ptr, own_ptr)
                    }
                    _ => {
                        shared.upload(&poison[..shared_len])?;
                        if let Some(o) = &own {
                            let input: Vec<u8> = (0..own_len).map(|i| byte(root, i)).collect();
                            o.upload(&input)?;
                        }
                        (own_ptr, shared.ptr)
                    }
                };
                let spec = CollSpec::new(kind, DataType::U8, block).root(root);
                let choice = comm
                    .collective_choice(&spec, send, recv, false, true)
                    .map_err(e2s)?;
                if choice.winner() != "ce" {
                    return Err(format!(
                        "{kind:?} root {root} block {block}: ce does not run it on rank {me}: {}",
                        choice.explain()
                    ));
                }
                // SAFETY: live stream and buffers; synchronized below.
                unsafe { comm.collective_on(&spec, send, recv, &stream) }.map_err(e2s)?;
                sync(&stream)?;
                comm.device_error().map_err(e2s)?;
                let what = format!("{kind:?} root {root} block {block} on rank {me}");
                let (got, want): (Vec<u8>, Vec<u8>) = match kind {
                    CollKind::Gather if me == root => {
                        let mut got = vec![0u8; total];
                        own.as_ref().ok_or("no output")?.download(&mut got)?;
                        let want = (0..n)
                            .flat_map(|r| (0..block).map(move |i| byte(r, i)))
                            .collect();
                        (got, want)
                    }
                    CollKind::Gather => (Vec::new(), Vec::new()),
                    _ => {
                        let mut got = vec![0u8; block];
                        shared.download(&mut got)?;
                        let at = if kind == CollKind::Scatter {
                            me * block
                        } else {
                            0
                        };
                        (got, (0..block).map(|i| byte(root, at + i)).collect())
                    }
                };
                if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
                    return Err(format!(
                        "{what}: byte {i} is {} where {} belongs",
                        got[i], want[i]
                    ));
                }
                ran += 1;
            }
        }
    }
    comm.barrier().map_err(e2s)?;
    Ok(format!("rank {me}: {ran} calls checked"))
}
