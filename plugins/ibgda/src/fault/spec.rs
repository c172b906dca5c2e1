//! Fault plans as text, for [`FAULT_ENV`] (the I/O crate reads the variable;
//! this crate only parses): plans separated by `;`, each a comma list of
//!
//! | item | meaning | default |
//! |---|---|---|
//! | `peer=N` or `peer=all` | only that peer's requests | `all` |
//! | `path=primary` or `path=backup` | the path | `primary` |
//! | `after=N` | requests carried on the path before the fault starts | `0` |
//! | `count=N` or `count=forever` | requests affected | `forever` |
//! | `drop` or `delay=D` | lose their completions, or delay them by `D` (a whole number with `ns`, `us`, `ms` or `s`) | required, exactly one |
//!
//! For example `peer=1,after=100,count=10,drop;path=backup,delay=2ms`. A
//! [`FaultPlan`] displays as this syntax, every key spelled out.

use super::{Fault, FaultPlan};
use crate::health::{Path, PeerId};
use std::fmt;
use std::time::Duration;

/// The environment variable holding fault plans, in [`parse_plans`]'s syntax.
pub const FAULT_ENV: &str = "FERROCX_IBGDA_FAULT";

/// The plans `spec` describes, in order (the first that hits a request
/// decides, as in [`super::FaultInjector::new`]); empty plans (an empty
/// variable, a trailing `;`) are skipped. An error names the bad piece.
pub fn parse_plans(spec: &str) -> Result<Vec<FaultPlan>, String> {
    spec.split(';')
        .map(str::trim)
        .filter(|plan| !plan.is_empty())
        .map(|plan| parse_plan(plan).map_err(|e| format!("{FAULT_ENV}: {e}")))
        .collect()
}

fn parse_plan(plan: &str) -> Result<FaultPlan, String> {
    let (mut peer, mut path, mut after, mut count, mut fault) = (None, None, None, None, None);
    for item in plan.split(',').map(str::trim) {
        let Some((key, value)) = item.split_once('=') else {
            match item {
                "drop" => once(&mut fault, Fault::Drop, "drop or delay", plan)?,
                "" => return Err(format!("empty item in plan '{plan}'")),
                "peer" | "path" | "after" | "count" | "delay" => {
                    return Err(format!(
                        "'{item}' needs a value ({item}=...) in plan '{plan}'"
                    ))
                }
                _ => return Err(format!("unknown word '{item}' in plan '{plan}'")),
            }
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let bad = |expected: &str| format!("bad {key} '{value}' in '{item}': expected {expected}");
        match key {
            "peer" => {
                let p = match value {
                    "all" => None,
                    n => Some(PeerId(n.parse().map_err(|_| bad("a rank or all"))?)),
                };
                once(&mut peer, p, key, plan)?;
            }
            "path" => {
                let p = match value {
                    "primary" => Path::Primary,
                    "backup" => Path::Backup,
                    _ => return Err(bad("primary or backup")),
                };
                once(&mut path, p, key, plan)?;
            }
            "after" => {
                let n = value.parse().map_err(|_| bad("a count"))?;
                once(&mut after, n, key, plan)?;
            }
            "count" => {
                let n = match value {
                    "forever" => None,
                    n => Some(n.parse().map_err(|_| bad("a count or forever"))?),
                };
                once(&mut count, n, key, plan)?;
            }
            "delay" => {
                let d = duration(value)
                    .ok_or_else(|| bad("a whole number with ns, us, ms or s (delay=2ms)"))?;
                once(&mut fault, Fault::Delay(d), "drop or delay", plan)?;
            }
            "drop" => return Err(format!("drop takes no value, in '{item}'")),
            _ => return Err(format!("unknown key '{key}' in '{item}'")),
        }
    }
    Ok(FaultPlan {
        peer: peer.flatten(),
        path: path.unwrap_or(Path::Primary),
        after: after.unwrap_or(0),
        count: count.unwrap_or(None),
        fault: fault
            .ok_or_else(|| format!("plan '{plan}' has neither drop nor delay=<duration>"))?,
    })
}

/// Sets `slot` unless an earlier item did (a repeated key is a mistake, not an
/// override).
fn once<T>(slot: &mut Option<T>, v: T, what: &str, plan: &str) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("{what} given twice in plan '{plan}'"));
    }
    *slot = Some(v);
    Ok(())
}

const UNITS: [(&str, u64); 4] = [
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

fn duration(text: &str) -> Option<Duration> {
    let digits = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let per = UNITS.iter().find(|u| u.0 == unit)?.1;
    // Whole seconds fit a u64: at most n of them.
    let ns = u128::from(n) * u128::from(per);
    Some(Duration::new(
        (ns / 1_000_000_000) as u64,
        (ns % 1_000_000_000) as u32,
    ))
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.peer {
            Some(p) => write!(f, "peer={},", p.0)?,
            None => f.write_str("peer=all,")?,
        }
        let path = match self.path {
            Path::Primary => "primary",
            Path::Backup => "backup",
        };
        write!(f, "path={path},after={},", self.after)?;
        match self.count {
            Some(n) => write!(f, "count={n},")?,
            None => f.write_str("count=forever,")?,
        }
        match self.fault {
            Fault::Drop => f.write_str("drop"),
            Fault::Delay(d) => {
                // The largest unit that says it exactly.
                let ns = d.as_nanos();
                let (unit, per) = UNITS
                    .iter()
                    .find(|u| ns % u128::from(u.1) == 0)
                    .expect("ns divides everything");
                write!(f, "delay={}{unit}", ns / u128::from(*per))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(
        peer: Option<u32>,
        path: Path,
        after: u64,
        count: Option<u64>,
        fault: Fault,
    ) -> FaultPlan {
        FaultPlan {
            peer: peer.map(PeerId),
            path,
            after,
            count,
            fault,
        }
    }

    #[test]
    fn specs_parse_to_their_plans_and_display_back() {
        let ms = Duration::from_millis;
        let cases: Vec<(&str, Vec<FaultPlan>)> = vec![
            ("", vec![]),
            (" ; ;", vec![]),
            ("drop", vec![plan(None, Path::Primary, 0, None, Fault::Drop)]),
            // The injector test's two plans.
            (
                "peer=1,after=3,count=2,drop;path=backup,after=1,delay=2ms",
                vec![
                    plan(Some(1), Path::Primary, 3, Some(2), Fault::Drop),
                    plan(None, Path::Backup, 1, None, Fault::Delay(ms(2))),
                ],
            ),
            (
                " delay = 1500us , count=forever ,peer=all, path=primary ; peer=4294967295,count=0,delay=7ns;",
                vec![
                    plan(None, Path::Primary, 0, None, Fault::Delay(Duration::from_micros(1500))),
                    plan(Some(u32::MAX), Path::Primary, 0, Some(0), Fault::Delay(Duration::from_nanos(7))),
                ],
            ),
            (
                "after=18446744073709551615,delay=18446744073709551615s,path=backup",
                vec![plan(
                    None,
                    Path::Backup,
                    u64::MAX,
                    None,
                    Fault::Delay(Duration::from_secs(u64::MAX)),
                )],
            ),
            (
                "delay=0ms;delay=3000ms;delay=60000000us",
                vec![
                    plan(None, Path::Primary, 0, None, Fault::Delay(Duration::ZERO)),
                    plan(None, Path::Primary, 0, None, Fault::Delay(ms(3000))),
                    plan(None, Path::Primary, 0, None, Fault::Delay(ms(60_000))),
                ],
            ),
        ];
        for (spec, want) in cases {
            let got = parse_plans(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(got, want, "{spec}");
            let text: Vec<String> = got.iter().map(ToString::to_string).collect();
            assert_eq!(parse_plans(&text.join(";")), Ok(want), "{text:?}");
        }
        // Every key spelled out, durations in their largest exact unit.
        let shown: Vec<String> =
            parse_plans("delay=3000ms;path=backup,peer=2,count=5,after=1,delay=1500us;drop")
                .expect("valid")
                .iter()
                .map(ToString::to_string)
                .collect();
        assert_eq!(
            shown,
            [
                "peer=all,path=primary,after=0,count=forever,delay=3s",
                "peer=2,path=backup,after=1,count=5,delay=1500us",
                "peer=all,path=primary,after=0,count=forever,drop",
            ]
        );
    }

    #[test]
    fn bad_specs_are_refused_naming_the_piece() {
        let cases = [
            ("pth=primary,drop", "unknown key 'pth' in 'pth=primary'"),
            ("peer=1,dorp", "unknown word 'dorp' in plan 'peer=1,dorp'"),
            ("peer=1,,drop", "empty item in plan 'peer=1,,drop'"),
            ("peer,drop", "'peer' needs a value (peer=...) in plan 'peer,drop'"),
            ("delay,count=1", "'delay' needs a value (delay=...) in plan 'delay,count=1'"),
            ("peer=x,drop", "bad peer 'x' in 'peer=x': expected a rank or all"),
            ("peer=-1,drop", "bad peer '-1' in 'peer=-1': expected a rank or all"),
            ("peer=4294967296,drop", "bad peer '4294967296' in 'peer=4294967296': expected a rank or all"),
            ("path=side,drop", "bad path 'side' in 'path=side': expected primary or backup"),
            ("after=,drop", "bad after '' in 'after=': expected a count"),
            ("after=1e3,drop", "bad after '1e3' in 'after=1e3': expected a count"),
            ("count=always,drop", "bad count 'always' in 'count=always': expected a count or forever"),
            ("delay=5", "bad delay '5' in 'delay=5': expected a whole number with ns, us, ms or s (delay=2ms)"),
            ("delay=ms", "bad delay 'ms' in 'delay=ms': expected a whole number with ns, us, ms or s (delay=2ms)"),
            ("delay=1.5ms", "bad delay '1.5ms' in 'delay=1.5ms': expected a whole number with ns, us, ms or s (delay=2ms)"),
            ("delay=2min", "bad delay '2min' in 'delay=2min': expected a whole number with ns, us, ms or s (delay=2ms)"),
            ("delay=99999999999999999999s", "bad delay '99999999999999999999s' in 'delay=99999999999999999999s': expected a whole number with ns, us, ms or s (delay=2ms)"),
            ("drop=1", "drop takes no value, in 'drop=1'"),
            ("path=primary,path=backup,drop", "path given twice in plan 'path=primary,path=backup,drop'"),
            ("drop,delay=1ms", "drop or delay given twice in plan 'drop,delay=1ms'"),
            ("drop,drop", "drop or delay given twice in plan 'drop,drop'"),
            ("peer=1,count=3", "plan 'peer=1,count=3' has neither drop nor delay=<duration>"),
            // The bad plan is named even after good ones.
            ("drop;after=2", "plan 'after=2' has neither drop nor delay=<duration>"),
        ];
        for (spec, why) in cases {
            assert_eq!(
                parse_plans(spec),
                Err(format!("FERROCX_IBGDA_FAULT: {why}")),
                "{spec}"
            );
        }
    }
}
