//! The health of the two paths to one peer, and which one carries new traffic.

use super::{ConfigError, Nanos, Path, PathFault, PeerError, PeerId};
use std::time::Duration;

/// Timing of the health machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthConfig {
    /// How long a posted request may wait for its completion before its path is
    /// marked bad. Note 004 measured NVSHMEM at about 10 s and NCCL's verbs
    /// timeout at about 15 s; the GPU-side check can afford less, but it must stay
    /// above the NIC's own retry time or healthy-but-busy paths get failed.
    pub timeout: Duration,
    /// How long a bad path must go without a new failure before it is taken back
    /// (for the primary: before traffic returns to it). Longer than `timeout`.
    pub recovery: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            timeout: Duration::from_secs(10),
            recovery: Duration::from_secs(30),
        }
    }
}

impl HealthConfig {
    /// Checks that the timing can work (see [`ConfigError`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.recovery <= self.timeout {
            return Err(ConfigError::RecoveryNotLongerThanTimeout {
                timeout: self.timeout,
                recovery: self.recovery,
            });
        }
        Ok(())
    }
}

/// The state of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStatus {
    /// Usable.
    Up,
    /// Marked bad at `since`; the last failure seen on it was at `last_failure`
    /// (failures of requests posted before it went down keep arriving and push the
    /// recovery back: the window counts from the last failure).
    Down {
        /// The first failure, the one that took it down.
        why: PathFault,
        /// When it went down.
        since: Nanos,
        /// The latest failure seen on it.
        last_failure: Nanos,
    },
}

/// Health of the primary and backup paths from this rank to one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathHealth {
    peer: PeerId,
    primary: PathStatus,
    /// `None`: this peer has no backup path (single NIC, or backup disabled).
    backup: Option<PathStatus>,
    recovery: Duration,
}

impl PathHealth {
    /// Both paths up (or the primary only, without a backup).
    pub fn new(peer: PeerId, has_backup: bool, recovery: Duration) -> Self {
        PathHealth {
            peer,
            primary: PathStatus::Up,
            backup: has_backup.then_some(PathStatus::Up),
            recovery,
        }
    }

    /// The state of `path`; `None` for a backup that does not exist.
    pub fn status(&self, path: Path) -> Option<PathStatus> {
        match path {
            Path::Primary => Some(self.primary),
            Path::Backup => self.backup,
        }
    }

    /// The path new traffic takes: the primary while it is up, else the backup
    /// while it is up; else the error naming both failures.
    pub fn route(&self) -> Result<Path, PeerError> {
        match (self.primary, self.backup) {
            (PathStatus::Up, _) => Ok(Path::Primary),
            (PathStatus::Down { .. }, Some(PathStatus::Up)) => Ok(Path::Backup),
            (PathStatus::Down { why: p, .. }, Some(PathStatus::Down { why: b, .. })) => {
                Err(PeerError {
                    peer: self.peer,
                    primary: p,
                    backup: Some(b),
                })
            }
            (PathStatus::Down { why, .. }, None) => Err(PeerError {
                peer: self.peer,
                primary: why,
                backup: None,
            }),
        }
    }

    /// Records a failure on `path` at `now`. Returns true when this took the path
    /// down (it was up), false when it was already down (the window restarts) or
    /// does not exist.
    pub fn mark_bad(&mut self, path: Path, why: PathFault, now: Nanos) -> bool {
        let slot = match path {
            Path::Primary => &mut self.primary,
            Path::Backup => match &mut self.backup {
                Some(s) => s,
                None => return false,
            },
        };
        match slot {
            PathStatus::Up => {
                *slot = PathStatus::Down {
                    why,
                    since: now,
                    last_failure: now,
                };
                true
            }
            PathStatus::Down { last_failure, .. } => {
                *last_failure = (*last_failure).max(now);
                false
            }
        }
    }

    /// Takes back every path whose recovery window has passed without a failure.
    /// Returns each path taken back with how long it was down; taking back the
    /// primary is the switch back, since [`route`](Self::route) prefers it.
    pub fn restore_due(&mut self, now: Nanos) -> Vec<(Path, std::time::Duration)> {
        let recovery = self.recovery;
        let mut restored = Vec::new();
        let mut check = |path: Path, slot: &mut PathStatus| {
            if let PathStatus::Down {
                since,
                last_failure,
                ..
            } = *slot
            {
                if now >= last_failure.after(recovery) {
                    *slot = PathStatus::Up;
                    restored.push((path, now.since(since)));
                }
            }
        };
        check(Path::Primary, &mut self.primary);
        if let Some(b) = &mut self.backup {
            check(Path::Backup, b);
        }
        restored
    }

    /// When the next down path becomes due for restoring, if any.
    pub fn next_restore(&self) -> Option<Nanos> {
        [Some(self.primary), self.backup]
            .into_iter()
            .flatten()
            .filter_map(|s| match s {
                PathStatus::Down { last_failure, .. } => Some(last_failure.after(self.recovery)),
                PathStatus::Up => None,
            })
            .min()
    }
}
