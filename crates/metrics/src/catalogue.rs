//! Every metric weft exports (DESIGN §9): name, type, labels, unit and
//! meaning. The exposition takes its HELP text from here, `weft metrics`
//! prints it as the catalogue in `docs/METRICS.md`, and a test checks that
//! every scheme counter, gauge and distribution has an entry.
//!
//! Invariants: counter names end in `_total`; label values are bounded by
//! the fabric (switches, ports, queues, links, hosts, schemes and fixed
//! enumerations such as drop causes), never per flow.

/// Prometheus metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic counter.
    Counter,
    /// Current value.
    Gauge,
    /// Cumulative histogram (`_bucket`, `_sum`, `_count`).
    Histogram,
}

impl Kind {
    /// The name Prometheus uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric.
#[derive(Debug, Clone, Copy)]
pub struct MetricSpec {
    /// Full name.
    pub name: &'static str,
    /// Type.
    pub kind: Kind,
    /// Label names.
    pub labels: &'static [&'static str],
    /// Unit.
    pub unit: &'static str,
    /// Meaning.
    pub help: &'static str,
}

const fn m(name: &'static str, kind: Kind, labels: &'static [&'static str], unit: &'static str, help: &'static str) -> MetricSpec {
    MetricSpec { name, kind, labels, unit, help }
}

use Kind::{Counter as C, Gauge as G, Histogram as H};

const PORT: &[&str] = &["switch", "port", "link"];
const QUEUE: &[&str] = &["switch", "port", "link", "queue"];
const QUEUE_CAUSE: &[&str] = &["switch", "port", "link", "queue", "cause"];
const SWITCH: &[&str] = &["switch", "scheme"];
const SWITCH_CAUSE: &[&str] = &["switch", "scheme", "cause"];
const SWITCH_RESOURCE: &[&str] = &["switch", "scheme", "resource"];
const HOST: &[&str] = &["host"];
const LINK: &[&str] = &["link", "direction"];
const ACTOR: &[&str] = &["actor"];
const PROCESS: &[&str] = &["process"];

/// The fixed metrics.
pub const METRICS: &[MetricSpec] = &[
    m("weft_port_tx_bytes_total", C, PORT, "bytes", "Bytes the port transmitted (Ethernet frames without preamble/IFG)."),
    m("weft_port_tx_frames_total", C, PORT, "frames", "Frames the port transmitted."),
    m("weft_port_rx_bytes_total", C, PORT, "bytes", "Bytes the port received."),
    m("weft_port_rx_frames_total", C, PORT, "frames", "Frames the port received."),
    m("weft_port_pfc_pause_sent_total", C, PORT, "frames", "PFC pause (XOFF) frames the port sent upstream."),
    m("weft_port_pfc_resume_sent_total", C, PORT, "frames", "PFC resume (XON) frames the port sent upstream."),
    m("weft_port_pfc_received_total", C, PORT, "frames", "PFC frames the port received from its peer."),
    m("weft_port_up", G, PORT, "boolean", "1 while the port's link is up."),
    m("weft_port_line_rate_bytes_per_second", G, PORT, "bytes/s", "The port's current line rate in bytes per second (utilisation = rate(tx bytes) / this)."),
    m("weft_port_queued_bytes", G, PORT, "bytes", "Bytes queued in all queues of the port."),
    m("weft_queue_enqueued_frames_total", C, QUEUE, "frames", "Frames admitted to the queue (incl. cut-through)."),
    m("weft_queue_tx_bytes_total", C, QUEUE, "bytes", "Bytes the queue transmitted."),
    m("weft_queue_tx_frames_total", C, QUEUE, "frames", "Frames the queue transmitted."),
    m("weft_queue_drops_total", C, QUEUE_CAUSE, "frames", "Frames the traffic manager dropped at the queue; cause = dynamic_threshold | buffer_full."),
    m("weft_queue_ecn_marks_total", C, QUEUE, "frames", "Frames marked CE (RED at dequeue) from the queue."),
    m("weft_queue_depth_bytes", G, QUEUE, "bytes", "Bytes queued now."),
    m("weft_queue_peak_depth_bytes", G, QUEUE, "bytes", "Largest depth the queue has had."),
    m("weft_queue_depth_at_enqueue_bytes", H, QUEUE, "bytes", "Depth each arriving frame found ahead of it (buckets 0, 1 KiB … 8 MiB)."),
    m("weft_queue_paused", G, QUEUE, "boolean", "1 while the pipeline holds the queue paused (e.g. a ConWeave reorder queue)."),
    m("weft_queue_pfc_paused", G, QUEUE, "boolean", "1 while a received PFC pause stops the queue's priority class."),
    m("weft_switch_rx_frames_total", C, SWITCH, "frames", "Frames the switch received on front-panel ports."),
    m("weft_switch_pipeline_passes_total", C, SWITCH, "passes", "Ingress pipeline passes (incl. recirculations)."),
    m("weft_switch_recirculations_total", C, SWITCH, "passes", "Packets sent through the recirculation port."),
    m("weft_switch_mirrored_total", C, SWITCH, "frames", "Frames the program emitted as mirrored copies."),
    m("weft_switch_generated_total", C, SWITCH, "frames", "Frames of the packet generator."),
    m("weft_switch_to_cpu_total", C, SWITCH, "frames", "Frames punted to the CPU port."),
    m("weft_switch_ecn_marks_total", C, SWITCH, "frames", "Frames marked CE by the switch."),
    m("weft_switch_program_errors_total", C, SWITCH, "errors", "Runtime errors of the loaded program (register rule violations); the packet is dropped."),
    m("weft_switch_consumed_by_program_total", C, SWITCH, "frames", "Frames the program consumed (control packets; not drops)."),
    m("weft_switch_drops_total", C, SWITCH_CAUSE, "frames", "Frames the switch dropped; cause = malformed | oversize | unknown_ethertype | not_for_us | ttl | no_route | program | tm | link_down."),
    m("weft_switch_buffer_used_bytes", G, SWITCH, "bytes", "Shared buffer in use now (cells × cell size)."),
    m("weft_switch_buffer_peak_bytes", G, SWITCH, "bytes", "Largest shared buffer use so far."),
    m("weft_switch_buffer_size_bytes", G, SWITCH, "bytes", "Shared buffer size."),
    m("weft_switch_resource_used", G, SWITCH_RESOURCE, "units of the resource", "Tofino resources the loaded program (with the L3 tables) uses: stages, stateful ALUs, SRAM/TCAM blocks, hash units, PHV bits."),
    m("weft_switch_resource_available", G, SWITCH_RESOURCE, "units of the resource", "The target's budget of the resource."),
    m("weft_host_flows_started_total", C, HOST, "flows", "Flows whose first packet the host sent."),
    m("weft_host_flows_completed_total", C, HOST, "flows", "Sized flows fully acknowledged at the sender."),
    m("weft_host_fct_seconds", H, HOST, "seconds", "Flow completion time seen by the sender: first packet sent → last byte acknowledged (1 µs … 1 s)."),
    m("weft_host_fct_slowdown", H, HOST, "ratio", "FCT / the flow's FCT alone in the idle fabric (DESIGN §9; the base is computed analytically)."),
    m("weft_host_tx_bytes_total", C, HOST, "bytes", "Bytes the host's NIC sent."),
    m("weft_host_tx_frames_total", C, HOST, "frames", "Frames the host's NIC sent."),
    m("weft_host_rx_frames_total", C, HOST, "frames", "Frames the host's NIC received."),
    m("weft_host_rx_malformed_total", C, HOST, "frames", "Malformed frames the host received and dropped."),
    m("weft_host_pfc_received_total", C, HOST, "frames", "PFC frames the host received."),
    m("weft_host_retransmits_total", C, HOST, "packets", "Packets the host sent again (RoCE go-back-N / selective repeat, TCP)."),
    m("weft_host_naks_received_total", C, HOST, "packets", "RoCE NAKs (sequence errors) the host's senders received."),
    m("weft_host_naks_sent_total", C, HOST, "packets", "RoCE NAKs the host's receivers sent."),
    m("weft_host_cnps_received_total", C, HOST, "packets", "RoCE CNPs (DCQCN rate cuts) the host's senders received."),
    m("weft_host_timeouts_total", C, HOST, "events", "Retransmission timeouts (TCP)."),
    m("weft_host_out_of_order_total", C, HOST, "packets", "Packets the host's receivers got out of order."),
    m("weft_host_ecn_marked_total", C, HOST, "packets", "CE-marked packets the host's receivers got."),
    m("weft_tap_rx_frames_total", C, HOST, "frames", "Frames a real host (TAP device in its network namespace) sent into the fabric."),
    m("weft_tap_queue_drops_total", C, HOST, "frames", "Frames of a real host dropped because its emulated NIC queue was full."),
    m("weft_tap_link_down_drops_total", C, HOST, "frames", "Frames of a real host dropped because its link was down."),
    m("weft_link_transport_received_total", C, LINK, "frames", "Frames received over the inter-process transport (UDP/QUIC) of a link direction (real time only)."),
    m("weft_link_transport_lost_total", C, LINK, "frames", "Frames the transport lost (sequence gaps), apart from fabric drops."),
    m("weft_link_transport_reordered_total", C, LINK, "frames", "Frames the transport delivered out of sequence."),
    m("weft_link_pacing_late_total", C, LINK, "frames", "Frames that arrived after their due time (departure + serialization + delay)."),
    m("weft_link_pacing_lag_seconds_total", C, LINK, "seconds", "Sum of how late those frames were; rate(lag) / rate(late) is the mean pacing lag."),
    m("weft_actor_deadline_lag_seconds", H, ACTOR, "seconds", "How late an actor handled its deadlines in real time (frames and timers; 1 µs … 100 ms)."),
    m("weft_actor_link_down_drops_total", C, ACTOR, "frames", "Frames an actor discarded because the link was down."),
    m("weft_actor_send_errors_total", C, ACTOR, "frames", "Frames the transport could not send."),
    m("weft_process_transport_rejected_total", C, PROCESS, "datagrams", "Datagrams that were malformed, of another fabric or for a link the process does not hold."),
    m("weft_process_scrape_duration_seconds", G, PROCESS, "seconds", "How long the latest scrape took to gather the metrics."),
];

/// Histogram bounds of `weft_host_fct_seconds`: 1 µs to 1 s.
pub const FCT_BOUNDS: &[f64] =
    &[1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1.0];
/// Histogram bounds of `weft_host_fct_slowdown`.
pub const SLOWDOWN_BOUNDS: &[f64] = &[1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
/// Histogram bounds of `weft_actor_deadline_lag_seconds`.
pub const LAG_BOUNDS: &[f64] = &[1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1];

/// A scheme's counter: exported as `weft_scheme_<name>_total{switch, scheme}`.
pub const SCHEME_COUNTERS: &[(&str, &str)] = &[
    ("ecmp_failover_packets", "Packets ECMP sent to another member because the hashed uplink was down."),
    ("conweave_reroutes", "Connections the source ToR moved to a new path (RTT_REPLY timeout → TAIL + REROUTED)."),
    ("conweave_reroute_aborted_all_busy", "Reroutes abandoned because both sampled paths were busy (NOTIFY)."),
    ("conweave_epochs", "Epochs started at the source ToR."),
    ("conweave_epochs_by_inactivity", "Epochs started by θ_inactive instead of CLEAR."),
    ("conweave_path_changes_after_inactivity", "Connections that moved to a non-busy path after inactivity."),
    ("conweave_rtt_requests", "RTT_REQUEST marks sent (one per epoch)."),
    ("conweave_rtt_replies_sent", "RTT_REPLY control packets the destination ToR sent."),
    ("conweave_rtt_replies_in_time", "RTT_REPLYs that arrived within θ_reply."),
    ("conweave_rtt_reply_timeouts", "θ_reply expiries (a reroute is attempted)."),
    ("conweave_notify_sent", "NOTIFY packets sent for CE-marked data (path congested)."),
    ("conweave_notify_received", "NOTIFY packets received (path busy for θ_path_busy)."),
    ("conweave_clear_sent", "CLEAR packets the destination ToR sent (epoch done)."),
    ("conweave_clear_received", "CLEAR packets the source ToR received."),
    ("conweave_tail_packets", "Packets marked TAIL (last on the old path)."),
    ("conweave_rerouted_packets", "Packets marked REROUTED (on the new path)."),
    ("conweave_held_packets", "REROUTED packets held in a paused reorder queue until the TAIL."),
    ("conweave_reorder_queues_allocated", "Reorder queues allocated at the destination ToR."),
    ("conweave_reorder_alloc_failures", "REROUTED packets that found no free reorder queue (sent through queue 0)."),
    ("conweave_resume_on_tail", "Reorder queues resumed by their TAIL."),
    ("conweave_resume_expiries", "Reorder queues flushed at T_resume (TAIL late or lost)."),
    ("conweave_timer_passes", "Recirculations of the T_resume timer packet."),
    ("conweave_fallback_packets", "Packets forwarded by ECMP (non-RoCE, ACK/NAK/CNP, intra-rack, collisions)."),
    ("conweave_conn_collisions", "Connections whose table entry another active connection held (ECMP fallback)."),
    ("conga_flowlets", "Flowlets started (gap > flowlet timeout)."),
    ("conga_path_changes", "Flowlets that took another uplink than the previous one."),
    ("conga_encapsulated", "Packets encapsulated in the VXLAN overlay at the source leaf."),
    ("conga_decapsulated", "Packets decapsulated at the destination leaf."),
    ("conga_unencapsulated_oversize", "Packets sent without the overlay because they would exceed the MTU."),
    ("conga_feedback_sent", "Congestion-From-Leaf metrics piggy-backed to a source leaf (FB_LBTag/FB_Metric)."),
    ("conga_feedback_received", "Feedback metrics written into the Congestion-To-Leaf table."),
    ("conga_ce_raised", "Times a fabric port raised the overlay CE field (hop-by-hop max)."),
    ("letflow_flowlets", "Flowlets started (gap > flowlet timeout)."),
    ("letflow_path_changes", "Flowlets that took another uplink than the previous one."),
    ("drill_decisions", "Per-packet DRILL decisions (2 samples + remembered best)."),
    ("drill_path_changes", "Decisions that chose another port than the remembered best."),
];

/// A scheme's per-switch gauge: `weft_scheme_<name>{switch, scheme}`.
pub const SCHEME_GAUGES: &[(&str, &str, &str)] =
    &[("conweave_reorder_buffer_bytes", "bytes", "Bytes held in ConWeave reorder queues of the switch (sampled every 10 µs).")];

/// A scheme's per-port gauge: `weft_scheme_<name>{switch, scheme, port}`.
pub const SCHEME_PORT_GAUGES: &[(&str, &str, &str)] = &[
    ("conweave_reorder_queues_in_use", "queues", "Reorder queues allocated on a host-facing port now (of 31)."),
    ("conga_local_metric", "3-bit level", "CONGA's quantised DRE of a fabric port (0–7), as the leaf's decision sees it."),
];

/// A scheme's sampled distribution: histogram `weft_scheme_<name>{switch, scheme}` with these bounds.
pub const SCHEME_DISTRIBUTIONS: &[(&str, &str, &str, &[f64])] = &[
    (
        "conweave_reorder_queues_per_port",
        "queues",
        "Reorder queues in use per host-facing port, sampled every 10 µs of fabric time.",
        &[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 31.0],
    ),
    (
        "conweave_reorder_buffer_bytes_per_switch",
        "bytes",
        "Bytes in reorder queues per switch, sampled every 10 µs of fabric time.",
        &[0.0, 1e3, 1e4, 5e4, 1e5, 2.5e5, 5e5, 1e6, 2.5e6, 5e6, 1e7],
    ),
];

/// The spec of a fixed metric.
pub fn spec(name: &str) -> Option<&'static MetricSpec> {
    METRICS.iter().find(|s| s.name == name)
}

/// HELP text and type of any exported family (fixed or scheme).
pub fn describe(name: &str) -> Option<(String, Kind)> {
    if let Some(s) = spec(name) {
        return Some((s.help.to_string(), s.kind));
    }
    let inner = name.strip_prefix("weft_scheme_")?;
    if let Some(c) = inner.strip_suffix("_total") {
        if let Some((_, h)) = SCHEME_COUNTERS.iter().find(|(n, _)| *n == c) {
            return Some((h.to_string(), Kind::Counter));
        }
    }
    if let Some((_, _, h)) = SCHEME_GAUGES.iter().chain(SCHEME_PORT_GAUGES).find(|(n, _, _)| *n == inner) {
        return Some((h.to_string(), Kind::Gauge));
    }
    SCHEME_DISTRIBUTIONS.iter().find(|(n, ..)| *n == inner).map(|(_, _, h, _)| (h.to_string(), Kind::Histogram))
}

/// The catalogue as a Markdown table (`weft metrics`).
pub fn markdown() -> String {
    let mut s = String::from("| name | type | labels | unit | meaning |\n|---|---|---|---|---|\n");
    let row = |s: &mut String, name: &str, kind: Kind, labels: &[&str], unit: &str, help: &str| {
        s.push_str(&format!("| `{name}` | {} | {} | {unit} | {} |\n", kind.as_str(), labels.join(", "), help.replace('|', "\\|")));
    };
    for x in METRICS {
        row(&mut s, x.name, x.kind, x.labels, x.unit, x.help);
    }
    for (n, h) in SCHEME_COUNTERS {
        row(&mut s, &format!("weft_scheme_{n}_total"), Kind::Counter, SWITCH, "events", h);
    }
    for (n, u, h) in SCHEME_GAUGES {
        row(&mut s, &format!("weft_scheme_{n}"), Kind::Gauge, SWITCH, u, h);
    }
    for (n, u, h) in SCHEME_PORT_GAUGES {
        row(&mut s, &format!("weft_scheme_{n}"), Kind::Gauge, &["switch", "scheme", "port"], u, h);
    }
    for (n, u, h, _) in SCHEME_DISTRIBUTIONS {
        row(&mut s, &format!("weft_scheme_{n}"), Kind::Histogram, SWITCH, u, h);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_metrics_md_holds_the_current_catalogue() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/METRICS.md");
        let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(doc.contains(&markdown()), "docs/METRICS.md is stale: regenerate its catalogue with `weft metrics`");
    }

    #[test]
    fn counters_end_in_total_and_others_do_not() {
        for m in METRICS {
            assert_eq!(m.kind == Kind::Counter, m.name.ends_with("_total"), "{}", m.name);
            assert!(m.name.starts_with("weft_"), "{}", m.name);
        }
    }
}
