//! Timer slack of polling threads. Linux rounds a normal thread's sleeps up by
//! its timer slack (50 µs by default), so the progress thread's short naps
//! (1–100 µs, see [`super::progress::backoff`]) would each cost at least 50 µs
//! more, which shows up as latency at the end of every long transfer.

/// The slack asked for: naps stay short while the thread still sleeps.
const SLACK_NS: libc::c_ulong = 1_000;

/// Set the calling thread's timer slack to [`SLACK_NS`]. Best effort: a
/// kernel that refuses leaves the default, which only costs latency.
pub fn tighten() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only the
    // calling thread's timer slack; no memory is passed.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, SLACK_NS, 0, 0, 0) };
    if rc != 0 {
        tracing::debug!(
            "PR_SET_TIMERSLACK failed ({}); progress naps keep the default slack",
            std::io::Error::last_os_error()
        );
    }
}
