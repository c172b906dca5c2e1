//! The proxy on memory another thread writes at the same time, as a GPU writes
//! pinned host memory: atomic words with acquire loads and release stores, and a
//! producer that publishes by stamps alone (it keeps its claim counter to
//! itself, as `fxg_post` does in device memory).

use super::*;
use crate::health::Completion;
use crate::queue::{QueueMemory, CONSUMER_INDEX, PRODUCER_INDEX};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

/// Memory two threads share, word by word. Each access then spins `pace`
/// times, as words crossing PCIe take their time: it widens the windows in
/// which a body read before its stamp, or written after it, would be caught.
#[derive(Clone)]
struct SharedWords {
    words: Arc<[AtomicU64]>,
    pace: u32,
}

impl SharedWords {
    fn new(bytes: usize) -> Self {
        SharedWords {
            words: (0..bytes / 8).map(|_| AtomicU64::new(0)).collect(),
            pace: 0,
        }
    }

    fn paced(&self, pace: u32) -> Self {
        SharedWords {
            words: self.words.clone(),
            pace,
        }
    }

    fn wait(&self) {
        (0..self.pace).for_each(|_| std::hint::spin_loop());
    }
}

impl QueueMemory for SharedWords {
    fn len_bytes(&self) -> usize {
        8 * self.words.len()
    }

    fn load(&self, at: usize) -> u64 {
        let v = self.words[at / 8].load(Ordering::Acquire);
        self.wait();
        v
    }

    fn store(&mut self, at: usize, v: u64) {
        self.words[at / 8].store(v, Ordering::Release);
        self.wait();
    }
}

/// The GPU's view of a request ring: the producer index is its own claim
/// counter, so the shared word is never written.
struct ClaimCounter {
    ring: SharedWords,
    claimed: u64,
}

impl QueueMemory for ClaimCounter {
    fn len_bytes(&self) -> usize {
        self.ring.len_bytes()
    }

    fn load(&self, at: usize) -> u64 {
        if at == PRODUCER_INDEX {
            self.claimed
        } else {
            self.ring.load(at)
        }
    }

    fn store(&mut self, at: usize, v: u64) {
        if at == PRODUCER_INDEX {
            self.claimed = v;
        } else {
            self.ring.store(at, v);
        }
    }
}

/// Completes every post as soon as the proxy side looks; keeps what it carried.
#[derive(Default)]
struct Immediate {
    due: Vec<Completion>,
    carried: Vec<WorkRecord>,
}

impl Carrier for Immediate {
    fn post(&mut self, peer: PeerId, path: Path, req: &CarrierRequest) -> Result<(), Refused> {
        self.carried.push(req.work);
        self.due.push(Completion {
            peer,
            path,
            seq: req.req.seq,
            fetched: None,
        });
        Ok(())
    }
}

/// Every word of the body differs from record to record, so a body read before
/// its stamp landed (or torn) would show.
fn record(i: u64) -> WorkRecord {
    WorkRecord::PutSignal {
        window: i as u32 ^ 0x5a5a_5a5a,
        dst: i.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        src: !i,
        bytes: (i as u32).rotate_left(7),
        signal: 8 * i,
        value: i << 20 | 1,
        op: if i.is_multiple_of(3) {
            SignalOp::Set
        } else {
            SignalOp::Add
        },
    }
}

#[test]
fn a_producer_thread_publishing_by_stamps_alone_is_served_on_shared_memory() {
    // The proxy reading slower than the GPU writes would catch a body read
    // before its stamp; the GPU writing slower, a stamp written before its body.
    // Pauses of the producer between records let the proxy wait on an empty
    // ring, polling the slot being written.
    serve(3000, 256, 16, 1 << 14);
    serve(3000, 16, 256, 0);
}

/// A producer thread pushes `n` records while this thread runs the proxy, each
/// side's accesses paced as given; after half its records the producer pauses
/// for up to `pause` spins.
fn serve(n: u64, proxy_pace: u32, gpu_pace: u32, pause: u64) {
    let cfg = ProxyConfig {
        sq_slots: 8,
        cq_slots: 4,
        max_owed: 64,
        take_per_poll: 4,
        ..ProxyConfig::default()
    };
    let mut proxy = Proxy::new(PeerId(0), cfg).expect("valid config");
    let (sqq, cqq) = (proxy.request_queue(), proxy.completion_queue());
    let sq = SharedWords::new(sqq.ring().bytes());
    let cq = SharedWords::new(cqq.ring().bytes());
    proxy
        .add_queue_in(
            q(P1),
            false,
            Box::new(sq.paced(proxy_pace)),
            Box::new(cq.paced(proxy_pace)),
        )
        .expect("right sizes");
    let deadline = Instant::now() + Duration::from_secs(30);

    let gpu = thread::spawn({
        let (sq, mut cq) = (sq.paced(gpu_pace), cq.paced(gpu_pace));
        move || {
            let mut sq = ClaimCounter {
                ring: sq,
                claimed: 0,
            };
            let mut rng = Rng::new(9);
            let (mut next, mut got) = (0, Vec::new());
            while got.len() < n as usize {
                assert!(Instant::now() < deadline, "GPU side stuck at {next}");
                let mut progress = false;
                if next < n {
                    match sqq.push(&mut sq, &record(next)) {
                        Ok(id) => {
                            assert_eq!(id, next);
                            next += 1;
                            progress = true;
                        }
                        Err(QueueError::Full { .. }) => {}
                        Err(e) => panic!("push {next}: {e}"),
                    }
                }
                while let Some((_, e)) = cqq.pop(&mut cq).expect("completion ring consistent") {
                    got.push(e.expect("valid completion"));
                    progress = true;
                }
                if !progress {
                    thread::yield_now();
                } else if pause > 0 && rng.chance(1, 2) {
                    (0..rng.below(pause)).for_each(|_| std::hint::spin_loop());
                }
            }
            got
        }
    });

    // The proxy side: its clock stands still, so only the GPU side's pace and
    // the completion credit decide what is taken.
    let mut carrier = Immediate::default();
    let now = Nanos(0);
    while !gpu.is_finished() {
        assert!(Instant::now() < deadline, "proxy side stuck");
        let mut progress = proxy.poll(&mut carrier, now) > 0;
        for c in std::mem::take(&mut carrier.due) {
            proxy.on_completion(c, &mut carrier, now).expect("posted");
            progress = true;
        }
        if !progress {
            thread::yield_now();
        }
    }
    let got = gpu.join().expect("GPU side");

    let ids: Vec<u64> = got.iter().map(|e| e.req_id).collect();
    assert_eq!(
        ids,
        (0..n).collect::<Vec<_>>(),
        "one completion each, in order"
    );
    assert!(got.iter().all(|e| e.status == CqStatus::Ok
        && e.peer == P1
        && e.paths == PathSet::of(Path::Primary)));
    for (i, w) in carrier.carried.iter().enumerate() {
        assert_eq!(*w, record(i as u64), "record {i} carried as written");
    }
    assert_eq!(carrier.carried.len() as u64, n, "every record carried once");
    // The shared producer word was never written: the stamps alone published.
    assert_eq!((sq.load(PRODUCER_INDEX), sq.load(CONSUMER_INDEX)), (0, n));
    assert_eq!(cqq.ring().indices(&cq), Ok((n, n)));
    assert_eq!(proxy.poll_event(), None);
}
