//! ConWeave's reorder queues over time (Appendix A): the timer packet
//! that circles the recirculation port per held queue, resumes it when
//! T_resume passes without a TAIL and frees its table entry once it is
//! empty; and the sampled usage of reorder queues and their buffer (the
//! paper's Fig. 14/15 metrics, not data plane).

use super::*;

impl ConWeave {
    pub(super) fn timer_pass(&mut self, cx: &mut IngressCx<'_>, t: TimerInfo) -> Result<(), ProgramError> {
        self.c.timer_passes += 1;
        cx.consume();
        let n = self.n_reorder(self.queues_per_port);
        if t.queue == 0 || t.queue > n {
            return Ok(());
        }
        let (k, s) = queue_slot(t.queue);
        let e = t.port as u32 % MAX_PORTS * SLOTS_PER_BANK + s;
        let now32 = cx.now as u32;
        let port = PortId(t.port);
        let q = QueueId(t.queue);
        let empty = cx.depths.queue_bytes(port, q) == 0;
        #[derive(PartialEq)]
        enum Act {
            Stale,
            Wait,
            Expire,
            ResumeAfterTail,
            Free,
        }
        let redo = self.times.resume_default + self.times.resume_extra;
        let act = cx.register(self.regs.reorder[k], e, |old| {
            let mut slot = ReorderSlot::unpack(old);
            if slot.sig != t.sig || slot.epoch != t.epoch || slot.state == SlotState::Free {
                return (old, Act::Stale);
            }
            match slot.state {
                SlotState::Paused if reached(now32, slot.resume_at) => {
                    // Resumed now; the deadline below only concerns a queue
                    // that a TAIL should have resumed.
                    slot.state = SlotState::Resumed;
                    slot.resume_at = now32.wrapping_add(redo as u32);
                    (slot.pack(), Act::Expire)
                }
                SlotState::Resumed if empty => (0, Act::Free),
                // The TAIL arrived (state Resumed) but the queue still
                // holds packets at its deadline: the TAIL was dropped before
                // it left egress, which is what resumes the queue. Resume it
                // here (a no-op for a queue already draining) and wait again.
                SlotState::Resumed if reached(now32, slot.resume_at) => {
                    slot.resume_at = now32.wrapping_add(redo as u32);
                    (slot.pack(), Act::ResumeAfterTail)
                }
                _ => (old, Act::Wait),
            }
        })?;
        match act {
            Act::Stale => {}
            Act::Free => self.release(port),
            Act::Expire => {
                self.c.resume_expiries += 1;
                cx.resume_queue(port, q);
                let clear = CwBits { path: t.path, opcode: CwOpcode::Clear, epoch: t.epoch, rerouted: false, tail: false };
                self.send_control(cx, t.conn, clear);
                cx.decision.verdict = Verdict::Recirculate;
            }
            Act::ResumeAfterTail => {
                self.c.resume_after_tail_deadline += 1;
                cx.resume_queue(port, q);
                cx.decision.verdict = Verdict::Recirculate;
            }
            Act::Wait => {
                cx.decision.verdict = Verdict::Recirculate;
            }
        }
        Ok(())
    }

    pub(super) fn release(&mut self, port: PortId) {
        if let Some(n) = self.in_use.get_mut(&port.0) {
            *n = n.saturating_sub(1);
        }
    }

    /// Records the usage samples due at every multiple of `sample_ns` up
    /// to `now` (metrics, not data plane). The number of queues in use only
    /// changes in pipeline passes, so sampling at each pass the instants
    /// since the previous one is exact for it; held bytes are read at the
    /// pass (they change at dequeues in between).
    ///
    /// A pass finds whether a sample is due by a product, not the division
    /// that finds how many are (`now / sample_ns > sampled_until` exactly
    /// when `now ≥ (sampled_until + 1) × sample_ns`).
    #[inline]
    pub(super) fn sample_until(&mut self, now: Nanos, depths: &dyn QueueDepths) {
        if now >= (self.sampled_until + 1).saturating_mul(self.sample_ns) {
            self.sample_due(now, depths);
        }
    }

    /// [`ConWeave::sample_until`] once a sample is due.
    #[inline(never)]
    fn sample_due(&mut self, now: Nanos, depths: &dyn QueueDepths) {
        let due = now / self.sample_ns;
        debug_assert!(due > self.sampled_until, "a sample is due");
        let k = due - self.sampled_until;
        self.sampled_until = due;
        let n = self.n_reorder(self.queues_per_port);
        let mut bytes = 0u64;
        for (p, faces) in self.host_facing.iter().enumerate() {
            if !*faces {
                continue;
            }
            let used = self.in_use.get(&(p as u16)).copied().unwrap_or(0) as u64;
            *self.queues_per_port_hist.entry(used).or_default() += k;
            if used > 0 {
                bytes += (1..=n).map(|q| depths.queue_bytes(PortId(p as u16), QueueId(q))).sum::<u64>();
            }
        }
        self.last_buffer_bytes = bytes;
        if self.host_facing.iter().any(|f| *f) {
            *self.buffer_hist.entry(bytes.div_ceil(1000) * 1000).or_default() += k;
        }
    }
}
