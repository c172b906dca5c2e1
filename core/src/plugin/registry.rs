//! Which plugins exist: built-ins (via `inventory`) and `.so` files from
//! `FERROCX_PLUGINS` / `FERROCX_PLUGIN_PATH`, transports and collective
//! plugins alike (a file may export both). Broken ones are reported and skipped.

use super::library::{open_library, PluginLib, PluginSource};
use crate::collective::CollectiveLib;
use crate::config::env_bool;
use crate::devnet::DevnetLib;
use crate::error::Result;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One line of the discovery report (what `fxinfo` prints).
#[derive(Debug, Clone)]
pub struct PluginReport {
    /// Plugin name, or the file name when it could not be read.
    pub name: String,
    /// "transport" or "collective" ("-" when the file could not be read).
    pub kind: &'static str,
    /// ABI version, when known.
    pub abi_version: Option<u32>,
    /// Built-in or file path.
    pub source: PluginSource,
    /// `None` = loaded; `Some(reason)` = skipped.
    pub skipped: Option<String>,
}

/// Everything discovered, usable plugins in discovery order.
pub struct Registry {
    /// Loaded, validated transports (a file plugin replaces a built-in of the same name).
    pub plugins: Vec<Arc<PluginLib>>,
    /// Loaded, validated collective plugins (same rule).
    pub collectives: Vec<Arc<CollectiveLib>>,
    /// Loaded, validated device-networking plugins (same rule).
    pub devnets: Vec<Arc<DevnetLib>>,
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
            collectives: Vec::new(),
            devnets: Vec::new(),
            report: Vec::new(),
        };
        if builtins {
            for table in ferrocx_sdk::builtin_transports() {
                match PluginLib::builtin(table) {
                    Ok(p) => reg.add(p),
                    Err(e) => reg.skip(table.name_str(), PluginSource::Builtin, e.to_string()),
                }
            }
            for table in ferrocx_sdk::collective::builtin_collectives() {
                match CollectiveLib::builtin(table) {
                    Ok(p) => reg.add_collective(p),
                    Err(e) => reg.skip(table.name_str(), PluginSource::Builtin, e.to_string()),
                }
            }
            for table in ferrocx_sdk::devnet::builtin_devnets() {
                match DevnetLib::builtin(table) {
                    Ok(p) => reg.add_devnet(p),
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
            let loaded = open_library(&path).and_then(|lib| {
                let t = PluginLib::from_library(&lib, &path);
                let c = CollectiveLib::from_library(&lib, &path);
                let d = DevnetLib::from_library(&lib, &path);
                if t.is_none() && c.is_none() && d.is_none() {
                    return Err(crate::Error::PluginLoad {
                        path: path.display().to_string(),
                        message: format!(
                            "no symbol '{}', '{}' or '{}': not a ferrocx plugin (or built for another ABI)",
                            ferrocx_sdk::abi::FX_SYMBOL_V1,
                            ferrocx_sdk::abi::FX_COLL_SYMBOL_V1,
                            ferrocx_sdk::abi::FX_DEVNET_SYMBOL_V1
                        ),
                    });
                }
                Ok((t, c, d))
            });
            match loaded {
                Ok((t, c, d)) => {
                    match d {
                        Some(Ok(p)) => reg.add_devnet(p),
                        Some(Err(e)) => reg.skip_file(&path, e),
                        None => {}
                    }
                    match t {
                        Some(Ok(p)) => reg.add(p),
                        Some(Err(e)) => reg.skip_file(&path, e),
                        None => {}
                    }
                    match c {
                        Some(Ok(p)) => reg.add_collective(p),
                        Some(Err(e)) => reg.skip_file(&path, e),
                        None => {}
                    }
                }
                Err(e) => reg.skip_file(&path, e),
            }
        }
        reg
    }

    fn add(&mut self, p: PluginLib) {
        let (name, abi, source) = (p.name.clone(), p.abi_version, p.source.clone());
        add_entry(
            &mut self.plugins,
            &mut self.report,
            "transport",
            p,
            name,
            abi,
            source,
            |q| (&q.name, &q.source),
        );
    }

    fn add_collective(&mut self, p: CollectiveLib) {
        let (name, abi, source) = (p.name.clone(), p.abi_version, p.source.clone());
        add_entry(
            &mut self.collectives,
            &mut self.report,
            "collective",
            p,
            name,
            abi,
            source,
            |q| (&q.name, &q.source),
        );
    }

    fn add_devnet(&mut self, p: DevnetLib) {
        let (name, abi, source) = (p.name.clone(), p.abi_version, p.source.clone());
        add_entry(
            &mut self.devnets,
            &mut self.report,
            "devnet",
            p,
            name,
            abi,
            source,
            |q| (&q.name, &q.source),
        );
    }

    fn skip_file(&mut self, path: &Path, e: crate::Error) {
        tracing::warn!(target: "ferrocx::plugin", "skipping plugin: {e}");
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.skip(name, PluginSource::File(path.to_path_buf()), e.to_string());
    }

    fn skip(&mut self, name: String, source: PluginSource, reason: String) {
        self.report.push(PluginReport {
            name,
            kind: "-",
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

/// Add a loaded plugin of one kind: a file replaces a built-in of the same
/// name; any other duplicate is skipped. Every outcome lands in the report.
#[allow(clippy::too_many_arguments)]
fn add_entry<T>(
    list: &mut Vec<Arc<T>>,
    report: &mut Vec<PluginReport>,
    kind: &'static str,
    p: T,
    name: String,
    abi_version: u32,
    source: PluginSource,
    key: impl Fn(&T) -> (&String, &PluginSource),
) {
    let entry = |skipped| PluginReport {
        name: name.clone(),
        kind,
        abi_version: Some(abi_version),
        source: source.clone(),
        skipped,
    };
    let Some(i) = list.iter().position(|q| key(q).0 == &name) else {
        report.push(entry(None));
        list.push(Arc::new(p));
        return;
    };
    let old_source = key(&list[i]).1.clone();
    if old_source == PluginSource::Builtin && source != PluginSource::Builtin {
        tracing::info!(target: "ferrocx::plugin", "{kind} plugin '{name}' from {source} replaces the built-in");
        if let Some(r) = report
            .iter_mut()
            .find(|r| r.name == name && r.kind == kind && r.skipped.is_none())
        {
            r.skipped = Some(format!("replaced by {source}"));
        }
        report.push(entry(None));
        list[i] = Arc::new(p);
    } else {
        let reason = format!("duplicate name: {name} already loaded from {old_source}");
        tracing::warn!(target: "ferrocx::plugin", "skipping {source}: {reason}");
        report.push(entry(Some(reason)));
    }
}
