//! CPU binding for launched ranks: rank i runs on the i-th CPU (modulo the
//! CPUs the launcher may use), as `mpirun --bind-to core` does. Busy-polling
//! ranks left unbound can be put on one core by the scheduler, and then every
//! message hand-off costs a context switch.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// CPUs this process may run on, in order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for pid 0 (us).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer and size.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set we own.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Make `cmd` start bound to `cpu`.
pub fn bind_to(cmd: &mut Command, cpu: usize) {
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // sched_setaffinity, a plain system call (async-signal-safe), on plain data.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
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
        bind_to(&mut c, cpu);
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.split_whitespace().last(),
            Some(cpu.to_string().as_str()),
            "{text}"
        );
    }
}
