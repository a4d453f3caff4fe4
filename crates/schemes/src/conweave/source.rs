//! ConWeave's source ToR (paper §3.2): epochs with one RTT_REQUEST each,
//! the reroute decision on a late RTT_REPLY (two sampled paths, busy ones
//! skipped), TAIL and REROUTED marking, CLEAR / θ_inactive ending a
//! reroute, NOTIFY marking a path busy, and the control packets the ToRs
//! send each other.
//!
//! Invariant: at most two paths of a connection are in flight (a second
//! reroute waits for CLEAR or θ_inactive).

use super::*;

/// What the source ToR decided for one data packet.
#[derive(Debug, Clone, Copy)]
pub(super) enum SrcDecision {
    Fallback,
    Send(CwBits),
}

impl ConWeave {
    /// Number of paths from this ToR and the port/path-id of path index `i`.
    pub(super) fn paths(&self, uplinks: usize) -> u32 {
        (uplinks.min(16) as u32 * self.upper_fanout.clamp(1, 16) as u32).clamp(1, MAX_PATHS)
    }
    pub(super) fn path_id(&self, i: u32) -> u8 {
        let u = self.upper_fanout.clamp(1, 16) as u32;
        ((i / u) | ((i % u) << 4)) as u8
    }
    pub(super) fn path_index(&self, id: u8) -> u32 {
        let u = self.upper_fanout.clamp(1, 16) as u32;
        (id & 0xf) as u32 * u + ((id >> 4) as u32 % u)
    }
    pub(super) fn busy_slot(leaf: u16, i: u32) -> (usize, u32) {
        ((i % 4) as usize, (leaf as u32 % MAX_LEAVES) * (MAX_PATHS / 4) + i / 4)
    }

    pub(super) fn ingress_source(&mut self, cx: &mut IngressCx<'_>, bth: usize) -> Result<(), ProgramError> {
        let Some(ip) = cx.info.ip else { return Ok(()) };
        let Some(dst_leaf) = cx.route_data.map(|d| d as u16) else {
            self.c.fallback_packets += 1;
            self.ecmp(cx);
            return Ok(());
        };
        let (h, sig) = Self::conn_key(ip.src, ip.dst, ip.src_port);
        let idx = h % self.conn_entries;
        let now = cx.now;
        let now32 = now as u32;
        let times = self.times;
        // Stage 2: the entry's owner and its last packet time (sig 16 | ns 32):
        // another connection takes the entry over only after the owner was
        // inactive for θ_inactive.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Owner {
            Mine { inactive: bool },
            TakeOver,
            Collision,
        }
        let owner = cx.register(self.regs.src_last_seen, idx, |old| {
            let (osig, last) = ((old >> 32) as u16, old as u32);
            let idle = now32.wrapping_sub(last) as u64 >= times.inactive;
            let new = ((sig as u64) << 32) | now32 as u64;
            if osig == sig {
                (new, Owner::Mine { inactive: idle })
            } else if osig == 0 || idle {
                (new, Owner::TakeOver)
            } else {
                (old, Owner::Collision)
            }
        })?;
        // Stages 3-6: two sampled paths from different banks of the path-status table.
        let n_paths = self.paths(cx.group.len());
        let s1 = rand::Rng::random_range(cx.rng, 0..n_paths);
        let s2 = if n_paths >= 2 {
            let mut s = rand::Rng::random_range(cx.rng, 0..n_paths - 1);
            if s >= s1 {
                s += 1;
            }
            // Another bank than s1's (one access per array and pass).
            if s % 4 == s1 % 4 {
                let other_bank = |p: &u32| p % 4 != s1 % 4;
                match (0..n_paths).filter(other_bank).count() {
                    0 => u32::MAX,
                    n => (0..n_paths).filter(other_bank).nth(rand::Rng::random_range(cx.rng, 0..n)).unwrap_or(u32::MAX),
                }
            } else {
                s
            }
        } else {
            u32::MAX
        };
        let mut avail = [false; 2];
        for k in 0..4 {
            for (j, s) in [s1, s2].into_iter().enumerate() {
                if s != u32::MAX && (s % 4) as usize == k {
                    let (_, e) = Self::busy_slot(dst_leaf, s);
                    let busy_for = times.path_busy;
                    avail[j] = cx.register(self.regs.path_busy[k], e, |until| {
                        // Busy while now is in [until − θ_path_busy, until).
                        let rem = (until as u32).wrapping_sub(now32) as u64;
                        (until, until == 0 || rem == 0 || rem > busy_for)
                    })?;
                }
            }
        }
        // Stage 7: the connection's state machine.
        let pid = |i: u32| self.path_id(i);
        let candidates = [(s1, avail[0]), (s2, avail[1])];
        // A new connection needs a path too (§3.2.2: "whenever a new path
        // is needed", two samples, the first one not busy; the authors'
        // simulator, conweave-routing.cc `RouteInput`, gives a new
        // connection that `goodPath`, or the first sample if both are busy).
        let initial = candidates.iter().find(|(s, ok)| *s != u32::MAX && *ok).map_or(s1, |(s, _)| *s);
        let mut c = self.c;
        let decision = cx.register(self.regs.src_conn, idx, |old| {
            let mut st = SrcConn::unpack(old);
            let inactive = match owner {
                Owner::Collision => {
                    c.conn_collisions += 1;
                    return (old, SrcDecision::Fallback);
                }
                Owner::TakeOver => true,
                Owner::Mine { inactive } => inactive,
            };
            if st.sig != sig || owner == Owner::TakeOver {
                st = SrcConn { sig, epoch: 0, rerouted: false, req_pending: false, path: pid(initial), req_ts: 0 };
                c.epochs += 1;
            } else if inactive {
                st.epoch = (st.epoch + 1) & 3;
                st.rerouted = false;
                st.req_pending = false;
                c.epochs += 1;
                c.epochs_inactive += 1;
                // Nothing in flight: move to a sampled path that is not busy
                // at no reordering risk (as the authors' simulator does).
                if let Some(p) = candidates.iter().find(|(s, ok)| *s != u32::MAX && *ok).map(|(s, _)| pid(*s)) {
                    c.inactive_path_changes += (p != st.path) as u64;
                    st.path = p;
                }
            }
            let mut bits = CwBits { path: st.path, opcode: CwOpcode::Data, epoch: st.epoch, rerouted: false, tail: false };
            if st.rerouted {
                bits.rerouted = true;
                c.rerouted_packets += 1;
            } else if !st.req_pending {
                bits.opcode = CwOpcode::RttRequest;
                st.req_pending = true;
                st.req_ts = now32;
                c.rtt_requests += 1;
            } else if now32.wrapping_sub(st.req_ts) as u64 >= times.reply {
                c.rtt_reply_timeouts += 1;
                let pick = candidates.iter().find(|(s, ok)| *s != u32::MAX && *ok && pid(*s) != st.path).map(|(s, _)| pid(*s));
                match pick {
                    Some(new) => {
                        // This packet is the TAIL on the OLD path.
                        bits.tail = true;
                        st.rerouted = true;
                        st.path = new;
                        c.reroutes += 1;
                        c.tail_packets += 1;
                    }
                    None => {
                        // All samples busy: no reroute; monitor again.
                        c.reroute_aborted += 1;
                        bits.opcode = CwOpcode::RttRequest;
                        st.req_ts = now32;
                        c.rtt_requests += 1;
                    }
                }
            }
            (st.pack(), SrcDecision::Send(bits))
        })?;
        self.c = c;
        let SrcDecision::Send(bits) = decision else {
            self.c.fallback_packets += 1;
            self.ecmp(cx);
            return Ok(());
        };
        // Stage 8: TAIL_TX_TSTAMP (written by the TAIL, read by REROUTED).
        let tx = ts16(now);
        let tail_tx = cx.register(self.regs.src_tail_ts, idx, |old| if bits.tail { (tx as u64, tx) } else { (old, old as u16) })?;
        let tor = (bits.path & 0xf) as usize;
        let port = cx.group.get(tor % cx.group.len().max(1)).copied().filter(|p| cx.port_up.get(p.index()).copied().unwrap_or(false));
        let Some(port) = port else {
            // The path's uplink is down: ECMP over the live ones, unmarked.
            self.c.fallback_packets += 1;
            self.ecmp(cx);
            return Ok(());
        };
        let l3 = cx.info.l3_offset as usize;
        if cwire::insert_ts(cx.frame, l3, bth, tx, if bits.rerouted { tail_tx } else { 0 }).is_err() || bits.write(cx.frame, bth).is_err() {
            self.ecmp(cx);
            return Ok(());
        }
        cx.forward(port);
        Ok(())
    }

    pub(super) fn control_at_source(&mut self, cx: &mut IngressCx<'_>, bits: CwBits) -> Result<(), ProgramError> {
        let Some(ip) = cx.info.ip else { return Ok(()) };
        // The control packet travels dst → src of the data direction.
        let (h, sig) = Self::conn_key(ip.dst, ip.src, ip.src_port);
        let idx = h % self.conn_entries;
        let now32 = cx.now as u32;
        let reply = self.times.reply;
        cx.consume();
        match bits.opcode {
            CwOpcode::Notify => {
                self.c.notify_received += 1;
                if let Some(leaf) = cx.route_data_of(ip.src).map(|d| d as u16) {
                    let (k, e) = Self::busy_slot(leaf, self.path_index(bits.path));
                    let until = now32.wrapping_add(self.times.path_busy as u32).max(1);
                    cx.register(self.regs.path_busy[k], e, |_| (until as u64, ()))?;
                }
            }
            CwOpcode::RttReply | CwOpcode::Clear => {
                let mut c = self.c;
                if bits.opcode == CwOpcode::Clear {
                    c.clear_received += 1;
                }
                cx.register(self.regs.src_conn, idx, |old| {
                    let mut st = SrcConn::unpack(old);
                    if st.sig != sig || st.epoch != bits.epoch {
                        return (old, ());
                    }
                    if bits.opcode == CwOpcode::Clear {
                        if st.rerouted {
                            st.rerouted = false;
                            st.req_pending = false;
                            st.epoch = (st.epoch + 1) & 3;
                            c.epochs += 1;
                        }
                    } else if !st.rerouted && st.req_pending && (now32.wrapping_sub(st.req_ts) as u64) < reply {
                        c.rtt_replies_in_time += 1;
                        st.req_pending = false;
                        st.epoch = (st.epoch + 1) & 3;
                        c.epochs += 1;
                    }
                    (st.pack(), ())
                })?;
                self.c = c;
            }
            _ => {}
        }
        Ok(())
    }

    /// Sends a control packet about `conn` towards its source.
    pub(super) fn send_control(&mut self, cx: &mut IngressCx<'_>, conn: Connection, bits: CwBits) {
        let f = frames::control(conn, bits, ts16(cx.now));
        let Some(group) = cx.route(conn.src) else { return };
        let h = flow_hash(cx.hash_seed, (conn.dst.0, conn.src.0, 17, conn.sport, 4791), true);
        let (port, _) = select_resilient(group, cx.port_up, h);
        if let Some(p) = port {
            let cq = QueueId(self.queues_per_port.saturating_sub(1));
            cx.emit(EmitTarget::Port(p, cq), f);
            match bits.opcode {
                CwOpcode::RttReply => self.c.rtt_replies_sent += 1,
                CwOpcode::Clear => self.c.clear_sent += 1,
                CwOpcode::Notify => self.c.notify_sent += 1,
                _ => {}
            }
        }
    }
}
