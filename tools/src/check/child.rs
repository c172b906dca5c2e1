//! What the conformance batteries run in a child process share: the line
//! protocol (`TRY`/`OK`/`BAD`/`SKIP`, then `DONE`), a plugin's last-error
//! text, and out-of-band collectives for a one-rank communicator.

use ferrocx_sdk::abi::{c_chars_to_string, FX_OK};
use std::ffi::{c_char, c_void};

/// One line of the child protocol.
pub fn say(kind: &str, name: &str, detail: impl AsRef<str>) {
    println!("{kind} {name}\t{}", detail.as_ref().replace('\n', " "));
}

/// The calling thread's last-error text from a table's `last_error` hook.
pub fn last_text(hook: Option<unsafe extern "C" fn(*mut c_char, usize) -> usize>) -> String {
    let Some(f) = hook else {
        return "(no last_error hook)".into();
    };
    let mut buf = vec![0 as c_char; 512];
    // SAFETY: a buffer of the given length.
    unsafe { f(buf.as_mut_ptr(), buf.len()) };
    c_chars_to_string(&buf)
}

/// `all_gather` of a one-rank communicator: the rank's own bytes.
///
/// # Safety
/// As the ABI says: `all` holds `len` bytes, `mine` as many.
pub unsafe extern "C" fn oob_all_gather(
    _: *mut c_void,
    mine: *const c_void,
    len: usize,
    all: *mut c_void,
) -> i32 {
    if len > 0 {
        // SAFETY: one rank: `all` holds `len` bytes, `mine` as many (ABI contract).
        unsafe { std::ptr::copy_nonoverlapping(mine as *const u8, all as *mut u8, len) };
    }
    FX_OK
}

/// `barrier` of a one-rank communicator: returns at once.
///
/// # Safety
/// None needed; `unsafe extern "C"` for the table's type.
pub unsafe extern "C" fn oob_barrier(_: *mut c_void) -> i32 {
    FX_OK
}
