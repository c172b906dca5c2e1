//! The MoE all-to-all-v of the example (issue 20, item 5), sans-IO: which
//! bytes a rank puts where to *dispatch* its tokens to the ranks holding
//! their experts, and to *combine* the experts' outputs back, in the shape of
//! DeepEP's dispatch/combine. The device kernel of the example turns each
//! [`Put`] into an `fxg_put` and each peer's last one into an `fxg_put_signal`
//! (add the count) on the receiver's signal word for this sender; here the
//! plans are built and checked on host memory.
//!
//! Dispatch: token `t` of rank `me` chose `k` experts; expert `e` lives on
//! rank `e / experts_per_rank`. The token goes once to each distinct rank
//! among them (two experts on one rank share the copy), in token order per
//! destination. The ranks all-gather their counts ([`Routing::counts`] into
//! [`Counts`]); rank `q` stores rank `r`'s tokens contiguously after those of
//! ranks `< r` ([`Layout`]), so every put's destination is known without
//! another exchange.
//!
//! Combine: rank `q` returns the output of the `j`-th token it got from `r`
//! to rank `r`'s combine buffer, which is laid out like `r`'s dispatch sends
//! (peer by peer, in send order); rank `r` then reduces, for each token, the
//! slots [`Routing::combine_slots`] names.

use std::fmt;

/// One contiguous copy: `bytes` from `src` in this rank's buffer to `dst` in
/// `peer`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Put {
    /// The destination rank.
    pub peer: usize,
    /// Byte offset in this rank's source buffer.
    pub src: u64,
    /// Byte offset in the peer's destination buffer.
    pub dst: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Why a routing or plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoeError {
    /// An expert index at or past `nranks × experts_per_rank`.
    UnknownExpert {
        /// The token.
        token: usize,
        /// Its expert.
        expert: u32,
        /// Experts in all.
        experts: u64,
    },
    /// No ranks, or no experts per rank.
    Empty,
    /// `counts_to_me` has a length other than the rank count.
    CountsLength {
        /// Ranks.
        nranks: usize,
        /// Counts given.
        got: usize,
    },
    /// This rank out of range.
    BadRank {
        /// The rank.
        me: usize,
        /// Ranks.
        nranks: usize,
    },
    /// A byte offset overflows `u64`.
    Overflow,
}

impl fmt::Display for MoeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoeError::UnknownExpert {
                token,
                expert,
                experts,
            } => write!(
                f,
                "token {token} chose expert {expert}, but there are {experts} experts"
            ),
            MoeError::Empty => write!(f, "no ranks or no experts per rank"),
            MoeError::CountsLength { nranks, got } => {
                write!(f, "{got} receive counts for {nranks} ranks")
            }
            MoeError::BadRank { me, nranks } => write!(f, "rank {me} of {nranks}"),
            MoeError::Overflow => write!(f, "a byte offset overflows"),
        }
    }
}

impl std::error::Error for MoeError {}

/// Where one rank's tokens go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// For each destination rank, the local token indices sent there, in order.
    sends: Vec<Vec<usize>>,
    /// For each token, the (destination rank, position in that rank's list).
    slots: Vec<Vec<(usize, usize)>>,
}

impl Routing {
    /// The routing of tokens whose chosen experts are `experts[t]` (any
    /// number per token, repeats allowed) on `nranks` ranks of
    /// `experts_per_rank` experts each.
    pub fn new(
        nranks: usize,
        experts_per_rank: usize,
        experts: &[Vec<u32>],
    ) -> Result<Routing, MoeError> {
        if nranks == 0 || experts_per_rank == 0 {
            return Err(MoeError::Empty);
        }
        let all = nranks as u64 * experts_per_rank as u64;
        let mut sends = vec![Vec::new(); nranks];
        let mut slots = Vec::with_capacity(experts.len());
        for (t, chosen) in experts.iter().enumerate() {
            let mut ranks: Vec<usize> = Vec::with_capacity(chosen.len());
            for &e in chosen {
                if u64::from(e) >= all {
                    return Err(MoeError::UnknownExpert {
                        token: t,
                        expert: e,
                        experts: all,
                    });
                }
                ranks.push(e as usize / experts_per_rank);
            }
            ranks.sort_unstable();
            ranks.dedup();
            let mine = ranks
                .into_iter()
                .map(|q| {
                    sends[q].push(t);
                    (q, sends[q].len() - 1)
                })
                .collect();
            slots.push(mine);
        }
        Ok(Routing { sends, slots })
    }

    /// Tokens sent to each rank (what the count exchange carries).
    pub fn counts(&self) -> Vec<u64> {
        self.sends.iter().map(|s| s.len() as u64).collect()
    }

    /// The local tokens sent to `peer`, in order.
    pub fn sent_to(&self, peer: usize) -> &[usize] {
        &self.sends[peer]
    }

    /// Token `t`'s slots in this rank's combine buffer (in units of tokens),
    /// one per distinct destination rank: what the combine reduces.
    pub fn combine_slots(&self, t: usize) -> Vec<u64> {
        let start = self.send_starts();
        self.slots[t]
            .iter()
            .map(|&(q, j)| start[q] + j as u64)
            .collect()
    }

    /// Where each peer's block starts in this rank's combine buffer (tokens).
    fn send_starts(&self) -> Vec<u64> {
        prefix(&self.counts())
    }
}

/// Exclusive prefix sums.
fn prefix(v: &[u64]) -> Vec<u64> {
    let mut at = 0;
    v.iter()
        .map(|&c| {
            let s = at;
            at += c;
            s
        })
        .collect()
}

/// Every rank's counts: row `r` is what rank `r` sends each rank (its
/// [`Routing::counts`]). The count exchange is an all-gather of the rows (n²
/// numbers), so that every rank can place both its dispatch puts (where its
/// tokens start at each peer) and its combine puts (where its block starts in
/// each origin's combine buffer) without another round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    rows: Vec<Vec<u64>>,
}

impl Counts {
    /// From the gathered rows (square: as many rows as ranks, each that long).
    pub fn new(rows: Vec<Vec<u64>>) -> Result<Counts, MoeError> {
        let n = rows.len();
        if n == 0 {
            return Err(MoeError::Empty);
        }
        if let Some(r) = rows.iter().find(|r| r.len() != n) {
            return Err(MoeError::CountsLength {
                nranks: n,
                got: r.len(),
            });
        }
        Ok(Counts { rows })
    }

    /// Ranks.
    pub fn nranks(&self) -> usize {
        self.rows.len()
    }

    /// Tokens rank `q` receives from each rank.
    pub fn to(&self, q: usize) -> Vec<u64> {
        self.rows.iter().map(|row| row[q]).collect()
    }

    /// Rank `q`'s receive buffer: rank `r`'s tokens start at slot
    /// `starts[r]`, after those of the ranks before it.
    pub fn layout(&self, q: usize) -> Layout {
        let to = self.to(q);
        Layout {
            starts: prefix(&to),
            total: to.iter().sum(),
        }
    }

    fn check(&self, me: usize) -> Result<(), MoeError> {
        if me >= self.nranks() {
            return Err(MoeError::BadRank {
                me,
                nranks: self.nranks(),
            });
        }
        Ok(())
    }
}

/// A rank's receive layout: rank `r`'s tokens start at `starts[r]` (tokens).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// First slot of each sender's tokens.
    pub starts: Vec<u64>,
    /// Tokens received in all.
    pub total: u64,
}

/// The puts of rank `me`'s dispatch: each token sent to a peer, from its
/// place in `me`'s token buffer to its slot in the peer's receive buffer
/// ([`Counts::layout`]), consecutive tokens merged into one put. The peers'
/// signals then carry [`Routing::counts`].
pub fn dispatch(
    me: usize,
    routing: &Routing,
    counts: &Counts,
    token_bytes: u64,
) -> Result<Vec<Put>, MoeError> {
    counts.check(me)?;
    let n = counts.nranks();
    if routing.sends.len() != n {
        return Err(MoeError::CountsLength {
            nranks: n,
            got: routing.sends.len(),
        });
    }
    let mut puts = Vec::new();
    for (q, list) in routing.sends.iter().enumerate() {
        let start = counts.layout(q).starts[me];
        for (j, &t) in list.iter().enumerate() {
            let src = (t as u64)
                .checked_mul(token_bytes)
                .ok_or(MoeError::Overflow)?;
            let dst = (start + j as u64)
                .checked_mul(token_bytes)
                .ok_or(MoeError::Overflow)?;
            push_merged(&mut puts, q, src, dst, token_bytes)?;
        }
    }
    Ok(puts)
}

/// The puts of rank `q`'s combine: the output of the `j`-th token received
/// from rank `r` (slot `layout(q).starts[r] + j` of `q`'s expert-output
/// buffer) goes back to rank `r`'s combine buffer, laid out as `r`'s dispatch
/// sends (peer by peer, in send order: [`Routing::combine_slots`]);
/// consecutive slots merged.
pub fn combine(q: usize, counts: &Counts, token_bytes: u64) -> Result<Vec<Put>, MoeError> {
    counts.check(q)?;
    let layout = counts.layout(q);
    let mut puts = Vec::new();
    for (r, row) in counts.rows.iter().enumerate() {
        // Where q's block starts in r's combine buffer.
        let origin = row[..q].iter().sum::<u64>();
        for j in 0..row[q] {
            let src = (layout.starts[r] + j)
                .checked_mul(token_bytes)
                .ok_or(MoeError::Overflow)?;
            let dst = (origin + j)
                .checked_mul(token_bytes)
                .ok_or(MoeError::Overflow)?;
            push_merged(&mut puts, r, src, dst, token_bytes)?;
        }
    }
    Ok(puts)
}

/// Append a put, extending the previous one when it continues it.
fn push_merged(
    puts: &mut Vec<Put>,
    peer: usize,
    src: u64,
    dst: u64,
    bytes: u64,
) -> Result<(), MoeError> {
    // The put's end must be addressable too.
    src.checked_add(bytes)
        .and(dst.checked_add(bytes))
        .ok_or(MoeError::Overflow)?;
    if let Some(p) = puts.last_mut() {
        if p.peer == peer && p.src + p.bytes == src && p.dst + p.bytes == dst {
            p.bytes += bytes;
            return Ok(());
        }
    }
    puts.push(Put {
        peer,
        src,
        dst,
        bytes,
    });
    Ok(())
}

#[cfg(test)]
mod tests;
