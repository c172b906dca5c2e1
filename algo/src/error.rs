//! The one error of this crate: arguments that cannot describe a collective.

use std::fmt;

/// Arguments that cannot describe a collective or a type (the message says
/// which and why). The core turns it into `ferrocx::Error::InvalidArgument`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid(pub String);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}

/// `Result` with [`Invalid`].
pub type Result<T, E = Invalid> = std::result::Result<T, E>;
