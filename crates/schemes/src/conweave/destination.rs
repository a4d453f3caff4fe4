//! ConWeave's destination ToR (paper §3.3, Appendix A): answers
//! RTT_REQUEST, NOTIFY on CE and CLEAR on TAIL; holds REROUTED packets that
//! arrive before their epoch's TAIL in a paused reorder queue of the host
//! port (a 4-way associative table), estimates T_resume, and lets the TAIL
//! resume the queue at egress.
//!
//! Invariant: REROUTED packets reach the host strictly after the TAIL and
//! in order.

use super::*;

/// What the destination ToR's connection stage classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DstClass {
    /// A packet of the OLD path (or of a path without reroute); `update`:
    /// a held queue waits, re-estimate T_resume.
    Old { update: bool },
    /// The TAIL.
    Tail,
    /// The first REROUTED packet before the TAIL.
    FirstOoo,
    /// A later REROUTED packet before the TAIL.
    Ooo,
    /// A REROUTED packet after the TAIL.
    InOrder,
    /// Another connection's entry, or a straggler: no reordering.
    Ignore,
}

impl ConWeave {
    pub(super) fn ingress_destination(
        &mut self,
        cx: &mut IngressCx<'_>,
        bth: usize,
        bits: CwBits,
        out_port: PortId,
    ) -> Result<(), ProgramError> {
        let Some(ip) = cx.info.ip else { return Ok(()) };
        cx.forward(out_port);
        let Some((tx, tail_tx_pkt)) = cwire::read_ts(cx.frame, bth) else { return Ok(()) };
        let conn = Connection {
            src: ip.src,
            dst: ip.dst,
            sport: ip.src_port,
            dest_qp: weft_wire::roce::BthPacket::new_checked(&cx.frame[bth..]).map(|b| b.dest_qp()).unwrap_or(0),
        };
        let (h, sig) = Self::conn_key(ip.src, ip.dst, ip.src_port);
        let idx = h % self.conn_entries;
        let now = cx.now;
        let now32 = now as u32;
        // Stage 2: the connection's reorder state.
        let (class, tail_tx, epoch_start) = cx.register(self.regs.dst_conn, idx, |old| {
            let mut st = DstConn::unpack(old);
            let fresh = DstConn { sig, epoch: bits.epoch, tail_seen: false, rr_seen: false, epoch_tx: tx, tail_tx: 0 };
            let mut epoch_start = false;
            if st.sig != sig {
                st = fresh;
                epoch_start = true;
            } else if st.epoch != bits.epoch {
                if ts16_diff_ns(tx, st.epoch_tx) < 0 {
                    // Sent before the current epoch's first packet: a
                    // straggler of an older epoch, passed to the host.
                    return (old, (DstClass::Ignore, 0, false));
                }
                st = fresh;
                epoch_start = true;
            }
            let class = if bits.tail {
                st.tail_seen = true;
                DstClass::Tail
            } else if bits.rerouted {
                if st.tail_seen {
                    DstClass::InOrder
                } else if !st.rr_seen {
                    st.rr_seen = true;
                    st.tail_tx = tail_tx_pkt;
                    DstClass::FirstOoo
                } else {
                    DstClass::Ooo
                }
            } else {
                DstClass::Old { update: st.rr_seen && !st.tail_seen }
            };
            (st.pack(), (class, st.tail_tx, epoch_start))
        })?;
        // Stage 3: the latest OLD packet's (TX, arrival), for T_resume. Only
        // one of the current epoch counts: a REROUTED packet that opens its
        // epoch here has none, and waits θ_resume_default (the authors'
        // phase-0 cache, conweave-routing.cc `RouteInput`: reset when a new
        // epoch begins with a phase-1 packet, `_phase0Cache = pkt_phase == 0`).
        let epoch = bits.epoch;
        let reference = cx.register(self.regs.dst_old_ref, idx, |old| match class {
            DstClass::Old { .. } | DstClass::Tail => ((1 << 49) | ((tx as u64) << 32) | now32 as u64, None),
            DstClass::FirstOoo if epoch_start => (old, None),
            DstClass::FirstOoo => ((old), ((old >> 49) & 1 == 1).then_some(((old >> 32) as u16, old as u32))),
            _ => (old, None),
        })?;
        let extra = self.times.resume_extra as i64;
        let estimate = |rx: u32, tx_ref: u16| -> u32 {
            let d = ts16_diff_ns(tail_tx, tx_ref) + extra;
            (rx as i64 + d.max(0)) as u32
        };
        // Stages 4-7: the 4-way reorder-queue table of the egress port.
        // After its TAIL arrived, a held queue is resumed when the TAIL
        // leaves egress; if the TAIL never leaves (the traffic manager
        // dropped it), the timer resumes the queue at this deadline.
        let tail_deadline = now32.wrapping_add((self.times.resume_default + self.times.resume_extra) as u32);
        let n = self.n_reorder(self.queues_per_port);
        let mut held: Option<u8> = None;
        let mut claimed = false;
        let mut resumed: Option<u8> = None;
        if matches!(class, DstClass::Tail | DstClass::FirstOoo | DstClass::Ooo | DstClass::Old { update: true }) && n > 0 {
            let resume_at = match (class, reference) {
                (DstClass::FirstOoo, Some((tx_ref, rx))) => estimate(rx, tx_ref),
                (DstClass::FirstOoo, None) => now32.wrapping_add((self.times.resume_default + self.times.resume_extra) as u32),
                _ => estimate(now32, tx),
            };
            for k in 0..REORDER_BANKS {
                let size = bank_size(k, n);
                if size == 0 {
                    continue;
                }
                let hk = h.rotate_left(8 * k as u32) ^ (k as u32).wrapping_mul(0x9e37_79b9);
                let s = hk % size;
                let e = out_port.0 as u32 % MAX_PORTS * SLOTS_PER_BANK + s;
                let q = bank_queue(k, s);
                let done = held.is_some() || resumed.is_some() || claimed;
                let r = cx.register(self.regs.reorder[k], e, |old| {
                    let mut slot = ReorderSlot::unpack(old);
                    if done {
                        return (old, None);
                    }
                    let mine = slot.sig == sig && slot.epoch == epoch && slot.state == SlotState::Paused;
                    match class {
                        DstClass::FirstOoo if slot.state == SlotState::Free => {
                            slot = ReorderSlot { sig, state: SlotState::Paused, epoch, resume_at };
                            (slot.pack(), Some((q, true)))
                        }
                        DstClass::Ooo if mine => (old, Some((q, false))),
                        DstClass::Tail if mine => {
                            slot.state = SlotState::Resumed;
                            slot.resume_at = tail_deadline;
                            (slot.pack(), Some((q, false)))
                        }
                        DstClass::Old { .. } if mine => {
                            slot.resume_at = resume_at;
                            (slot.pack(), None)
                        }
                        _ => (old, None),
                    }
                })?;
                if let Some((q, claim)) = r {
                    match class {
                        DstClass::Tail => resumed = Some(q),
                        _ => {
                            held = Some(q);
                            claimed = claim;
                        }
                    }
                }
            }
        }
        match class {
            DstClass::FirstOoo | DstClass::Ooo => {
                if let Some(q) = held {
                    if claimed {
                        cx.pause_queue(out_port, QueueId(q));
                        self.c.reorder_queues_allocated += 1;
                        *self.in_use.entry(out_port.0).or_default() += 1;
                        let t = TimerInfo { port: out_port.0, queue: q, sig, epoch, path: bits.path, conn };
                        cx.emit(EmitTarget::Recirculate, frames::timer(t));
                    }
                    self.c.held_packets += 1;
                    cx.decision.queue = Some(QueueId(q));
                } else {
                    if class == DstClass::FirstOoo {
                        self.c.reorder_alloc_failures += 1;
                    }
                    cx.decision.queue = Some(QueueId(0));
                }
            }
            DstClass::Tail => {
                // The queue id rides to egress in the TAIL's timestamp header.
                let bridged = resumed.map_or(0, |q| 0x8000 | q as u16);
                let _ = cwire::write_ts(cx.frame, bth, tx, bridged);
                if resumed.is_some() {
                    self.c.resume_on_tail += 1;
                }
                let clear = CwBits { path: bits.path, opcode: CwOpcode::Clear, epoch, rerouted: false, tail: false };
                self.send_control(cx, conn, clear);
                cx.decision.queue = Some(QueueId(0));
            }
            _ => cx.decision.queue = Some(QueueId(0)),
        }
        if bits.opcode == CwOpcode::RttRequest {
            let reply = CwBits { path: bits.path, opcode: CwOpcode::RttReply, epoch, rerouted: false, tail: false };
            self.send_control(cx, conn, reply);
        }
        if ip.ecn == ipv4::Ecn::Ce {
            let notify = CwBits { path: bits.path, opcode: CwOpcode::Notify, epoch, rerouted: false, tail: false };
            self.send_control(cx, conn, notify);
        }
        Ok(())
    }
}
