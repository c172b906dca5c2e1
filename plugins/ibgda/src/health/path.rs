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
    /// The longest the window grows to for a path that flaps: one that fails
    /// again within its window after being taken back gets twice the window
    /// next time (up to this); one that stayed up a whole window starts again
    /// from `recovery`. At least `recovery`.
    pub max_recovery: Duration,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            timeout: Duration::from_secs(10),
            recovery: Duration::from_secs(30),
            max_recovery: Duration::from_secs(240),
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
        if self.max_recovery < self.recovery {
            return Err(ConfigError::MaxRecoveryBelowRecovery {
                recovery: self.recovery,
                max_recovery: self.max_recovery,
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

/// One path: its state, and the recovery window its next failure gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    status: PathStatus,
    /// The window of the current (or next) time down.
    window: Duration,
    /// When it was last taken back: a failure within `window` of that is a flap.
    restored: Option<Nanos>,
}

impl Slot {
    fn new(window: Duration) -> Self {
        Slot {
            status: PathStatus::Up,
            window,
            restored: None,
        }
    }
}

/// Health of the primary and backup paths from this rank to one peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathHealth {
    peer: PeerId,
    primary: Slot,
    /// `None`: this peer has no backup path (single NIC, or backup disabled).
    backup: Option<Slot>,
    recovery: Duration,
    max_recovery: Duration,
}

impl PathHealth {
    /// Both paths up (or the primary only, without a backup), with `cfg`'s
    /// recovery windows.
    pub fn new(peer: PeerId, has_backup: bool, cfg: &HealthConfig) -> Self {
        PathHealth {
            peer,
            primary: Slot::new(cfg.recovery),
            backup: has_backup.then_some(Slot::new(cfg.recovery)),
            recovery: cfg.recovery,
            max_recovery: cfg.max_recovery.max(cfg.recovery),
        }
    }

    /// The state of `path`; `None` for a backup that does not exist.
    pub fn status(&self, path: Path) -> Option<PathStatus> {
        self.slot(path).map(|s| s.status)
    }

    /// The recovery window of `path`'s current (or next) time down: longer
    /// while it flaps.
    pub fn window(&self, path: Path) -> Option<Duration> {
        self.slot(path).map(|s| s.window)
    }

    fn slot(&self, path: Path) -> Option<&Slot> {
        match path {
            Path::Primary => Some(&self.primary),
            Path::Backup => self.backup.as_ref(),
        }
    }

    /// The path new traffic takes: the primary while it is up, else the backup
    /// while it is up; else the error naming both failures.
    pub fn route(&self) -> Result<Path, PeerError> {
        match (self.primary.status, self.backup.map(|b| b.status)) {
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
    /// does not exist. A path that goes down again within its window of being
    /// taken back flaps: its window doubles (to `max_recovery`); one that stayed
    /// up longer starts again from `recovery`.
    pub fn mark_bad(&mut self, path: Path, why: PathFault, now: Nanos) -> bool {
        let (base, most) = (self.recovery, self.max_recovery);
        let slot = match path {
            Path::Primary => &mut self.primary,
            Path::Backup => match &mut self.backup {
                Some(s) => s,
                None => return false,
            },
        };
        match &mut slot.status {
            PathStatus::Up => {
                let flapped = slot.restored.is_some_and(|t| now < t.after(slot.window));
                slot.window = if flapped {
                    slot.window.saturating_mul(2).min(most)
                } else {
                    base
                };
                slot.status = PathStatus::Down {
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
        let mut restored = Vec::new();
        let mut check = |path: Path, slot: &mut Slot| {
            if let PathStatus::Down {
                since,
                last_failure,
                ..
            } = slot.status
            {
                if now >= last_failure.after(slot.window) {
                    slot.status = PathStatus::Up;
                    slot.restored = Some(now);
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
            .filter_map(|s| match s.status {
                PathStatus::Down { last_failure, .. } => Some(last_failure.after(s.window)),
                PathStatus::Up => None,
            })
            .min()
    }
}
