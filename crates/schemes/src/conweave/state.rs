//! ConWeave's register words (paper §3.2, §3.3, Appendix A): the source
//! ToR's and the destination ToR's per-connection state and the
//! reorder-queue table entry, each packed into one register entry so that
//! a pass reads it with one stateful-ALU access; the reorder table's bank
//! layout; the strip offsets bridged to egress; small predicates on
//! packets and the 32-bit clock.
//!
//! Invariant: `unpack(pack(x)) == x` for every word (tested).

use super::SLOTS_PER_BANK;

/// Source-ToR connection state, packed in one 64-bit register:
/// sig 16 | epoch 2 | rerouted 1 | request pending 1 | path 8 | request time 32 (ns, low bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SrcConn {
    pub(super) sig: u16,
    pub(super) epoch: u8,
    pub(super) rerouted: bool,
    pub(super) req_pending: bool,
    pub(super) path: u8,
    pub(super) req_ts: u32,
}

impl SrcConn {
    pub(super) fn unpack(v: u64) -> Self {
        SrcConn {
            sig: (v >> 48) as u16,
            epoch: ((v >> 46) & 3) as u8,
            rerouted: (v >> 45) & 1 == 1,
            req_pending: (v >> 44) & 1 == 1,
            path: (v >> 32) as u8,
            req_ts: v as u32,
        }
    }
    pub(super) fn pack(self) -> u64 {
        ((self.sig as u64) << 48)
            | (((self.epoch & 3) as u64) << 46)
            | ((self.rerouted as u64) << 45)
            | ((self.req_pending as u64) << 44)
            | ((self.path as u64) << 32)
            | self.req_ts as u64
    }
}

/// Destination-ToR connection state: sig 16 | epoch 2 | tail seen 1 |
/// rerouted seen 1 | TX of the epoch's first packet here 16 | TAIL_TX 16.
/// The epoch's TX time tells a packet of an older epoch (older TX, e.g.
/// held by PFC on a congested path) from a new epoch when the 2-bit epoch
/// wrapped: the paper's footnote 6 remedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DstConn {
    pub(super) sig: u16,
    pub(super) epoch: u8,
    pub(super) tail_seen: bool,
    pub(super) rr_seen: bool,
    pub(super) epoch_tx: u16,
    pub(super) tail_tx: u16,
}

impl DstConn {
    pub(super) fn unpack(v: u64) -> Self {
        DstConn {
            sig: (v >> 48) as u16,
            epoch: ((v >> 46) & 3) as u8,
            tail_seen: (v >> 45) & 1 == 1,
            rr_seen: (v >> 44) & 1 == 1,
            epoch_tx: (v >> 16) as u16,
            tail_tx: v as u16,
        }
    }
    pub(super) fn pack(self) -> u64 {
        ((self.sig as u64) << 48)
            | (((self.epoch & 3) as u64) << 46)
            | ((self.tail_seen as u64) << 45)
            | ((self.rr_seen as u64) << 44)
            | ((self.epoch_tx as u64) << 16)
            | self.tail_tx as u64
    }
}

/// A reorder-queue table entry: sig 16 | state 2 | epoch 2 | T_resume 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReorderSlot {
    pub(super) sig: u16,
    pub(super) state: SlotState,
    pub(super) epoch: u8,
    pub(super) resume_at: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotState {
    Free,
    Paused,
    Resumed,
}

impl ReorderSlot {
    pub(super) fn unpack(v: u64) -> Self {
        ReorderSlot {
            sig: (v >> 48) as u16,
            state: match (v >> 46) & 3 {
                1 => SlotState::Paused,
                2 => SlotState::Resumed,
                _ => SlotState::Free,
            },
            epoch: ((v >> 44) & 3) as u8,
            resume_at: v as u32,
        }
    }
    pub(super) fn pack(self) -> u64 {
        let st = match self.state {
            SlotState::Free => 0u64,
            SlotState::Paused => 1,
            SlotState::Resumed => 2,
        };
        ((self.sig as u64) << 48) | (st << 46) | (((self.epoch & 3) as u64) << 44) | self.resume_at as u64
    }
}

/// Queue of bank `k`, slot `s`.
pub(super) fn bank_queue(k: usize, s: u32) -> u8 {
    (1 + k as u32 + 4 * s) as u8
}
/// Slots of bank `k` that exist with `n` reorder queues (1..=n).
pub(super) fn bank_size(k: usize, n: u8) -> u32 {
    (0..SLOTS_PER_BANK).filter(|s| bank_queue(k, *s) <= n).count() as u32
}
/// Bank and slot of reorder queue `q`.
pub(super) fn queue_slot(q: u8) -> (usize, u32) {
    (((q - 1) % 4) as usize, ((q - 1) / 4) as u32)
}

/// Whether the BTH at `bth` is an RC SEND or RDMA WRITE packet (ConWeave
/// reroutes data; ACK/NAK and CNP go by ECMP in the control queue).
pub(super) fn carries_data(frame: &[u8], bth: usize) -> bool {
    use weft_wire::roce::{BthPacket, Opcode};
    frame.get(bth..).and_then(|b| BthPacket::new_checked(b).ok()).is_some_and(|b| {
        matches!(
            b.opcode(),
            Opcode::SendFirst
                | Opcode::SendMiddle
                | Opcode::SendLast
                | Opcode::SendOnly
                | Opcode::WriteFirst
                | Opcode::WriteMiddle
                | Opcode::WriteLast
                | Opcode::WriteOnly
        )
    })
}

/// `a` is at or after `b` on the 32-bit ns clock.
pub(super) fn reached(now32: u32, at: u32) -> bool {
    (now32.wrapping_sub(at) as i32) >= 0
}

/// Where the destination ToR's egress strips the timestamp header, bridged
/// from ingress as metadata (valid 1 | l3 offset 15 | BTH offset 16), so
/// the egress pass needs no second parse of the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StripAt {
    pub(super) l3: u16,
    pub(super) bth: u16,
}

impl StripAt {
    pub(super) fn bridged(self) -> u32 {
        1 << 31 | ((self.l3 as u32 & 0x7fff) << 16) | self.bth as u32
    }
    pub(super) fn from_bridged(v: u32) -> Option<Self> {
        (v >> 31 == 1).then_some(StripAt { l3: ((v >> 16) & 0x7fff) as u16, bth: v as u16 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_register_word_unpacks_to_what_was_packed() {
        for (sig, epoch, a, b, path, ts) in
            [(1u16, 0u8, false, true, 0x21u8, 7u32), (0xffff, 3, true, false, 0xff, u32::MAX), (0x8001, 2, true, true, 0, 0)]
        {
            let s = SrcConn { sig, epoch, rerouted: a, req_pending: b, path, req_ts: ts };
            assert_eq!(SrcConn::unpack(s.pack()), s);
            let d = DstConn { sig, epoch, tail_seen: a, rr_seen: b, epoch_tx: ts as u16, tail_tx: (ts >> 16) as u16 };
            assert_eq!(DstConn::unpack(d.pack()), d);
            for state in [SlotState::Free, SlotState::Paused, SlotState::Resumed] {
                let r = ReorderSlot { sig, state, epoch, resume_at: ts };
                assert_eq!(ReorderSlot::unpack(r.pack()), r);
            }
        }
        for at in [StripAt { l3: 14, bth: 42 }, StripAt { l3: 18, bth: 46 }, StripAt { l3: 0x7fff, bth: u16::MAX }] {
            assert_eq!(StripAt::from_bridged(at.bridged()), Some(at));
        }
        assert_eq!(StripAt::from_bridged(0), None, "nothing bridged: no header to strip");
    }

    #[test]
    fn reorder_banks_cover_queues_1_to_30_once() {
        let mut seen = Vec::new();
        for k in 0..4 {
            for s in 0..bank_size(k, 30) {
                let q = bank_queue(k, s);
                assert_eq!(queue_slot(q), (k, s));
                seen.push(q);
            }
        }
        seen.sort();
        assert_eq!(seen, (1..=30).collect::<Vec<u8>>());
    }

    #[test]
    fn the_32_bit_clock_wraps() {
        assert!(reached(5, 5) && reached(6, 5) && !reached(4, 5));
        assert!(reached(3, u32::MAX - 2) && !reached(u32::MAX - 2, 3));
    }
}
