//! The ce barrier (sans-IO): which flag array a barrier uses, the value
//! ranks write and wait for, how they compare, which slots are reset, and
//! how a collective strings barriers and copies together. The output is a
//! list of abstract memory operations ([`MemOp`]); `issue.rs` turns them into
//! `cuStreamBatchMemOp` calls, the unit tests (`sim.rs`) execute them on
//! simulated ranks.
//!
//! ## Flags
//!
//! Every rank owns one small device buffer ([`FlagLayout`]) of four `u32`
//! arrays with one slot per rank: eager-ready, eager-complete, graph-ready,
//! graph-complete. Slot `s` of rank `r`'s array is written only by rank `s`
//! (and, in graph mode, reset by `r` itself): "rank `s` arrived at my
//! barrier".
//!
//! ## One barrier
//!
//! A rank writes its slot (`[me]`) in the array of every peer
//! (`WRITE_VALUE_32`, which fences the rank's earlier stream work before the
//! write), then waits until every peer's slot in its own array holds the
//! barrier's value (`WAIT_VALUE_32`). Barriers alternate strictly between the
//! ready and the complete array (barrier `k` of a mode uses ready when `k` is
//! even), separately for eager and graph mode.
//!
//! * **Eager** (not captured): the value grows by one per use of an array
//!   (`1, 2, 3, …`, wrapping around `u32`; the same on every rank since every
//!   rank issues the same barriers) and waits compare `GEQ`, which CUDA
//!   defines as the *cyclic* comparison `(int32_t)(*addr - value) >= 0`.
//!   A peer's slot is never more than one value behind the one awaited (its
//!   write for the previous use of the array was needed to pass that use)
//!   and never ahead (its write for the next use needs this rank's arrival at
//!   the barrier in between), so the wraparound after 2³² uses is harmless
//!   and nothing is ever reset. The watchdog releases a stuck stream by
//!   writing a value far ahead of every pending wait (`watch::release_value`:
//!   2³⁰ past the stuck barrier's value) into every eager slot. (A value
//!   such as `0xFFFF_FFFF` would not do: compared cyclically it lies *behind*
//!   every value below 2³¹.)
//! * **Graph** (the stream is being captured): a captured graph replays the
//!   same values forever, so the value is the constant 1, waits compare `EQ`,
//!   and every barrier resets the slots it waited on to 0 after its waits,
//!   ready for the next replay.
//!
//! Why the graph reset is safe, and why graph mode needs an even number of
//! barriers per collective: when rank `me` has passed barrier `k` on array
//! `A` and resets `A[s]`, the next write of `s` into `me`'s `A` belongs to
//! barrier `k + 2` (barrier `k + 1` uses the other array). `s` issues it only after
//! passing barrier `k + 1`, which needs `me`'s write for `k + 1`, which
//! `me`'s stream issues after the reset. So the reset always lands before
//! the next write — *provided consecutive barriers use different arrays*.
//! If two consecutive barriers used the same array, `s` could pass the first,
//! write 1 for the second, and `me`'s reset after the first would then wipe
//! that write: `me` would wait forever (a lost write). Within a collective
//! the strict alternation rules this out. Across collectives in graph mode it
//! holds only if every collective starts on the ready array: a captured
//! sequence is replayed as it was captured, and the first barrier of a
//! replay follows the last barrier of the previous replay (or of another
//! graph). Hence every collective issues an **even** number of graph
//! barriers — ready, one per extra batch, complete, padded with one more
//! barrier when the count is odd — so it ends on the complete array and the
//! next one, captured or replayed in any order, starts on ready. (`sim.rs`
//! shows the lost write when the padding is left out.)
//!
//! Within one `cuStreamBatchMemOp` call the operations execute in array
//! order ("the operations are enqueued in the order they appear in the
//! array", CUDA driver API), so the resets placed after the waits of the
//! same barrier run after those waits.
//!
//! ## A collective
//!
//! Ready barrier, copies, complete barrier ([`Sequencer::collective`]). A
//! collective split into batches (`plan.rs`) gets one more barrier between
//! consecutive batches; the number of batches is the same on every rank.

use crate::plan::{Fold, Parts, Push};
use ferrocx_sdk::kernels::ll;

/// The constant value of graph-mode barriers.
pub const GRAPH_VALUE: u32 = 1;

/// One of the four flag arrays of a rank's flag buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Array {
    /// Eager mode, even barriers.
    EagerReady,
    /// Eager mode, odd barriers.
    EagerComplete,
    /// Graph mode, even barriers.
    GraphReady,
    /// Graph mode, odd barriers.
    GraphComplete,
}

impl Array {
    /// Every array, in buffer order.
    pub const ALL: [Array; 4] = [
        Array::EagerReady,
        Array::EagerComplete,
        Array::GraphReady,
        Array::GraphComplete,
    ];

    /// Position in the buffer.
    pub fn index(self) -> usize {
        self as usize
    }

    /// For messages.
    pub fn name(self) -> &'static str {
        match self {
            Array::EagerReady => "ready",
            Array::EagerComplete => "complete",
            Array::GraphReady => "graph ready",
            Array::GraphComplete => "graph complete",
        }
    }
}

/// Where the arrays lie in a rank's flag buffer: `nranks` `u32` slots each,
/// every array starting on a 16-byte boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlagLayout {
    /// Slots per array.
    pub nranks: usize,
    /// The largest LL block (`FERROCX_CE_LL_BYTES`, equal on every rank): it
    /// sizes the LL areas.
    pub ll_bytes: usize,
    /// The largest LL128 block (`setup::ll128_region`: from the agreed
    /// variables and every rank's GPU, so equal on every rank, and with it
    /// the scratch's offset after the flags; 0: no LL128 region).
    pub ll128_bytes: usize,
    /// Bytes per slot of the Simple kernel's rings (`FERROCX_CE_SIMPLE_SLOT`,
    /// equal on every rank; 0: no Simple region).
    pub simple_slot: usize,
    /// Bytes per slot of the point-to-point kernel's rings (the same
    /// variable; 0: no point-to-point region).
    pub p2p_slot: usize,
    /// Lines per ring of the point-to-point kernel's LL part
    /// (`ferrocx_sdk::kernels::p2p::ring_lines` of `FERROCX_CE_P2P_LL_BYTES`;
    /// 0: none).
    pub p2p_lines: usize,
}

impl FlagLayout {
    /// Bytes from one array to the next.
    pub fn stride(&self) -> usize {
        (self.nranks * 4).div_ceil(16) * 16
    }

    /// Bytes of the whole buffer: the four arrays, the note ring
    /// (`crate::notes`: `nranks × RING` notes of `WORDS` words,
    /// writer-major), the LL control words, then the LL region (two parities
    /// × `nranks` writers × one area: `ferrocx_sdk::kernels::ll`), then the
    /// Simple region (`ferrocx_sdk::kernels::simple`), then the
    /// point-to-point region (the same layout, `ferrocx_sdk::kernels::p2p`),
    /// then its LL part (line rings), then the LL128 region (two parities ×
    /// `nranks` writers × one area of 128-byte lines:
    /// `ferrocx_sdk::kernels::ll128`). All of it is zeroed before a peer can
    /// see it.
    pub fn bytes(&self) -> usize {
        if self.ll128_bytes == 0 {
            return self.p2p_ll_offset() + self.p2p_ll_bytes();
        }
        self.ll128_offset() + 2 * self.nranks * self.ll128_area()
    }

    /// Byte offset of the LL128 region (256-byte aligned: its lines are
    /// 128-byte aligned), after the point-to-point LL part.
    pub fn ll128_offset(&self) -> usize {
        (self.p2p_ll_offset() + self.p2p_ll_bytes()).div_ceil(256) * 256
    }

    /// Bytes of one LL128 area (a multiple of 128; 0 without the region).
    pub fn ll128_area(&self) -> usize {
        if self.ll128_bytes == 0 {
            return 0;
        }
        ferrocx_sdk::kernels::ll128::area_bytes(self.ll128_bytes)
    }

    /// Byte offset of the point-to-point LL part (256-byte aligned), after
    /// the point-to-point region.
    pub fn p2p_ll_offset(&self) -> usize {
        (self.p2p_offset() + self.p2p_bytes()).div_ceil(256) * 256
    }

    /// Bytes of the point-to-point LL part (0 without).
    pub fn p2p_ll_bytes(&self) -> usize {
        if self.p2p_slot == 0 {
            return 0;
        }
        ferrocx_sdk::kernels::p2p::ll_part_bytes(self.nranks, self.p2p_lines)
            .unwrap_or(usize::MAX / 2)
    }

    /// Byte offset of the point-to-point region (256-byte aligned), after the
    /// Simple region.
    pub fn p2p_offset(&self) -> usize {
        (self.simple_offset() + self.simple_bytes()).div_ceil(256) * 256
    }

    /// Bytes of the point-to-point region (0 without).
    pub fn p2p_bytes(&self) -> usize {
        if self.p2p_slot == 0 {
            return 0;
        }
        ferrocx_sdk::kernels::simple::region_bytes(self.nranks, self.p2p_slot)
            .unwrap_or(usize::MAX / 2)
    }

    /// Byte offset of the Simple region (256-byte aligned), after the LL region.
    pub fn simple_offset(&self) -> usize {
        (self.ll_offset() + 2 * self.nranks * self.ll_area()).div_ceil(256) * 256
    }

    /// Bytes of the Simple region (`ferrocx_sdk::kernels::simple`; 0 without).
    pub fn simple_bytes(&self) -> usize {
        if self.simple_slot == 0 {
            return 0;
        }
        ferrocx_sdk::kernels::simple::region_bytes(self.nranks, self.simple_slot)
            .unwrap_or(usize::MAX / 2)
    }

    /// Byte offset of the LL kernel's control words (`ll::CTL_WORDS` × 8).
    pub fn ll_ctl_offset(&self) -> usize {
        (self.ring_offset() + self.ring_bytes()).div_ceil(16) * 16
    }

    /// Byte offset of the LL kernel's table of the ranks' buffers as this
    /// process maps them (`nranks` addresses; written once, read only here).
    pub fn ll_table_offset(&self) -> usize {
        self.ll_ctl_offset() + ll::CTL_WORDS * 8
    }

    /// Byte offset of the LL region (256-byte aligned).
    pub fn ll_offset(&self) -> usize {
        (self.ll_table_offset() + self.nranks * 8).div_ceil(256) * 256
    }

    /// Bytes of one LL area: a block of `ll_bytes`.
    pub fn ll_area(&self) -> usize {
        ll::area_bytes(self.ll_bytes)
    }

    /// Bytes of the note ring.
    pub fn ring_bytes(&self) -> usize {
        self.nranks * crate::notes::RING * crate::notes::WORDS * 4
    }

    /// Byte offset of the note ring.
    pub fn ring_offset(&self) -> usize {
        Array::ALL.len() * self.stride()
    }

    /// Byte offset of word `word` of `writer`'s note of call `seq` in a rank's ring.
    pub fn note_offset(&self, writer: usize, seq: u64, word: usize) -> usize {
        use crate::notes::{slot, RING, WORDS};
        debug_assert!(writer < self.nranks && word < WORDS);
        self.ring_offset() + ((writer * RING + slot(seq)) * WORDS + word) * 4
    }

    /// Byte offset of `slot` of `array`.
    pub fn offset(&self, array: Array, slot: usize) -> usize {
        debug_assert!(slot < self.nranks);
        array.index() * self.stride() + slot * 4
    }
}

/// Eager (values grow, `GEQ`) or graph (constant value, `EQ`, resets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The stream runs the work once.
    Eager,
    /// The stream is being captured into a CUDA graph.
    Graph,
}

/// How a wait compares the slot with its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `CU_STREAM_WAIT_VALUE_GEQ`: the cyclic `(int32_t)(slot - value) >= 0`.
    Geq,
    /// `CU_STREAM_WAIT_VALUE_EQ`.
    Eq,
}

impl Cmp {
    /// Whether a slot holding `slot` satisfies a wait for `value`.
    pub fn holds(self, slot: u32, value: u32) -> bool {
        match self {
            Cmp::Geq => slot.wrapping_sub(value) as i32 >= 0,
            Cmp::Eq => slot == value,
        }
    }
}

/// One stream memory operation on the flag buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemOp {
    /// Write `value` into `slot` of `array` in rank `rank`'s flag buffer
    /// (a peer's, through its mapping, or this rank's own for a reset).
    Write {
        /// Owner of the buffer written.
        rank: usize,
        /// Which array.
        array: Array,
        /// Which slot.
        slot: usize,
        /// The value.
        value: u32,
    },
    /// Write word `word` of this rank's note of call `seq` (`crate::notes`)
    /// into its slot of rank `rank`'s note ring.
    Note {
        /// Owner of the ring written.
        rank: usize,
        /// The call's number.
        seq: u64,
        /// Which word of the note.
        word: usize,
        /// Its value.
        value: u32,
    },
    /// Wait until `slot` of `array` in this rank's own buffer satisfies `cmp value`.
    Wait {
        /// Which array.
        array: Array,
        /// Which slot (the peer waited for).
        slot: usize,
        /// The value.
        value: u32,
        /// The comparison.
        cmp: Cmp,
    },
}

/// One barrier as one rank issues it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Barrier {
    /// Eager or graph.
    pub mode: Mode,
    /// Ordinal of this barrier among the rank's barriers of its mode (the
    /// same on every rank).
    pub index: u64,
    /// The array it uses.
    pub array: Array,
    /// The value written and waited for.
    pub value: u32,
    /// Whether the waited slots are reset to 0 after the waits.
    pub resets: bool,
    /// Writes to every peer, then waits for every peer, then resets.
    pub ops: Vec<MemOp>,
}

/// One step of a collective on one rank's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A barrier.
    Sync(Barrier),
    /// A batch of copies (never empty).
    Copies(Vec<Push>),
    /// A reduction queued with the reduction kernels (right after the ready barrier).
    Reduce(Fold),
}

/// Hands out the barriers of one communicator on one rank.
#[derive(Debug, Clone)]
pub struct Sequencer {
    rank: usize,
    nranks: usize,
    eager: u64,
    graph: u64,
    base: u32,
}

impl Sequencer {
    /// A fresh communicator's sequencer (every flag 0).
    pub fn new(rank: usize, nranks: usize) -> Self {
        Self::with_base(rank, nranks, 0)
    }

    /// As [`new`](Self::new) for eager flags that all hold `base` (tests
    /// start near the wraparound this way: the values are `base + 1`, …).
    pub fn with_base(rank: usize, nranks: usize, base: u32) -> Self {
        Sequencer {
            rank,
            nranks,
            eager: 0,
            graph: 0,
            base,
        }
    }

    /// Barriers issued so far in `mode`.
    pub fn issued(&self, mode: Mode) -> u64 {
        match mode {
            Mode::Eager => self.eager,
            Mode::Graph => self.graph,
        }
    }

    /// The next barrier of `mode`.
    pub fn barrier(&mut self, mode: Mode) -> Barrier {
        let (index, array, value, cmp, resets) = match mode {
            Mode::Eager => {
                let k = self.eager;
                self.eager += 1;
                let array = if k & 1 == 0 {
                    Array::EagerReady
                } else {
                    Array::EagerComplete
                };
                // The k-th barrier is the (k/2)-th use of its array (mod 2^32).
                let value = self.base.wrapping_add((k / 2) as u32).wrapping_add(1);
                (k, array, value, Cmp::Geq, false)
            }
            Mode::Graph => {
                let k = self.graph;
                self.graph += 1;
                let array = if k & 1 == 0 {
                    Array::GraphReady
                } else {
                    Array::GraphComplete
                };
                (k, array, GRAPH_VALUE, Cmp::Eq, true)
            }
        };
        let me = self.rank;
        let peers = || (0..self.nranks).filter(move |&r| r != me);
        let mut ops: Vec<MemOp> = peers()
            .map(|rank| MemOp::Write {
                rank,
                array,
                slot: me,
                value,
            })
            .collect();
        ops.extend(peers().map(|slot| MemOp::Wait {
            array,
            slot,
            value,
            cmp,
        }));
        if resets {
            ops.extend(peers().map(|slot| MemOp::Write {
                rank: me,
                array,
                slot,
                value: 0,
            }));
        }
        Barrier {
            mode,
            index,
            array,
            value,
            resets,
            ops,
        }
    }

    /// The steps of one collective whose copies are `batches` (one entry per
    /// batch, the same number on every rank, possibly empty on some): the
    /// ready barrier, each batch with a barrier between consecutive ones, the
    /// complete barrier, and in graph mode one more barrier when the count
    /// is odd (see the module docs).
    pub fn collective(&mut self, mode: Mode, batches: Vec<Vec<Push>>) -> Vec<Step> {
        self.reduction(
            mode,
            Parts {
                batches,
                ..Parts::default()
            },
        )
    }

    /// [`Sequencer::collective`] with all of a collective's [`Parts`]: the
    /// staging copy before the ready barrier, the fold right after it (see
    /// [`crate::plan::fold`]: nothing another rank reads is written before
    /// the complete barrier, so no barrier goes between), the batches, and the
    /// post copy after the complete barrier (and any graph padding).
    pub fn reduction(&mut self, mode: Mode, parts: Parts) -> Vec<Step> {
        let Parts {
            stage,
            fold,
            batches,
            post,
            note,
        } = parts;
        let start = self.issued(mode);
        debug_assert!(mode == Mode::Eager || start & 1 == 0);
        let mut steps = Vec::new();
        if !stage.is_empty() {
            steps.push(Step::Copies(stage));
        }
        let mut ready = self.barrier(mode);
        if let Some((seq, call)) = note {
            // The notes go first: each flag write is ordered after the writes
            // before it, so a peer past this barrier has them.
            let words = call.note(seq);
            let notes = (0..self.nranks)
                .filter(|&r| r != self.rank)
                .flat_map(|rank| {
                    (0..words.len()).map(move |word| MemOp::Note {
                        rank,
                        seq,
                        word,
                        value: words[word],
                    })
                });
            ready.ops.splice(0..0, notes);
        }
        steps.push(Step::Sync(ready));
        steps.extend(fold.map(Step::Reduce));
        for (i, b) in batches.into_iter().enumerate() {
            if i > 0 {
                steps.push(Step::Sync(self.barrier(mode)));
            }
            if !b.is_empty() {
                steps.push(Step::Copies(b));
            }
        }
        steps.push(Step::Sync(self.barrier(mode)));
        if mode == Mode::Graph && (self.issued(mode) - start) & 1 == 1 {
            steps.push(Step::Sync(self.barrier(mode)));
        }
        if !post.is_empty() {
            steps.push(Step::Copies(post));
        }
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_every_array_to_16_bytes() {
        for n in 1..=9 {
            let l = FlagLayout {
                nranks: n,
                ll_bytes: 256 << 10,
                ll128_bytes: 0,
                simple_slot: 4096,
                p2p_slot: 1040,
                p2p_lines: 100,
            };
            assert_eq!(l.stride() % 16, 0);
            assert!(l.stride() >= 4 * n);
            assert_eq!(l.ring_offset(), 4 * l.stride());
            let words = crate::notes::WORDS;
            assert_eq!(l.ring_bytes(), n * crate::notes::RING * words * 4);
            // The LL control words after the ring, the region after them, aligned.
            assert!(l.ll_ctl_offset() >= l.ring_offset() + l.ring_bytes());
            assert_eq!(l.ll_ctl_offset() % 16, 0);
            assert_eq!(l.ll_table_offset(), l.ll_ctl_offset() + ll::CTL_WORDS * 8);
            assert!(l.ll_offset() >= l.ll_table_offset() + 8 * n);
            assert_eq!(l.ll_offset() % 256, 0);
            assert_eq!(l.ll_area(), 512 << 10);
            // The Simple region after the LL region, aligned.
            assert!(l.simple_offset() >= l.ll_offset() + 2 * n * l.ll_area());
            assert_eq!(l.simple_offset() % 256, 0);
            let simple = ferrocx_sdk::kernels::simple::region_bytes(n, 4096).unwrap();
            assert_eq!(l.simple_bytes(), simple);
            // The point-to-point region after it, aligned, with its own slot.
            assert_eq!(l.p2p_offset(), l.simple_offset() + simple);
            assert_eq!(l.p2p_offset() % 256, 0);
            let p2p = ferrocx_sdk::kernels::simple::region_bytes(n, 1040).unwrap();
            assert_eq!(l.p2p_bytes(), p2p);
            // Its line rings after it, aligned.
            assert!(l.p2p_ll_offset() >= l.p2p_offset() + p2p);
            assert_eq!(l.p2p_ll_offset() % 256, 0);
            let lines = ferrocx_sdk::kernels::p2p::ll_part_bytes(n, 100).unwrap();
            assert_eq!(l.p2p_ll_bytes(), lines);
            assert_eq!(l.bytes(), l.p2p_ll_offset() + lines);
            let no_lines = FlagLayout { p2p_lines: 0, ..l };
            assert_eq!(no_lines.bytes(), no_lines.p2p_ll_offset());
            // The LL128 region last, 256-byte aligned, its areas whole lines;
            // nothing before it moves with its size.
            let l8 = FlagLayout {
                ll128_bytes: (2 << 20) + 1,
                ..l
            };
            assert_eq!(l8.p2p_ll_offset(), l.p2p_ll_offset());
            assert!(l8.ll128_offset() >= l.p2p_ll_offset() + lines);
            assert_eq!(l8.ll128_offset() % 256, 0);
            assert_eq!(l8.ll128_area() % 128, 0);
            assert!(l8.ll128_area() / 128 * 120 > (2 << 20));
            assert_eq!(l8.bytes(), l8.ll128_offset() + 2 * n * l8.ll128_area());
            assert_eq!(l.ll128_area(), 0);
            let none = FlagLayout {
                simple_slot: 0,
                p2p_slot: 0,
                ..l
            };
            assert_eq!(none.bytes(), none.simple_offset());
            assert_eq!(none.p2p_offset(), none.simple_offset());
            for a in Array::ALL {
                assert_eq!(l.offset(a, 0) % 16, 0);
                assert!(l.offset(a, n - 1) + 4 <= l.ring_offset());
            }
            // Every writer's every note slot lies in the ring, apart from the others'.
            let ring = crate::notes::RING as u64;
            assert_eq!(l.note_offset(0, 0, 0), l.ring_offset());
            assert_eq!(l.note_offset(0, 0, 1), l.ring_offset() + 4);
            assert_eq!(
                l.note_offset(n - 1, ring - 1, words - 1) + 4,
                l.ring_offset() + l.ring_bytes()
            );
            assert_eq!(
                l.note_offset(0, ring, 2),
                l.note_offset(0, 0, 2),
                "the ring wraps"
            );
            if n > 1 {
                assert_eq!(
                    l.note_offset(1, 0, 0),
                    l.note_offset(0, ring - 1, words - 1) + 4
                );
            }
        }
        assert_eq!(
            FlagLayout {
                nranks: 4,
                ll_bytes: 0,
                ll128_bytes: 0,
                simple_slot: 0,
                p2p_slot: 0,
                p2p_lines: 0,
            }
            .stride(),
            16
        );
        assert_eq!(
            FlagLayout {
                nranks: 5,
                ll_bytes: 0,
                ll128_bytes: 0,
                simple_slot: 0,
                p2p_slot: 0,
                p2p_lines: 0,
            }
            .stride(),
            32
        );
        assert_eq!(
            FlagLayout {
                nranks: 3,
                ll_bytes: 0,
                ll128_bytes: 0,
                simple_slot: 0,
                p2p_slot: 0,
                p2p_lines: 0,
            }
            .offset(Array::GraphReady, 2),
            2 * 16 + 8
        );
    }

    #[test]
    fn eager_barriers_alternate_grow_and_wait_geq() {
        let mut s = Sequencer::new(1, 3);
        let b: Vec<Barrier> = (0..6).map(|_| s.barrier(Mode::Eager)).collect();
        let arrays: Vec<Array> = b.iter().map(|b| b.array).collect();
        assert_eq!(
            arrays,
            [
                Array::EagerReady,
                Array::EagerComplete,
                Array::EagerReady,
                Array::EagerComplete,
                Array::EagerReady,
                Array::EagerComplete
            ]
        );
        let values: Vec<u32> = b.iter().map(|b| b.value).collect();
        assert_eq!(values, [1, 1, 2, 2, 3, 3]);
        assert!(b.iter().all(|b| !b.resets));
        assert_eq!(
            b[2].ops,
            vec![
                MemOp::Write {
                    rank: 0,
                    array: Array::EagerReady,
                    slot: 1,
                    value: 2
                },
                MemOp::Write {
                    rank: 2,
                    array: Array::EagerReady,
                    slot: 1,
                    value: 2
                },
                MemOp::Wait {
                    array: Array::EagerReady,
                    slot: 0,
                    value: 2,
                    cmp: Cmp::Geq
                },
                MemOp::Wait {
                    array: Array::EagerReady,
                    slot: 2,
                    value: 2,
                    cmp: Cmp::Geq
                },
            ]
        );
        assert_eq!(s.issued(Mode::Eager), 6);
        assert_eq!(s.issued(Mode::Graph), 0);
    }

    #[test]
    fn eager_values_wrap_around_and_compare_cyclically() {
        let mut s = Sequencer::with_base(0, 2, u32::MAX - 1);
        let v: Vec<u32> = (0..6).map(|_| s.barrier(Mode::Eager).value).collect();
        assert_eq!(v, [u32::MAX, u32::MAX, 0, 0, 1, 1]);
        // CUDA's GEQ: one behind waits, equal or a little ahead passes, across the wrap.
        assert!(!Cmp::Geq.holds(u32::MAX, 0));
        assert!(Cmp::Geq.holds(0, 0) && Cmp::Geq.holds(1, 0));
        assert!(!Cmp::Geq.holds(0, 1));
        assert!(Cmp::Geq.holds(5 + (1 << 30), 5));
        assert!(
            !Cmp::Geq.holds(u32::MAX, 5),
            "0xFFFF_FFFF lies behind small values"
        );
        assert!(Cmp::Eq.holds(1, 1) && !Cmp::Eq.holds(2, 1));
    }

    #[test]
    fn graph_barriers_are_constant_eq_and_reset_after_the_waits() {
        let mut s = Sequencer::new(0, 3);
        let b = s.barrier(Mode::Graph);
        assert_eq!((b.array, b.value, b.resets), (Array::GraphReady, 1, true));
        assert_eq!(b.ops.len(), 6);
        assert!(matches!(
            b.ops[0],
            MemOp::Write {
                rank: 1,
                slot: 0,
                value: 1,
                ..
            }
        ));
        assert!(matches!(
            b.ops[2],
            MemOp::Wait {
                slot: 1,
                cmp: Cmp::Eq,
                ..
            }
        ));
        assert!(matches!(
            b.ops[4],
            MemOp::Write {
                rank: 0,
                slot: 1,
                value: 0,
                ..
            }
        ));
        assert!(matches!(
            b.ops[5],
            MemOp::Write {
                rank: 0,
                slot: 2,
                value: 0,
                ..
            }
        ));
        assert_eq!(s.barrier(Mode::Graph).array, Array::GraphComplete);
        assert_eq!(
            s.issued(Mode::Eager),
            0,
            "graph barriers leave eager state alone"
        );
    }

    #[test]
    fn a_single_rank_has_empty_barriers() {
        let mut s = Sequencer::new(0, 1);
        assert!(s.barrier(Mode::Eager).ops.is_empty());
        assert!(s.barrier(Mode::Graph).ops.is_empty());
    }

    fn syncs(steps: &[Step]) -> usize {
        steps.iter().filter(|s| matches!(s, Step::Sync(_))).count()
    }

    /// A staged reduction copies into its scratch before the ready barrier and
    /// folds right after it; the complete barrier ends it.
    #[test]
    fn reductions_stage_then_sync_then_fold() {
        use crate::plan::{Buf, Fold};
        let stage = vec![Push {
            src_rank: 1,
            src_buf: Buf::Send,
            dst_buf: Buf::Scratch,
            src: 0,
            dst_rank: 1,
            dst: 0,
            bytes: 8,
        }];
        let fold = Fold {
            dst: 0,
            srcs: vec![(0, 0), (1, 0)],
            src_buf: Buf::Scratch,
            dst_buf: Buf::Recv,
            bytes: 8,
        };
        let post = vec![Push {
            src_buf: Buf::Scratch,
            dst_buf: Buf::Recv,
            ..stage[0]
        }];
        let call = crate::notes::Call::new(ferrocx_sdk::collective::Coll::AllReduce, 8, 0, 2, 0);
        for mode in [Mode::Eager, Mode::Graph] {
            let mut s = Sequencer::new(1, 2);
            let parts = Parts {
                stage: stage.clone(),
                fold: Some(fold.clone()),
                batches: vec![Vec::new()],
                post: post.clone(),
                note: Some((7, call)),
            };
            let steps = s.reduction(mode, parts);
            // The note to the peer leads the ready barrier, before its flag write.
            let Step::Sync(ready) = &steps[1] else {
                panic!("{steps:?}")
            };
            let words = call.note(7);
            for (word, &value) in words.iter().enumerate() {
                assert_eq!(
                    ready.ops[word],
                    MemOp::Note {
                        rank: 0,
                        seq: 7,
                        word,
                        value
                    }
                );
            }
            assert!(matches!(
                ready.ops[words.len()],
                MemOp::Write { rank: 0, .. }
            ));
            assert!(
                matches!(&steps[0], Step::Copies(v) if *v == stage),
                "{steps:?}"
            );
            assert!(matches!(&steps[1], Step::Sync(_)));
            assert!(matches!(&steps[2], Step::Reduce(f) if *f == fold));
            assert!(matches!(steps.last(), Some(Step::Copies(v)) if *v == post));
            assert!(
                matches!(steps[steps.len() - 2], Step::Sync(_)),
                "the post copy after the last barrier"
            );
            assert_eq!(syncs(&steps), 2);
        }
    }

    #[test]
    fn collectives_pad_graph_mode_to_an_even_barrier_count() {
        let c = |n| Push {
            src_rank: 0,
            src_buf: crate::plan::Buf::Send,
            dst_buf: crate::plan::Buf::Recv,
            src: n,
            dst_rank: 0,
            dst: 0,
            bytes: 1,
        };
        for batches in 1..=4usize {
            let b: Vec<Vec<Push>> = (0..batches).map(|i| vec![c(i)]).collect();
            let mut s = Sequencer::new(0, 2);
            let eager = s.collective(Mode::Eager, b.clone());
            assert_eq!(syncs(&eager), batches + 1);
            assert!(matches!(eager.first(), Some(Step::Sync(_))));
            assert!(matches!(eager.last(), Some(Step::Sync(_))));
            let graph = s.collective(Mode::Graph, b.clone());
            assert_eq!(syncs(&graph) % 2, 0, "{batches} batches");
            assert_eq!(syncs(&graph), (batches + 1).next_multiple_of(2));
            let again = s.collective(Mode::Graph, b);
            let Step::Sync(first) = &again[0] else {
                panic!("starts with a barrier")
            };
            assert_eq!(first.array, Array::GraphReady);
        }
        // Empty batches keep their barriers (the same count on every rank).
        let mut s = Sequencer::new(1, 2);
        let steps = s.collective(Mode::Eager, vec![vec![], vec![]]);
        assert_eq!((steps.len(), syncs(&steps)), (3, 3));
    }
}
