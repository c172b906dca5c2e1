//! Reading plugin settings: typed lookups of environment variables with errors that
//! name the variable, shared by every plugin (and the core) so `1/true/yes/on`,
//! durations like `500ms` and byte counts mean the same everywhere.
//!
//! Each function takes a `lookup` (normally `|n| host.env(n)`, a table in tests);
//! unset or blank means the default.
//!
//! ```
//! use ferrocx_sdk::env;
//! use std::time::Duration;
//! let vars = |n: &str| (n == "X_TIMEOUT").then(|| "250ms".to_string());
//! assert_eq!(env::duration(&vars, "X_TIMEOUT", Duration::from_secs(1)).unwrap(),
//!            Duration::from_millis(250));
//! assert!(env::boolean(&vars, "X_FLAG", true).unwrap());
//! ```

use crate::error::{PluginError, PluginResult};
use std::time::Duration;

fn value(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    lookup(name).filter(|v| !v.trim().is_empty())
}

/// `1/true/yes/on` or `0/false/no/off`.
pub fn boolean(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: bool,
) -> PluginResult<bool> {
    let Some(v) = value(lookup, name) else {
        return Ok(default);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(PluginError::invalid(format!(
            "{name}={v:?} is not a boolean (use 0 or 1)"
        ))),
    }
}

/// How calls are checked against the peers' (`FERROCX_CHECK_CALLS`), weakest
/// first: ranks that differ take the strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallCheck {
    /// `0/false/no/off`: nothing compared, and messages go only where data does.
    Off,
    /// `deferred`: every message is compared with its receiver's call before its
    /// data is used, but a rank that receives nothing from a peer in a call (a
    /// broadcast's root) does not wait to hear from it: it runs ahead, and hears
    /// of a difference at a later call.
    Deferred,
    /// `1/true/yes/on/sync` (the default): every rank of a call hears from its
    /// peers in that call, so a difference fails that call on every rank.
    Sync,
}

impl CallCheck {
    /// Whether anything is compared.
    pub fn compares(self) -> bool {
        self != CallCheck::Off
    }
}

/// `FERROCX_CHECK_CALLS` as a [`CallCheck`]; unset or blank means [`CallCheck::Sync`].
pub fn call_check(lookup: &impl Fn(&str) -> Option<String>) -> PluginResult<CallCheck> {
    const NAME: &str = "FERROCX_CHECK_CALLS";
    let Some(v) = value(lookup, NAME) else {
        return Ok(CallCheck::Sync);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "sync" => Ok(CallCheck::Sync),
        "deferred" => Ok(CallCheck::Deferred),
        "0" | "false" | "no" | "off" => Ok(CallCheck::Off),
        _ => Err(PluginError::invalid(format!(
            "{NAME}={v:?} is none of 1 (sync), deferred, 0 (off)"
        ))),
    }
}

/// Which receive buffers a zero-copy path (shm's single copy, p2p's direct
/// write) may write into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZeroCopy {
    /// None: every message takes the staged path.
    Off,
    /// Registered receive buffers only.
    Registered,
    /// Any eligible receive buffer.
    Any,
}

/// A [`ZeroCopy`] setting: `1/true/yes/on/all/any`, `registered`, or
/// `0/false/no/off`; unset or blank means [`ZeroCopy::Any`]. `any` says what
/// "any" means for this transport, for the error message.
pub fn zero_copy(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &str,
    any: &str,
) -> PluginResult<ZeroCopy> {
    let Some(v) = value(lookup, name) else {
        return Ok(ZeroCopy::Any);
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "all" | "any" => Ok(ZeroCopy::Any),
        "registered" => Ok(ZeroCopy::Registered),
        "0" | "false" | "no" | "off" => Ok(ZeroCopy::Off),
        _ => Err(PluginError::invalid(format!(
            "{name}={v:?}: use 1 ({any}), registered, or 0 (never)"
        ))),
    }
}

/// A non-negative integer, optionally with a binary suffix `K`, `M` or `G`
/// (case-insensitive: `16M` = 16 777 216), as byte sizes are written.
///
/// ```
/// use ferrocx_sdk::env::parse_unsigned;
/// assert_eq!(parse_unsigned(" 64M"), Some(64 << 20));
/// assert_eq!(parse_unsigned("12"), Some(12));
/// assert_eq!(parse_unsigned("1.5G"), None);
/// ```
pub fn parse_unsigned(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, shift) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 10),
        (i, 'm' | 'M') => (&s[..i], 20),
        (i, 'g' | 'G') => (&s[..i], 30),
        _ => (s, 0),
    };
    digits.parse::<usize>().ok()?.checked_mul(1usize << shift)
}

/// A non-negative integer (counts, byte sizes; see [`parse_unsigned`]).
pub fn unsigned(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: usize,
) -> PluginResult<usize> {
    let Some(v) = value(lookup, name) else {
        return Ok(default);
    };
    parse_unsigned(&v).ok_or_else(|| {
        PluginError::invalid(format!(
            "{name}={v:?} is not a non-negative integer (K, M, G suffixes allowed)"
        ))
    })
}

/// A plugin's bid (`can_run`'s answer, a transport's score): a non-negative
/// integer that fits an `i32`.
pub fn priority(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: i32,
) -> PluginResult<i32> {
    let v = unsigned(lookup, name, default.max(0) as usize)?;
    i32::try_from(v).map_err(|_| {
        PluginError::invalid(format!("{name}={v} is too large (at most {})", i32::MAX))
    })
}

/// A positive duration: plain seconds (`30`, `0.5`) or with a unit (`500ms`, `30s`, `2m`).
pub fn duration(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: Duration,
) -> PluginResult<Duration> {
    let Some(v) = value(lookup, name) else {
        return Ok(default);
    };
    parse_duration(&v).ok_or_else(|| {
        PluginError::invalid(format!(
            "{name}={v:?} is not a duration (examples: 30, 0.5, 500ms, 30s, 2m)"
        ))
    })
}

/// Parse `30`, `0.5`, `500ms`, `30s` or `2m`; `None` unless positive and finite.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().ok()?;
    (v.is_finite() && v > 0.0).then(|| Duration::from_secs_f64(v * scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn values_defaults_and_errors_name_the_variable() {
        let l = table(&[
            ("B", " yes "),
            ("N", "12"),
            ("D", "2m"),
            ("E", " "),
            ("X", "zz"),
        ]);
        assert!(boolean(&l, "B", false).unwrap());
        assert!(!boolean(&l, "E", false).unwrap(), "blank means default");
        assert_eq!(unsigned(&l, "N", 1).unwrap(), 12);
        let sizes = table(&[
            ("S", "16M"),
            ("K", "4k"),
            ("G", "2G"),
            ("O", "99999999999G"),
        ]);
        assert_eq!(unsigned(&sizes, "S", 0).unwrap(), 16 << 20);
        assert_eq!(unsigned(&sizes, "K", 0).unwrap(), 4096);
        assert_eq!(unsigned(&sizes, "G", 0).unwrap(), 2 << 30);
        assert!(unsigned(&sizes, "O", 0).is_err(), "overflow is an error");
        assert_eq!(unsigned(&l, "unset", 7).unwrap(), 7);
        assert_eq!(
            duration(&l, "D", Duration::ZERO).unwrap(),
            Duration::from_secs(120)
        );
        for e in [
            boolean(&l, "X", true).unwrap_err(),
            unsigned(&l, "X", 0).unwrap_err(),
            duration(&l, "X", Duration::ZERO).unwrap_err(),
        ] {
            assert!(e.message().contains("X=\"zz\""), "{e}");
        }
    }

    #[test]
    fn call_checks() {
        let check = |v: &str| {
            let v = v.to_string();
            call_check(&move |n: &str| (n == "FERROCX_CHECK_CALLS").then(|| v.clone()))
        };
        assert_eq!(call_check(&table(&[])).unwrap(), CallCheck::Sync);
        for (v, want) in [
            ("", CallCheck::Sync),
            ("1", CallCheck::Sync),
            ("sync", CallCheck::Sync),
            (" Deferred ", CallCheck::Deferred),
            ("off", CallCheck::Off),
            ("0", CallCheck::Off),
        ] {
            assert_eq!(check(v).unwrap(), want, "{v:?}");
        }
        assert!(check("lazy")
            .unwrap_err()
            .message()
            .contains("FERROCX_CHECK_CALLS=\"lazy\""));
        assert!(CallCheck::Off < CallCheck::Deferred && CallCheck::Deferred < CallCheck::Sync);
        assert!(!CallCheck::Off.compares() && CallCheck::Deferred.compares());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("3s"), Some(Duration::from_secs(3)));
        for bad in ["", "0", "-1", "abc", "1h", "nan"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
