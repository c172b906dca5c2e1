//! A runner executes one schedule on one channel: posts a stage's transfers,
//! waits for them (without blocking: the engine's sweep calls `advance`),
//! runs its local steps, goes on to the next stage.

use super::local::{self, Bases};
use crate::algo::{Schedule, Xfer};
use crate::comm::Dir;
use crate::error::Error;
use crate::types::{DataType, RedOp};
use std::sync::Arc;

/// Below this a send is assumed eager (copied out at once by the transport).
const EAGER_BYTES: usize = 16 * 1024;

/// Scratch memory, 8-byte aligned, recycled through the engine's pool.
pub(crate) type ScratchBuf = Vec<u64>;

/// A transfer for the engine to queue: (channel, peer, dir, address, bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Post {
    pub channel: usize,
    pub peer: usize,
    pub dir: Dir,
    pub ptr: usize,
    pub len: usize,
}

/// What `advance` needs from the engine: somewhere to queue transfers and
/// a way to know whether the last stage's transfers are done.
pub(crate) trait Poster {
    /// Queue transfers; they complete into the returned stage counter.
    fn post(&mut self, posts: &[Post]) -> Arc<super::StageDone>;
}

/// Result of [`Runner::advance`].
pub(crate) enum Step {
    /// Waiting for transfers.
    Blocked,
    /// Every stage done.
    Done,
    /// A stage failed.
    Failed(Error),
}

pub(crate) struct Runner {
    pub channel: usize,
    pub sched: Arc<Schedule>,
    pub bases: Bases,
    pub dtype: DataType,
    pub op: RedOp,
    pub nranks: usize,
    /// Collectives break the communicator on failure; point-to-point
    /// errors (a receive too small) only fail the request.
    pub fatal: bool,
    pub stage: usize,
    pub cur: Option<Arc<super::StageDone>>,
    pub scratch: Option<ScratchBuf>,
    /// Keeps a staged copy of an in-place input alive.
    pub _staging: Option<Arc<ScratchBuf>>,
    /// Reused list of transfers (no allocation per stage once warm).
    posts: Vec<Post>,
}

impl Runner {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        channel: usize,
        sched: Arc<Schedule>,
        bases: Bases,
        dtype: DataType,
        op: RedOp,
        nranks: usize,
        fatal: bool,
        staging: Option<Arc<ScratchBuf>>,
    ) -> Self {
        Runner {
            channel,
            sched,
            bases,
            dtype,
            op,
            nranks,
            fatal,
            stage: 0,
            cur: None,
            scratch: None,
            _staging: staging,
            posts: Vec::new(),
        }
    }

    /// Scratch bytes this runner needs.
    pub fn scratch_bytes(&self) -> usize {
        self.sched.scratch * self.bases.esize
    }

    /// Give the runner its scratch buffer (before the first `advance`).
    pub fn set_scratch(&mut self, buf: ScratchBuf) {
        self.bases.scratch = buf.as_ptr() as usize;
        self.scratch = Some(buf);
    }

    fn locals(&self, stage: usize) {
        let st = &self.sched.stages[stage];
        // SAFETY: regions lie in validated user buffers (checked against the
        // counts when the task was made, kept alive by the request's contract)
        // or in this runner's scratch; the stage's transfers are complete.
        unsafe { local::run(&st.locals, &self.bases, self.dtype, self.op, self.nranks) };
    }

    /// Move as far as possible without blocking.
    pub fn advance(&mut self, poster: &mut dyn Poster) -> Step {
        loop {
            if let Some(done) = &self.cur {
                if !done.is_done() {
                    return Step::Blocked;
                }
                if let Some(e) = done.take_error() {
                    self.cur = None;
                    return Step::Failed(e);
                }
                self.cur = None;
                self.locals(self.stage);
                self.stage += 1;
            }
            let Some(st) = self.sched.stages.get(self.stage) else {
                return Step::Done;
            };
            if st.is_local() {
                self.locals(self.stage);
                self.stage += 1;
                continue;
            }
            let addr = |x: &Xfer, dir| {
                let (ptr, len) = self.bases.addr(&x.region);
                Post {
                    channel: self.channel,
                    peer: x.peer,
                    dir,
                    ptr,
                    len,
                }
            };
            // Small messages go out first (they are eager: the sooner posted,
            // the sooner the peer has them); with large ones, receives first,
            // so a rendezvous transport advertises where data should go before
            // this rank spends its time copying.
            self.posts.clear();
            let recvs = st.recvs.iter().map(|x| addr(x, Dir::Recv));
            let sends = st.sends.iter().map(|x| addr(x, Dir::Send));
            let eager = st
                .sends
                .iter()
                .all(|x| x.region.len * self.bases.esize < EAGER_BYTES);
            if eager {
                self.posts.extend(sends.chain(recvs));
            } else {
                self.posts.extend(recvs.chain(sends));
            }
            self.cur = Some(poster.post(&self.posts));
        }
    }
}
