//! A log of the 802.1Qbb pause frames a node receives, per port and
//! priority: what the ConWeave authors' simulator writes as its `pfc.txt`
//! (`network-load-balance.cc`, `get_pfc`, called by a `QbbNetDevice` on
//! every PFC frame it receives: time, node, interface, pause or resume), so
//! the two can be compared instant by instant.
//!
//! Off unless a driver turns it on ([`PfcLog::enable`]); then every PFC frame
//! a switch port or host NIC receives appends one [`PfcEvent`] per priority
//! it names, in the order received. Nothing else reads it, so a run's
//! results are the same with it on or off.

use serde::Serialize;
use weft_wire::ids::PortId;
use weft_wire::time::Nanos;

/// One priority of one received PFC frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PfcEvent {
    /// When the frame was received.
    pub at: Nanos,
    /// The port it came in on (0 for a host).
    pub port: PortId,
    /// The priority (0-7).
    pub class: u8,
    /// Pause (quanta > 0) or resume (quanta 0).
    pub pause: bool,
}

/// The log: `None` until enabled.
#[derive(Debug, Clone, Default)]
pub struct PfcLog(Option<Vec<PfcEvent>>);

impl PfcLog {
    /// Starts recording.
    pub fn enable(&mut self) {
        self.0.get_or_insert_with(Vec::new);
    }
    /// Records the priorities of a PFC frame (`quanta` per priority,
    /// `class_enable` the priorities it names) received on `port` at `at`.
    pub fn record(&mut self, at: Nanos, port: PortId, class_enable: u8, quanta: &[u16; 8]) {
        if let Some(log) = &mut self.0 {
            for c in 0..8u8 {
                if class_enable & (1 << c) != 0 {
                    log.push(PfcEvent { at, port, class: c, pause: quanta[c as usize] != 0 });
                }
            }
        }
    }
    /// What was recorded (empty when off).
    pub fn events(&self) -> &[PfcEvent] {
        self.0.as_deref().unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_each_named_priority_only_when_enabled() {
        let mut log = PfcLog::default();
        let mut q = [0u16; 8];
        q[3] = 0xffff;
        log.record(5, PortId(1), 1 << 3, &q);
        assert!(log.events().is_empty());
        log.enable();
        log.record(10, PortId(2), (1 << 3) | (1 << 5), &q);
        assert_eq!(
            log.events(),
            &[PfcEvent { at: 10, port: PortId(2), class: 3, pause: true }, PfcEvent { at: 10, port: PortId(2), class: 5, pause: false }]
        );
    }
}
