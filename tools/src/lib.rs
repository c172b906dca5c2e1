pub mod launch;
pub mod perf;
pub mod check;
