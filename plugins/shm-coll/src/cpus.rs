//! Whether a rank shares its CPUs with more ranks than they hold (then a
//! waiting rank yields at once: [`crate::wait`]). Sans-IO: the sets and the
//! decision; the two reads of this host's CPUs are at the end.
//!
//! The host's CPU count alone misjudges both ways: ranks bound to a core each
//! (`--bind-to core`) see one CPU in their own affinity, yet do not share;
//! ranks all started under `taskset -c 0,1` (or a cpuset, or Slurm's
//! binding) on a 16-CPU host share two. So every rank sends its affinity in
//! its hello ([`crate::setup::Hello`]) and each rank counts the ranks whose
//! sets meet its own, transitively, against the CPUs those sets hold
//! together.

/// CPUs 0..1024 (glibc's `cpu_set_t`) as a bit set. Empty: unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuSet([u64; WORDS]);

const WORDS: usize = 16;

/// Bytes of an encoded [`CpuSet`].
pub const CPUSET_BYTES: usize = WORDS * 8;

impl CpuSet {
    /// The set of `cpus` (those from 1024 on are left out).
    pub fn of(cpus: impl IntoIterator<Item = usize>) -> Self {
        let mut s = CpuSet::default();
        for c in cpus.into_iter().filter(|&c| c < WORDS * 64) {
            s.0[c / 64] |= 1 << (c % 64);
        }
        s
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// CPUs in the set.
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    fn meets(&self, other: &CpuSet) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a & b != 0)
    }

    fn add(&mut self, other: &CpuSet) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }

    /// Plain bytes.
    pub fn encode(&self) -> [u8; CPUSET_BYTES] {
        let mut b = [0u8; CPUSET_BYTES];
        for (chunk, w) in b.chunks_exact_mut(8).zip(&self.0) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// From [`encode`](Self::encode)'s bytes (`CPUSET_BYTES` of them).
    pub fn decode(b: &[u8]) -> Self {
        let mut s = CpuSet::default();
        for (w, chunk) in s.0.iter_mut().zip(b.chunks_exact(8)) {
            *w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        }
        s
    }
}

/// How many ranks share a rank's CPUs, and how many CPUs those are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharing {
    /// Ranks, this one included.
    pub ranks: usize,
    /// CPUs they may run on.
    pub cpus: usize,
}

impl Sharing {
    /// Whether the ranks outnumber the CPUs.
    pub fn over(&self) -> bool {
        self.ranks > self.cpus
    }
}

/// Who shares rank `me`'s CPUs, of ranks with CPU sets `sets` (every rank's,
/// in rank order, all on one host): the ranks whose sets meet its own,
/// directly or through others, and the CPUs of their sets together, at most
/// `limit` (the host's online CPUs under its cgroup quota). Where a set is
/// unknown (empty), every rank, on `limit` CPUs.
pub fn sharing(sets: &[CpuSet], me: usize, limit: usize) -> Sharing {
    let limit = limit.max(1);
    if sets.get(me).is_none_or(CpuSet::is_empty) || sets.iter().any(CpuSet::is_empty) {
        return Sharing {
            ranks: sets.len(),
            cpus: limit,
        };
    }
    let mut held = sets[me];
    let mut sharing = vec![false; sets.len()];
    sharing[me] = true;
    // Grow the group until no other rank's set meets it (at most one pass per rank).
    loop {
        let mut grew = false;
        for (r, s) in sets.iter().enumerate() {
            if !sharing[r] && s.meets(&held) {
                sharing[r] = true;
                held.add(s);
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    Sharing {
        ranks: sharing.iter().filter(|&&s| s).count(),
        cpus: held.count().min(limit),
    }
}

/// The CPUs this process may run on (empty where that cannot be read).
pub fn this_process() -> CpuSet {
    CpuSet::of(ferrocx_sdk::proc::allowed_cpus().unwrap_or_default())
}

/// CPUs the host gives: its online CPUs, capped by a cgroup v2 CPU quota (a
/// container limited to 2 CPUs on a large host).
pub fn host_limit() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let online = usize::try_from(n).unwrap_or(1).max(1);
    std::fs::read_to_string("/sys/fs/cgroup/cpu.max")
        .ok()
        .and_then(|q| quota_cpus(&q))
        .map_or(online, |q| online.min(q))
}

/// CPUs a cgroup v2 `cpu.max` line allows (`"200000 100000"`: 2), rounded up;
/// `None` without a limit (`"max 100000"`) or for a line it cannot read.
fn quota_cpus(line: &str) -> Option<usize> {
    let mut it = line.split_whitespace();
    let quota: u64 = it.next()?.parse().ok()?;
    let period: u64 = it.next()?.parse().ok().filter(|&p| p > 0)?;
    usize::try_from(quota.div_ceil(period))
        .ok()
        .map(|c| c.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(cpus: &[&[usize]]) -> Vec<CpuSet> {
        cpus.iter().map(|c| CpuSet::of(c.iter().copied())).collect()
    }

    #[test]
    fn ranks_bound_to_a_core_each_do_not_share() {
        let s = sets(&[&[0], &[1], &[2], &[3]]);
        assert!((0..4).all(|me| !sharing(&s, me, 16).over()));
    }

    #[test]
    fn ranks_under_one_mask_of_fewer_cpus_share() {
        // taskset -c 0,1 on a 16-CPU host, 4 ranks.
        let s = sets(&[&[0, 1], &[0, 1], &[0, 1], &[0, 1]]);
        assert!((0..4).all(|me| sharing(&s, me, 16).over()));
        assert_eq!(sharing(&s, 3, 16), Sharing { ranks: 4, cpus: 2 });
        // The same two ranks: one CPU each.
        assert!(!sharing(&s[..2], 0, 16).over());
        // Unbound on a host of 16: no.
        let all: Vec<usize> = (0..16).collect();
        let s = sets(&[&all, &all, &all, &all]);
        assert!(!sharing(&s, 2, 16).over());
        // A cgroup quota of 2 CPUs counts.
        assert!(sharing(&s, 2, 2).over());
    }

    #[test]
    fn sharing_is_counted_through_other_ranks_and_only_where_sets_meet() {
        // 0 and 1 on CPU 0 and 1, 2 on CPUs 1 and 2: three ranks on three CPUs,
        // none over; with 3 on CPU 2 too, four on three.
        let s = sets(&[&[0], &[0, 1], &[1, 2]]);
        assert!((0..3).all(|me| !sharing(&s, me, 16).over()));
        let s = sets(&[&[0], &[0, 1], &[1, 2], &[2]]);
        assert!((0..4).all(|me| sharing(&s, me, 16).over()));
        // Two ranks on CPU 0, two bound apart: only the first two share.
        let s = sets(&[&[0], &[0], &[5], &[6]]);
        let over: Vec<bool> = (0..4).map(|me| sharing(&s, me, 16).over()).collect();
        assert_eq!(over, [true, true, false, false]);
    }

    #[test]
    fn unknown_sets_count_every_rank_against_the_host() {
        let mut s = sets(&[&[0], &[1], &[2]]);
        s[1] = CpuSet::default();
        assert!(!sharing(&s, 0, 4).over());
        assert!(sharing(&s, 0, 2).over());
    }

    #[test]
    fn sets_round_trip_and_count() {
        let s = CpuSet::of([0, 63, 64, 1023, 1024, 5000]);
        assert_eq!(s.count(), 4);
        assert_eq!(CpuSet::decode(&s.encode()), s);
        assert!(CpuSet::default().is_empty() && !s.is_empty());
    }

    #[test]
    fn this_process_runs_somewhere_and_a_cgroup_quota_counts_as_cpus() {
        assert!(this_process().count() >= 1);
        assert_eq!(quota_cpus("200000 100000\n"), Some(2));
        assert_eq!(quota_cpus("150000 100000"), Some(2));
        assert_eq!(quota_cpus("50000 100000"), Some(1));
        assert_eq!(quota_cpus("max 100000"), None);
        assert_eq!(quota_cpus("garbage"), None);
        assert_eq!(quota_cpus("100 0"), None);
        assert!(host_limit() >= 1);
    }
}
