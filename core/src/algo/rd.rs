//! stub
use super::*;
pub(crate) fn all_reduce(_a: &CollArgs) -> Schedule { todo!() }
