//! Carrying out what the rail state machines (`rails`) decide, on the
//! connection's QPs: poll the completion queues and feed the completions
//! back, follow the mailboxes (re-arm requests and acknowledgements), post
//! the work the engines ask for (RDMA WRITEs, markers, probes, re-arms), and
//! log failovers and recoveries. Runs inside `isend`/`irecv`/`test` under the
//! connection's lock (`conn`).

use crate::blob::{self, ConnBlob};
use crate::conn::{off_hello, random_psn, Inner, Side};
use crate::ctrl::{self, FifoSlot, Rearm, Record};
use crate::qp::{RemoteQp, SQ_DEPTH, WC_RECV_RDMA_WITH_IMM};
use crate::rails::{self, Action, Event, RailAction, RecvAction, WrId, WrKind};
use ferrocx_sdk::{Direction, PluginResult};
use std::time::Instant;

impl Inner {
    /// Poll, follow mailboxes, post, log.
    pub(crate) fn progress(&mut self) -> PluginResult<()> {
        if self.broken.is_some() || matches!(self.side, Side::Unconnected) {
            return Ok(());
        }
        let now = Instant::now();
        let mut wcs = Vec::new();
        for r in 0..self.rails.len() {
            wcs.clear();
            self.rails[r].qp.poll(&mut wcs)?;
            for wc in wcs.clone() {
                self.on_completion(r, wc.wr_id, wc.status, wc.opcode, wc.imm, now)?;
            }
        }
        self.follow_mailbox()?;
        self.post_work(now)?;
        self.log_events();
        if let Some(e) = match &self.side {
            Side::Send { engine, .. } => engine.fatal().map(str::to_owned),
            Side::Recv { writer, .. } => writer.fatal().map(str::to_owned),
            Side::Unconnected => None,
        } {
            self.break_all(e);
        }
        Ok(())
    }

    fn break_all(&mut self, why: String) {
        self.shared.host.warn(format!(
            "net-ib: rank {} / rank {}: connection failed: {why}",
            self.me, self.peer
        ));
        if let Side::Recv { msgs, .. } = &mut self.side {
            for m in msgs.values_mut() {
                m.done.get_or_insert(Err(why.clone()));
            }
        }
        self.broken = Some(why);
    }

    fn on_completion(
        &mut self,
        r: usize,
        wr_id: u64,
        status: u32,
        opcode: u32,
        imm: u32,
        now: Instant,
    ) -> PluginResult<()> {
        let wr = WrId::decode(wr_id);
        if wr.kind == WrKind::Recv {
            self.rails[r].recvs = self.rails[r].recvs.saturating_sub(1);
            if status == rails::wc::SUCCESS && opcode == WC_RECV_RDMA_WITH_IMM {
                self.on_marker(imm);
                self.fill_recvs(r)?;
            } else if let Side::Recv { writer, .. } = &mut self.side {
                // Receives flush when the QP went to error.
                writer.rails.failed(r, status, now);
            }
            return Ok(());
        }
        match &mut self.side {
            Side::Send { engine, .. } => {
                engine.on_completion(r, wr, status, now);
                if wr.kind == WrKind::ReadRecord && status == rails::wc::SUCCESS {
                    let rec: Record = self.region.read(ctrl::record_read_at(ctrl::slot(wr.msg)));
                    if let Side::Send { engine, .. } = &mut self.side {
                        engine.resolved(wr.msg, rec.seq == wr.msg);
                    }
                }
            }
            Side::Recv { writer, .. } => writer.on_completion(r, wr, status, now),
            Side::Unconnected => {}
        }
        Ok(())
    }

    fn on_marker(&mut self, imm: u32) {
        let region = &self.region;
        let Side::Recv { msgs, .. } = &mut self.side else {
            return;
        };
        let Some((&seq, m)) = msgs
            .iter_mut()
            .find(|(&s, m)| s as u32 == imm && m.done.is_none())
        else {
            return; // a duplicate marker: already complete
        };
        let rec: Record = region.read(ctrl::record_at(ctrl::slot(seq)));
        m.done = Some(if rec.seq != seq {
            Err(format!(
                "marker for message {seq} found record of message {} (protocol error)",
                rec.seq
            ))
        } else if rec.size > m.len {
            Err(format!(
                "message of {} bytes exceeds the {}-byte receive",
                rec.size, m.len
            ))
        } else {
            if m.bounce && rec.size > 0 {
                // SAFETY: the receive's buffer is valid for m.len >= rec.size bytes
                // (irecv's contract) and the bounce slot holds rec.size bytes.
                unsafe {
                    region.copy_out(
                        ctrl::bounce_at(ctrl::slot(seq)),
                        m.addr as *mut u8,
                        rec.size as usize,
                    )
                };
            }
            Ok(rec.size as usize)
        });
        let leases = std::mem::take(&mut m.leases);
        self.release(leases);
    }

    fn follow_mailbox(&mut self) -> PluginResult<()> {
        match &mut self.side {
            Side::Send {
                engine, acked_gen, ..
            } => {
                let gen: u64 = self
                    .region
                    .read(std::mem::offset_of!(ctrl::Ctrl, rearm_ack));
                if gen > *acked_gen {
                    *acked_gen = gen;
                    if let Some(r) = engine.rails.rearm_acked(gen) {
                        self.shared.host.info(format!(
                            "net-ib: rank {} → rank {}: {} re-armed; probing it",
                            self.me,
                            self.peer,
                            self.rail_name(r)
                        ));
                    }
                }
            }
            Side::Recv { rearm_gen, .. } => {
                let req: Rearm = self.region.read(std::mem::offset_of!(ctrl::Ctrl, rearm));
                if req.gen > *rearm_gen && (req.rail as usize) < self.rails.len() {
                    *rearm_gen = req.gen;
                    self.rearm_as_receiver(req)?;
                }
            }
            Side::Unconnected => {}
        }
        Ok(())
    }

    /// Process every completion already in rail `r`'s CQ (before its QP is reset).
    fn drain(&mut self, r: usize) -> PluginResult<()> {
        let now = Instant::now();
        let mut wcs = Vec::new();
        self.rails[r].qp.poll(&mut wcs)?;
        for wc in wcs {
            self.on_completion(r, wc.wr_id, wc.status, wc.opcode, wc.imm, now)?;
        }
        Ok(())
    }

    fn rearm_as_receiver(&mut self, req: Rearm) -> PluginResult<()> {
        let r = req.rail as usize;
        self.drain(r)?;
        self.rails[r].qp.reset()?;
        self.rails[r].recvs = 0;
        if let Side::Recv { writer, .. } = &mut self.side {
            writer.rail_reset(r, SQ_DEPTH);
        }
        let pw = self.rails[r].peer.expect("connected");
        let remote = RemoteQp {
            qpn: pw.qpn,
            psn: req.sender_psn,
            lid: pw.lid,
            gid: pw.gid,
            ethernet: pw.link_layer == blob::LL_ETH,
            mtu: pw.mtu,
        };
        let cfg = &self.shared.cfg;
        let rq = &mut self.rails[r];
        rq.qp.connect(
            &remote,
            rq.mtu,
            rq.gid_index,
            req.receiver_psn,
            cfg.timeout,
            cfg.retry_cnt,
        )?;
        self.fill_recvs(r)?;
        let Side::Recv { writer, .. } = &mut self.side else {
            return Ok(());
        };
        writer.rails.rearmed_by_peer(r);
        let via = writer.rails.active().unwrap_or(r);
        writer.reserve(via);
        self.region
            .write(std::mem::offset_of!(ctrl::Ctrl, rearm_ack_src), req.gen);
        let pb = *self.peer_region()?;
        let wr = WrId {
            kind: WrKind::RearmAck,
            rail: via,
            msg: req.gen,
            index: 0,
        };
        let rq = &mut self.rails[via];
        rq.qp.write(
            wr.encode(),
            self.region.lkey(rq.dev),
            self.region
                .addr(std::mem::offset_of!(ctrl::Ctrl, rearm_ack_src)),
            8,
            pb.rails[via].rkey,
            pb.region + std::mem::offset_of!(ctrl::Ctrl, rearm_ack) as u64,
            None,
        )?;
        self.shared.host.info(format!(
            "net-ib: rank {} ← rank {}: {} re-armed at the sender's request",
            self.me,
            self.peer,
            self.rail_name(r)
        ));
        Ok(())
    }

    fn post_work(&mut self, now: Instant) -> PluginResult<()> {
        let pb = *self.peer_region()?;
        match &mut self.side {
            Side::Send { engine, .. } => {
                let mut acts = Vec::new();
                engine.poll(now, &mut acts);
                for a in acts {
                    self.post_send_action(&pb, a)?;
                }
            }
            Side::Recv { writer, hello, .. } => {
                if !*hello {
                    if self.region.read::<u64>(off_hello()) != !self.conn_id {
                        return Ok(()); // announce nothing before the sender can take it
                    }
                    *hello = true;
                }
                let mut acts = Vec::new();
                writer.poll(now, &mut acts);
                for a in acts {
                    self.post_recv_action(&pb, a)?;
                }
            }
            Side::Unconnected => {}
        }
        Ok(())
    }

    fn post_send_action(&mut self, pb: &ConnBlob, a: Action) -> PluginResult<()> {
        let Side::Send { msgs, .. } = &mut self.side else {
            return Ok(());
        };
        match a {
            Action::Data {
                rail,
                msg,
                index,
                offset,
                len,
            } => {
                let m = &msgs[&msg];
                let wr = WrId {
                    kind: WrKind::Data,
                    rail,
                    msg,
                    index,
                };
                let (laddr, lkey, rkey, raddr) = (
                    m.laddr + offset,
                    m.lkeys[rail],
                    m.fifo.rkey[rail],
                    m.fifo.addr + offset,
                );
                self.rails[rail]
                    .qp
                    .write(wr.encode(), lkey, laddr, len as u32, rkey, raddr, None)
            }
            Action::Marker { rail, msg, index } => {
                let m = &msgs[&msg];
                let slot = ctrl::slot(msg);
                self.region.write(
                    ctrl::record_src_at(slot),
                    Record {
                        seq: msg,
                        size: m.len,
                    },
                );
                let wr = WrId {
                    kind: WrKind::Marker,
                    rail,
                    msg,
                    index,
                };
                let rq = &mut self.rails[rail];
                rq.qp.write(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region.addr(ctrl::record_src_at(slot)),
                    std::mem::size_of::<Record>() as u32,
                    pb.rails[rail].rkey,
                    pb.region + ctrl::record_at(slot) as u64,
                    Some(msg as u32),
                )
            }
            Action::ReadRecord { rail, msg } => {
                let slot = ctrl::slot(msg);
                let wr = WrId {
                    kind: WrKind::ReadRecord,
                    rail,
                    msg,
                    index: 0,
                };
                let rq = &mut self.rails[rail];
                rq.qp.read(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region.addr(ctrl::record_read_at(slot)),
                    std::mem::size_of::<Record>() as u32,
                    pb.rails[rail].rkey,
                    pb.region + ctrl::record_at(slot) as u64,
                )
            }
            Action::Rail(RailAction::Probe { rail }) => self.post_probe(pb, rail),
            Action::Rail(RailAction::Rearm { rail, via, gen }) => {
                let (sp, rp) = (random_psn(), random_psn());
                // Finish the old incarnation's completions, then RESET → RTS with new PSNs.
                self.drain(rail)?;
                self.rails[rail].qp.reset()?;
                if let Side::Send { engine, .. } = &mut self.side {
                    engine.rail_reset(rail, SQ_DEPTH);
                }
                let pw = self.rails[rail].peer.expect("connected");
                let remote = RemoteQp {
                    qpn: pw.qpn,
                    psn: rp,
                    lid: pw.lid,
                    gid: pw.gid,
                    ethernet: pw.link_layer == blob::LL_ETH,
                    mtu: pw.mtu,
                };
                let cfg = &self.shared.cfg;
                let rq = &mut self.rails[rail];
                rq.qp.connect(
                    &remote,
                    rq.mtu,
                    rq.gid_index,
                    sp,
                    cfg.timeout,
                    cfg.retry_cnt,
                )?;
                self.region.write(
                    std::mem::offset_of!(ctrl::Ctrl, rearm_src),
                    Rearm {
                        gen,
                        rail: rail as u32,
                        sender_psn: sp,
                        receiver_psn: rp,
                        reserved: 0,
                    },
                );
                let wr = WrId {
                    kind: WrKind::Rearm,
                    rail: via,
                    msg: gen,
                    index: 0,
                };
                let rq = &mut self.rails[via];
                rq.qp.write(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region
                        .addr(std::mem::offset_of!(ctrl::Ctrl, rearm_src)),
                    std::mem::size_of::<Rearm>() as u32,
                    pb.rails[via].rkey,
                    pb.region + std::mem::offset_of!(ctrl::Ctrl, rearm) as u64,
                    None,
                )
            }
        }
    }

    fn post_probe(&mut self, pb: &ConnBlob, rail: usize) -> PluginResult<()> {
        let wr = WrId {
            kind: WrKind::Probe,
            rail,
            msg: 0,
            index: 0,
        };
        let rq = &mut self.rails[rail];
        rq.qp.write(
            wr.encode(),
            self.region.lkey(rq.dev),
            self.region
                .addr(std::mem::offset_of!(ctrl::Ctrl, probe_src)),
            8,
            pb.rails[rail].rkey,
            pb.region + std::mem::offset_of!(ctrl::Ctrl, probe) as u64,
            None,
        )
    }

    fn post_recv_action(&mut self, pb: &ConnBlob, a: RecvAction) -> PluginResult<()> {
        match a {
            RecvAction::Fifo { rail, seq } => {
                let slot = ctrl::slot(seq);
                let wr = WrId {
                    kind: WrKind::Fifo,
                    rail,
                    msg: seq,
                    index: 0,
                };
                let rq = &mut self.rails[rail];
                rq.qp.write(
                    wr.encode(),
                    self.region.lkey(rq.dev),
                    self.region.addr(ctrl::fifo_src_at(slot)),
                    std::mem::size_of::<FifoSlot>() as u32,
                    pb.rails[rail].rkey,
                    pb.region + ctrl::fifo_at(slot) as u64,
                    None,
                )
            }
            RecvAction::Rail(RailAction::Probe { rail }) => self.post_probe(pb, rail),
            RecvAction::Rail(RailAction::Rearm { .. }) => Ok(()),
        }
    }

    fn log_events(&mut self) {
        let events = match &mut self.side {
            Side::Send { engine, .. } => engine.rails.take_events(),
            Side::Recv { writer, .. } => writer.rails.take_events(),
            Side::Unconnected => return,
        };
        let arrow = if self.dir == Direction::Send {
            "→"
        } else {
            "←"
        };
        for e in events {
            let host = self.shared.host;
            match e {
                Event::Failover { rail, status, to, newly } => {
                    let to = match to {
                        Some(t) => format!("unacknowledged work moves to {}", self.rail_name(t)),
                        None => "no rail left".into(),
                    };
                    let seen = if newly { "" } else { " (path already known down)" };
                    host.warn(format!(
                        "net-ib: rank {} {arrow} rank {}: {} failed: {}{seen}; {to}",
                        self.me,
                        self.peer,
                        self.rail_name(rail),
                        rails::status_name(status)
                    ));
                }
                Event::Recovered { rail, down_for } => host.info(format!(
                    "net-ib: rank {} {arrow} rank {}: {} recovered after {:.1} s; traffic returns to it",
                    self.me,
                    self.peer,
                    self.rail_name(rail),
                    down_for.as_secs_f64()
                )),
                Event::ProbeFailed { rail } => host.info(format!(
                    "net-ib: rank {} {arrow} rank {}: probe of {} failed; next try after a longer window",
                    self.me,
                    self.peer,
                    self.rail_name(rail)
                )),
                Event::RearmTimedOut { rail } => host.info(format!(
                    "net-ib: rank {} {arrow} rank {}: peer did not re-arm {} in time; will retry",
                    self.me,
                    self.peer,
                    self.rail_name(rail)
                )),
            }
        }
    }
}
