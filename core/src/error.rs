//! `ferrocx::Error`: says what happened, to which peer, in which plugin hook.

use ferrocx_algo::fingerprint::{mismatch_text, MISMATCH};
use std::fmt;
use std::time::Duration;

/// Every failure the core reports. Messages name the plugin, peer and hook involved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The caller passed something invalid (null or short buffer, rank out of range, …).
    InvalidArgument(String),
    /// An environment variable or explicit setting is malformed.
    Config {
        /// Variable or setting name.
        var: String,
        /// What is wrong with it.
        message: String,
    },
    /// Rendezvous or out-of-band exchange failed.
    Bootstrap(String),
    /// A bootstrap connection failed authentication: this rank and the one it met do
    /// not share the job secret (`FERROCX_SECRET` / `FERROCX_SECRET_FILE`), or only one
    /// of them has one. The message says which side and what to set.
    Auth(String),
    /// A bounded wait expired (`FERROCX_TIMEOUT`).
    Timeout {
        /// What was being waited for.
        what: String,
        /// The peer waited on, when there is one.
        peer: Option<usize>,
        /// How long it waited.
        after: Duration,
    },
    /// A peer process died or reported a failure.
    PeerFailed {
        /// The failed rank.
        rank: usize,
        /// What is known about it.
        detail: String,
    },
    /// A plugin hook returned an error.
    Plugin {
        /// Plugin name.
        plugin: String,
        /// Hook name (`setup`, `isend`, …).
        hook: &'static str,
        /// Peer of the connection, when the hook concerns one.
        peer: Option<usize>,
        /// `FX_*` code.
        code: i32,
        /// The plugin's last-error text.
        message: String,
    },
    /// A plugin library could not be loaded or was rejected.
    PluginLoad {
        /// File (or built-in name).
        path: String,
        /// Why.
        message: String,
    },
    /// No loaded transport can reach a peer.
    NoTransport {
        /// The unreachable peer.
        peer: usize,
        /// Candidates and their answers.
        detail: String,
    },
    /// The communicator was destroyed or aborted.
    Destroyed(String),
    /// The operation is not supported (memory kind, transport feature, …).
    Unsupported(String),
    /// An operating-system error outside any plugin.
    Io(String),
    /// A CUDA driver call failed (the message names the call and the driver's code).
    Cuda(String),
    /// Two ranks made different calls at the same point: their call fingerprints
    /// differ (`FERROCX_CHECK_CALLS`). Every rank of the call gets it (the rank
    /// that saw it tells the others); no data of that call may be used.
    Mismatch {
        /// The lower of the two ranks.
        rank: usize,
        /// What it called, e.g. `all_reduce(float, sum, 1000) as op #5`.
        call: String,
        /// The other rank.
        peer: usize,
        /// What that rank called.
        peer_call: String,
    },
    /// A wait timed out (`FERROCX_TIMEOUT`) and every rank was asked where it is:
    /// the report says which ranks never reached which operation. Every rank of the
    /// communicator gets it (the rank whose wait expired tells the others).
    Hang {
        /// The rank whose wait expired.
        rank: usize,
        /// Its timeout, e.g. `timed out after 5.0s waiting for rank 2: …`.
        waited: String,
        /// Every rank's state, e.g. `rank 2 is past all_reduce(float, sum, 1000) as
        /// op #4 and made no further call; ranks 0,1 wait in broadcast(…) as op #5`.
        report: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Config { var, message } => write!(f, "bad configuration {var}: {message}"),
            Error::Bootstrap(m) => write!(f, "bootstrap failed: {m}"),
            Error::Auth(m) => write!(f, "bootstrap authentication failed: {m}"),
            Error::Timeout { what, peer, after } => match peer {
                Some(p) => write!(
                    f,
                    "timed out after {:.1}s waiting for rank {p}: {what} (FERROCX_TIMEOUT)",
                    after.as_secs_f64()
                ),
                None => write!(
                    f,
                    "timed out after {:.1}s: {what} (FERROCX_TIMEOUT)",
                    after.as_secs_f64()
                ),
            },
            Error::PeerFailed { rank, detail } => write!(f, "rank {rank} failed: {detail}"),
            Error::Plugin {
                plugin,
                hook,
                peer,
                code,
                message,
            } => {
                write!(f, "plugin '{plugin}' {hook}")?;
                if let Some(p) = peer {
                    write!(f, " (peer rank {p})")?;
                }
                write!(
                    f,
                    " failed with {}: {message}",
                    ferrocx_sdk::abi::code_name(*code)
                )
            }
            Error::PluginLoad { path, message } => {
                write!(f, "cannot load plugin {path}: {message}")
            }
            Error::NoTransport { peer, detail } => {
                write!(f, "no transport can reach rank {peer}: {detail}")
            }
            Error::Destroyed(m) => write!(f, "communicator is no longer usable: {m}"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Io(m) => write!(f, "I/O error: {m}"),
            Error::Cuda(m) => write!(f, "CUDA error: {m}"),
            Error::Mismatch {
                rank,
                call,
                peer,
                peer_call,
            } => f.write_str(&mismatch_text(*rank, call, *peer, peer_call)),
            Error::Hang {
                rank,
                waited,
                report,
            } => write!(f, "{HANG}{report}{HANG_RANK}{rank} {waited}"),
        }
    }
}

impl std::error::Error for Error {}

/// How a [`Error::Hang`] message starts, and what follows its report.
const HANG: &str = "hang: ";
const HANG_RANK: &str = ". Rank ";

impl Error {
    /// Ranks `a` and `b` called `call_a` and `call_b`; the lower rank is named first.
    pub(crate) fn mismatch(a: usize, call_a: String, b: usize, call_b: String) -> Self {
        let ((rank, call), (peer, peer_call)) = if a <= b {
            ((a, call_a), (b, call_b))
        } else {
            ((b, call_b), (a, call_a))
        };
        Error::Mismatch {
            rank,
            call,
            peer,
            peer_call,
        }
    }

    /// The error a peer's abort notice means here: the mismatch it found, or its failure.
    pub(crate) fn from_abort(from: usize, reason: &str) -> Self {
        Self::parse_mismatch(reason)
            .or_else(|| Self::parse_hang(reason))
            .unwrap_or_else(|| Error::PeerFailed {
                rank: from,
                detail: format!("it aborted the communicator: {reason}"),
            })
    }

    /// The [`Error::Mismatch`] whose message is `s`.
    pub(crate) fn parse_mismatch(s: &str) -> Option<Self> {
        let s = s.strip_prefix(MISMATCH)?.strip_prefix("rank ")?;
        let (rank, s) = s.split_once(" called ")?;
        let (call, s) = s.split_once(", rank ")?;
        let (peer, peer_call) = s.split_once(" called ")?;
        Some(Error::Mismatch {
            rank: rank.parse().ok()?,
            call: call.to_string(),
            peer: peer.parse().ok()?,
            peer_call: peer_call.to_string(),
        })
    }

    /// The [`Error::Hang`] whose message is `s`.
    fn parse_hang(s: &str) -> Option<Self> {
        let (report, s) = s.strip_prefix(HANG)?.split_once(HANG_RANK)?;
        let (rank, waited) = s.split_once(' ')?;
        Some(Error::Hang {
            rank: rank.parse().ok()?,
            waited: waited.to_string(),
            report: report.to_string(),
        })
    }

    /// The peer rank this error is about, when there is one.
    pub fn peer(&self) -> Option<usize> {
        match self {
            Error::Timeout { peer, .. } | Error::Plugin { peer, .. } => *peer,
            Error::PeerFailed { rank, .. } => Some(*rank),
            Error::NoTransport { peer, .. } => Some(*peer),
            _ => None,
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    /// From an `sdk::cuda` failure: no driver or device → `Unsupported`, else `Cuda`.
    pub(crate) fn cuda(e: ferrocx_sdk::PluginError) -> Self {
        if e.code() == ferrocx_sdk::abi::FX_UNSUPPORTED {
            Error::Unsupported(e.message().to_string())
        } else {
            Error::Cuda(e.message().to_string())
        }
    }
}

impl From<ferrocx_algo::Invalid> for Error {
    fn from(e: ferrocx_algo::Invalid) -> Self {
        Error::InvalidArgument(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mismatch_crosses_an_abort_notice_intact() {
        let e = Error::mismatch(
            2,
            "broadcast(float, 10, root 2) as op #0".into(),
            1,
            "broadcast(float, 10, root 1) as op #0".into(),
        );
        assert_eq!(
            e.to_string(),
            "mismatched calls: rank 1 called broadcast(float, 10, root 1) as op #0, rank 2 called broadcast(float, 10, root 2) as op #0"
        );
        assert_eq!(Error::from_abort(2, &e.to_string()), e);
        let h = Error::Hang {
            rank: 0,
            waited: "timed out after 5.0s waiting for rank 2: x (FERROCX_TIMEOUT)".into(),
            report: "rank 2 is past a(b) as op #4 and made no further call; ranks 0,1 wait in c as op #5".into(),
        };
        assert_eq!(
            h.to_string(),
            "hang: rank 2 is past a(b) as op #4 and made no further call; ranks 0,1 wait in c as op #5. \
             Rank 0 timed out after 5.0s waiting for rank 2: x (FERROCX_TIMEOUT)"
        );
        assert_eq!(Error::from_abort(0, &h.to_string()), h);
        assert_eq!(
            Error::from_abort(3, "out of memory"),
            Error::PeerFailed {
                rank: 3,
                detail: "it aborted the communicator: out of memory".into()
            }
        );
    }
}
