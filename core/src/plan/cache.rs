//! Schedules of repeated collectives, kept so that a training loop calling
//! the same all-reduce every step does not rebuild (and reallocate) it.

use crate::algo::{self, Algo, CollArgs, CollKind, Schedule};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Multiply-rotate hasher: keys are a few small integers, and SipHash
/// showed up in profiles of 8-byte all-reduces.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Entries kept; beyond this the cache starts over (cheap, and bounded).
const MAX_ENTRIES: usize = 256;

#[derive(Hash, PartialEq, Eq)]
struct Key {
    kind: CollKind,
    algo: Algo,
    count: usize,
    root: usize,
    part: (usize, usize),
    chunk: usize,
}

/// Schedules by their arguments (this rank and size are fixed per communicator).
#[derive(Default)]
pub(crate) struct ScheduleCache {
    map: Mutex<HashMap<Key, Arc<Schedule>, BuildHasherDefault<KeyHasher>>>,
}

impl ScheduleCache {
    /// The schedule for `a`, built once. All-to-all-v (per-call counts) is not cached.
    pub fn get(&self, a: &CollArgs<'_>) -> Arc<Schedule> {
        if a.v.is_some() {
            return Arc::new(algo::schedule(a));
        }
        let key = Key {
            kind: a.kind,
            algo: a.algo,
            count: a.count,
            root: a.root,
            part: (a.part.index, a.part.of),
            chunk: a.chunk,
        };
        let mut map = self.map.lock();
        if let Some(s) = map.get(&key) {
            return s.clone();
        }
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        let s = Arc::new(algo::schedule(a));
        map.insert(key, s.clone());
        s
    }
}
