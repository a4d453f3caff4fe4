//! Target profiles: the budgets of one chip (docs/ARCHITECTURE.md#the-tofino2-model).
//!
//! Figures for Tofino2 and Tofino1 come from Intel's public descriptions as
//! summarised in docs/ARCHITECTURE.md#the-tofino2-model; `unlimited` lifts every limit for experiments
//! that ignore the chip. Every figure can be overridden per switch.

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
    /// Profile by name.
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "tofino2" => Some(Self::tofino2()),
            "tofino1" => Some(Self::tofino1()),
            "unlimited" => Some(Self::unlimited()),
            _ => None,
        }
    }
    /// Names of the built-in profiles.
    pub const NAMES: [&'static str; 3] = ["tofino2", "tofino1", "unlimited"];
    /// Shared buffer size in bytes.
    pub fn buffer_bytes(&self) -> u64 {
        self.buffer_cells as u64 * self.cell_bytes as u64
    }
}
