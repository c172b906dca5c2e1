//! Which plugins exist: built-ins (via `inventory`) and `.so` files from
//! `FERROCX_PLUGINS` / `FERROCX_PLUGIN_PATH`. Broken ones are reported and skipped.

use super::library::{PluginLib, PluginSource};
use crate::config::env_bool;
use crate::error::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One line of the discovery report (what `fxinfo` prints).
#[derive(Debug, Clone)]
pub struct PluginReport {
    /// Plugin name, or the file name when it could not be read.
    pub name: String,
    /// ABI version, when known.
    pub abi_version: Option<u32>,
    /// Built-in or file path.
    pub source: PluginSource,
    /// `None` = loaded; `Some(reason)` = skipped.
    pub skipped: Option<String>,
}

/// Everything discovered, usable plugins in discovery order.
pub struct Registry {
    /// Loaded, validated plugins (a file plugin replaces a built-in of the same name).
    pub plugins: Vec<Arc<PluginLib>>,
    /// One entry per candidate, loaded or not.
    pub report: Vec<PluginReport>,
}

fn split_list(v: &str, seps: &[char]) -> Vec<String> {
    v.split(|c| seps.contains(&c))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// `.so` files in a directory that look like plugins, sorted for determinism.
fn scan_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.ends_with(".so")
                && (n.starts_with("libferrocx_plugin_")
                    || n.starts_with("ferrocx_plugin_")
                    || n.starts_with("libfx_"))
        })
        .collect();
    out.sort();
    Ok(out)
}

impl Registry {
    /// Discover plugins as the environment says.
    pub fn discover() -> Result<Registry> {
        let builtins = env_bool("FERROCX_BUILTIN_PLUGINS", true)?;
        let files = std::env::var("FERROCX_PLUGINS").unwrap_or_default();
        let dirs = std::env::var("FERROCX_PLUGIN_PATH").unwrap_or_default();
        Ok(Self::discover_with(
            builtins,
            &split_list(&files, &[',', ':']),
            &split_list(&dirs, &[':']),
        ))
    }

    /// Discover with explicit inputs (for tests and tools).
    pub fn discover_with(builtins: bool, files: &[String], dirs: &[String]) -> Registry {
        let mut reg = Registry {
            plugins: Vec::new(),
            report: Vec::new(),
        };
        if builtins {
            for table in ferrocx_sdk::builtin_transports() {
                match PluginLib::builtin(table) {
                    Ok(p) => reg.add(p),
                    Err(e) => reg.skip(table.name_str(), PluginSource::Builtin, e.to_string()),
                }
            }
        }
        let mut paths: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
        for d in dirs {
            match scan_dir(Path::new(d)) {
                Ok(found) => paths.extend(found),
                Err(e) => {
                    tracing::warn!(target: "ferrocx::plugin", "FERROCX_PLUGIN_PATH entry {d}: {e}")
                }
            }
        }
        for path in paths {
            match PluginLib::load(&path) {
                Ok(p) => reg.add(p),
                Err(e) => {
                    tracing::warn!(target: "ferrocx::plugin", "skipping plugin: {e}");
                    let name = path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    reg.skip(name, PluginSource::File(path), e.to_string());
                }
            }
        }
        reg
    }

    fn add(&mut self, p: PluginLib) {
        if let Some(i) = self.plugins.iter().position(|q| q.name == p.name) {
            let old = &self.plugins[i];
            let reason = if old.source == PluginSource::Builtin && p.source != PluginSource::Builtin
            {
                format!("replaced by {}", p.source)
            } else {
                format!(
                    "duplicate name: {} already loaded from {}",
                    p.name, old.source
                )
            };
            if old.source == PluginSource::Builtin && p.source != PluginSource::Builtin {
                tracing::info!(target: "ferrocx::plugin", "plugin '{}' from {} replaces the built-in", p.name, p.source);
                if let Some(r) = self
                    .report
                    .iter_mut()
                    .find(|r| r.name == p.name && r.skipped.is_none())
                {
                    r.skipped = Some(reason);
                }
                self.report.push(PluginReport {
                    name: p.name.clone(),
                    abi_version: Some(p.abi_version),
                    source: p.source.clone(),
                    skipped: None,
                });
                self.plugins[i] = Arc::new(p);
            } else {
                tracing::warn!(target: "ferrocx::plugin", "skipping {}: {reason}", p.source);
                self.report.push(PluginReport {
                    name: p.name.clone(),
                    abi_version: Some(p.abi_version),
                    source: p.source.clone(),
                    skipped: Some(reason),
                });
            }
            return;
        }
        self.report.push(PluginReport {
            name: p.name.clone(),
            abi_version: Some(p.abi_version),
            source: p.source.clone(),
            skipped: None,
        });
        self.plugins.push(Arc::new(p));
    }

    fn skip(&mut self, name: String, source: PluginSource, reason: String) {
        self.report.push(PluginReport {
            name,
            abi_version: None,
            source,
            skipped: Some(reason),
        });
    }

    /// Skipped entries as "source: reason" lines (for error messages).
    pub fn skipped_summary(&self) -> String {
        let s: Vec<String> = self
            .report
            .iter()
            .filter_map(|r| {
                r.skipped
                    .as_ref()
                    .map(|why| format!("{} ({}): {why}", r.name, r.source))
            })
            .collect();
        if s.is_empty() {
            "none".into()
        } else {
            s.join("; ")
        }
    }
}
