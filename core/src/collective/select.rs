//! Choosing who runs a collective call: every loaded collective plugin's
//! `can_run` against the core's own algorithms ([`FX_COLL_CORE_PRIORITY`]);
//! the highest wins, ties go to the core, then to the earlier plugin.
//! Sans-IO: the scores come in, the decision and its explanation go out.

use ferrocx_sdk::abi::FX_COLL_CORE_PRIORITY;

/// Who runs a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    /// The core's own algorithms.
    Core,
    /// The collective plugin at this index of the communicator's list.
    Plugin(usize),
}

/// A decision and what it was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The winner.
    pub runner: Runner,
    /// `(name, priority)` of every candidate, the core first.
    pub scores: Vec<(String, i32)>,
    /// The winner's path in its own words: the core's algorithm, a plugin's
    /// protocol or route (its `describe` hook); `None` where it says nothing.
    pub path: Option<String>,
}

impl Runner {
    /// The winner among the plugins' priorities, in order: the highest above
    /// the core's, ties to the core, then to the earlier plugin.
    pub fn best(priorities: impl IntoIterator<Item = i32>) -> Runner {
        let mut runner = Runner::Core;
        let mut best = FX_COLL_CORE_PRIORITY;
        for (i, p) in priorities.into_iter().enumerate() {
            if p > best {
                best = p;
                runner = Runner::Plugin(i);
            }
        }
        runner
    }
}

impl Choice {
    /// Decide from each plugin's `(name, priority)`.
    pub fn decide(plugins: &[(String, i32)]) -> Choice {
        let runner = Runner::best(plugins.iter().map(|(_, p)| *p));
        let mut scores = vec![("core".to_string(), FX_COLL_CORE_PRIORITY)];
        scores.extend(plugins.iter().cloned());
        Choice {
            runner,
            scores,
            path: None,
        }
    }

    /// "ce: Simple direct", "core: ring": the winner and its path.
    pub fn winner_path(&self) -> String {
        match &self.path {
            Some(p) => format!("{}: {p}", self.winner()),
            None => self.winner().to_string(),
        }
    }

    /// The winner's name.
    pub fn winner(&self) -> &str {
        match self.runner {
            Runner::Core => "core",
            Runner::Plugin(i) => &self.scores[i + 1].0,
        }
    }

    /// "ce 200 > core 100, cma 0" — why the winner won.
    pub fn explain(&self) -> String {
        let w = self.winner();
        let (ws, rest): (Vec<_>, Vec<_>) = self.scores.iter().partition(|(n, _)| n == w);
        let list = |v: &[&(String, i32)]| {
            v.iter()
                .map(|(n, p)| format!("{n} {p}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if rest.is_empty() {
            list(&ws)
        } else {
            format!("{} ≥ {}", list(&ws), list(&rest))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[(&str, i32)]) -> Vec<(String, i32)> {
        v.iter().map(|(n, p)| (n.to_string(), *p)).collect()
    }

    #[test]
    fn highest_wins_ties_go_to_the_core_then_the_earlier_plugin() {
        assert_eq!(Choice::decide(&[]).runner, Runner::Core);
        assert_eq!(Choice::decide(&s(&[("ce", 0)])).runner, Runner::Core);
        assert_eq!(Choice::decide(&s(&[("ce", 100)])).runner, Runner::Core);
        assert_eq!(Choice::decide(&s(&[("ce", 101)])).runner, Runner::Plugin(0));
        let c = Choice::decide(&s(&[("a", 150), ("b", 200), ("c", 200)]));
        assert_eq!(c.runner, Runner::Plugin(1));
        assert_eq!(c.winner(), "b");
        assert_eq!(c.explain(), "b 200 ≥ core 100, a 150, c 200");
        assert_eq!(
            Choice::decide(&s(&[("ce", 5)])).explain(),
            "core 100 ≥ ce 5"
        );
    }
}
