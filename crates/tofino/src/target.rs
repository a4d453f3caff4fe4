//! Target profiles: the budgets of one chip (docs/ARCHITECTURE.md#the-tofino2-model).
//!
//! Figures for Tofino2 and Tofino1 come from Intel's public descriptions as
//! summarised in docs/ARCHITECTURE.md#the-tofino2-model; `unlimited` lifts every limit for experiments
//! that ignore the chip. Every figure can be overridden per switch.
//!
//! `bmv2` and `bmv2-opt` are the P4 software switch (p4lang/behavioral-model's
//! `simple_switch`) that Mininet testbeds run: no chip budgets, but a
//! [`SoftwarePipeline`] that serves packets one at a time at a measured
//! per-packet cost instead of line rate (docs/ARCHITECTURE.md#the-bmv2-target).

use serde::{Deserialize, Serialize};
use weft_wire::time::BitRate;

/// The budgets and fixed costs of one switch ASIC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetProfile {
    /// Profile name (`tofino1`, `tofino2`, `unlimited`).
    pub name: String,
    /// Match-action stages per pipeline (ingress and egress each).
    pub stages: u8,
    /// Stateful ALUs per stage (one register array each).
    pub salus_per_stage: u32,
    /// SRAM blocks per stage.
    pub sram_blocks_per_stage: u32,
    /// Bits per SRAM block (1K words x 128 bit).
    pub sram_block_bits: u64,
    /// TCAM blocks per stage.
    pub tcam_blocks_per_stage: u32,
    /// TCAM block geometry: entries x key bits.
    pub tcam_block_entries: u32,
    /// TCAM block key width in bits.
    pub tcam_block_key_bits: u32,
    /// Hash distribution units per stage.
    pub hash_units_per_stage: u32,
    /// Width of one hash unit's output in bits.
    pub hash_unit_bits: u32,
    /// Widest register a SALU can update, in bits.
    pub max_register_bits: u32,
    /// PHV capacity in bits.
    pub phv_bits: u32,
    /// VLIW instructions per stage.
    pub vliw_per_stage: u32,
    /// Queues per egress port (32 default, up to 128).
    pub queues_per_port: u8,
    /// Buffer cells in the shared packet buffer.
    pub buffer_cells: u32,
    /// Bytes per buffer cell.
    pub cell_bytes: u32,
    /// Recirculation port bandwidth.
    pub recirculation_rate: BitRate,
    /// Latency of one recirculation (back to ingress), ns.
    pub recirculation_latency_ns: u64,
    /// Guaranteed minimum of the recirculation port's queue, in cells, from
    /// the traffic manager's MIN pool (Tofino's per-queue guaranteed
    /// minimum, open-p4studio `traffic_mgr_q_intf.h`,
    /// `bf_tm_q_guaranteed_min_limit_set`): packets a program recirculates
    /// (its timers) are admitted within it whatever the shared pool holds.
    /// 2 048 cells hold one timer packet for every reorder queue of a
    /// 64-port ConWeave switch at once.
    #[serde(default = "default_recirculation_min_cells")]
    pub recirculation_min_cells: u32,
    /// CPU (PCIe) port rate.
    pub cpu_port_rate: BitRate,
    /// A software switch's packet-at-a-time pipeline (`None`: an ASIC,
    /// whose pipeline keeps up with line rate on every port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software: Option<SoftwarePipeline>,
}

/// The timing of a software switch's pipeline, after BMv2's `simple_switch`
/// (p4lang/behavioral-model `targets/simple_switch/simple_switch.cpp`): every
/// frame received on any port waits in one input buffer (`InputBuffer`,
/// 1 024 packets, constructor `SimpleSwitch::SimpleSwitch`) for the one
/// ingress thread (`SimpleSwitch::ingress_thread`: parser and ingress
/// pipeline for all ports), which takes a per-packet time; then egress
/// queues of 64 packets per port (`egress_buffers`, same constructor) that
/// drop when full, drained at the port's rate, in bits as a Mininet link
/// shapes it or in packets per second as `set_egress_queue_rate` does.
///
/// Invariants: frames leave the input buffer in arrival order, one every
/// service time, never two at once; the mean service time is
/// `per_packet_ns` whatever the jitter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SoftwarePipeline {
    /// Mean time the ingress thread spends on one packet, ns.
    pub per_packet_ns: u64,
    /// Coefficient of variation of that time, 0 (every packet takes
    /// exactly `per_packet_ns`) to 1 (exponentially distributed): a
    /// service time is `per_packet_ns x ((1 - jitter) + jitter x E)`, `E` a
    /// unit exponential draw from the switch's seeded RNG.
    pub jitter: f64,
    /// Frames the input buffer holds; one arriving at a full buffer is
    /// dropped (BMv2 blocks the receiving interface, whose queue then
    /// drops).
    pub input_buffer_packets: u32,
    /// Drop-tail limit of every egress queue in packets, unless the
    /// topology sets `queue_limit`.
    pub queue_packets: u32,
}

impl SoftwarePipeline {
    /// One service time, drawn with the unit exponential `unit_exp`.
    pub fn service_ns(&self, unit_exp: f64) -> u64 {
        let j = self.jitter.clamp(0.0, 1.0);
        let t = self.per_packet_ns as f64 * ((1.0 - j) + j * unit_exp);
        (t.round() as u64).max(1)
    }
}

fn default_recirculation_min_cells() -> u32 {
    2048
}

impl TargetProfile {
    /// Intel Tofino2: 20 stages, 4 SALUs, 80 SRAM / 24 TCAM blocks per stage,
    /// 384K cells x 176 B, 400 Gbit/s recirculation.
    pub fn tofino2() -> Self {
        TargetProfile {
            name: "tofino2".into(),
            stages: 20,
            salus_per_stage: 4,
            sram_blocks_per_stage: 80,
            sram_block_bits: 128 * 1024,
            tcam_blocks_per_stage: 24,
            tcam_block_entries: 512,
            tcam_block_key_bits: 44,
            hash_units_per_stage: 6,
            hash_unit_bits: 52,
            max_register_bits: 128,
            phv_bits: 5120,
            vliw_per_stage: 32,
            queues_per_port: 32,
            buffer_cells: 384 * 1024,
            cell_bytes: 176,
            recirculation_rate: BitRate::gbps(400),
            recirculation_latency_ns: 1_000,
            recirculation_min_cells: default_recirculation_min_cells(),
            cpu_port_rate: BitRate::gbps(25),
            software: None,
        }
    }
    /// Intel Tofino1: 12 stages, 280K cells x 80 B, 100 Gbit/s recirculation.
    pub fn tofino1() -> Self {
        TargetProfile {
            name: "tofino1".into(),
            stages: 12,
            max_register_bits: 64,
            phv_bits: 4096 + 2048,
            buffer_cells: 280 * 1024,
            cell_bytes: 80,
            recirculation_rate: BitRate::gbps(100),
            cpu_port_rate: BitRate::gbps(10),
            ..Self::tofino2()
        }
    }
    /// No limits (budgets so large nothing is rejected).
    pub fn unlimited() -> Self {
        TargetProfile {
            name: "unlimited".into(),
            stages: 255,
            salus_per_stage: u32::MAX / 1024,
            sram_blocks_per_stage: u32::MAX / 1024,
            tcam_blocks_per_stage: u32::MAX / 1024,
            hash_units_per_stage: u32::MAX / 1024,
            max_register_bits: 128,
            phv_bits: u32::MAX / 1024,
            vliw_per_stage: u32::MAX / 1024,
            queues_per_port: 128,
            buffer_cells: u32::MAX / 1024,
            recirculation_rate: BitRate::gbps(100_000),
            ..Self::tofino2()
        }
    }
    /// BMv2's `simple_switch` as the P4 tutorials and Mininet testbeds
    /// build it (the default `./configure`, logging macros compiled in):
    /// 300 µs per packet, about 3 300 packets/s through the one ingress
    /// thread. Published measurements of that build: iperf TCP through one
    /// `simple_switch` at about 30 Mbit/s (<https://github.com/p4lang/behavioral-model/issues/537>) and
    /// 24 Mbit/s (`simple_switch_grpc`, <https://github.com/p4lang/behavioral-model/issues/1172>), i.e. 2 000 to
    /// 2 500 data packets of 1 500 B plus their ACKs (one per two segments),
    /// 3 000 to 3 750 packets/s. No published figure gives the spread of
    /// per-packet times; the maintainers call it "very inconsistent"
    /// (docs/performance.md), so the jitter is 0.5 (an assumption; `packet_jitter`
    /// in a topology changes it). 8 queues per port (`--priority-queues`'s
    /// most), no shared buffer (each queue is bounded in packets).
    pub fn bmv2() -> Self {
        TargetProfile {
            name: "bmv2".into(),
            queues_per_port: 8,
            software: Some(SoftwarePipeline { per_packet_ns: 300_000, jitter: 0.5, input_buffer_packets: 1024, queue_packets: 64 }),
            ..Self::unlimited()
        }
    }
    /// BMv2 built for speed (`--disable-logging-macros --disable-elogger`,
    /// `-O3`): 12.5 µs per packet, the "around 1Gbps, or 80,000pps" of
    /// p4lang/behavioral-model docs/performance.md (its Mininet benchmark,
    /// `simple_router.p4`, one switch, AWS c4.2xlarge).
    pub fn bmv2_optimized() -> Self {
        TargetProfile {
            name: "bmv2-opt".into(),
            software: Some(SoftwarePipeline { per_packet_ns: 12_500, jitter: 0.5, input_buffer_packets: 1024, queue_packets: 64 }),
            ..Self::bmv2()
        }
    }
    /// Profile by name.
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "tofino2" => Some(Self::tofino2()),
            "tofino1" => Some(Self::tofino1()),
            "unlimited" => Some(Self::unlimited()),
            "bmv2" => Some(Self::bmv2()),
            "bmv2-opt" => Some(Self::bmv2_optimized()),
            _ => None,
        }
    }
    /// Names of the built-in profiles.
    pub const NAMES: [&'static str; 5] = ["tofino2", "tofino1", "unlimited", "bmv2", "bmv2-opt"];
    /// Shared buffer size in bytes.
    pub fn buffer_bytes(&self) -> u64 {
        self.buffer_cells as u64 * self.cell_bytes as u64
    }
}
