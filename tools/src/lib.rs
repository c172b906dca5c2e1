pub mod check;
pub mod launch;
pub mod perf;
