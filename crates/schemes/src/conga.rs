//! CONGA (Alizadeh et al., SIGCOMM 2014): congestion-aware flowlet load
//! balancing with leaf-to-leaf feedback in a VXLAN overlay (paper §3).
//!
//! - **Overlay** (§2.5, §3.1): the source leaf encapsulates every packet
//!   bound for another leaf in Ethernet / IPv4 / UDP 4789 / VXLAN carrying
//!   LBTag (the uplink's index in the equal-cost group), CE, FB_LBTag and
//!   FB_Metric ([`weft_wire::vxlan`]); the destination leaf decapsulates
//!   (copying a CE mark of the outer header into an ECN-capable inner one,
//!   RFC 6040). The outer addresses are the inner ones: weft's fabric routes
//!   host prefixes, not VTEP loopbacks; the source leaf of a packet is the
//!   leaf its source address's route points to. The UDP source port carries
//!   a hash of the inner 5-tuple (entropy for the spines' ECMP).
//! - **DRE** (§3.2) per fabric port, in the egress pipeline: X += bytes of
//!   each departing packet; every T_dre X ← X (1 − α) (applied lazily at
//!   the next packet, for every period boundary passed); the metric is
//!   X / (C τ), τ = T_dre / α, quantised to 3 bits. Each fabric egress
//!   raises the packet's CE to its metric (§3.3 step 2). The DRE register
//!   holds X as an f32 and the time of its last update in ns (low 32 bits,
//!   so an idle port's age is exact up to 4.29 s). Egress publishes the
//!   register's word to the ingress-side array `conga_dre_to_ingress`
//!   ([`Declarations::egress_to_ingress`]), from which the ingress pipeline
//!   reads every uplink's metric, decayed to the packet's time, as it reads
//!   queue depths; C is the port's line rate now.
//! - **Feedback** (§3.3): the destination leaf stores CE in the
//!   Congestion-From-Leaf table per (source leaf, LBTag) and marks changed
//!   entries; every packet to that leaf carries one entry, round-robin,
//!   favouring changed ones. The source leaf stores FB_Metric in the
//!   Congestion-To-Leaf table per (destination leaf, LBTag). Metrics not
//!   refreshed for `aging_us` read as 0 ("metric aging").
//! - **Decision** (§3.5): on the first packet of a flowlet (gap
//!   `flowlet_gap_us`, [`FlowletTable`]) the
//!   uplink minimising max(local DRE metric, remote metric) is taken; ties
//!   are broken at random (the flowlet's previous uplink, which CONGA
//!   prefers on ties, is read only in the flowlet table's later stage). With
//!   `use_remote = false` the decision is local-only (the "Local Only" case
//!   of the paper's Fig. 2).
//!
//! Tables pack one row per leaf into one register entry (8 uplinks × 3-bit
//! metric + 2-bit age stamp = 40 bits; From-Leaf: 8 × 3 bits + 8 changed
//! bits), so a decision reads one entry (one SALU access); weft's CONGA
//! therefore handles up to 8 uplinks per leaf (LBTag 0..7). As in real
//! VXLAN fabrics, switch-to-switch links default to the hosts' MTU plus
//! the 50-byte overlay (`switch_link_mtu` in the core's fabric description, set by
//! the topology), so every host frame is encapsulated; only on a fabric
//! whose links were given a smaller MTU explicitly are frames that would
//! not fit forwarded unencapsulated by the same flowlet decision, without
//! feedback (counted as `conga_unencapsulated_oversize`).
//!
//! Defaults: as the ConWeave evaluation (docs/HOSTS.md#reference-parameters): flowlet gap 100 µs,
//! T_dre 50 µs, α 0.2, aging 500 µs (CONGA's own: gap 500 µs, aging ~10 ms).
//!
//! Tofino resources: flowlet arrays (stages 1, 3), To-Leaf (stage 2),
//! feedback cursor (stage 4), From-Leaf (stage 5), DRE per port (egress
//! stage 1).

use super::ecmp::flow_hash;
use super::flowlet::FlowletTable;
use super::{param, param_in, param_us, ParamInfo, Params, SchemeError, SchemeInfo, TimeScale};
use bytes::BytesMut;
use weft_tofino::program::{Declarations, PacketSource, ScrapeView, SwitchView};
use weft_tofino::{EgressCx, Gress, IngressCx, Program, ProgramError, RegisterId};
use weft_wire::frame::FrameInfo;
use weft_wire::ids::PortId;
use weft_wire::time::{BitRate, Nanos};
use weft_wire::{ethernet, ipv4, udp, vxlan, EtherType, EthernetAddress};

/// Catalog entry.
pub fn info() -> SchemeInfo {
    SchemeInfo {
        name: "conga",
        source: "CONGA (SIGCOMM'14) §3; parameters of the ConWeave evaluation",
        summary: "flowlets to the uplink minimising max(local DRE, remote metric), leaf-to-leaf feedback in a VXLAN overlay",
        reference_rate: Some(BitRate::gbps(100)),
        params: vec![
            ParamInfo { name: "flowlet_gap_us", default: "100", unit: "µs", doc: "flowlet inactivity gap (CONGA's own: 500)" },
            ParamInfo { name: "t_dre_us", default: "50", unit: "µs", doc: "DRE decrement period T_dre" },
            ParamInfo { name: "alpha", default: "0.2", unit: "(0,1)", doc: "DRE decrement factor α (τ = T_dre/α)" },
            ParamInfo { name: "aging_us", default: "500", unit: "µs", doc: "a remote metric not refreshed for this long reads as 0" },
            ParamInfo { name: "use_remote", default: "true", unit: "bool", doc: "false: local-only decisions (CONGA paper Fig. 2b)" },
            ParamInfo { name: "entries", default: "65536", unit: "entries", doc: "flowlet table size" },
        ],
    }
}

/// Uplinks a leaf's tables cover.
const MAX_UPLINKS: usize = 8;
/// Ports the DRE arrays cover.
const DRE_PORTS: u32 = 512;
/// Leaves the tables cover.
const MAX_LEAVES: u32 = 1024;
/// Encapsulation overhead.
const OVERLAY_LEN: usize = vxlan::OVERLAY_LEN;

#[derive(Debug, Clone, Copy)]
struct Regs {
    to_leaf: RegisterId,
    fb_cursor: RegisterId,
    from_leaf: RegisterId,
    dre: RegisterId,
    dre_to_ingress: RegisterId,
}

#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    flowlets: u64,
    path_changes: u64,
    encapsulated: u64,
    decapsulated: u64,
    unencapsulated_oversize: u64,
    feedback_sent: u64,
    feedback_received: u64,
    ce_raised: u64,
}

/// The CONGA program.
#[derive(Debug, Clone)]
pub struct Conga {
    gap_ns: Nanos,
    t_dre: Nanos,
    alpha: f64,
    aging: Nanos,
    use_remote: bool,
    entries: u32,
    flowlets: Option<FlowletTable>,
    regs: Option<Regs>,
    leaf: bool,
    host_facing: Vec<bool>,
    mtus: Vec<u16>,
    c: Counters,
}

impl Conga {
    /// Builds from parameters.
    pub fn from_params(p: &Params) -> Result<Self, SchemeError> {
        let alpha = param_in("conga", p, "alpha", "number in (0, 1)", 0.2f64, |a| *a > 0.0 && *a < 1.0)?;
        let entries = param_in("conga", p, "entries", "u32 > 0", 65536u32, |e| *e > 0)?;
        Ok(Conga {
            gap_ns: param_us("conga", p, "flowlet_gap_us", 100.0, true)?,
            t_dre: param_us("conga", p, "t_dre_us", 50.0, true)?.max(1),
            alpha,
            aging: param_us("conga", p, "aging_us", 500.0, true)?.max(2),
            use_remote: param("conga", p, "use_remote", "bool", true)?,
            entries,
            flowlets: None,
            regs: None,
            leaf: false,
            host_facing: Vec::new(),
            mtus: Vec::new(),
            c: Counters::default(),
        })
    }

    /// Its flowlet gap, DRE period and metric aging multiplied by `s`
    /// (docs/SCHEMES.md#parameter-scaling).
    pub fn time_scaled(mut self, s: TimeScale) -> Self {
        self.gap_ns = s.ns(self.gap_ns);
        self.t_dre = s.ns(self.t_dre).max(1);
        self.aging = s.ns(self.aging).max(2);
        self
    }

    /// DRE register word `word` (X as f32 bits | time of its last update,
    /// low 32 bits of ns) decayed to `now`: one factor (1 − α) per T_dre
    /// boundary passed, as the periodic decrement does.
    fn decayed(&self, word: u64, now: Nanos) -> f64 {
        let x = f32::from_bits((word >> 32) as u32) as f64;
        // The update time, from its low 32 bits (the last 4.29 s).
        let t = now.saturating_sub((now as u32).wrapping_sub(word as u32) as u64);
        let k = (now / self.t_dre).saturating_sub(t / self.t_dre);
        if k == 0 {
            x
        } else if k > 200 {
            0.0
        } else {
            x * (1.0 - self.alpha).powi(k as i32)
        }
    }

    /// 3-bit congestion metric of DRE value `x` on a port of `rate`.
    fn quantise(&self, rate: BitRate, x: f64) -> u8 {
        let rate_bytes_per_ns = rate.bps() as f64 / 8e9;
        let tau = self.t_dre as f64 / self.alpha;
        let util = x / (rate_bytes_per_ns * tau);
        (util * 8.0).floor().clamp(0.0, 7.0) as u8
    }

    /// The metric of a port of `rate` whose DRE word egress last published
    /// is `word`, at `now`.
    fn local_metric(&self, word: u64, rate: BitRate, now: Nanos) -> u8 {
        self.quantise(rate, self.decayed(word, now))
    }

    /// The 2-bit age stamp of `now` (periods of aging / 2).
    fn stamp(&self, now: Nanos) -> u64 {
        (now / (self.aging / 2)) & 3
    }

    fn faces_host(&self, p: PortId) -> bool {
        self.host_facing.get(p.index()).copied().unwrap_or(false)
    }
}

/// To-Leaf row: metric of tag i in bits 3i..3i+3, age stamp in 24+2i..24+2i+2.
fn row_metric(row: u64, i: usize) -> u8 {
    ((row >> (3 * i)) & 7) as u8
}
fn row_stamp(row: u64, i: usize) -> u64 {
    (row >> (24 + 2 * i)) & 3
}
fn row_set(row: u64, i: usize, metric: u8, stamp: u64) -> u64 {
    let cleared = row & !(7 << (3 * i)) & !(3 << (24 + 2 * i));
    cleared | ((metric as u64 & 7) << (3 * i)) | ((stamp & 3) << (24 + 2 * i))
}

impl Conga {
    /// Source leaf: flowlet decision, encapsulation with feedback.
    fn ingress_source(&mut self, cx: &mut IngressCx<'_>, regs: Regs, dst_leaf: u16) -> Result<(), ProgramError> {
        let Some(t) = cx.info.five_tuple() else { return Ok(()) };
        let Some(table) = &self.flowlets else { return Ok(()) };
        let h = flow_hash(cx.hash_seed, t, true);
        let now = cx.now;
        let leaf_idx = dst_leaf as u32 % MAX_LEAVES;
        // The uplinks (LBTag = index in the group), their local metric, or
        // None when the link is down.
        let n = cx.group.len().min(MAX_UPLINKS);
        let mut uplinks = [PortId(0); MAX_UPLINKS];
        let mut local = [None; MAX_UPLINKS];
        for (i, p) in cx.group.iter().take(n).enumerate() {
            uplinks[i] = *p;
            if cx.port_up.get(p.index()).copied().unwrap_or(false) {
                let word = cx.snapshot(regs.dre_to_ingress, p.0 as u32 % DRE_PORTS)?;
                let rate = cx.port_rates.get(p.index()).copied().unwrap_or(BitRate::gbps(8));
                local[i] = Some(self.local_metric(word, rate, now));
            }
        }
        let (use_remote, cur_stamp) = (self.use_remote, self.stamp(now));
        let d = table.lookup(cx, h, |cx| {
            // Stage 2: the destination leaf's remote metrics (one row).
            let row = cx.register(regs.to_leaf, leaf_idx, |row| (row, row))?;
            let mut best = 0u32; // bit i: uplink i has the least metric
            let mut best_m = u8::MAX;
            for (i, l) in local.iter().enumerate().take(n) {
                let Some(l) = l else { continue };
                let fresh = (cur_stamp.wrapping_sub(row_stamp(row, i)) & 3) <= 1;
                let m = (*l).max(if use_remote && fresh { row_metric(row, i) } else { 0 });
                if m < best_m {
                    best_m = m;
                    best = 0;
                }
                if m == best_m {
                    best |= 1 << i;
                }
            }
            if best == 0 {
                return Ok(None);
            }
            let k = rand::Rng::random_range(cx.rng, 0..best.count_ones());
            let i = (0..n).filter(|i| best & (1 << i) != 0).nth(k as usize).unwrap_or(0);
            Ok(Some(uplinks[i]))
        })?;
        self.c.flowlets += d.new_flowlet as u64;
        self.c.path_changes += d.path_changed as u64;
        let Some(port) = d.port else { return Ok(()) };
        let tag = uplinks[..n].iter().position(|p| *p == port).unwrap_or(0) as u8;
        // Stages 4-5: one feedback entry for the destination leaf.
        let cursor = cx.register(regs.fb_cursor, leaf_idx, |c| ((c + 1) % MAX_UPLINKS as u64, c as usize))?;
        let feedback = cx.register(regs.from_leaf, leaf_idx, |row| {
            let changed = (row >> 24) & 0xff;
            if row == 0 {
                return (row, None);
            }
            let pick = (0..MAX_UPLINKS).map(|j| (cursor + j) % MAX_UPLINKS).find(|i| changed & (1 << i) != 0).unwrap_or(cursor);
            (row & !(1 << (24 + pick)), Some((pick as u8, row_metric(row, pick))))
        })?;
        cx.forward(port);
        let mtu = self.mtus.get(port.index()).copied().unwrap_or(1500) as usize;
        if cx.frame.len() + OVERLAY_LEN > mtu + ethernet::TAGGED_HEADER_LEN {
            self.c.unencapsulated_oversize += 1;
            return Ok(());
        }
        let Some(ip) = cx.info.ip else { return Ok(()) };
        let inner_len = cx.frame.len();
        let mut f = BytesMut::zeroed(OVERLAY_LEN + inner_len);
        ethernet::Repr { dst: EthernetAddress([0; 6]), src: EthernetAddress([0; 6]), vlan_tci: None, ethertype: EtherType::Ipv4 }
            .emit(&mut f);
        ipv4::Repr {
            src: ip.src,
            dst: ip.dst,
            protocol: ipv4::Protocol::Udp,
            dscp: ip.dscp,
            ecn: ip.ecn,
            ident: 0,
            ttl: 64,
            payload_len: udp::HEADER_LEN + vxlan::HEADER_LEN + inner_len,
        }
        .emit(&mut f[14..]);
        let entropy = 49152 | (h as u16 & 0x3fff);
        udp::Repr { src_port: entropy, dst_port: udp::VXLAN_PORT, payload_len: vxlan::HEADER_LEN + inner_len }.emit(&mut f[34..]);
        vxlan::Repr { vni: 1, lb_tag: tag, ce: 0, feedback }.emit(&mut f[42..]);
        f[OVERLAY_LEN..].copy_from_slice(cx.frame);
        *cx.frame = f;
        self.c.encapsulated += 1;
        self.c.feedback_sent += feedback.is_some() as u64;
        Ok(())
    }

    /// Destination leaf: record CE and feedback, decapsulate.
    fn ingress_destination(&mut self, cx: &mut IngressCx<'_>, regs: Regs, out: PortId) -> Result<(), ProgramError> {
        let Some(ip) = cx.info.ip else { return Ok(()) };
        let l4 = ip.l4_offset as usize;
        let Ok(v) = vxlan::Packet::new_checked(&cx.frame[l4 + udp::HEADER_LEN..]) else { return Ok(()) };
        let repr = vxlan::Repr::parse(&v);
        let inner_start = l4 + udp::HEADER_LEN + vxlan::HEADER_LEN;
        let src_leaf = cx.route_data_of(ip.src).map(|d| d as u16);
        if let Some(src_leaf) = src_leaf {
            let idx = src_leaf as u32 % MAX_LEAVES;
            let stamp = self.stamp(cx.now);
            if let Some((tag, metric)) = repr.feedback {
                self.c.feedback_received += 1;
                let i = (tag as usize).min(MAX_UPLINKS - 1);
                cx.register(regs.to_leaf, idx, |row| (row_set(row, i, metric, stamp), ()))?;
            }
            let i = (repr.lb_tag as usize).min(MAX_UPLINKS - 1);
            let ce = repr.ce;
            cx.register(regs.from_leaf, idx, |row| {
                let changed = row_metric(row, i) != ce || row == 0;
                let metrics = (row & 0xff_ffff & !(7 << (3 * i))) | ((ce as u64) << (3 * i));
                let flags = ((row >> 24) & 0xff) | ((changed as u64) << i);
                (metrics | (flags << 24) | (1 << 40), ())
            })?;
        }
        let mut inner = BytesMut::from(&cx.frame[inner_start..]);
        if ip.ecn == ipv4::Ecn::Ce {
            if let Ok(info) = FrameInfo::parse(&inner) {
                if info.ip.is_some_and(|i| matches!(i.ecn, ipv4::Ecn::Ect0 | ipv4::Ecn::Ect1)) {
                    ipv4::Packet::new_unchecked(&mut inner[info.l3_offset as usize..]).set_ecn(ipv4::Ecn::Ce);
                }
            }
        }
        *cx.frame = inner;
        self.c.decapsulated += 1;
        cx.forward(out);
        Ok(())
    }
}

/// Whether `info` is a VXLAN packet.
fn is_vxlan(info: &FrameInfo) -> bool {
    info.ip.is_some_and(|i| i.protocol == 17 && i.dst_port == udp::VXLAN_PORT)
}

impl Program for Conga {
    /// The destination's leaf index (per-destination-ToR state).
    fn route_data(&self, route: &weft_tofino::l3::Route) -> Option<u32> {
        crate::leaf_of_route(route)
    }
    fn name(&self) -> &'static str {
        "conga"
    }

    fn declare(&mut self, d: &mut Declarations) {
        let ig = Gress::Ingress;
        d.hash("conga_5tuple_crc32", ig, 0, 32);
        self.flowlets = Some(FlowletTable::declare(d, "conga", self.entries, self.gap_ns, 1, 3));
        self.regs = Some(Regs {
            to_leaf: d.register("conga_congestion_to_leaf", ig, 2, MAX_LEAVES, 40),
            fb_cursor: d.register("conga_feedback_cursor", ig, 4, MAX_LEAVES, 8),
            from_leaf: d.register("conga_congestion_from_leaf", ig, 5, MAX_LEAVES, 41),
            dre: d.register("conga_dre", Gress::Egress, 1, DRE_PORTS, 64),
            dre_to_ingress: d.egress_to_ingress("conga_dre_to_ingress", 2, DRE_PORTS, 64),
        });
        d.metadata_bits(32 + 16 + 8 * 3 + 4 + 3 + 4 + 3);
    }

    fn attach(&mut self, view: &SwitchView) {
        self.leaf = view.leaf_index.is_some();
        self.host_facing = view.host_facing.clone();
        self.mtus = view.mtus.clone();
    }

    fn ingress(&mut self, cx: &mut IngressCx<'_>) -> Result<(), ProgramError> {
        let Some(regs) = self.regs else { return Ok(()) };
        let from_host = matches!(cx.source, PacketSource::Port(p) if self.faces_host(p));
        let to_host = (cx.group.len() == 1).then(|| cx.group[0]).filter(|p| self.faces_host(*p));
        match (to_host, cx.route_data.map(|d| d as u16)) {
            (Some(out), _) if is_vxlan(cx.info) && !from_host => self.ingress_destination(cx, regs, out),
            (None, Some(dst_leaf)) if self.leaf && from_host && cx.info.ip.is_some() && !cx.group.is_empty() => {
                self.ingress_source(cx, regs, dst_leaf)
            }
            _ => {
                // Spines and everything else: ECMP on the (outer) 5-tuple.
                let h = cx.info.five_tuple().map_or(0, |t| flow_hash(cx.hash_seed, t, true));
                cx.forward_to(super::ecmp::select_resilient(cx.group, cx.port_up, h).0);
                Ok(())
            }
        }
    }

    fn egress(&mut self, cx: &mut EgressCx<'_>) -> Result<(), ProgramError> {
        if self.faces_host(cx.port) {
            return Ok(());
        }
        let Some(regs) = self.regs else { return Ok(()) };
        let now = cx.now;
        let bytes = cx.frame.len() as f64;
        let index = cx.port.0 as u32 % DRE_PORTS;
        // DRE register: X (f32 bits) | time (ns, low 32 bits).
        let (word, x) = cx.register(regs.dre, index, |v| {
            let x = self.decayed(v, now) + bytes;
            let word = ((x as f32).to_bits() as u64) << 32 | now as u32 as u64;
            (word, (word, x))
        })?;
        cx.publish(regs.dre_to_ingress, index, word)?;
        let metric = self.quantise(cx.port_rate, x);
        // CE ← max(CE, metric) on overlay packets.
        let Ok(info) = FrameInfo::parse(cx.frame) else { return Ok(()) };
        if is_vxlan(&info) {
            if let Some(ip) = info.ip {
                let at = ip.l4_offset as usize + udp::HEADER_LEN;
                if let Ok(mut v) = vxlan::Packet::new_checked(&mut cx.frame[at..]) {
                    if metric > v.ce() {
                        v.raise_ce(metric);
                        self.c.ce_raised += 1;
                    }
                }
            }
        }
        Ok(())
    }

    fn port_gauges(&self, view: &ScrapeView<'_>) -> Vec<(&'static str, PortId, f64)> {
        let Some(regs) = self.regs.filter(|_| self.leaf) else { return Vec::new() };
        (0..self.host_facing.len())
            .map(|p| PortId(p as u16))
            .filter(|p| !self.faces_host(*p))
            .map(|p| {
                let word = view.registers.snapshot(regs.dre_to_ingress, p.0 as u32 % DRE_PORTS).unwrap_or(0);
                let rate = view.port_rates.get(p.index()).copied().unwrap_or(BitRate::gbps(8));
                ("conga_local_metric", p, self.local_metric(word, rate, view.now) as f64)
            })
            .collect()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.c;
        vec![
            ("conga_flowlets", c.flowlets),
            ("conga_path_changes", c.path_changes),
            ("conga_encapsulated", c.encapsulated),
            ("conga_decapsulated", c.decapsulated),
            ("conga_unencapsulated_oversize", c.unencapsulated_oversize),
            ("conga_feedback_sent", c.feedback_sent),
            ("conga_feedback_received", c.feedback_received),
            ("conga_ce_raised", c.ce_raised),
        ]
    }
}

/// The registry entry of `conga` (see [`crate::REGISTRY`]).
pub const SCHEME: crate::Scheme = crate::Scheme {
    info,
    build: |p, s| Ok(Box::new(Conga::from_params(p)?.time_scaled(s))),
    metrics: crate::SchemeMetrics {
        counters: &[
            ("conga_flowlets", "Flowlets started (gap > flowlet timeout)."),
            ("conga_path_changes", "Flowlets that took another uplink than the previous one."),
            ("conga_encapsulated", "Packets encapsulated in the VXLAN overlay at the source leaf."),
            ("conga_decapsulated", "Packets decapsulated at the destination leaf."),
            ("conga_unencapsulated_oversize", "Packets sent without the overlay because they would exceed the MTU."),
            ("conga_feedback_sent", "Congestion-From-Leaf metrics piggy-backed to a source leaf (FB_LBTag/FB_Metric)."),
            ("conga_feedback_received", "Feedback metrics written into the Congestion-To-Leaf table."),
            ("conga_ce_raised", "Times a fabric port raised the overlay CE field (hop-by-hop max)."),
        ],
        gauges: &[],
        port_gauges: &[(
            "conga_local_metric",
            "3-bit level",
            "CONGA's quantised DRE of a fabric port (0–7), as the leaf's decision sees it.",
        )],
        distributions: &[],
    },
};
