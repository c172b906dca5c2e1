//! CPU binding for launched ranks. `core`: rank i runs on the i-th CPU (modulo
//! the CPUs the launcher may use), as `mpirun --bind-to core` does. Busy-polling
//! ranks left unbound can be put on one core by the scheduler, and then every
//! message hand-off costs a context switch. `share`: rank i gets the i-th of N
//! equal blocks of those CPUs (`mpirun --map-by slot:PE=k`), for ranks with
//! several busy threads: a GPU rank's progress thread and the application
//! thread waiting on a stream would take turns on one core, a scheduler slice
//! (milliseconds) at a time.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

pub use ferrocx_sdk::proc::allowed_cpus;

/// How launched ranks are bound to CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Bind {
    /// Not bound.
    #[default]
    None,
    /// Rank i on the i-th allowed CPU (modulo their number).
    Core,
    /// Rank i on the i-th of `nranks` equal blocks of the allowed CPUs (at least one each).
    Share,
}

impl Bind {
    /// `none`, `core` or `share`.
    pub fn parse(s: &str) -> Option<Bind> {
        match s {
            "none" => Some(Bind::None),
            "core" => Some(Bind::Core),
            "share" => Some(Bind::Share),
            _ => None,
        }
    }

    /// The CPUs rank `i` of `n` gets out of `cpus` (empty: unbound).
    pub fn cpus_for(self, i: usize, n: usize, cpus: &[usize]) -> Vec<usize> {
        if cpus.is_empty() {
            return Vec::new();
        }
        match self {
            Bind::None => Vec::new(),
            Bind::Core => vec![cpus[i % cpus.len()]],
            Bind::Share => {
                let k = (cpus.len() / n.max(1)).max(1);
                let start = (i * k) % cpus.len();
                cpus[start..(start + k).min(cpus.len())].to_vec()
            }
        }
    }
}

/// Make `cmd` start bound to `cpus`.
pub fn bind_to(cmd: &mut Command, cpus: Vec<usize>) {
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // sched_setaffinity, a plain system call (async-signal-safe), on plain data.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in &cpus {
                libc::CPU_SET(cpu, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_runs_on_the_cpu_it_was_bound_to() {
        let cpus = allowed_cpus().unwrap();
        assert!(!cpus.is_empty());
        let cpu = *cpus.last().unwrap();
        let mut c = Command::new("sh");
        c.args(["-c", "grep Cpus_allowed_list /proc/self/status"]);
        bind_to(&mut c, vec![cpu]);
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.split_whitespace().last(),
            Some(cpu.to_string().as_str()),
            "{text}"
        );
    }

    #[test]
    fn share_gives_each_rank_its_own_block() {
        let cpus: Vec<usize> = (0..32).collect();
        assert_eq!(
            Bind::Share.cpus_for(1, 2, &cpus),
            (16..32).collect::<Vec<_>>()
        );
        assert_eq!(
            Bind::Share.cpus_for(0, 3, &cpus),
            (0..10).collect::<Vec<_>>()
        );
        // More ranks than CPUs: one each, wrapping around.
        assert_eq!(Bind::Share.cpus_for(3, 4, &[4, 5]), vec![5]);
        assert_eq!(Bind::Core.cpus_for(3, 4, &[4, 5]), vec![5]);
        assert!(Bind::None.cpus_for(0, 2, &cpus).is_empty());
        assert_eq!(Bind::parse("share"), Some(Bind::Share));
        assert_eq!(Bind::parse("socket"), None);
    }
}
