//! Facts about processes: is a peer still there, and on which CPUs may this
//! one run.

/// The other end of a connection: its rank (for messages) and process id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Rank in the communicator.
    pub rank: i32,
    /// Process id (0 until known).
    pub pid: i32,
}

impl Peer {
    /// See [`pid_alive`].
    pub fn alive(&self) -> bool {
        pid_alive(self.pid)
    }
}

/// False once `pid` has exited: `kill(pid, 0)` fails with ESRCH, or the
/// process is a zombie its parent has not reaped yet. A pid we may not signal
/// (EPERM) or a non-positive pid (unknown) counts as alive: we only ever
/// declare death on evidence.
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return true;
    }
    // SAFETY: signal 0 performs only the existence and permission check.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    !is_zombie(pid)
}

/// CPUs this process may run on, in order (its affinity mask: a launcher's
/// binding, `taskset`, a cpuset).
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for pid 0 (us).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer and size.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set we own.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Reads the state letter of /proc/PID/stat (after the parenthesised command name).
fn is_zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    matches!(state, Some('Z') | Some('X'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_is_alive_and_a_reaped_child_is_not() {
        assert!(pid_alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!pid_alive(pid));
        assert!(pid_alive(0), "unknown pids are not declared dead");
    }

    #[test]
    fn an_unreaped_child_counts_as_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while pid_alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!pid_alive(pid), "zombie must count as exited");
        child.wait().unwrap();
    }
}
