//! What the tests of `exchange` (threads and channels) and `comm` (threads and
//! real mailboxes) share: the inputs, NCCL's buffer layouts, the expected outputs.

use ferrocx_algo::RedOp;
use ferrocx_sdk::collective::Coll;
use std::ops::Range;

/// Rank r's element i of its send buffer.
pub fn input(r: usize, i: usize) -> u32 {
    (r * 1000 + i * 7 + 1) as u32
}

/// The expected output of rank r (None: it receives nothing).
pub fn expected(
    coll: Coll,
    op: RedOp,
    c: usize,
    n: usize,
    r: usize,
    root: usize,
) -> Option<Vec<u32>> {
    let red = |i: usize| {
        let xs = (0..n).map(|q| input(q, i));
        match op {
            RedOp::Sum => xs.fold(0u32, u32::wrapping_add),
            RedOp::Max => xs.max().unwrap(),
            RedOp::Min => xs.min().unwrap(),
            RedOp::Prod => xs.fold(1u32, u32::wrapping_mul),
            RedOp::Avg => xs.fold(0u32, u32::wrapping_add) / n as u32,
        }
    };
    Some(match coll {
        Coll::AllReduce => (0..c).map(red).collect(),
        Coll::Reduce if r == root => (0..c).map(red).collect(),
        Coll::ReduceScatter => (0..c).map(|i| red(r * c + i)).collect(),
        Coll::Broadcast => (0..c).map(|i| input(root, i)).collect(),
        Coll::AllGather => (0..n * c).map(|i| input(i / c, i % c)).collect(),
        Coll::Gather if r == root => (0..n * c).map(|i| input(i / c, i % c)).collect(),
        Coll::AllToAll => (0..n * c).map(|i| input(i / c, r * c + i % c)).collect(),
        Coll::Scatter => (0..c).map(|i| input(root, r * c + i)).collect(),
        _ => return None,
    })
}

/// One rank's buffers for a call, its input laid out as NCCL says.
pub struct Bufs {
    send: Vec<u32>,
    buf: Vec<u32>,
    in_place: bool,
    out: Range<usize>,
}

impl Bufs {
    /// `count` elements per block; in place or not.
    pub fn new(coll: Coll, c: usize, n: usize, r: usize, root: usize, in_place: bool) -> Self {
        let (se, re) = coll.buffer_bytes(c, n, r, root);
        let input: Vec<u32> = (0..se).map(|i| input(r, i)).collect();
        let mut buf = vec![0xdead_beefu32; se.max(re)];
        let at_root = r == root;
        // Where the input goes in the one buffer, and where the output is read.
        let (inp, out) = match coll {
            _ if !in_place => (None, 0..re),
            Coll::AllGather => (Some(r * c), 0..re),
            Coll::Gather if at_root => (Some(r * c), 0..re),
            Coll::ReduceScatter => (Some(0), r * c..r * c + re),
            Coll::Scatter if at_root => (Some(0), r * c..r * c + re),
            _ => (Some(0), 0..re),
        };
        if let Some(at) = inp {
            buf[at..at + se].copy_from_slice(&input);
        }
        Bufs {
            send: input,
            buf,
            in_place,
            out,
        }
    }

    /// Whether the call is in place.
    pub fn in_place(&self) -> bool {
        self.in_place
    }

    /// The buffers as NCCL's API takes them: in place, both are the one buffer.
    pub fn api(&mut self) -> (*const u8, *mut u8) {
        let one = self.buf.as_mut_ptr().cast::<u8>();
        if self.in_place {
            (one.cast_const(), one)
        } else {
            (self.send.as_ptr().cast(), one)
        }
    }

    /// This rank's output.
    pub fn output(&self) -> Vec<u32> {
        self.buf[self.out.clone()].to_vec()
    }
}
