//! One RC queue pair and its completion queue, through `sideway`: creation, the
//! RESET → INIT → RTR → RTS transitions (with `FERROCX_IB_TIMEOUT` / `FERROCX_IB_RETRY_CNT`),
//! posting RDMA WRITE (with or without immediate), RDMA READ and empty receives, and
//! polling completions into plain values.

use crate::device::{self, Device};
use ferrocx_sdk::abi::FX_SYSTEM;
use ferrocx_sdk::{PluginError, PluginResult};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{BasicCompletionQueue, PollCompletionQueueError};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{
    BasicQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState, QueuePairType,
    SetScatterGatherEntry, WorkRequestFlags,
};
use std::sync::Arc;

/// Send-queue slots per QP.
pub const SQ_DEPTH: usize = 128;
/// Receive-queue slots per QP (empty receives consumed by WRITE WITH IMM).
pub const RQ_DEPTH: usize = 2 * crate::ctrl::DEPTH + 8;
/// Completion-queue entries per QP (its own CQ).
pub const CQ_DEPTH: usize = SQ_DEPTH + RQ_DEPTH + 16;
/// `ibv_wc_opcode` of a receive consumed by a WRITE WITH IMM.
pub const WC_RECV_RDMA_WITH_IMM: u32 = 129;

/// A completion, copied out of the CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// `ibv_wc_status`.
    pub status: u32,
    /// `ibv_wc_opcode`.
    pub opcode: u32,
    /// Immediate data (receives of WRITE WITH IMM).
    pub imm: u32,
}

/// What the other end of a QP told us (from its blob).
#[derive(Debug, Clone, Copy)]
pub struct RemoteQp {
    /// Its QP number.
    pub qpn: u32,
    /// Its send queue's first PSN (our receive queue's).
    pub psn: u32,
    /// Its port's LID.
    pub lid: u16,
    /// Its port's GID.
    pub gid: [u8; 16],
    /// RoCE (GID routed) rather than InfiniBand.
    pub ethernet: bool,
    /// Its active MTU (verbs enum).
    pub mtu: u8,
}

/// One RC QP with its own CQ.
pub struct Qp {
    /// The QP.
    pub qp: BasicQueuePair,
    /// Its CQ (send and receive).
    pub cq: Arc<BasicCompletionQueue>,
    /// Device name and port, for messages.
    pub name: String,
    /// Port.
    pub port: u8,
}

fn sys(what: String) -> PluginError {
    PluginError::new(FX_SYSTEM, what)
}

fn mtu(v: u8) -> Mtu {
    match v {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

impl Qp {
    /// Create a QP on `dev`'s protection domain for `port`, and move it to INIT.
    pub fn create(dev: &Device, port: u8) -> PluginResult<Qp> {
        let name = format!("{}:{port}", dev.name);
        let cq = dev
            .ctx
            .create_cq_builder()
            .setup_cqe(CQ_DEPTH as u32)
            .build()
            .map_err(|e| sys(format!("net-ib: creating a CQ on {name}: {e:?}")))?;
        let qp = dev
            .pd
            .create_qp_builder()
            .setup_qp_type(QueuePairType::ReliableConnection)
            .setup_max_send_wr(SQ_DEPTH as u32)
            .setup_max_recv_wr(RQ_DEPTH as u32)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_send_cq(cq.clone())
            .setup_recv_cq(cq.clone())
            .build()
            .map_err(|e| sys(format!("net-ib: creating an RC QP on {name}: {e:?}")))?;
        let mut q = Qp { qp, cq, name, port };
        q.enter_init()?;
        Ok(q)
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qp.qp_number()
    }

    fn modify(&mut self, attr: &QueuePairAttribute, to: &str) -> PluginResult<()> {
        self.qp.modify(attr).map_err(|e| {
            sys(format!(
                "net-ib: moving the QP on {} to {to}: {e:?}",
                self.name
            ))
        })
    }

    fn enter_init(&mut self) -> PluginResult<()> {
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::Init)
            .setup_pkey_index(0)
            .setup_port(self.port)
            .setup_access_flags(device::access());
        self.modify(&a, "INIT")
    }

    /// RESET then INIT (re-arm after an error).
    pub fn reset(&mut self) -> PluginResult<()> {
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::Reset);
        self.modify(&a, "RESET")?;
        self.enter_init()
    }

    /// INIT → RTR → RTS towards `remote`, sending from GID `gid_index`, our send queue
    /// starting at `sq_psn`; `timeout` and `retry_cnt` bound how long a dead path takes to
    /// fail a work request.
    pub fn connect(
        &mut self,
        remote: &RemoteQp,
        local_mtu: u8,
        gid_index: u8,
        sq_psn: u32,
        timeout: u8,
        retry_cnt: u8,
    ) -> PluginResult<()> {
        let mut ah = AddressHandleAttribute::new();
        ah.setup_port(self.port).setup_service_level(0);
        if remote.ethernet || remote.gid != [0; 16] && remote.lid == 0 {
            ah.setup_grh(&Gid { raw: remote.gid }, 0, gid_index, 255, 0);
        } else {
            ah.setup_dest_lid(remote.lid);
        }
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu(local_mtu.min(remote.mtu)))
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(1)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        self.modify(&a, "RTR")?;
        let mut a = QueuePairAttribute::new();
        a.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(sq_psn)
            .setup_timeout(timeout)
            .setup_retry_cnt(retry_cnt)
            // Receivers keep receives posted; retry forever rather than fail on RNR.
            .setup_rnr_retry(7)
            .setup_max_read_atomic(1);
        self.modify(&a, "RTS")
    }

    fn post(
        guard: sideway::ibverbs::queue_pair::BasicPostSendGuard<'_>,
        name: &str,
    ) -> PluginResult<()> {
        guard
            .post()
            .map_err(|e| sys(format!("net-ib: posting a send on {name}: {e:?}")))
    }

    /// RDMA WRITE of `len` bytes at `laddr` (`lkey`) to `raddr` (`rkey`), with `imm` as
    /// immediate data when given. Always signaled.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &mut self,
        wr_id: u64,
        lkey: u32,
        laddr: u64,
        len: u32,
        rkey: u32,
        raddr: u64,
        imm: Option<u32>,
    ) -> PluginResult<()> {
        let name = self.name.clone();
        let mut g = self.qp.start_post_send();
        let wr = g.construct_wr(wr_id, WorkRequestFlags::Signaled);
        let h = match imm {
            Some(imm) => wr.setup_write_imm(rkey, raddr, imm),
            None => wr.setup_write(rkey, raddr),
        };
        // SAFETY: the caller keeps laddr..laddr+len registered (lkey) and valid until the
        // completion of this work request is polled.
        unsafe { h.setup_sge(lkey, laddr, len) };
        Self::post(g, &name)
    }

    /// RDMA READ of `len` bytes at `raddr` (`rkey`) into `laddr` (`lkey`). Signaled.
    pub fn read(
        &mut self,
        wr_id: u64,
        lkey: u32,
        laddr: u64,
        len: u32,
        rkey: u32,
        raddr: u64,
    ) -> PluginResult<()> {
        let name = self.name.clone();
        let mut g = self.qp.start_post_send();
        let h = g
            .construct_wr(wr_id, WorkRequestFlags::Signaled)
            .setup_read(rkey, raddr);
        // SAFETY: as for `write`: the target stays registered and valid until completion.
        unsafe { h.setup_sge(lkey, laddr, len) };
        Self::post(g, &name)
    }

    /// Post one empty receive (consumed by a WRITE WITH IMM).
    pub fn post_recv(&mut self, wr_id: u64) -> PluginResult<()> {
        let mut g = self.qp.start_post_recv();
        g.construct_wr(wr_id);
        g.post()
            .map_err(|e| sys(format!("net-ib: posting a receive on {}: {e:?}", self.name)))
    }

    /// Move every available completion into `out`.
    pub fn poll(&self, out: &mut Vec<Completion>) -> PluginResult<()> {
        match self.cq.start_poll() {
            Ok(poller) => {
                for wc in poller {
                    out.push(Completion {
                        wr_id: wc.wr_id(),
                        status: wc.status(),
                        opcode: wc.opcode(),
                        imm: wc.imm_data(),
                    });
                }
                Ok(())
            }
            Err(PollCompletionQueueError::CompletionQueueEmpty) => Ok(()),
            Err(e) => Err(sys(format!(
                "net-ib: polling the CQ of {}: {e:?}",
                self.name
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rails::wc;
    use sideway::ibverbs::completion::{WorkCompletionOperationType, WorkCompletionStatus};

    #[test]
    fn verbs_constants_match_sideway() {
        // rails.rs classifies raw statuses; they must be the verbs ABI values.
        assert_eq!(WorkCompletionStatus::Success as u32, wc::SUCCESS);
        assert_eq!(
            WorkCompletionStatus::WorkRequestFlushedError as u32,
            wc::WR_FLUSH_ERR
        );
        assert_eq!(
            WorkCompletionStatus::RetryCounterExceededError as u32,
            wc::RETRY_EXC_ERR
        );
        assert_eq!(
            WorkCompletionStatus::RemoteAccessError as u32,
            wc::REM_ACCESS_ERR
        );
        assert_eq!(
            WorkCompletionStatus::ResponseTimeoutError as u32,
            wc::RESP_TIMEOUT_ERR
        );
        assert_eq!(WorkCompletionStatus::GeneralError as u32, wc::GENERAL_ERR);
        assert_eq!(
            WorkCompletionOperationType::ReceiveWithImmediate as u32,
            WC_RECV_RDMA_WITH_IMM
        );
        assert_eq!(mtu(5), Mtu::Mtu4096);
        assert_eq!(mtu(1), Mtu::Mtu256);
    }
}
