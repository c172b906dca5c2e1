//! Logging setup: `tracing` filtered by `FERROCX_DEBUG` (EnvFilter syntax),
//! to stderr or `FERROCX_DEBUG_FILE` (`%h` = host, `%p` = pid).

use std::sync::Once;

static INIT: Once = Once::new();

/// Install the ferrocx subscriber once per process, unless the application
/// already installed its own (then ferrocx's events go to that one).
pub fn init() {
    INIT.call_once(|| {
        let filter = std::env::var("FERROCX_DEBUG").unwrap_or_else(|_| "warn".into());
        let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
            eprintln!("ferrocx: FERROCX_DEBUG='{filter}' is not a valid filter ({e}); using 'warn'");
            tracing_subscriber::EnvFilter::new("warn")
        });
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(true).with_ansi(ansi);
        let result = match std::env::var("FERROCX_DEBUG_FILE") {
            Ok(pattern) if !pattern.is_empty() => {
                let path = pattern.replace("%h", &crate::bootstrap::host_name()).replace("%p", &std::process::id().to_string());
                match std::fs::OpenOptions::new().create(true).append(true).open(&path) {
                    Ok(f) => builder.with_ansi(false).with_writer(std::sync::Mutex::new(f)).try_init(),
                    Err(e) => {
                        eprintln!("ferrocx: cannot open FERROCX_DEBUG_FILE {path}: {e}; logging to stderr");
                        builder.with_writer(std::io::stderr).try_init()
                    }
                }
            }
            _ => builder.with_writer(std::io::stderr).try_init(),
        };
        // An application-installed subscriber wins; that is fine.
        let _ = result;
    });
}
