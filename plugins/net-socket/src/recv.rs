//! The receiving end of a connection: reads chunk frames from every socket, places
//! each chunk at its offset in the receive posted for its message, and — in
//! acknowledged mode — acknowledges it on the socket it came from.
//!
//! Receives match messages by sequence number (the n-th receive gets the n-th send),
//! so chunks may arrive on any socket in any order. Nothing is placed twice: a chunk
//! already in place (resent after a rail failure, or its old copy arriving late) is
//! read into scratch and dropped, and once a receive completes no socket writes into
//! its buffer again, even one that was mid-chunk. A chunk whose receive is not posted
//! yet is kept in memory (bounded by the sender's window, since it stays
//! unacknowledged until placed) so one slow message never blocks a socket that later
//! carries the resent chunk another message waits for.

use crate::accept::Acceptor;
use crate::send::{live, Params, Who};
use crate::sock::{self, Io};
use crate::wire::{Frame, Kind, FRAME_BYTES};
use ferrocx_sdk::failover::{chunk_len, nchunks};
use ferrocx_sdk::{PluginError, PluginResult};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Bytes of the scratch buffer that swallows chunks nobody needs.
const DISCARD_CHUNK: usize = 64 << 10;
/// How often listeners are polled for replacement sockets (acknowledged mode).
const ACCEPT_EVERY: Duration = Duration::from_millis(20);

enum Dest {
    /// Straight into the posted receive.
    User,
    /// Into memory until its receive is posted.
    Keep(Vec<u8>),
    /// Not needed (duplicate, or its receive failed or completed).
    Discard,
}

struct Body {
    seq: u64,
    total: u64,
    offset: u64,
    len: usize,
    got: usize,
    dest: Dest,
}

struct RxStream {
    sock: Option<TcpStream>,
    hdr: [u8; FRAME_BYTES],
    hdr_got: usize,
    body: Option<Body>,
    acks: VecDeque<[u8; FRAME_BYTES]>,
    ack_sent: usize,
}

impl RxStream {
    fn empty() -> Self {
        RxStream {
            sock: None,
            hdr: [0; FRAME_BYTES],
            hdr_got: 0,
            body: None,
            acks: VecDeque::new(),
            ack_sent: 0,
        }
    }
}

struct RecvOp {
    seq: u64,
    addr: usize,
    cap: usize,
    total: Option<u64>,
    got: u64,
    bits: Vec<u64>,
    done: bool,
}

impl RecvOp {
    fn has(&self, index: u32) -> bool {
        self.bits
            .get((index / 64) as usize)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    }
}

/// Chunks that arrived before their receive was posted.
struct Early {
    total: u64,
    chunks: Vec<(u64, Vec<u8>, usize)>,
}

/// The receiving end's data path.
pub(crate) struct Receiver {
    who: Who,
    p: Params,
    token: u64,
    acceptor: Acceptor,
    next_accept: Instant,
    streams: Vec<RxStream>,
    recvs: VecDeque<RecvOp>,
    next_seq: u64,
    early: BTreeMap<u64, Early>,
    done_below: u64,
    done_above: BTreeSet<u64>,
    done: HashMap<u64, PluginResult<usize>>,
    scratch: Vec<u8>,
}

impl Receiver {
    /// A receiver expecting `nstreams` sockets on `acceptor`.
    pub fn new(who: Who, p: Params, token: u64, acceptor: Acceptor, nstreams: usize) -> Self {
        Receiver {
            who,
            p,
            token,
            acceptor,
            next_accept: Instant::now(),
            streams: (0..nstreams).map(|_| RxStream::empty()).collect(),
            recvs: VecDeque::new(),
            next_seq: 0,
            early: BTreeMap::new(),
            done_below: 0,
            done_above: BTreeSet::new(),
            done: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Accept sockets: `Ok(true)` once every socket of the sender is connected or,
    /// with several rails, once one is (the sender may have found a rail down; its
    /// other sockets are accepted whenever they come).
    pub fn connect_step(&mut self) -> PluginResult<bool> {
        self.accept()?;
        Ok(if self.p.reliable {
            self.streams.iter().any(|s| s.sock.is_some())
        } else {
            self.streams.iter().all(|s| s.sock.is_some())
        })
    }

    fn accept(&mut self) -> PluginResult<()> {
        for (index, t) in self
            .acceptor
            .poll(self.token, self.who.host, &self.who.what)?
        {
            let Some(st) = self.streams.get_mut(index as usize) else {
                self.who.host.warn(format!(
                    "{}: the sender announced socket {index} of {}; closed",
                    self.who.what,
                    self.streams.len()
                ));
                continue;
            };
            let t = live(t, &self.p)?;
            if let Some(old) = st.sock.replace(t) {
                // A reconnected socket replaces its predecessor; whatever that one
                // was reading is resent by the sender.
                sock::abort(old);
                self.who.host.info(format!(
                    "net-socket: socket {index} from rank {} reconnected on {}",
                    self.who.peer, self.who.what
                ));
            }
            *st = RxStream {
                sock: st.sock.take(),
                ..RxStream::empty()
            };
        }
        Ok(())
    }

    /// Post a receive of at most `cap` bytes; `None` when too many are outstanding.
    pub fn post(&mut self, addr: usize, cap: usize, max: usize) -> Option<u64> {
        if self.recvs.len() >= max {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.recvs.push_back(RecvOp {
            seq,
            addr,
            cap,
            total: None,
            got: 0,
            bits: Vec::new(),
            done: false,
        });
        if let Some(early) = self.early.remove(&seq) {
            if self.set_total(seq, early.total) {
                for (offset, data, s) in early.chunks {
                    self.place_copy(seq, offset, &data, s);
                }
            } else {
                for (offset, _, s) in early.chunks {
                    self.ack(s, seq, offset);
                }
            }
        }
        Some(seq)
    }

    /// Whether receive `seq` is still in progress: not complete, or complete with
    /// acknowledgements not yet handed to the kernel (nothing else would send them:
    /// the core stops testing a connection with nothing posted).
    pub fn pending(&self, seq: u64) -> bool {
        self.op(seq).is_some_and(|o| !o.done)
            || (self.acks_queued() && self.done.contains_key(&seq))
    }

    /// The result of receive `seq`, once (once its acknowledgements are out).
    pub fn take(&mut self, seq: u64) -> Option<PluginResult<usize>> {
        if self.acks_queued() && self.done.get(&seq).is_some_and(Result::is_ok) {
            return None;
        }
        self.done.remove(&seq)
    }

    fn acks_queued(&self) -> bool {
        self.streams.iter().any(|st| !st.acks.is_empty())
    }

    /// An acknowledged receiver with no receive in progress: it still reads and
    /// acknowledges what arrives (resent chunks), see `linger`.
    pub fn lingering(&self) -> bool {
        self.p.reliable && self.recvs.iter().all(|o| o.done)
    }

    /// Forget a result nobody will collect.
    pub fn forget(&mut self, seq: u64) -> bool {
        self.done.remove(&seq).is_some()
    }

    /// This end is being freed: tell the sender, on every socket (best effort, never
    /// blocking), that every message below the first incomplete one is in place.
    pub fn say_goodbye(&mut self) {
        if !self.p.reliable {
            return;
        }
        let bye = Frame {
            kind: Kind::Bye,
            seq: self.done_below,
            total: 0,
            offset: 0,
        }
        .encode();
        for st in &mut self.streams {
            // An acknowledgement half written would garble the goodbye: skip that socket.
            if let (Some(t), 0) = (&st.sock, st.ack_sent) {
                // SAFETY: `bye` is our own frame.
                let _ = unsafe { sock::send2(t, (bye.as_ptr(), bye.len()), (std::ptr::null(), 0)) };
            }
        }
    }

    /// Fail every outstanding receive with `e` and close the sockets.
    pub fn fail_all(&mut self, e: &PluginError) {
        for o in self.recvs.drain(..) {
            if !o.done {
                self.done.insert(o.seq, Err(e.clone()));
            }
        }
        for st in &mut self.streams {
            if let Some(t) = st.sock.take() {
                sock::abort(t);
            }
        }
        self.early.clear();
    }

    fn op(&self, seq: u64) -> Option<&RecvOp> {
        let front = self.recvs.front()?.seq;
        self.recvs.get(seq.checked_sub(front)? as usize)
    }

    fn op_mut(&mut self, seq: u64) -> Option<&mut RecvOp> {
        let front = self.recvs.front()?.seq;
        self.recvs.get_mut(seq.checked_sub(front)? as usize)
    }

    fn is_done(&self, seq: u64) -> bool {
        seq < self.done_below || self.done_above.contains(&seq)
    }

    fn complete(&mut self, seq: u64, r: PluginResult<usize>) {
        if let Some(o) = self.op_mut(seq) {
            o.done = true;
        }
        self.done.insert(seq, r);
        self.done_above.insert(seq);
        while self.done_above.remove(&self.done_below) {
            self.done_below += 1;
        }
        while self.recvs.front().is_some_and(|o| o.done) {
            self.recvs.pop_front();
        }
    }

    /// Learn message `seq`'s length from a frame; false when the receive cannot hold it
    /// (it then fails, naming both sizes) or is already done.
    fn set_total(&mut self, seq: u64, total: u64) -> bool {
        let chunk = self.p.chunk;
        let (peer, me_what) = (self.who.peer, self.who.what.clone());
        let Some(o) = self.op_mut(seq) else {
            return false;
        };
        if o.done {
            return false;
        }
        if o.total.is_none() {
            if total > o.cap as u64 {
                let cap = o.cap;
                self.complete(
                    seq,
                    Err(PluginError::invalid(format!(
                        "rank {peer} sent {total} bytes but the receive posted on {me_what} holds only {cap}"
                    ))),
                );
                return false;
            }
            o.total = Some(total);
            o.bits = vec![0; nchunks(total, chunk).div_ceil(64) as usize];
            if total == 0 {
                self.complete(seq, Ok(0));
                return false;
            }
        }
        true
    }

    /// Where the payload of a data frame goes.
    fn classify(&mut self, f: &Frame) -> PluginResult<Dest> {
        let chunk = self.p.chunk as u64;
        if !f.offset.is_multiple_of(chunk)
            || (f.offset >= f.total && f.total != 0)
            || (f.total == 0 && f.offset != 0)
        {
            return Err(PluginError::internal(format!(
                "net-socket protocol error on {}: chunk at {} of a {}-byte message",
                self.who.what, f.offset, f.total
            )));
        }
        let index = (f.offset / chunk) as u32;
        if self.is_done(f.seq) {
            return Ok(Dest::Discard);
        }
        if f.seq < self.next_seq {
            if let Some(t) = self.op(f.seq).and_then(|o| o.total) {
                if t != f.total {
                    return Err(PluginError::internal(format!(
                        "net-socket protocol error on {}: message #{} announced as {t} and {} bytes",
                        self.who.what, f.seq, f.total
                    )));
                }
            }
            if !self.set_total(f.seq, f.total) {
                return Ok(Dest::Discard);
            }
            let placed = self.op(f.seq).is_none_or(|o| o.has(index));
            return Ok(if placed { Dest::Discard } else { Dest::User });
        }
        let e = self.early.entry(f.seq).or_insert(Early {
            total: f.total,
            chunks: Vec::new(),
        });
        if e.chunks.iter().any(|(o, _, _)| *o == f.offset) {
            return Ok(Dest::Discard);
        }
        Ok(Dest::Keep(vec![0; chunk_len(f.total, self.p.chunk, index)]))
    }

    /// Whether a chunk may still be written into its receive buffer.
    fn wanted(&self, seq: u64, offset: u64) -> bool {
        let index = (offset / self.p.chunk as u64) as u32;
        self.op(seq).is_some_and(|o| !o.done && !o.has(index))
    }

    fn mark(&mut self, seq: u64, offset: u64, len: usize) {
        let index = (offset / self.p.chunk as u64) as u32;
        let Some(o) = self.op_mut(seq) else {
            return;
        };
        if o.has(index) {
            return;
        }
        o.bits[(index / 64) as usize] |= 1 << (index % 64);
        o.got += len as u64;
        if Some(o.got) == o.total {
            let n = o.got as usize;
            self.complete(seq, Ok(n));
        }
    }

    /// Place an early chunk into the receive just posted.
    fn place_copy(&mut self, seq: u64, offset: u64, data: &[u8], s: usize) {
        if let Some(o) = self.op(seq) {
            if !o.done && !o.has((offset / self.p.chunk as u64) as u32) {
                // SAFETY: the frame's offset and length were checked against the
                // message length, which `set_total` checked against the receive's
                // capacity; the poster keeps the buffer valid and unaliased until the
                // receive completes (irecv's contract).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        (o.addr + offset as usize) as *mut u8,
                        data.len(),
                    );
                }
                self.mark(seq, offset, data.len());
            }
        }
        self.ack(s, seq, offset);
    }

    /// Queue an acknowledgement on socket `s` (or any live one if it is gone).
    fn ack(&mut self, s: usize, seq: u64, offset: u64) {
        if !self.p.reliable {
            return;
        }
        let s = if self.streams[s].sock.is_some() {
            s
        } else {
            match self.streams.iter().position(|st| st.sock.is_some()) {
                Some(i) => i,
                None => return,
            }
        };
        self.streams[s].acks.push_back(
            Frame {
                kind: Kind::Ack,
                seq,
                total: 0,
                offset,
            }
            .encode(),
        );
    }

    /// One round of non-blocking progress. An error means the connection is gone.
    pub fn progress(&mut self, now: Instant) -> PluginResult<()> {
        if self.p.reliable && now >= self.next_accept {
            self.next_accept = now + ACCEPT_EVERY;
            self.accept()?;
        }
        for s in 0..self.streams.len() {
            if let Err(why) = self.read_stream(s) {
                self.stream_lost(s, why)?;
            }
        }
        if self.p.reliable {
            // A lost socket hands its queued acknowledgements to a surviving one,
            // possibly one flushed already: go round until nothing moves.
            let mut lost = true;
            while lost {
                lost = false;
                for s in 0..self.streams.len() {
                    if let Err(why) = self.flush_acks(s) {
                        self.stream_lost(s, why)?;
                        lost = true;
                    }
                }
            }
        }
        Ok(())
    }

    /// Read what socket `s` has. `Err(why)` when the socket failed.
    fn read_stream(&mut self, s: usize) -> Result<(), String> {
        loop {
            if self.streams[s].sock.is_none() {
                return Ok(());
            }
            if self.streams[s].body.is_none() {
                let st = &mut self.streams[s];
                let t = st.sock.as_ref().expect("checked above");
                while st.hdr_got < FRAME_BYTES {
                    let n = FRAME_BYTES - st.hdr_got;
                    // SAFETY: writable bytes of our own header buffer.
                    match unsafe { sock::recv(t, st.hdr[st.hdr_got..].as_mut_ptr(), n) } {
                        Ok(Io::Moved(0)) => return Err(String::new()),
                        Ok(Io::Moved(k)) => st.hdr_got += k,
                        Ok(Io::Again) => return Ok(()),
                        Err(e) => return Err(e.to_string()),
                    }
                }
                let f = Frame::decode(&st.hdr).map_err(|e| e.message().to_string())?;
                match f.kind {
                    Kind::Ping => {
                        st.hdr_got = 0;
                        continue;
                    }
                    Kind::Ack | Kind::Bye => {
                        return Err(format!("protocol error: {f:?} on a data socket"))
                    }
                    Kind::Data => {}
                }
                // Without acknowledgements nothing is ever resent, so a socket may wait
                // (in its kernel buffer, under TCP flow control) for its receive.
                if !self.p.reliable && f.seq >= self.next_seq {
                    return Ok(());
                }
                st.hdr_got = 0;
                let dest = self.classify(&f).map_err(|e| e.message().to_string())?;
                let index = (f.offset / self.p.chunk as u64) as u32;
                self.streams[s].body = Some(Body {
                    seq: f.seq,
                    total: f.total,
                    offset: f.offset,
                    len: chunk_len(f.total, self.p.chunk, index),
                    got: 0,
                    dest,
                });
            }
            if !self.read_body(s)? {
                return Ok(());
            }
        }
    }

    /// Read the payload of socket `s`'s current chunk: true once it is complete.
    fn read_body(&mut self, s: usize) -> Result<bool, String> {
        loop {
            let (seq, offset, len, got, user) = {
                let b = self.streams[s]
                    .body
                    .as_ref()
                    .expect("a chunk is being read");
                (b.seq, b.offset, b.len, b.got, matches!(b.dest, Dest::User))
            };
            if got == len {
                break;
            }
            // Another socket may have placed this chunk (or the whole message) since.
            if user && !self.wanted(seq, offset) {
                self.streams[s].body.as_mut().expect("checked").dest = Dest::Discard;
            }
            let addr = self.op(seq).map_or(0, |o| o.addr);
            let st = &mut self.streams[s];
            let t = st.sock.as_ref().expect("read_stream checked");
            let b = st.body.as_mut().expect("checked");
            let want = len - got;
            let r = match &mut b.dest {
                // SAFETY: offset + len lies within the message length, checked against
                // the receive's capacity; the buffer stays valid and unaliased until the
                // receive completes (irecv's contract), and `wanted` says it has not.
                Dest::User => unsafe {
                    sock::recv(t, (addr + offset as usize + got) as *mut u8, want)
                },
                // SAFETY: `v` holds `len` initialized bytes; we write after `got`.
                Dest::Keep(v) => unsafe { sock::recv(t, v[got..].as_mut_ptr(), want) },
                Dest::Discard => {
                    if self.scratch.is_empty() {
                        self.scratch = vec![0; DISCARD_CHUNK];
                    }
                    let n = want.min(DISCARD_CHUNK);
                    // SAFETY: our own scratch buffer of at least `n` bytes.
                    unsafe { sock::recv(t, self.scratch.as_mut_ptr(), n) }
                }
            };
            match r {
                Ok(Io::Moved(0)) => return Err(String::new()),
                Ok(Io::Moved(k)) => b.got += k,
                Ok(Io::Again) => return Ok(false),
                Err(e) => return Err(e.to_string()),
            }
        }
        let b = self.streams[s].body.take().expect("checked");
        match b.dest {
            Dest::User => {
                self.mark(b.seq, b.offset, b.len);
                self.ack(s, b.seq, b.offset);
            }
            Dest::Keep(v) => {
                if b.seq < self.next_seq {
                    // Its receive was posted while the chunk was being read.
                    if self.set_total(b.seq, b.total) {
                        self.place_copy(b.seq, b.offset, &v, s);
                    } else {
                        self.ack(s, b.seq, b.offset);
                    }
                } else if let Some(e) = self.early.get_mut(&b.seq) {
                    e.chunks.push((b.offset, v, s));
                }
            }
            Dest::Discard => self.ack(s, b.seq, b.offset),
        }
        Ok(true)
    }

    fn flush_acks(&mut self, s: usize) -> Result<(), String> {
        let st = &mut self.streams[s];
        let Some(t) = st.sock.as_ref() else {
            return Ok(());
        };
        while let Some(a) = st.acks.front() {
            let rest = &a[st.ack_sent..];
            // SAFETY: `rest` is a live slice of our own queued acknowledgement.
            match unsafe { sock::send2(t, (rest.as_ptr(), rest.len()), (std::ptr::null(), 0)) } {
                Ok(Io::Moved(k)) => {
                    st.ack_sent += k;
                    if st.ack_sent == FRAME_BYTES {
                        st.ack_sent = 0;
                        st.acks.pop_front();
                    }
                }
                Ok(Io::Again) => return Ok(()),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }

    /// Socket `s` failed (`why` empty: end of stream). With one rail, or with no
    /// socket left, the connection is gone; otherwise the sender resends elsewhere.
    fn stream_lost(&mut self, s: usize, why: String) -> PluginResult<()> {
        let st = &mut self.streams[s];
        if let Some(t) = st.sock.take() {
            sock::abort(t);
        }
        // Unplaced acknowledgements are moot: the sender resends those chunks.
        let moved: Vec<_> = st.acks.drain(..).collect();
        st.body = None;
        st.hdr_got = 0;
        st.ack_sent = 0;
        let why = if why.is_empty() {
            "closed the connection (end of stream)".to_string()
        } else {
            format!("failed ({why})")
        };
        let pending = self.recvs.iter().filter(|o| !o.done).count();
        let alive = self.streams.iter().filter(|st| st.sock.is_some()).count();
        if !self.p.reliable || alive == 0 {
            return Err(PluginError::remote(format!(
                "peer rank {} {why} while {pending} receive(s) were pending on {}",
                self.who.peer, self.who.what
            )));
        }
        // Acknowledgements of placed chunks go out on a surviving socket.
        if let Some(i) = self.streams.iter().position(|st| st.sock.is_some()) {
            self.streams[i].acks.extend(moved);
        }
        self.who.host.debug(format!(
            "net-socket: socket {s} from rank {} {why} on {}; {alive} socket(s) left",
            self.who.peer, self.who.what
        ));
        Ok(())
    }
}
