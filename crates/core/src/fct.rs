//! Base flow completion time: the FCT of a flow alone on its path in the
//! idle fabric, computed analytically (ConWeave §4.1 "FCT slowdown").
//!
//! Formula: the flow's frames (payload + every header on the wire) leave
//! the source NIC back to back; on each link `j` (rate `r_j`, delay `d_j`)
//! frame `k` starts when it has fully arrived (store-and-forward) and the
//! link has finished frame `k-1`:
//!
//! ```text
//! start(k, j) = max(arrive(k, j), end(k-1, j))
//! end(k, j)   = start(k, j) + serialization(frame_k, r_j)   (exact to the ns)
//! arrive(k, j+1) = end(k, j) + d_j
//! ```
//!
//! and the base FCT is `arrive(last, L) - start(first, 0)`: serialization at
//! the bottleneck, propagation, and one store-and-forward serialization per
//! hop, with header overheads included because frame sizes are wire sizes.
//! Serialization uses the same [`Serializer`] as the ports, so a flow alone
//! in the engine finishes exactly at its base FCT.
//!
//! Two slowdown definitions ([`SlowdownDefinition`]):
//! - `weft`: FCT from the first packet sent to the last byte received (one
//!   way), over [`base_fct`];
//! - `ns3`: the ConWeave authors' (their ns-3 `scratch/network-load-balance.cc`,
//!   `qp_finish`, `CalculateRoute` and the pairRtt loop in `main`; the
//!   clamp at 1 is their `fctAnalysis.py`): FCT at the sender, from the
//!   flow's start to the last acknowledgment, over [`ns3_ideal_fct`] =
//!   base RTT + wire bytes × 8 / bottleneck rate, where base RTT = 2 × the
//!   path's link delays + the transmission time of one 1000 B payload on
//!   each link of the path; the slowdown is at least 1. weft counts its own
//!   wire bytes (58 B of headers per RoCE packet, 16 more on the first),
//!   the authors count 48 B per packet (their simulated headers). UDP flows
//!   have no acknowledgments: their `ns3` FCT ends at the last byte received.

use crate::fabric::FabricSpec;
use crate::serializer::Serializer;
use rustc_hash::FxHashMap;
use weft_tofino::l3::RouteTable;
use weft_wire::ids::NodeId;
use weft_wire::time::{BitRate, Nanos};
use weft_wire::Ipv4Address;

/// One link of a path, in the direction of the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathLink {
    /// Rate.
    pub rate: BitRate,
    /// Propagation delay.
    pub delay: Nanos,
}

/// Base FCT of frames of the given wire sizes on `path`, from the first
/// bit leaving the source to the last bit arriving at the destination.
///
/// On a path whose links all have one rate, with no frame longer than the
/// first (every flow the hosts send: the first frame carries the most
/// headers and a full payload), it is the closed form
/// `Σ d_j + (L - 1) × ser(first) + ser(all bits)` (`uniform_base_fct`),
/// which the recurrence above reaches exactly; otherwise the recurrence is
/// stepped frame by frame and link by link.
pub fn base_fct(frames: impl IntoIterator<Item = usize, IntoIter: Clone>, path: &[PathLink]) -> Nanos {
    let frames = frames.into_iter();
    uniform_base_fct(frames.clone(), path).unwrap_or_else(|| stepped_base_fct(frames, path))
}

/// [`base_fct`] in closed form where it applies (see there), `None`
/// elsewhere. Why it is exact, with `ser(b)` the serializer's rounded-up
/// time of `b` bits and `B_k` the bits of frames `0..=k`: the first link
/// sends back to back from 0, so frame `k` ends at `ser(B_k)`; if frame `k`
/// ends on link `j` at `C_j + ser(B_k)`, it reaches link `j + 1` at
/// `C_j + d_j + ser(B_k)`, where frame 0 opens a busy period and every later
/// frame arrives no later than its predecessor ends (`ser(B_k) ≤ ser(B_(k-1))
/// + ser(b_k) ≤ ser(B_(k-1)) + ser(b_0)`, rounding up being subadditive and
/// `b_k ≤ b_0`), so it continues the period and ends at `C_j + d_j + ser(b_0)
/// + ser(B_k)`: `C_(j+1) = C_j + d_j + ser(b_0)`.
fn uniform_base_fct(mut frames: impl Iterator<Item = usize>, path: &[PathLink]) -> Option<Nanos> {
    let (last, rest) = path.split_last()?;
    let rate = last.rate;
    if rate.bps() == 0 || rest.iter().any(|l| l.rate != rate) {
        return None;
    }
    let first = frames.next()?;
    let mut bytes = first as u128;
    for len in frames {
        if len > first {
            return None;
        }
        bytes += len as u128;
    }
    let delay: Nanos = path.iter().map(|l| l.delay).sum();
    let hops = rest.len() as Nanos;
    Some(delay + hops * rate.serialization_ns(first) + rate.serialization_ns_bits(bytes * 8))
}

/// [`base_fct`] by its recurrence, a serializer per link.
fn stepped_base_fct(frames: impl IntoIterator<Item = usize>, path: &[PathLink]) -> Nanos {
    let mut ports: Vec<Serializer> = path.iter().map(|l| Serializer::new(l.rate)).collect();
    let mut last_arrival = 0;
    for len in frames {
        let mut at = 0; // the source NIC may start at once
        for (j, l) in path.iter().enumerate() {
            let start = at.max(ports[j].busy_until());
            let end = ports[j].start(start, len);
            at = end + l.delay;
        }
        last_arrival = at;
    }
    last_arrival
}

/// Which FCT slowdown `summary.json`, the tables and the plots report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlowdownDefinition {
    /// Receiver-side FCT over the one-way store-and-forward base ([`base_fct`]).
    Weft,
    /// The ConWeave authors' simulator: sender-side FCT over [`ns3_ideal_fct`],
    /// at least 1. The default: it is what the ConWeave paper's figures use.
    #[default]
    Ns3,
}

impl SlowdownDefinition {
    /// The name used on the command line and in outputs.
    pub fn name(self) -> &'static str {
        match self {
            SlowdownDefinition::Weft => "weft",
            SlowdownDefinition::Ns3 => "ns3",
        }
    }
    /// What the slowdown divides, in a few words (table headers).
    pub fn describe(self) -> &'static str {
        match self {
            SlowdownDefinition::Weft => "weft: receiver FCT / one-way idle-path FCT",
            SlowdownDefinition::Ns3 => "ns3: sender FCT / (base RTT + wire bytes / bottleneck), as the ConWeave authors' simulator",
        }
    }
}

impl std::str::FromStr for SlowdownDefinition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "weft" => Ok(SlowdownDefinition::Weft),
            "ns3" => Ok(SlowdownDefinition::Ns3),
            other => Err(format!("unknown slowdown definition `{other}` (weft, ns3)")),
        }
    }
}

/// Payload whose per-link transmission time the authors' base RTT adds
/// (their `packet_payload_size`).
pub const NS3_RTT_PAYLOAD: u64 = 1000;

/// The ConWeave authors' ideal FCT of a flow of `frames` (wire sizes) on
/// `path`: `2 × Σ delay + Σ 1000 B × 8 / rate + Σ wire bytes × 8 /
/// min rate`, each term rounded down to the ns as their integer arithmetic
/// does (`CalculateRoute`: `packet_payload_size * 1e9 * 8 / bw` per link;
/// `qp_finish`: `total_bytes * 8e9 / b`).
pub fn ns3_ideal_fct(frames: impl IntoIterator<Item = usize>, path: &[PathLink]) -> Nanos {
    let delay: Nanos = path.iter().map(|l| l.delay).sum();
    let tx: Nanos = path.iter().map(|l| NS3_RTT_PAYLOAD * 8_000_000_000 / l.rate.bps().max(1)).sum();
    let bottleneck = path.iter().map(|l| l.rate.bps()).min().unwrap_or(1).max(1);
    let bytes: u64 = frames.into_iter().map(|f| f as u64).sum();
    2 * delay + tx + (bytes as u128 * 8_000_000_000 / bottleneck as u128) as Nanos
}

/// Wire sizes of a UDP flow of `size` payload bytes in packets of at most
/// `payload` bytes (Ethernet 14 + IPv4 20 + UDP 8 headers; each packet at
/// least `min_payload`).
pub fn udp_frames(size: u64, payload: u16, min_payload: u16) -> impl Iterator<Item = usize> + Clone {
    let p = payload.max(1) as u64;
    let full = size / p;
    let rest = size % p;
    let last = (rest > 0).then(|| rest.max(min_payload as u64));
    (0..full).map(move |_| p).chain(last).map(|b| 42 + b as usize)
}

/// Wire sizes of a RoCEv2 WRITE of `size` bytes in packets of `payload`
/// bytes (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4, RETH 16 on the
/// first packet).
pub fn roce_frames(size: u64, payload: u16) -> impl Iterator<Item = usize> + Clone {
    let p = payload.max(1) as u64;
    let n = size.div_ceil(p).max(1);
    (0..n).map(move |k| {
        let bytes = if k + 1 == n { size - p * k } else { p } as usize;
        crate::host::roce::DATA_OVERHEAD + bytes + if k == 0 { weft_wire::roce::RETH_LEN } else { 0 }
    })
}

/// Wire sizes of a TCP transfer of `size` bytes in `mss`-byte segments
/// (Ethernet 14 + IPv4 20 + TCP 20 headers).
pub fn tcp_frames(size: u64, mss: u16) -> impl Iterator<Item = usize> + Clone {
    let m = mss.max(1) as u64;
    let n = size.div_ceil(m).max(1);
    (0..n).map(move |k| crate::host::tcp::SEGMENT_OVERHEAD + (if k + 1 == n { size - m * k } else { m }) as usize)
}

/// The best path from host `src` to host `dst` through the switches'
/// equal-cost routes: the one with the highest bottleneck rate, then the
/// lowest total delay (what an ideal load balancer would give a flow alone
/// in the fabric). `None` if there is no route. For many flows, [`Paths`]
/// computes each pair once.
pub fn path(fabric: &FabricSpec, src: NodeId, dst: NodeId) -> Option<Vec<PathLink>> {
    best_path(fabric, &mut Vec::new(), src, dst)
}

/// The switches' route tables, each built the first time a path crosses
/// its switch (indexed by node).
type Tables = Vec<Option<RouteTable>>;

/// The link a path from `src` starts on: its first port's peer, that
/// link's rate and delay. A best path depends on `src` only through these.
fn first_hop(fabric: &FabricSpec, src: NodeId) -> Option<(NodeId, PathLink)> {
    let first = fabric.nodes.get(src.index())?.ports.first()?;
    let l = fabric.links.get(first.link.index())?;
    Some((first.peer, PathLink { rate: l.rate, delay: l.delay }))
}

/// [`path`], with the switches' route tables built so far in `tables`.
fn best_path(fabric: &FabricSpec, tables: &mut Tables, src: NodeId, dst: NodeId) -> Option<Vec<PathLink>> {
    let (peer, link) = first_hop(fabric, src)?;
    best_path_from(fabric, tables, peer, link, dst)
}

/// The best path that starts with `link` into `peer` and ends at `dst`.
///
/// A depth-first search over the equal-cost groups with one path buffer:
/// the members of a group are tried last first, and a complete path
/// replaces the best one only if strictly better, so among equally good
/// paths the first one found wins. A path of more than 64 links is not
/// extended (a routing loop).
fn best_path_from(fabric: &FabricSpec, tables: &mut Tables, peer: NodeId, link: PathLink, dst: NodeId) -> Option<Vec<PathLink>> {
    /// The search's fixed inputs and its best path so far, with that
    /// path's key: the bottleneck rate (higher is better), the total delay
    /// (lower is better).
    struct Search<'f> {
        fabric: &'f FabricSpec,
        dst: NodeId,
        dst_ip: Ipv4Address,
        best: Option<(BitRate, Nanos, Vec<PathLink>)>,
    }
    fn visit(s: &mut Search, tables: &mut Tables, node: NodeId, path: &mut Vec<PathLink>, rate: BitRate, delay: Nanos) {
        if node == s.dst {
            let better = s.best.as_ref().is_none_or(|(r, d, _)| (rate, std::cmp::Reverse(delay)) > (*r, std::cmp::Reverse(*d)));
            if better {
                s.best = Some((rate, delay, path.clone()));
            }
            return;
        }
        if path.len() > 64 {
            return;
        }
        let fabric = s.fabric;
        let Some(sw) = fabric.nodes.get(node.index()).and_then(|n| n.as_switch()) else { return };
        if tables.len() <= node.index() {
            tables.resize_with(node.index() + 1, || None);
        }
        let table = tables[node.index()].get_or_insert_with(|| RouteTable::new(&sw.routes));
        let Some((group, _)) = table.lookup_group(s.dst_ip) else { return };
        let members = table.group(group).len();
        for i in (0..members).rev() {
            let Some(p) = tables[node.index()].as_ref().map(|t| t.group(group)[i]) else { return };
            let Some(port) = fabric.nodes[node.index()].ports.get(p.index()) else { continue };
            let Some(l) = fabric.links.get(port.link.index()) else { continue };
            path.push(PathLink { rate: l.rate, delay: l.delay });
            visit(s, tables, port.peer, path, rate.min(l.rate), delay + l.delay);
            path.pop();
        }
    }
    let dst_ip: Ipv4Address = fabric.nodes.get(dst.index())?.as_host()?.ip;
    let mut s = Search { fabric, dst, dst_ip, best: None };
    let mut path = Vec::with_capacity(8);
    path.push(link);
    visit(&mut s, tables, peer, &mut path, link.rate, link.delay);
    s.best.map(|(_, _, p)| p)
}

/// The best paths ([`path`]) between the hosts of a fabric, each computed
/// once per (first link, destination) and every switch's route table built
/// once: the results of a run with 1 000 000 flows ask for most host pairs
/// of a 2 048-host fabric, but the hosts behind one ToR share their paths.
pub struct Paths<'a> {
    fabric: &'a FabricSpec,
    tables: Tables,
    host_of: FxHashMap<Ipv4Address, NodeId>,
    memo: FxHashMap<(NodeId, PathLink, NodeId), Option<Vec<PathLink>>>,
}

impl<'a> Paths<'a> {
    /// No path computed yet.
    pub fn new(fabric: &'a FabricSpec) -> Self {
        let mut host_of = FxHashMap::default();
        for (i, n) in fabric.nodes.iter().enumerate() {
            if let Some(h) = n.as_host() {
                // The first host with an address, as a search from the start would find.
                host_of.entry(h.ip).or_insert(NodeId(i as u32));
            }
        }
        Paths { fabric, tables: Vec::new(), host_of, memo: FxHashMap::default() }
    }

    /// The fabric.
    pub fn fabric(&self) -> &'a FabricSpec {
        self.fabric
    }

    /// The (first) host with address `ip`.
    pub fn host(&self, ip: Ipv4Address) -> Option<NodeId> {
        self.host_of.get(&ip).copied()
    }

    /// [`path`] from `src` to `dst`.
    pub fn get(&mut self, src: NodeId, dst: NodeId) -> Option<&[PathLink]> {
        let (fabric, tables) = (self.fabric, &mut self.tables);
        let (peer, link) = first_hop(fabric, src)?;
        self.memo.entry((peer, link, dst)).or_insert_with(|| best_path_from(fabric, tables, peer, link, dst)).as_deref()
    }
}

/// Bandwidth-delay product of the fabric: host link rate x the base RTT of
/// the longest path from the first host, where the RTT is the one-way time
/// of a full RoCE data packet (1000 B payload) plus that of its ACK. On
/// leaf-spine-8x8 this gives 104.5 KB, the ConWeave paper's 104 KB.
pub fn bdp_bytes(fabric: &FabricSpec) -> u64 {
    let hosts = fabric.hosts();
    let Some(&h0) = hosts.first() else { return 0 };
    let rate = fabric.nodes[h0.index()].ports.first().map_or(BitRate(0), |p| p.rate);
    let data = crate::host::roce::DATA_OVERHEAD + 1000;
    let ack = crate::host::roce::DATA_OVERHEAD + weft_wire::roce::AETH_LEN;
    // One set of route tables for every host's path (a fat tree with
    // thousands of hosts would otherwise rebuild them per host).
    let mut tables = Vec::new();
    let rtt = hosts
        .iter()
        .skip(1)
        .filter_map(|&h| best_path(fabric, &mut tables, h0, h))
        .map(|p| base_fct([data], &p) + base_fct([ack], &p))
        .max()
        .unwrap_or(0);
    rate.bytes_in(rtt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closed form is the recurrence, to the ns, on paths of one rate
    /// (odd rates such as the sped-up links of `compare-ns3 --packet-time
    /// ns3` included) with trains whose first frame is the longest; it
    /// declines the rest.
    #[test]
    fn the_closed_form_is_the_recurrence_where_it_applies() {
        let mut rand = crate::test_rand::below(7);
        let rates = [BitRate::gbps(100), BitRate::gbps(25), BitRate(102_123_552_123), BitRate(9_999_999_937), BitRate(1)];
        for round in 0..3000 {
            let rate = rates[rand(rates.len() as u64) as usize];
            let path: Vec<PathLink> = (0..rand(6) + 1).map(|_| PathLink { rate, delay: rand(3) * rand(5000) }).collect();
            let first = rand(9000) as usize + 1;
            let n = [1, 2, 3, rand(40) + 1, rand(3000) + 1][round % 5];
            let mut frames: Vec<usize> = (0..n).map(|_| if rand(3) == 0 { first } else { rand(first as u64) as usize + 1 }).collect();
            frames[0] = first;
            let want = stepped_base_fct(frames.iter().copied(), &path);
            assert_eq!(uniform_base_fct(frames.iter().copied(), &path), Some(want), "{rate:?} {path:?} {frames:?}");
            assert_eq!(base_fct(frames.iter().copied(), &path), want);
            // A later frame longer than the first, or a link of another
            // rate: the recurrence.
            frames.push(first + 1);
            assert_eq!(uniform_base_fct(frames.iter().copied(), &path), None);
            assert_eq!(base_fct(frames.iter().copied(), &path), stepped_base_fct(frames.iter().copied(), &path));
            let mut mixed = path.clone();
            mixed.push(PathLink { rate: BitRate(rate.bps() + 1), delay: 10 });
            assert_eq!(uniform_base_fct([first].into_iter(), &mixed), None);
        }
        assert_eq!(base_fct([0usize; 0], &[PathLink { rate: BitRate::gbps(100), delay: 5 }]), 0, "no frames");
        assert_eq!(base_fct([100], &[]), 0, "no links");
    }

    #[test]
    fn one_frame_is_serialization_per_hop_plus_propagation() {
        let p = [PathLink { rate: BitRate::gbps(100), delay: 1000 }; 4];
        // 1500 B: 120 ns per hop, store-and-forward on 4 links, 4 us propagation.
        assert_eq!(base_fct([1500], &p), 4 * 120 + 4000);
    }

    #[test]
    fn a_train_is_limited_by_the_bottleneck() {
        let p = [
            PathLink { rate: BitRate::gbps(100), delay: 1000 },
            PathLink { rate: BitRate::gbps(25), delay: 1000 },
            PathLink { rate: BitRate::gbps(100), delay: 1000 },
        ];
        // 100 frames of 1000 B: the 25G link needs 320 ns each.
        let fct = base_fct(std::iter::repeat_n(1000, 100), &p);
        assert_eq!(fct, 80 + 100 * 320 + 80 + 3000);
    }

    #[test]
    fn ns3_ideal_fct_is_base_rtt_plus_wire_bytes_at_the_bottleneck() {
        // 4 links of 100G, 1 us: base RTT 8 us + 4 x 80 ns = 8320 ns (the
        // authors' maxRtt on leaf-spine-8x8).
        let p = [PathLink { rate: BitRate::gbps(100), delay: 1000 }; 4];
        assert_eq!(ns3_ideal_fct([], &p), 8320);
        // 1000 B of payload in one RoCE packet: 1074 wire bytes = 85.92 ns.
        assert_eq!(ns3_ideal_fct(roce_frames(1000, 1000), &p), 8320 + 85);
    }

    #[test]
    fn udp_frames_count_headers() {
        let v: Vec<usize> = udp_frames(3000, 1472, 16).collect();
        assert_eq!(v, vec![1514, 1514, 42 + 56]);
        let v: Vec<usize> = udp_frames(5, 1472, 16).collect();
        assert_eq!(v, vec![42 + 16]);
    }
}
