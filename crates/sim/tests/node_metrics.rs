//! The metrics of every scheme and transport, collected from nodes of a
//! virtual-time engine, are in the catalogue; completed flows fill the FCT
//! histograms once (weft-metrics' `collect`, driven by weft-sim).
use prometheus::proto::MetricType;
use weft_core::fabric::NodeKind;
use weft_core::node::{HostTransport, Node, NodeConfig};
use weft_metrics::{catalogue, FamilySet, NodeMetrics};
use weft_sim::engine::Engine;
use weft_testkit::{fat_tree4, leaf_pair};
use weft_wire::time::BitRate;

/// Every family a node can produce is in the catalogue, with its type
/// and label names: the catalogue in the docs cannot go stale.
fn assert_catalogued(set: &FamilySet) {
    for f in set.families() {
        let (_, kind) = catalogue::describe(f.name()).unwrap_or_else(|| panic!("{} is not in the catalogue", f.name()));
        let ty = match kind {
            catalogue::Kind::Counter => MetricType::COUNTER,
            catalogue::Kind::Gauge => MetricType::GAUGE,
            catalogue::Kind::Histogram => MetricType::HISTOGRAM,
        };
        assert_eq!(f.get_field_type(), ty, "{}", f.name());
        if let Some(spec) = catalogue::spec(f.name()) {
            for m in f.get_metric() {
                let names: Vec<&str> = m.get_label().iter().map(|l| l.name()).collect();
                assert_eq!(names, spec.labels, "{}", f.name());
            }
        }
    }
}

#[test]
fn every_scheme_and_transport_exports_only_catalogued_metrics() {
    for info in weft_schemes::catalog() {
        // A fat-tree for the schemes made for them (LBSP refuses others).
        let mut f = if info.name == "lbsp" { fat_tree4(BitRate::gbps(100)) } else { leaf_pair(2, 2, BitRate::gbps(100)) };
        for n in &mut f.nodes {
            if let NodeKind::Switch(s) = &mut n.kind {
                s.scheme = info.name.to_string();
            }
        }
        for transport in
            [HostTransport::Udp, HostTransport::Roce(weft_core::host::RoceConfig::lossless()), HostTransport::Tcp(Default::default())]
        {
            let e = Engine::new(&f, &NodeConfig { transport, ..NodeConfig::default() }).unwrap_or_else(|e| panic!("{}: {e}", info.name));
            let mut set = FamilySet::new();
            for (i, n) in e.nodes().iter().enumerate() {
                NodeMetrics::new().collect(&f, i, n, 0, &mut set);
            }
            assert_catalogued(&set);
            let names: Vec<&str> = set.families().map(|x| x.name()).collect();
            for needed in
                ["weft_port_tx_bytes_total", "weft_switch_resource_used", "weft_host_fct_seconds", "weft_host_flows_started_total"]
            {
                assert!(names.contains(&needed), "{} lacks {needed}", info.name);
            }
            if info.name == "conweave" {
                assert!(names.contains(&"weft_scheme_conweave_reroutes_total"));
                assert!(names.contains(&"weft_scheme_conweave_reorder_queues_in_use"));
                assert!(names.contains(&"weft_scheme_conweave_reorder_queues_per_port"));
            }
            if info.name == "conga" {
                assert!(names.contains(&"weft_scheme_conga_local_metric"));
            }
        }
    }
}

#[test]
fn completed_flows_fill_the_fct_and_slowdown_histograms_once() {
    let f = leaf_pair(2, 2, BitRate::gbps(100));
    let cfg = NodeConfig { transport: HostTransport::Roce(weft_core::host::RoceConfig::lossless()), ..NodeConfig::default() };
    let mut e = Engine::new(&f, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let hosts = f.hosts();
    let (src, dst) = (hosts[0], hosts[hosts.len() - 1]);
    let dst_ip = f.nodes[dst.index()].as_host().map(|h| h.ip).unwrap_or_default();
    for k in 0..4u32 {
        let flow = weft_core::host::SizedFlow::new(weft_wire::ids::FlowId(k), dst_ip, 20_000, k as u64 * 100_000, 1000 + k as u16, 0);
        if let Some(Node::RoceHost(h)) = e.node_mut(src) {
            h.add_flow(flow);
        }
        e.refresh(src);
    }
    let mut m = NodeMetrics::new();
    let mut seen = 0;
    for step in 1..=20u64 {
        e.run_until(step * 50_000, u64::MAX);
        let mut set = FamilySet::new();
        m.collect(&f, src.index(), &e.nodes()[src.index()], e.now(), &mut set);
        let fam = |n: &str| set.families().find(|x| x.name() == n).cloned().unwrap_or_default();
        let done = fam("weft_host_flows_completed_total").get_metric()[0].get_counter().get_value() as u64;
        let h = fam("weft_host_fct_seconds");
        let fct = h.get_metric()[0].get_histogram();
        assert_eq!(fct.get_sample_count(), done, "one observation per completed flow");
        assert!(done >= seen, "completions never go back");
        seen = done;
        let sd = fam("weft_host_fct_slowdown");
        let sd = sd.get_metric()[0].get_histogram();
        assert_eq!(sd.get_sample_count(), done);
        if done > 0 {
            assert!(sd.get_sample_sum() / done as f64 >= 1.0, "a flow cannot beat its idle-fabric FCT");
            assert!(fct.get_sample_sum() / done as f64 > 1e-6 && fct.get_sample_sum() / (done as f64) < 1e-3);
        }
    }
    assert_eq!(seen, 4);
}
