pub mod launch;
