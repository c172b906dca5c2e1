//! The mailbox regions, mapped (the plugin's only memory-mapping module):
//! this rank's own, which peers write into, and every peer's, which it
//! writes into. Offsets come from [`Layout`]; who writes what when is
//! `comm`'s protocol.

use crate::layout::{self, Layout, HEAD, INLINE};
use ferrocx_algo::fingerprint::FINGERPRINT_BYTES;
use ferrocx_sdk::region::Region;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// Which of a pair's rings a credit word counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    /// The collective messages.
    Coll,
    /// The point-to-point messages.
    P2p,
}

/// The most lines [`Arena::prepare_post`] claims ahead: past a few hundred
/// bytes the copy, not the first stores' misses, is the post's cost.
const PREPARE_LINES: usize = 16;

/// Whether this CPU executes PREFETCHW (CPUID 8000_0001h, ECX bit 8).
fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // CPUID exists on every x86-64 CPU; the extended leaf is read only
        // where the CPU reports it.
        __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Every rank's region, mapped here.
pub struct Arena {
    me: usize,
    layout: Layout,
    /// Base of rank r's region in this process.
    bases: Vec<*mut u8>,
    /// Rank r's region (keeps the mapping; its creator holds the lock on byte 0).
    regions: Vec<Region>,
    /// Whether the CPU has PREFETCHW ([`prepare_post`](Self::prepare_post)).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    prefetchw: bool,
}

// SAFETY: the mappings are process-wide; every access goes through atomics or
// copies whose ownership the protocol decides (one writer per slot and call).
unsafe impl Send for Arena {}

impl Arena {
    /// Create this rank's region (zero-filled) and stamp it.
    pub fn create(name: &str, layout: &Layout) -> std::io::Result<Region> {
        let r = Region::create(name, layout.len(), 0)?;
        // SAFETY: a fresh mapping of layout.len() ≥ 8 bytes, 64-aligned (page).
        unsafe { r.base().cast::<u64>().write(layout::MAGIC) };
        Ok(r)
    }

    /// Map peer regions: `open(r)` maps rank r's (never called for `me`).
    /// `mine` was made by [`create`](Self::create) for a layout at least as large.
    pub fn new(
        me: usize,
        layout: Layout,
        mine: Region,
        mut open: impl FnMut(usize) -> std::io::Result<Region>,
    ) -> std::io::Result<Self> {
        let mut regions = Vec::with_capacity(layout.nranks);
        let mut bases = vec![std::ptr::null_mut(); layout.nranks];
        let mut mine = Some(mine);
        for (r, base) in bases.iter_mut().enumerate() {
            if r == me {
                let m = mine.take().expect("one own region");
                *base = m.base();
                regions.push(m);
                continue;
            }
            let reg = open(r)?;
            if reg.len() < layout.len() {
                return Err(std::io::Error::other(format!(
                    "rank {r}'s region holds {} bytes, {} needed",
                    reg.len(),
                    layout.len()
                )));
            }
            // SAFETY: the region is mapped for at least 8 bytes.
            let magic = unsafe { reg.base().cast::<u64>().read() };
            if magic != layout::MAGIC {
                return Err(std::io::Error::other(format!(
                    "rank {r}'s region {} is not a shm-coll region of this version (magic {magic:#018x}, this build's {:#018x}: another ferrocx build?)",
                    reg.name(),
                    layout::MAGIC
                )));
            }
            *base = reg.base();
            regions.push(reg);
        }
        Ok(Arena {
            me,
            layout,
            bases,
            regions,
            prefetchw: has_prefetchw(),
        })
    }

    /// Remove this rank's region name (every peer mapped it); the mapping stays.
    pub fn unlink_own(&mut self) -> std::io::Result<()> {
        self.regions[self.me].unlink()
    }

    /// Whether `rank`'s process still holds its region: `Some(false)` once it
    /// exited (its liveness lock is free; unlike a pid, this holds across pid
    /// namespaces), `None` when the system cannot tell.
    pub fn holder_alive(&self, rank: usize) -> Option<bool> {
        self.regions[rank].lock_held(0)
    }

    /// The head `from` writes its collective message `number` into in `owner`'s region.
    #[inline]
    fn head(&self, owner: usize, from: usize, number: u64) -> *mut u8 {
        // SAFETY: the offset lies inside every region (layout.len() checked at mapping).
        unsafe { self.bases[owner].add(self.layout.head(from, number)) }
    }

    /// Where the payload of `from`'s collective message `number` of `len`
    /// bytes lies in `owner`'s region: in its head's line up to [`INLINE`]
    /// bytes, else in its slot.
    #[inline]
    fn payload(&self, owner: usize, from: usize, number: u64, len: usize) -> *mut u8 {
        if len <= INLINE {
            self.head(owner, from, number).wrapping_add(HEAD)
        } else {
            // SAFETY: the offset lies inside every region (layout.len() checked at mapping).
            unsafe { self.bases[owner].add(self.layout.slot(from, number)) }
        }
    }

    fn flag(&self, slot: *mut u8) -> &AtomicU64 {
        // SAFETY: slots are 64-byte aligned and mapped while the arena lives; the
        // flag is only ever accessed atomically.
        unsafe { &*slot.cast::<AtomicU64>() }
    }

    /// A 64-byte aligned word at `offset` of `owner`'s region.
    fn word(&self, owner: usize, offset: usize) -> &AtomicU64 {
        // SAFETY: the layout puts credit words on their own cache lines inside
        // the region; they are accessed atomically only.
        unsafe { &*self.bases[owner].add(offset).cast::<AtomicU64>() }
    }

    /// Write this rank's collective message `number` to `to`: the payload, the
    /// fingerprint and the length, then the flag `number + 1` (release: a
    /// reader that sees the flag sees the rest).
    ///
    /// # Safety
    /// `data` readable for `len` ≤ the layout's bytes; `to` is done with
    /// message `number − heads`, and with `number − depth` when `len` is over
    /// [`INLINE`] (its [`credits`](Self::credits) say so, or the calls'
    /// lockstep does: `comm`).
    pub unsafe fn post(
        &self,
        to: usize,
        number: u64,
        fingerprint: &[u8; FINGERPRINT_BYTES],
        data: *const u8,
        len: usize,
    ) {
        debug_assert!(len <= self.layout.bytes);
        // SAFETY: the caller's contract; the slot holds `layout.bytes` of payload.
        unsafe {
            write_message(
                self.head(to, self.me, number),
                self.payload(to, self.me, number, len),
                number + 1,
                fingerprint,
                data,
                len,
            )
        }
    }

    /// Whether `from`'s collective message `number` is here (acquire).
    pub fn arrived(&self, from: usize, number: u64) -> bool {
        self.flag(self.head(self.me, from, number))
            .load(Ordering::Acquire)
            == number + 1
    }

    /// Start fetching `from`'s collective message `number` into this core's
    /// cache — its head, and the first line of a payload of `len` bytes over
    /// [`INLINE`]: a hint, nothing is read.
    /// With deep rings the sender runs ahead, so the next message is usually
    /// written already and its miss overlaps the caller's own work instead of
    /// stalling its next call.
    pub fn prefetch(&self, from: usize, number: u64, len: usize) {
        self.prefetch_lines(self.head(self.me, from, number), 1, false);
        if len > INLINE {
            self.prefetch_lines(self.payload(self.me, from, number, len), 1, false);
        }
    }

    /// Start taking ownership of the lines of the slot this rank's collective
    /// message `number` to `to` goes into, for a payload of `len` bytes (at
    /// most `PREPARE_LINES`): the lines come here writable, the peer's copies
    /// invalidated, so that the post's stores later hit this core's cache
    /// instead of waiting in the store buffer for that round trip (which the
    /// next locked instruction, such as the core's unlock after the call,
    /// would wait for). A hint: nothing is written.
    pub fn prepare_post(&self, to: usize, number: u64, len: usize) {
        self.prefetch_lines(self.head(to, self.me, number), 1, true);
        if len > INLINE {
            let lines = len.div_ceil(64).min(PREPARE_LINES);
            self.prefetch_lines(self.payload(to, self.me, number, len), lines, true);
        }
    }

    /// Prefetch `lines` cache lines from `p` into this core's cache, to read
    /// (PREFETCHT0) or to write (PREFETCHW, skipped on a CPU without it).
    fn prefetch_lines(&self, p: *mut u8, lines: usize, write: bool) {
        #[cfg(target_arch = "x86_64")]
        {
            if write && !self.prefetchw {
                return;
            }
            for i in 0..lines {
                let a = p.wrapping_add(i * 64);
                // SAFETY: a prefetch (PREFETCHW checked in CPUID at mapping) never
                // faults and reads or writes nothing the program sees, nor any
                // register or flag; the callers' lines lie inside a mapped slot.
                unsafe {
                    if write {
                        std::arch::asm!(
                            "prefetchw [{a}]",
                            a = in(reg) a,
                            options(nostack, preserves_flags, readonly)
                        );
                    } else {
                        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                        _mm_prefetch::<_MM_HINT_T0>(a.cast::<i8>());
                    }
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (p, lines, write);
    }

    /// `from`'s collective message `number`: fingerprint, length, payload.
    /// Valid once [`arrived`](Self::arrived) said so, until it is credited (in
    /// `comm`'s lockstep: until this rank's next message to `from`).
    pub fn message(&self, from: usize, number: u64) -> ([u8; FINGERPRINT_BYTES], usize, *const u8) {
        // SAFETY: the caller saw the flag (acquire) of this head.
        let (fp, len) = unsafe { read_head(self.head(self.me, from, number)) };
        (
            fp,
            len,
            self.payload(self.me, from, number, len).cast_const(),
        )
    }

    /// Sender `from`'s point-to-point slot for its message `number` in `owner`'s region.
    fn p2p_slot(&self, owner: usize, from: usize, number: u64) -> *mut u8 {
        // SAFETY: inside every region (layout.len() checked at mapping).
        unsafe { self.bases[owner].add(self.layout.p2p_slot(from, number)) }
    }

    /// Write this rank's point-to-point message `number` to `to`, made after
    /// `epoch` collective exchanges with it: payload, length, epoch, then the
    /// flag `number + 1` (release: a reader that sees it sees the rest).
    ///
    /// # Safety
    /// `data` readable for `len` ≤ the layout's `p2p_bytes`; `to` took message
    /// `number − P2P_SLOTS` ([`credits`](Self::credits)).
    pub unsafe fn p2p_post(&self, to: usize, number: u64, epoch: u32, data: *const u8, len: usize) {
        debug_assert!(len <= self.layout.p2p_bytes);
        let s = self.p2p_slot(to, self.me, number);
        // SAFETY: the slot is ours to write (caller's contract), 64-byte aligned,
        // with a 16-byte head and `p2p_bytes` of payload.
        unsafe {
            crate::copy::bytes(data, s.add(layout::P2P_HEAD), len);
            s.add(layout::P2P_LEN).cast::<u32>().write(len as u32);
            s.add(layout::EPOCH).cast::<u32>().write(epoch);
        }
        self.flag(s).store(number + 1, Ordering::Release);
    }

    /// Whether `from`'s point-to-point message `number` is here (acquire).
    pub fn p2p_arrived(&self, from: usize, number: u64) -> bool {
        self.flag(self.p2p_slot(self.me, from, number))
            .load(Ordering::Acquire)
            == number + 1
    }

    /// `from`'s point-to-point message `number`: length, payload, epoch.
    /// Valid once [`p2p_arrived`](Self::p2p_arrived) said so, until it is credited.
    pub fn p2p_message(&self, from: usize, number: u64) -> (usize, *const u8, u32) {
        let s = self.p2p_slot(self.me, from, number);
        // SAFETY: the writer finished before its release store of the flag, which
        // the caller observed with acquire; everything lies in the slot.
        unsafe {
            (
                s.add(layout::P2P_LEN).cast::<u32>().read() as usize,
                s.add(layout::P2P_HEAD).cast_const(),
                s.add(layout::EPOCH).cast::<u32>().read(),
            )
        }
    }

    fn credit_offset(&self, ring: Ring, from: usize) -> usize {
        match ring {
            Ring::Coll => self.layout.coll_credit(from),
            Ring::P2p => self.layout.credit(from),
        }
    }

    /// How many of this rank's messages on `ring` `to` has taken.
    pub fn credits(&self, ring: Ring, to: usize) -> u64 {
        self.word(self.me, self.credit_offset(ring, to))
            .load(Ordering::Acquire)
    }

    /// Tell `from` this rank took its first `taken` messages on `ring`
    /// (release: `from` may overwrite their slots).
    pub fn credit(&self, ring: Ring, from: usize, taken: u64) {
        self.word(from, self.credit_offset(ring, self.me))
            .store(taken, Ordering::Release);
    }

    /// A block of memory no peer writes: this rank's slot in its own region.
    pub fn scratch(&self) -> *mut u8 {
        self.payload(self.me, self.me, 0, usize::MAX)
    }

    fn broken_word(&self, rank: usize) -> &AtomicU32 {
        // SAFETY: the header is mapped and the word aligned; accessed atomically only.
        unsafe { &*self.bases[rank].add(layout::BROKEN).cast::<AtomicU32>() }
    }

    /// Tell the peers this rank gave up, and why (they report the same).
    pub fn mark_broken(&self, reason: &str) {
        let b = self.broken_word(self.me);
        if b.load(Ordering::Acquire) != 0 {
            return;
        }
        let bytes = reason.as_bytes();
        let n = bytes.len().min(layout::REASON_BYTES - 1);
        // SAFETY: the reason field is this rank's to write, before the release below.
        unsafe {
            let at = self.bases[self.me].add(layout::REASON);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, n);
            at.add(n).write(0);
        }
        b.store(1, Ordering::Release);
    }

    /// The words of `rank`'s published call: the sequence word, then the
    /// fingerprint's four.
    fn call_words(&self, rank: usize) -> &[AtomicU64; 1 + FINGERPRINT_BYTES / 8] {
        // SAFETY: the header's CALL line is mapped, 8-byte aligned and accessed
        // atomically only.
        unsafe { &*self.bases[rank].add(layout::CALL).cast() }
    }

    /// Publish the call this rank is in (a seqlock: its peers read it while it
    /// may be rewritten).
    pub fn publish_call(&self, seq: u64, fingerprint: &[u8; FINGERPRINT_BYTES]) {
        let w = self.call_words(self.me);
        w[0].store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        for (i, word) in w[1..].iter().enumerate() {
            let b: [u8; 8] = fingerprint[i * 8..i * 8 + 8].try_into().expect("8 bytes");
            word.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
        w[0].store(seq + 1, Ordering::Release);
    }

    /// The call `rank` last published — its sequence number and fingerprint —
    /// or `None` when it published none yet or is rewriting it.
    pub fn published_call(&self, rank: usize) -> Option<(u64, [u8; FINGERPRINT_BYTES])> {
        let w = self.call_words(rank);
        let before = w[0].load(Ordering::Acquire);
        if before == 0 {
            return None;
        }
        let mut fp = [0u8; FINGERPRINT_BYTES];
        for (i, word) in w[1..].iter().enumerate() {
            fp[i * 8..i * 8 + 8].copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
        fence(Ordering::Acquire);
        (w[0].load(Ordering::Relaxed) == before).then_some((before - 1, fp))
    }

    /// Why `rank` gave up, if it did (read between polls and after
    /// exchanges: the usual answer, no, is one load).
    #[inline]
    pub fn broken(&self, rank: usize) -> Option<String> {
        if self.broken_word(rank).load(Ordering::Acquire) == 0 {
            return None;
        }
        self.reason(rank)
    }

    /// The failure text `rank` wrote before raising its `broken` word.
    #[cold]
    #[inline(never)]
    fn reason(&self, rank: usize) -> Option<String> {
        let mut buf = vec![0u8; layout::REASON_BYTES];
        // SAFETY: written before the release store we observed.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.bases[rank].add(layout::REASON),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
        Some(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

/// Write a message: its payload (in the head's line or in its slot), the
/// fingerprint and the length into its head, then the head's flag (release: a
/// reader that sees the flag sees the rest).
///
/// # Safety
/// `head` is a mapped, 64-byte aligned head this rank may write and `payload`
/// where its payload goes, with room for `len` bytes; `data` is readable for `len`.
unsafe fn write_message(
    head: *mut u8,
    payload: *mut u8,
    flag: u64,
    fingerprint: &[u8; FINGERPRINT_BYTES],
    data: *const u8,
    len: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        crate::copy::bytes(data, payload, len);
        std::ptr::copy_nonoverlapping(
            fingerprint.as_ptr(),
            head.add(layout::FINGERPRINT),
            FINGERPRINT_BYTES,
        );
        head.add(layout::LEN).cast::<u32>().write(len as u32);
        (*head.cast::<AtomicU64>()).store(flag, Ordering::Release);
    }
}

/// A head's fingerprint and payload length.
///
/// # Safety
/// `head` is a mapped head whose flag the caller observed (acquire).
unsafe fn read_head(head: *mut u8) -> ([u8; FINGERPRINT_BYTES], usize) {
    let mut fp = [0u8; FINGERPRINT_BYTES];
    // SAFETY: the writer finished before its release store of the flag,
    // which the caller observed with acquire; everything lies in the head.
    unsafe {
        std::ptr::copy_nonoverlapping(
            head.add(layout::FINGERPRINT),
            fp.as_mut_ptr(),
            FINGERPRINT_BYTES,
        );
        (fp, head.add(layout::LEN).cast::<u32>().read() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's region of an earlier protocol (`FXSC` v5, whose heads lay in
    /// their slots) is refused at mapping, naming the rank and both versions,
    /// rather than mapped and misread.
    #[test]
    fn a_peer_region_of_another_version_is_refused() {
        let layout = Layout::new(2, 256, 2, 2, 0);
        let base = format!("/{}test-magic-{}", crate::comm::PREFIX, std::process::id());
        let (theirs_name, mine_name) = (format!("{base}-1"), format!("{base}-0"));
        let theirs = Arena::create(&theirs_name, &layout).expect("create rank 1's region");
        // SAFETY: a fresh mapping of layout.len() ≥ 8 bytes, 64-aligned.
        unsafe {
            theirs
                .base()
                .cast::<u64>()
                .write(u64::from_le_bytes(*b"FXSC\x05\0\0\0"))
        };
        let mine = Arena::create(&mine_name, &layout).expect("create rank 0's region");
        let got = Arena::new(0, layout, mine, |_| {
            Region::open(&theirs_name, Some(layout.len()))
        });
        // The names go before any assertion, so a failure leaves nothing in /dev/shm.
        let _ = ferrocx_sdk::region::unlink_name(&theirs_name);
        let _ = ferrocx_sdk::region::unlink_name(&mine_name);
        let e = got.err().expect("a region of another version is refused");
        let text = e.to_string();
        assert!(
            text.contains("rank 1's region")
                && text.contains("not a shm-coll region of this version")
                && text.contains("0x0000000543535846")
                && text.contains("0x0000000643535846"),
            "{text}"
        );
    }
}
