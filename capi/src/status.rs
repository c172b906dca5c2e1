//! Result codes, the thread's last error, and the guard every entry point
//! runs in (catches panics, records the message with the rank and the call).

use ferrocx::Error;
use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Success.
pub const FERROCX_SUCCESS: i32 = 0;
/// Null or misaligned buffer, bad count, rank out of range, mismatched calls.
pub const FERROCX_INVALID_ARGUMENT: i32 = 1;
/// Not possible here (device buffers without a GPU, …).
pub const FERROCX_UNSUPPORTED: i32 = 2;
/// A system call, the CUDA driver or a plugin failed.
pub const FERROCX_SYSTEM_ERROR: i32 = 3;
/// A peer failed or went away.
pub const FERROCX_REMOTE_ERROR: i32 = 4;
/// A wait exceeded `FERROCX_TIMEOUT`.
pub const FERROCX_TIMEOUT: i32 = 5;
/// The communicator was finalized or aborted.
pub const FERROCX_DESTROYED: i32 = 6;
/// A bug (a caught panic).
pub const FERROCX_INTERNAL_ERROR: i32 = 7;
/// A bootstrap connection failed authentication: the ranks' job secrets
/// (`FERROCX_SECRET` / `FERROCX_SECRET_FILE`) differ, or only some have one.
pub const FERROCX_AUTH_ERROR: i32 = 8;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// Record `msg` as the calling thread's last error.
pub fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// The code for a ferrocx error.
pub fn code_of(e: &Error) -> i32 {
    match e {
        Error::InvalidArgument(_) | Error::Config { .. } | Error::Mismatch { .. } => {
            FERROCX_INVALID_ARGUMENT
        }
        Error::Unsupported(_) | Error::NoTransport { .. } => FERROCX_UNSUPPORTED,
        Error::Timeout { .. } | Error::Hang { .. } => FERROCX_TIMEOUT,
        Error::PeerFailed { .. } => FERROCX_REMOTE_ERROR,
        Error::Destroyed(_) => FERROCX_DESTROYED,
        Error::Auth(_) => FERROCX_AUTH_ERROR,
        _ => FERROCX_SYSTEM_ERROR,
    }
}

/// Run an entry point: `Ok` → SUCCESS; an error → its code, the message
/// "rank R: call: error" kept for `ferrocx_get_last_error`; a panic →
/// INTERNAL_ERROR, never unwinding into C.
pub fn guard(call: &str, rank: Option<usize>, f: impl FnOnce() -> ferrocx::Result<()>) -> i32 {
    // Formatted only on failure: the success path allocates nothing.
    let who = || rank.map_or(String::new(), |r| format!("rank {r}: "));
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => FERROCX_SUCCESS,
        Ok(Err(e)) => {
            set_last(&format!("{}{call}: {e}", who()));
            code_of(&e)
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last(&format!("{}{call}: internal error (panic: {what})", who()));
            FERROCX_INTERNAL_ERROR
        }
    }
}

/// `ferrocx_get_version`.
///
/// # Safety
/// `version` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocx_get_version(version: *mut i32) -> i32 {
    guard("ferrocx_get_version", None, || {
        // SAFETY: the caller's contract; null is refused.
        let v = unsafe { version.as_mut() }
            .ok_or_else(|| Error::InvalidArgument("version is NULL".into()))?;
        *v = crate::FERROCX_VERSION_CODE;
        Ok(())
    })
}

/// `ferrocx_get_error_string`.
#[no_mangle]
pub extern "C" fn ferrocx_get_error_string(result: i32) -> *const c_char {
    let s: &'static [u8] = match result {
        FERROCX_SUCCESS => b"success\0",
        FERROCX_INVALID_ARGUMENT => b"invalid argument\0",
        FERROCX_UNSUPPORTED => b"unsupported\0",
        FERROCX_SYSTEM_ERROR => b"system error\0",
        FERROCX_REMOTE_ERROR => b"remote error (a peer failed)\0",
        FERROCX_TIMEOUT => b"timeout\0",
        FERROCX_DESTROYED => b"communicator destroyed\0",
        FERROCX_INTERNAL_ERROR => b"internal error\0",
        FERROCX_AUTH_ERROR => b"authentication failed (job secrets differ)\0",
        _ => b"unknown result code\0",
    };
    s.as_ptr() as *const c_char
}

/// `ferrocx_get_last_error`.
#[no_mangle]
pub extern "C" fn ferrocx_get_last_error() -> *const c_char {
    // The CString lives in the thread-local until the thread's next error.
    LAST.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn auth_failures_have_their_own_code() {
        let e = Error::Auth("the bootstrap root refused this rank".into());
        assert_eq!(code_of(&e), FERROCX_AUTH_ERROR);
        // SAFETY: ferrocx_get_error_string returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(ferrocx_get_error_string(FERROCX_AUTH_ERROR)) };
        assert_eq!(
            s.to_str().unwrap(),
            "authentication failed (job secrets differ)"
        );
        assert_eq!(code_of(&Error::Bootstrap("x".into())), FERROCX_SYSTEM_ERROR);
    }
}
