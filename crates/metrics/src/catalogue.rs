//! Every metric weft exports (docs/RESULTS.md): name, type, labels, unit and
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

use weft_schemes::REGISTRY;
use Kind::{Counter as C, Gauge as G, Histogram as H};

const PORT: &[&str] = &["switch", "port", "link"];
const QUEUE: &[&str] = &["switch", "port", "link", "queue"];
const QUEUE_CAUSE: &[&str] = &["switch", "port", "link", "queue", "cause"];
const SWITCH: &[&str] = &["switch", "scheme"];
const SWITCH_CAUSE: &[&str] = &["switch", "scheme", "cause"];
const SWITCH_RESOURCE: &[&str] = &["switch", "scheme", "resource"];
const INT_PATH: &[&str] = &["switch", "source_leaf", "port", "link"];
const HOST: &[&str] = &["host"];
const HOST_CAUSE: &[&str] = &["host", "cause"];
const LINK: &[&str] = &["link", "direction"];
const ACTOR: &[&str] = &["actor"];
const PROCESS: &[&str] = &["process"];
const PROCESS_CAUSE: &[&str] = &["process", "cause"];

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
    m("weft_queue_drops_total", C, QUEUE_CAUSE, "frames", "Frames the traffic manager dropped at the queue; cause = dynamic_threshold | buffer_full | pfc_watchdog (its priority was in a PFC storm, `--set tm.pfc_watchdog`)."),
    m("weft_queue_ecn_marks_total", C, QUEUE, "frames", "Frames marked CE (RED at dequeue) from the queue."),
    m("weft_queue_depth_bytes", G, QUEUE, "bytes", "Bytes queued now."),
    m("weft_queue_peak_depth_bytes", G, QUEUE, "bytes", "Largest depth the queue has had."),
    m("weft_queue_depth_at_enqueue_bytes", H, QUEUE, "bytes", "Depth each arriving frame found ahead of it (buckets 0, 1 KiB … 8 MiB)."),
    m("weft_queue_paused", G, QUEUE, "boolean", "1 while the pipeline holds the queue paused (e.g. a ConWeave reorder queue)."),
    m("weft_queue_pfc_paused", G, QUEUE, "boolean", "1 while a received PFC pause stops the queue's priority class."),
    m("weft_queue_pfc_watchdog_storms_total", C, QUEUE, "storms", "PFC storms the watchdog declared on the queue's priority while it held packets (`--set tm.pfc_watchdog`)."),
    m("weft_queue_pfc_watchdog_forwarded_frames_total", C, QUEUE, "frames", "Frames the queue sent in a PFC storm although their priority was paused (watchdog action forward)."),
    m("weft_switch_rx_frames_total", C, SWITCH, "frames", "Frames the switch received on front-panel ports."),
    m("weft_switch_pipeline_passes_total", C, SWITCH, "passes", "Ingress pipeline passes (incl. recirculations)."),
    m("weft_switch_recirculations_total", C, SWITCH, "passes", "Packets sent through the recirculation port."),
    m("weft_switch_mirrored_total", C, SWITCH, "frames", "Frames the program emitted as mirrored copies."),
    m("weft_switch_generated_total", C, SWITCH, "frames", "Frames of the packet generator."),
    m("weft_switch_to_cpu_total", C, SWITCH, "frames", "Frames punted to the CPU port."),
    m("weft_switch_ecn_marks_total", C, SWITCH, "frames", "Frames marked CE by the switch."),
    m("weft_switch_program_errors_total", C, SWITCH, "errors", "Runtime errors of the loaded program (register rule violations); the packet is dropped."),
    m("weft_switch_consumed_by_program_total", C, SWITCH, "frames", "Frames the program consumed (control packets; not drops)."),
    m("weft_switch_drops_total", C, SWITCH_CAUSE, "frames", "Frames the switch dropped; cause = malformed | oversize | unknown_ethertype | not_for_us | ttl | no_route | program | tm | link_down | restart (queued when the switch restarted) | recirculation (a recirculated packet, e.g. a timer, refused beyond the recirculation queue's guaranteed minimum)."),
    m("weft_switch_restarts_total", C, SWITCH, "restarts", "Restarts of the switch (`weft node SWITCH restart`, a restart event): each lost the switch's register state."),
    m("weft_switch_buffer_used_bytes", G, SWITCH, "bytes", "Shared buffer in use now (cells × cell size)."),
    m("weft_switch_buffer_peak_bytes", G, SWITCH, "bytes", "Largest shared buffer use so far."),
    m("weft_switch_buffer_size_bytes", G, SWITCH, "bytes", "Shared buffer size."),
    m("weft_switch_resource_used", G, SWITCH_RESOURCE, "units of the resource", "Tofino resources the loaded program (with the L3 tables) uses: stages, stateful ALUs, SRAM/TCAM blocks, hash units, PHV bits."),
    m("weft_switch_resource_available", G, SWITCH_RESOURCE, "units of the resource", "The target's budget of the resource."),
    m("weft_int_path_hop_latency_seconds", G, INT_PATH, "seconds", "INT collector (int-nexthop sinks): largest hop latency along the path from source_leaf arriving on port, as last reported."),
    m("weft_int_path_queue_bytes", G, INT_PATH, "bytes", "INT collector: largest queue occupancy along the path, as last reported."),
    m("weft_int_path_utilization", G, INT_PATH, "DRE value", "INT collector: largest link utilisation (DRE) along the path, as last reported."),
    m("weft_int_path_congestion", G, INT_PATH, "0..3", "INT collector: the path's degree of congestion (sum of the min-max-normalised metrics)."),
    m("weft_int_path_best", G, INT_PATH, "boolean", "1 if the port is the sink's best port towards source_leaf (what new flowlets take there)."),
    m("weft_int_path_reports_total", C, INT_PATH, "reports", "Telemetry reports (data packets and probes) the sink has had of the path."),
    m("weft_host_flows_started_total", C, HOST, "flows", "Flows whose first packet the host sent."),
    m("weft_host_flows_completed_total", C, HOST, "flows", "Sized flows fully acknowledged at the sender."),
    m("weft_host_fct_seconds", H, HOST, "seconds", "Flow completion time seen by the sender: first packet sent → last byte acknowledged (1 µs … 1 s)."),
    m("weft_host_fct_slowdown", H, HOST, "ratio", "FCT / the flow's FCT alone in the idle fabric (docs/RESULTS.md; the base is computed analytically)."),
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
    m("weft_tap_queue_drops_total", C, HOST, "frames", "Frames of a real host dropped because its emulated NIC queue was full (only when the link slows down under a full queue: otherwise the reader waits)."),
    m("weft_tap_reader_pauses_total", C, HOST, "pauses", "Times weft stopped reading a real host's TAP because its emulated NIC queue was full (back-pressure: the host's qdisc holds the packets)."),
    m("weft_tap_link_down_drops_total", C, HOST, "frames", "Frames of a real host dropped because its link was down."),
    m("weft_tap_super_frames_total", C, HOST, "packets", "TCP/UDP super-frames (TSO/USO, up to 64 KB) a real host's kernel handed its NIC model, which cut them into MTU frames (segmentation offload; the fabric sees only the frames)."),
    m("weft_tap_offload_errors_total", C, HOST, "packets", "Packets with a virtio-net header a real host sent that could not be segmented (not IPv4 TCP/UDP, or offsets outside the frame): dropped."),
    m("weft_tap_tx_packets_total", C, HOST, "packets", "Packets weft wrote into a real host's TAP (frames, or coalesced runs of them with segmentation offload)."),
    m("weft_tap_coalesced_packets_total", C, HOST, "packets", "Of weft_tap_tx_packets_total, packets that coalesce several in-order TCP segments due together (GRO toward the host)."),
    m("weft_tap_coalesced_segments_total", C, HOST, "frames", "The fabric's MTU frames inside weft_tap_coalesced_packets_total."),
    m("weft_tap_rx_ring_drops_total", C, HOST, "frames", "Frames toward a VM host (kind rxe) dropped because its NIC's receive ring was full."),
    m("weft_tap_link_loss_drops_total", C, HOST, "frames", "Frames of a real host lost at random on its link toward the ToR (link loss probability)."),
    m(
        "weft_tap_rejected_total",
        C,
        HOST_CAUSE,
        "frames",
        "Frames of a real host the edge refused (they never entered the fabric); cause = malformed | bad_ipv4_checksum | bad_icrc | oversize | unknown_ethertype | pfc | spoofed_source | fabric_control (a frame a switch would take for the fabric's own control traffic: LBSP, P4TE feedback or hop option, ConWeave BTH bits or timer, INT shim, VXLAN overlay, IPv4 to a switch address).",
    ),
    m("weft_link_transport_received_total", C, LINK, "frames", "Frames received over the inter-process transport (UDP/QUIC) of a link direction (real time only)."),
    m("weft_link_transport_lost_total", C, LINK, "frames", "Frames the transport lost (sequence gaps), apart from fabric drops."),
    m("weft_link_transport_reordered_total", C, LINK, "frames", "Frames the transport delivered out of sequence."),
    m("weft_link_pacing_late_total", C, LINK, "frames", "Frames that arrived after their due time (departure + serialization + delay)."),
    m("weft_link_pacing_lag_seconds_total", C, LINK, "seconds", "Sum of how late those frames were; rate(lag) / rate(late) is the mean pacing lag."),
    m(
        "weft_link_underlay_seconds_total",
        C,
        LINK,
        "seconds",
        "Sum of the underlay's one-way latency (arrival - the sender's send time, on the synchronised fabric clock) of the frames received; rate(underlay) / rate(received) is the mean. A frame waits for its due time, so the configured delay holds while this stays below it.",
    ),
    m(
        "weft_link_underlay_min_seconds",
        G,
        LINK,
        "seconds",
        "The smallest one-way latency of the underlay seen on a link direction: the physical network's part of the link's delay. Above the configured delay, frames arrive late.",
    ),
    m("weft_actor_deadline_lag_seconds", H, ACTOR, "seconds", "How late an actor handled its deadlines in real time (frames and timers; 1 µs … 100 ms)."),
    m("weft_actor_link_down_drops_total", C, ACTOR, "frames", "Frames an actor discarded because the link was down."),
    m("weft_actor_link_loss_drops_total", C, ACTOR, "frames", "Frames an actor's port lost at random because its link has a loss probability (`weft link LINK loss P`, a topology loss event)."),
    m("weft_actor_send_errors_total", C, ACTOR, "frames", "Frames the transport could not send."),
    m(
        "weft_actor_overload_drops_total",
        C,
        ACTOR,
        "frames",
        "Frames dropped because they reached the actor more than the process's max lag after they were due: the emulation could not keep up (bounded-lag policy).",
    ),
    m(
        "weft_actor_late_frames_total",
        C,
        ACTOR,
        "frames",
        "Frames an actor handled later than the fabric's smallest link delay after they were due: late by more than any link is long, so the fabric on time might have treated them otherwise (the faithfulness report of `weft status` and `weft down`).",
    ),
    m(
        "weft_process_cpu_seconds_total",
        C,
        PROCESS,
        "seconds",
        "CPU time the emu-node process has used, every thread, user and system: beside wall time, how much of a core the emulation needed.",
    ),
    m(
        "weft_process_transport_rejected_total",
        C,
        PROCESS_CAUSE,
        "datagrams",
        "Link datagrams the process refused; cause = malformed | foreign (another fabric's tag) | forged (authentication tag or loopback token does not verify) | replayed (sequence number already delivered, or older than the 128-frame replay window) | unknown_link.",
    ),
    m("weft_process_scrape_duration_seconds", G, PROCESS, "seconds", "How long the latest scrape took to gather the metrics."),
    m("weft_process_metrics_stale_nodes", G, PROCESS, "nodes", "Nodes whose metrics in the latest scrape are from an earlier one: their actor did not answer before the scrape's deadline (a long mailbox on a loaded machine)."),
];

/// Histogram bounds of `weft_host_fct_seconds`: 1 µs to 1 s.
pub const FCT_BOUNDS: &[f64] =
    &[1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2, 0.5, 1.0];
/// Histogram bounds of `weft_host_fct_slowdown`.
pub const SLOWDOWN_BOUNDS: &[f64] = &[1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0, 200.0, 500.0, 1000.0];
/// Histogram bounds of `weft_actor_deadline_lag_seconds`.
pub const LAG_BOUNDS: &[f64] = &[1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1];

/// Every scheme's counters (name, help): `weft_scheme_<name>_total{switch, scheme}`.
pub fn scheme_counters() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    REGISTRY.iter().flat_map(|s| s.metrics.counters)
}

/// Every scheme's per-switch gauges (name, unit, help): `weft_scheme_<name>{switch, scheme}`.
pub fn scheme_gauges() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)> {
    REGISTRY.iter().flat_map(|s| s.metrics.gauges)
}

/// Every scheme's per-port gauges: `weft_scheme_<name>{switch, scheme, port}`.
pub fn scheme_port_gauges() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str)> {
    REGISTRY.iter().flat_map(|s| s.metrics.port_gauges)
}

/// Every scheme's sampled distributions (name, unit, help, bounds):
/// histogram `weft_scheme_<name>{switch, scheme}`.
pub fn scheme_distributions() -> impl Iterator<Item = &'static (&'static str, &'static str, &'static str, &'static [f64])> {
    REGISTRY.iter().flat_map(|s| s.metrics.distributions)
}

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
        if let Some((_, h)) = scheme_counters().find(|(n, _)| *n == c) {
            return Some((h.to_string(), Kind::Counter));
        }
    }
    if let Some((_, _, h)) = scheme_gauges().chain(scheme_port_gauges()).find(|(n, _, _)| *n == inner) {
        return Some((h.to_string(), Kind::Gauge));
    }
    scheme_distributions().find(|(n, ..)| *n == inner).map(|(_, _, h, _)| (h.to_string(), Kind::Histogram))
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
    for (n, h) in scheme_counters() {
        row(&mut s, &format!("weft_scheme_{n}_total"), Kind::Counter, SWITCH, "events", h);
    }
    for (n, u, h) in scheme_gauges() {
        row(&mut s, &format!("weft_scheme_{n}"), Kind::Gauge, SWITCH, u, h);
    }
    for (n, u, h) in scheme_port_gauges() {
        row(&mut s, &format!("weft_scheme_{n}"), Kind::Gauge, &["switch", "scheme", "port"], u, h);
    }
    for (n, u, h, _) in scheme_distributions() {
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
