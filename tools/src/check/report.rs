//! PASS/FAIL lines and the exit status of the battery.

use std::process::ExitCode;

/// Collected results.
#[derive(Default)]
pub struct Report {
    passed: usize,
    failed: usize,
    skipped: usize,
}

impl Report {
    /// A passing check.
    pub fn pass(&mut self, name: &str, detail: String) {
        self.passed += 1;
        println!("PASS  {name:<22} {detail}");
    }
    /// A failing check.
    pub fn fail(&mut self, name: &str, detail: String) {
        self.failed += 1;
        println!("FAIL  {name:<22} {detail}");
    }
    /// A check that could not run.
    pub fn skip(&mut self, name: &str, detail: String) {
        self.skipped += 1;
        println!("SKIP  {name:<22} {detail}");
    }
    /// Print the summary; non-zero exit on any failure.
    pub fn finish(&self) -> ExitCode {
        println!(
            "check: {} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        );
        if self.failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        }
    }
}
