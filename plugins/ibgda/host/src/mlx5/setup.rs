//! The mlx5 handler's collective bring-up at `comm_init`, and the choice
//! between it and the proxy handler.
//!
//! 1. Every rank, alone: its GPU's primary and backup ports from the
//!    pairing, the verbs and mlx5dv libraries, per port a context and a PD,
//!    per (peer, path) a CQ and an RC QP with their buffers through mlx5dv,
//!    those mapped for the GPU, this rank's signal words registered on both
//!    PDs (the window the records carry until a device window is
//!    registered), and its [`rc::Endpoints`] record.
//! 2. All-gather: each rank's [`Outcome`] with its record. [`choose`]: mlx5
//!    when every rank is ready, else the proxy with the first failing rank's
//!    reason (an error if a rank forced mlx5).
//! 3. Every rank: each QP through RESET → INIT → RTR → RTS with
//!    [`rc::connect`]'s attributes, the [`mlx5_peer`] table from the
//!    records, copied to device memory; all-gather and choose again.
//!
//! Every all-gather has one length on every rank and comes whatever a rank
//! met, so one rank's failure is everyone's and no rank waits alone.

use super::map::{register_window, HostMap, Registered};
use super::queues::{HostQueues, Mr, Port, Qp};
use super::verbs::Verbs;
use crate::config::{Config, Handler};
use crate::mapped::DeviceBlock;
use crate::nics::{self, PortChoice};
use ferrocx_ibgda::mlx5_peer::{self, HealthStart, LocalQueues, WindowKey};
use ferrocx_ibgda::rc::{self, Endpoints, Link, PathEnd, PATHS};
use ferrocx_sdk::collective::Oob;
use ferrocx_sdk::{PluginError, PluginResult};
use std::sync::Arc;

/// Bytes of a reason in an [`Outcome`] (longer ones are cut at a character).
pub const REASON_BYTES: usize = 240;
/// Bytes of an encoded [`Outcome`].
pub const OUTCOME_BYTES: usize = 4 + REASON_BYTES;

/// What one rank met in one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// This rank has `FERROCX_IBGDA_HANDLER=mlx5`.
    pub forced: bool,
    /// Ready, or why not.
    pub result: Result<(), String>,
}

impl Outcome {
    /// Fixed-length bytes: ok, forced, reason length (u16 LE), reason.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; OUTCOME_BYTES];
        b[0] = self.result.is_ok() as u8;
        b[1] = self.forced as u8;
        if let Err(why) = &self.result {
            let mut end = why.len().min(REASON_BYTES);
            while !why.is_char_boundary(end) {
                end -= 1;
            }
            b[2..4].copy_from_slice(&(end as u16).to_le_bytes());
            b[4..4 + end].copy_from_slice(&why.as_bytes()[..end]);
        }
        b
    }

    /// Inverse of [`encode`](Self::encode); garbage decodes to a failure saying so.
    pub fn decode(b: &[u8]) -> Outcome {
        let bad = |why: String| Outcome {
            forced: false,
            result: Err(why),
        };
        if b.len() < OUTCOME_BYTES {
            return bad(format!("a {}-byte outcome", b.len()));
        }
        let forced = b[1] == 1;
        if b[0] == 1 {
            return Outcome {
                forced,
                result: Ok(()),
            };
        }
        let n = usize::from(u16::from_le_bytes([b[2], b[3]])).min(REASON_BYTES);
        Outcome {
            forced,
            result: Err(String::from_utf8_lossy(&b[4..4 + n]).into_owned()),
        }
    }
}

/// Which handler every rank uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// Every rank is ready.
    Mlx5,
    /// The proxy handler, and why not mlx5.
    Proxy(String),
}

/// From every rank's outcome of one step (rank order): mlx5 when all are
/// ready; else the proxy, with the first failing rank's reason (and how many
/// others failed) — or an error with that reason if any rank forced mlx5.
pub fn choose(all: &[Outcome]) -> Result<Choice, String> {
    let failed: Vec<(usize, &String)> = all
        .iter()
        .enumerate()
        .filter_map(|(r, o)| o.result.as_ref().err().map(|e| (r, e)))
        .collect();
    let Some(&(r, why)) = failed.first() else {
        return Ok(Choice::Mlx5);
    };
    let more = match failed.len() - 1 {
        0 => String::new(),
        1 => " (and 1 other rank)".to_string(),
        k => format!(" (and {k} other ranks)"),
    };
    let reason = format!("rank {r}: {why}{more}");
    match all.iter().position(|o| o.forced) {
        Some(f) => Err(format!(
            "FERROCX_IBGDA_HANDLER=mlx5 on rank {f}, but the mlx5 handler is unavailable: {reason}"
        )),
        None => Ok(Choice::Proxy(reason)),
    }
}

/// One path's port and its QP toward every peer (`None` for this rank).
struct PathSide {
    port: Arc<Port>,
    qps: Vec<Option<Qp>>,
    /// The signal words on this port.
    signals: Mr,
}

/// Everything one rank made in step 1. Dropped in field order, as `Mlx5`:
/// the CUDA registrations of the queue pages before libmlx5 frees them (a
/// rank whose bring-up ends with the proxy drops this).
struct Local {
    io: HostMap,
    host: HostMap,
    paths: Vec<PathSide>,
    record: Endpoints,
}

/// The mlx5 handler of one communicator, once up. Dropped in field order:
/// the device table, the CUDA registrations of the queue pages (before
/// libmlx5 frees them), then QPs, CQs, MRs, PDs and contexts (each QP and MR
/// holds its port).
pub struct Mlx5 {
    table: DeviceBlock,
    /// The device window the table names, once registered on every rank.
    attached: Option<Attached>,
    _io: HostMap,
    _host: HostMap,
    _paths: Vec<PathSide>,
    ports: [String; PATHS],
    slots: u32,
    cq_entries: u32,
    me: usize,
    /// Every rank's signal words per path (what the table names without a
    /// device window).
    signal_keys: Vec<[WindowKey; PATHS]>,
    /// Why the last device window is not the table's, if it is not.
    window_note: Option<String>,
}

/// A device window the table names: its number and its regions on both
/// paths' NICs (dropped after the table stops naming them).
struct Attached {
    id: u32,
    how: Registered,
    _mrs: Vec<Mr>,
}

/// Bytes of a rank's window record in [`Mlx5::attach_window`]'s all-gather:
/// per path the address (u64) and remote key (u32), then 4 zero bytes.
const WINDOW_RECORD_BYTES: usize = PATHS * 16;

impl Mlx5 {
    /// The table's device address (`struct fxg_mlx5_peer[nranks]`).
    pub fn table(&self) -> u64 {
        self.table.addr()
    }

    /// One line for `describe`.
    pub fn describe(&self) -> String {
        let window = match (&self.attached, &self.window_note) {
            (Some(a), _) => format!(
                "puts go from and to device window {} ({}); signal words otherwise",
                a.id, a.how
            ),
            (None, Some(why)) => format!(
                "the peers' window is their signal words (host memory): {why}"
            ),
            (None, None) => "the peers' window is their signal words (host memory) until a device window is registered".to_string(),
        };
        format!(
            "mlx5 handler: primary {}, backup {}; per peer and path an RC QP of {} send WQEs and a CQ of {} entries, mapped for the GPU (send queues, CQs and doorbell records as device-mapped host memory, UAR pages as I/O memory); {window}; table of struct fxg_mlx5_peer at {:#x} (the view's reserved[0])",
            self.ports[0],
            self.ports[1],
            self.slots,
            self.cq_entries,
            self.table.addr()
        )
    }

    /// Make the table name a device window (`id`, `base`, `bytes` as this
    /// rank registers it; `this_rank`: whether its registration holds so
    /// far): collective, every rank with the handler up, at every window
    /// registration (a no-op on every rank while one is attached: all
    /// decide alike). Each rank registers the window on both paths' NICs
    /// (dma-buf, else peer memory); one all-gather of the outcomes and keys;
    /// where every rank succeeded, this rank's table gets the peers' window
    /// keys and its own sources' local keys ([`mlx5_peer::window_patch`]:
    /// the queues' counters and the path health in the table are left
    /// alone). Where a rank failed, the table keeps naming the signal words
    /// and `describe` says why. No put may be in flight (the registration
    /// contract). Errors where the all-gather or the table's copy failed.
    pub fn attach_window(
        &mut self,
        id: u32,
        base: u64,
        bytes: u64,
        this_rank: Result<(), String>,
        oob: &Oob,
    ) -> PluginResult<()> {
        if self.attached.is_some() {
            return Ok(());
        }
        let mut mrs = Vec::with_capacity(PATHS);
        let mut how = Registered::DmaBuf;
        let mut local = this_rank;
        for (p, side) in self._paths.iter().enumerate() {
            if local.is_err() {
                break;
            }
            match register_window(&side.port, base, bytes, true) {
                Ok((mr, h)) => {
                    how = h;
                    mrs.push(mr);
                }
                Err(e) => {
                    local = Err(format!("window {id} on the {} path: {e}", rc::path_name(p)));
                    break;
                }
            }
        }
        let mut mine = Outcome {
            forced: false,
            result: local,
        }
        .encode();
        let rkeys: Vec<u32> = mrs.iter().map(Mr::rkey).collect();
        mine.extend_from_slice(&window_record(base, &rkeys));
        let all = oob.all_gather(&mine)?;
        let outcomes: Vec<Outcome> = all.iter().map(|b| Outcome::decode(b)).collect();
        if let Ok(Choice::Proxy(why)) | Err(why) = choose(&outcomes) {
            self.window_note = Some(format!("window {id} is not on every rank's NICs: {why}"));
            return Ok(());
        }
        let keys: Vec<[WindowKey; PATHS]> = all
            .iter()
            .map(|b| window_keys(&b[OUTCOME_BYTES..]))
            .collect();
        let lkeys = [mrs[0].lkey(), mrs[1].lkey()];
        // Attached on every rank alike (the decision was collective); a table
        // this rank could not rewrite is this rank's error.
        self.attached = Some(Attached { id, how, _mrs: mrs });
        self.window_note = None;
        self.patch(&keys, lkeys)
    }

    /// The table names the signal words again when window `id` (the
    /// attached one) is deregistered; its regions are released after.
    pub fn detach_window(&mut self, id: u32) -> PluginResult<()> {
        if self.attached.as_ref().is_none_or(|a| a.id != id) {
            return Ok(());
        }
        let keys = self.signal_keys.clone();
        let me = &self._paths;
        let lkeys = [me[0].signals.lkey(), me[1].signals.lkey()];
        self.patch(&keys, lkeys)?;
        self.attached = None;
        Ok(())
    }

    fn patch(&self, keys: &[[WindowKey; PATHS]], lkeys: [u32; PATHS]) -> PluginResult<()> {
        for (at, b) in mlx5_peer::window_patch(self.me, keys, lkeys, true) {
            self.table.write(at, &b)?;
        }
        Ok(())
    }
}

/// One rank's window record: `base` and the remote key on each path that
/// registered it (zeros for a path that did not).
fn window_record(base: u64, rkeys: &[u32]) -> [u8; WINDOW_RECORD_BYTES] {
    let mut rec = [0u8; WINDOW_RECORD_BYTES];
    for (p, k) in rkeys.iter().take(PATHS).enumerate() {
        rec[16 * p..16 * p + 8].copy_from_slice(&base.to_le_bytes());
        rec[16 * p + 8..16 * p + 12].copy_from_slice(&k.to_le_bytes());
    }
    rec
}

/// The per-path keys of one rank's window record (see [`WINDOW_RECORD_BYTES`]).
fn window_keys(b: &[u8]) -> [WindowKey; PATHS] {
    [0, 1].map(|p| {
        let at = 16 * p;
        match (b.get(at..at + 8), b.get(at + 8..at + 12)) {
            (Some(a), Some(k)) => WindowKey {
                addr: u64::from_le_bytes(a.try_into().expect("8 bytes")),
                rkey: u32::from_le_bytes(k.try_into().expect("4 bytes")),
            },
            _ => WindowKey::default(),
        }
    })
}

/// What a rank ended with.
pub enum Brought {
    /// The mlx5 handler is up on every rank.
    Up(Box<Mlx5>),
    /// The proxy handler; why not mlx5.
    Proxy(String),
}

fn port_line(c: &PortChoice, p: &Port) -> String {
    let link = match p.addr.link {
        Link::InfiniBand => format!("InfiniBand LID {:#x}", p.addr.lid),
        Link::Ethernet => format!("RoCE GID index {}", p.addr.gid_index),
    };
    format!("{}:{} ({link}, MTU {})", c.device, c.port, p.addr.mtu)
}

/// Step 1 on this rank.
fn local(
    verbs: Result<Arc<Verbs>, String>,
    me: usize,
    n: usize,
    cfg: &Config,
    own_gpu: Option<&str>,
    signals: (u64, u64),
) -> Result<(Local, [String; PATHS]), String> {
    // The libraries first: without rdma-core nothing else matters.
    let verbs = verbs?;
    let own = own_gpu.ok_or("this rank's GPU has no PCI bus id")?;
    let choice = nics::ports_for(&ferrocx_sdk::sysfs::Sysfs::system(), own)?;
    let mut paths = Vec::with_capacity(PATHS);
    let mut lines = [String::new(), String::new()];
    for (p, c) in choice.iter().enumerate() {
        let which = rc::path_name(p);
        let port = Arc::new(
            Port::open(verbs.clone(), &c.device, c.port, c.gid)
                .map_err(|e| format!("{which} path: {e}"))?,
        );
        lines[p] = port_line(c, &port);
        let mut qps = Vec::with_capacity(n);
        for q in 0..n {
            qps.push(if q == me {
                None
            } else {
                Some(
                    Qp::create(&port, cfg.slots)
                        .map_err(|e| format!("{which} path to rank {q}: {e}"))?,
                )
            });
        }
        let (signals, _) = register_window(&port, signals.0, signals.1, false)
            .map_err(|e| format!("{which} path: the signal words: {e}"))?;
        paths.push(PathSide { port, qps, signals });
    }
    let mut host_ranges = Vec::new();
    let mut io_ranges = Vec::new();
    for (p, side) in paths.iter().enumerate() {
        for (q, qp) in side.qps.iter().enumerate() {
            let Some(qp) = qp else { continue };
            let hq = qp.raw.check().map_err(|e| {
                format!(
                    "{} path to rank {q}: mlx5dv_init_obj gave {e}",
                    rc::path_name(p)
                )
            })?;
            host_ranges.extend(hq.host_ranges());
            io_ranges.push(hq.io_range());
        }
    }
    let host = HostMap::register(&host_ranges, false)?;
    let io = HostMap::register(&io_ranges, true)?;
    let record = Endpoints {
        rank: me as u32,
        paths: [0, 1].map(|p| {
            let side = &paths[p];
            PathEnd {
                addr: side.port.addr,
                window: signals.0,
                window_bytes: signals.1,
                rkey: side.signals.rkey(),
                qpn: side
                    .qps
                    .iter()
                    .map(|q| q.as_ref().map_or(0, Qp::qpn))
                    .collect(),
            }
        }),
    };
    record.check().map_err(|e| e.to_string())?;
    Ok((
        Local {
            paths,
            record,
            host,
            io,
        },
        lines,
    ))
}

/// Step 3 on this rank: connect every QP, build the table, copy it to the GPU.
#[allow(clippy::type_complexity)]
fn connect(
    me: usize,
    cfg: &Config,
    l: &Local,
    all: &[Endpoints],
) -> Result<(DeviceBlock, u32, Vec<[WindowKey; PATHS]>), String> {
    let timeout_ns = cfg.health.timeout.as_nanos().min(u128::from(u64::MAX)) as u64;
    let n = all.len();
    let mut queues: Vec<[Option<LocalQueues>; 2]> = vec![[None, None]; n];
    let mut cq_entries = 0;
    for (p, side) in l.paths.iter().enumerate() {
        for (q, qp) in side.qps.iter().enumerate() {
            let Some(qp) = qp else { continue };
            let which = rc::path_name(p);
            let c = rc::connect(&all[me], &all[q], p, timeout_ns)
                .map_err(|e| format!("{which} path to rank {q}: {e}"))?;
            qp.connect(&c)
                .map_err(|e| format!("{which} path to rank {q}: {e}"))?;
            let hq: HostQueues = qp
                .raw
                .check()
                .map_err(|e| format!("{which} path to rank {q}: {e}"))?;
            cq_entries = 1 << hq.cq_log;
            let lq = hq
                .local(
                    side.signals.lkey(),
                    |a| l.host.spans().device(a),
                    |a| l.io.spans().device(a),
                )
                .map_err(|e| format!("{which} path to rank {q}: {e}"))?;
            queues[q][p] = Some(lq);
        }
    }
    let health = HealthStart {
        recovery_ns: cfg.health.recovery.as_nanos().min(u128::from(u64::MAX)) as u64,
        max_recovery_ns: cfg.health.max_recovery.as_nanos().min(u128::from(u64::MAX)) as u64,
        timeout_ns,
    };
    let bytes = mlx5_peer::from_records(me, all, &queues, health)?;
    let table = DeviceBlock::new(bytes.len()).map_err(|e| e.message().to_string())?;
    table
        .write(0, &bytes)
        .map_err(|e| e.message().to_string())?;
    let signal_keys = all
        .iter()
        .map(|e| {
            [0, 1].map(|p| WindowKey {
                addr: e.paths[p].window,
                rkey: e.paths[p].rkey,
            })
        })
        .collect();
    Ok((table, cq_entries, signal_keys))
}

/// The collective bring-up (module doc). `signals` is this rank's signal
/// words (host address, bytes); the caller bound the rank's CUDA context.
/// Errors only where a rank forced mlx5 (or the all-gather failed).
pub fn bring_up(
    me: usize,
    n: usize,
    cfg: &Config,
    own_gpu: Option<&str>,
    signals: (u64, u64),
    oob: &Oob,
) -> PluginResult<Brought> {
    bring_up_with(Verbs::shared, me, n, cfg, own_gpu, signals, oob)
}

/// [`bring_up`] with the libraries from `verbs` (tests load missing ones).
fn bring_up_with(
    verbs: impl FnOnce() -> Result<Arc<Verbs>, String>,
    me: usize,
    n: usize,
    cfg: &Config,
    own_gpu: Option<&str>,
    signals: (u64, u64),
    oob: &Oob,
) -> PluginResult<Brought> {
    let forced = cfg.handler == Handler::Mlx5;
    let step1 = match cfg.handler {
        Handler::Proxy => Err("FERROCX_IBGDA_HANDLER=proxy".to_string()),
        _ => local(verbs(), me, n, cfg, own_gpu, signals),
    };
    let rec_len = Endpoints::encoded_len(n);
    let mut mine = Outcome {
        forced,
        result: step1.as_ref().map(|_| ()).map_err(Clone::clone),
    }
    .encode();
    match &step1 {
        Ok((l, _)) => mine.extend(l.record.encode()),
        Err(_) => mine.resize(OUTCOME_BYTES + rec_len, 0),
    }
    let all = oob.all_gather(&mine)?;
    let outcomes: Vec<Outcome> = all.iter().map(|b| Outcome::decode(b)).collect();
    let decided = choose(&outcomes).map_err(PluginError::unsupported)?;
    let (l, ports) = match (decided, step1) {
        (Choice::Proxy(why), _) => return Ok(Brought::Proxy(why)),
        (Choice::Mlx5, Ok(x)) => x,
        (Choice::Mlx5, Err(_)) => unreachable!("every rank reported ready"),
    };
    let records: Result<Vec<Endpoints>, String> = all
        .iter()
        .enumerate()
        .map(|(r, b)| {
            Endpoints::decode(&b[OUTCOME_BYTES..], r as u32, n).map_err(|e| e.to_string())
        })
        .collect();
    let step3 = records.and_then(|all| connect(me, cfg, &l, &all));
    let mine = Outcome {
        forced,
        result: step3.as_ref().map(|_| ()).map_err(Clone::clone),
    };
    let all = oob.all_gather(&mine.encode())?;
    let outcomes: Vec<Outcome> = all.iter().map(|b| Outcome::decode(b)).collect();
    match (choose(&outcomes).map_err(PluginError::unsupported)?, step3) {
        (Choice::Proxy(why), _) => Ok(Brought::Proxy(why)),
        (Choice::Mlx5, Ok((table, cq_entries, signal_keys))) => Ok(Brought::Up(Box::new(Mlx5 {
            table,
            attached: None,
            _io: l.io,
            _host: l.host,
            _paths: l.paths,
            ports,
            slots: cfg.slots,
            cq_entries,
            me,
            signal_keys,
            window_note: None,
        }))),
        (Choice::Mlx5, Err(_)) => unreachable!("every rank reported ready"),
    }
}

#[cfg(test)]
mod tests;
