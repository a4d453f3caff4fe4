//! The links a fabric cuts between emu-node processes, and what their
//! delay became (`weft status`, docs/MACHINES.md "The underlay's latency").
//!
//! A frame sent across processes carries its due time on the fabric clock,
//! which every emu-node shares within its clock estimate's uncertainty; the
//! receiver holds it until then. So the underlay's one-way latency `u` is
//! taken out of a cut link's configured delay `d` by construction: the
//! frame waits `d - u` at the receiver. Only where `u > d` does a frame
//! arrive late, and the link's achieved delay becomes `u`. This module
//! puts the configured delay, the underlay's latency the receiver measured
//! (arrival - the header's send time) and the achieved delay side by side,
//! and warns where the underlay is slower than the configuration.
//!
//! Invariants: one row per link direction whose ends are in two processes;
//! numbers come only from the receiving process's last report; a direction
//! no frame crossed yet has no underlay figure (and no warning).

use emu_node::fabric::FabricSpec;
use emu_node::ids::LinkId;
use emu_node::runtime::ProcessReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One direction of a link cut between two processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutLinkStatus {
    /// The link's name.
    pub link: String,
    /// Sending node and receiving node (`leaf0->spine1`).
    pub direction: String,
    /// Where the sender and receiver run: machine names with `--machines`,
    /// else `emu-node P`.
    pub from: String,
    /// See `from`.
    pub to: String,
    /// The link's configured one-way delay now (the topology's, or the last
    /// `weft link LINK delay`), ns.
    pub configured_ns: u64,
    /// Frames received over this direction.
    pub frames: u64,
    /// The underlay's one-way latency, smallest and mean over those frames,
    /// ns (absent until a frame crossed).
    pub underlay_min_ns: Option<u64>,
    /// See `underlay_min_ns`.
    pub underlay_mean_ns: Option<u64>,
    /// The delay the frames got on average: configured, plus how late the
    /// late ones arrived, ns.
    pub achieved_mean_ns: u64,
    /// Frames that arrived after their due time.
    pub late: u64,
}

impl CutLinkStatus {
    /// A warning when the underlay alone is slower than the configured
    /// delay (then the link's delay is the underlay's, not the topology's).
    pub fn warning(&self) -> Option<String> {
        let min = self.underlay_min_ns?;
        (min > self.configured_ns).then(|| {
            format!(
                "link {} ({}, {} -> {}): the underlay takes {} one way, more than the configured delay {}: {} of its {} frames arrived late and were handled late, {} of delay on average instead of {}",
                self.link,
                self.direction,
                self.from,
                self.to,
                us(min),
                us(self.configured_ns),
                self.late,
                self.frames,
                us(self.achieved_mean_ns),
                us(self.configured_ns)
            )
        })
    }
}

fn us(ns: u64) -> String {
    format!("{:.1} us", ns as f64 / 1e3)
}

/// Every direction of every link whose ends run in two processes, from the
/// processes' last reports. `delays` holds the delays changed since the
/// start; `place` names where a process runs.
pub fn cut_links(
    f: &FabricSpec,
    reports: &BTreeMap<u32, ProcessReport>,
    delays: &BTreeMap<LinkId, u64>,
    place: impl Fn(u32) -> String,
) -> Vec<CutLinkStatus> {
    let mut rows = Vec::new();
    for (i, l) in f.links.iter().enumerate() {
        let (pa, pb) = (f.nodes[l.a.0.index()].placement, f.nodes[l.b.0.index()].placement);
        if pa == pb {
            continue;
        }
        let configured_ns = delays.get(&LinkId(i as u32)).copied().unwrap_or(l.delay);
        for dir in [0u8, 1] {
            let (from, to, receiver) = if dir == 0 { (l.a.0, l.b.0, pb) } else { (l.b.0, l.a.0, pa) };
            let sender = if dir == 0 { pa } else { pb };
            let t = reports.get(&receiver).and_then(|r| r.transport.iter().find(|t| t.link == i as u32 && t.dir == dir));
            let underlay = t.and_then(|t| t.underlay_ns());
            rows.push(CutLinkStatus {
                link: l.name.clone(),
                direction: format!("{}->{}", f.nodes[from.index()].name, f.nodes[to.index()].name),
                from: place(sender),
                to: place(receiver),
                configured_ns,
                frames: t.map_or(0, |t| t.seq.received),
                underlay_min_ns: underlay.map(|u| u.0),
                underlay_mean_ns: underlay.map(|u| u.1),
                achieved_mean_ns: t.map_or(configured_ns, |t| t.achieved_delay_ns(configured_ns)),
                late: t.map_or(0, |t| t.late),
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use emu_node::link::remote::TransportReport;

    fn report(process: u32, transport: Vec<TransportReport>) -> ProcessReport {
        ProcessReport { process, transport, ..Default::default() }
    }

    #[test]
    fn a_cut_link_shows_its_underlay_and_warns_only_when_the_underlay_is_slower() {
        let topo = crate::config::topology::Topology::load("leaf-spine-2x4-rt").expect("shipped topology");
        let mut f = topo.fabric;
        // leaf0 and its hosts in process 0, everything else in process 1.
        let leaf0 = f.node_by_name("leaf0").expect("leaf0");
        for n in f.nodes.iter_mut() {
            n.placement = 1;
        }
        f.nodes[leaf0.index()].placement = 0;
        let hosts: Vec<_> =
            f.links.iter().filter(|l| l.a.0 == leaf0 || l.b.0 == leaf0).map(|l| if l.a.0 == leaf0 { l.b.0 } else { l.a.0 }).collect();
        for h in hosts {
            if f.nodes[h.index()].as_host().is_some() {
                f.nodes[h.index()].placement = 0;
            }
        }
        let cut: Vec<usize> = (0..f.links.len())
            .filter(|&i| f.nodes[f.links[i].a.0.index()].placement != f.nodes[f.links[i].b.0.index()].placement)
            .collect();
        assert_eq!(cut.len(), 4, "leaf0's four uplinks");
        let l = cut[0] as u32;
        let configured = f.links[cut[0]].delay;
        // Direction 0 received in process 1: 100 frames, underlay 30..50 us,
        // none late. Direction 1 nothing yet.
        let mut t = TransportReport { link: l, dir: 0, transit_min_ns: 30_000, transit_sum_ns: 4_000_000, ..Default::default() };
        t.seq.received = 100;
        // The direction from process 0 to process 1.
        t.dir = if f.nodes[f.links[cut[0]].a.0.index()].placement == 0 { 0 } else { 1 };
        let reports = BTreeMap::from([(1, report(1, vec![t])), (0, report(0, vec![]))]);
        let place = |p: u32| format!("m{}", p + 1);
        let rows = cut_links(&f, &reports, &BTreeMap::new(), place);
        assert_eq!(rows.len(), 8, "two directions of four links");
        let r = rows.iter().find(|r| r.link == f.links[cut[0]].name && r.to == "m2").expect("the measured direction");
        assert_eq!((r.frames, r.underlay_min_ns, r.underlay_mean_ns), (100, Some(30_000), Some(40_000)));
        assert_eq!((r.from.as_str(), r.configured_ns, r.achieved_mean_ns), ("m1", configured, configured));
        let other = rows.iter().find(|r| r.link == f.links[cut[0]].name && r.to == "m1").expect("the other direction");
        assert_eq!((other.frames, other.underlay_min_ns), (0, None));
        // 10 us configured (the topology's links), 30 us underlay: warned,
        // with the achieved delay; 40 of the frames 20 us late on average.
        let mut late = t;
        late.late = 40;
        late.late_ns = 800_000;
        let reports = BTreeMap::from([(1, report(1, vec![late]))]);
        let rows = cut_links(&f, &reports, &BTreeMap::from([(LinkId(l), 10_000)]), place);
        let r = rows.iter().find(|r| r.link == f.links[cut[0]].name && r.to == "m2").expect("row");
        assert_eq!(r.achieved_mean_ns, 10_000 + 8_000);
        let w = r.warning().expect("a warning");
        assert!(
            w.contains("30.0 us one way")
                && w.contains("configured delay 10.0 us")
                && w.contains("40 of its 100 frames arrived late")
                && w.contains("18.0 us of delay on average"),
            "{w}"
        );
        // 1 ms configured: no warning.
        let rows = cut_links(&f, &reports, &BTreeMap::from([(LinkId(l), 1_000_000)]), place);
        assert!(rows.iter().all(|r| r.warning().is_none()));
    }
}
