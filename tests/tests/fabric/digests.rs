//! Results do not move by accident: fixed small runs (RoCE lossless with
//! ConWeave, RoCE IRN with DRILL, DCTCP with LetFlow, UDP with CONGA, on
//! leaf-spine-8x8 with AliStorage flows) whose `summary.json` and
//! `flows.csv` must hash to the digests checked in next to this file
//! (`digests.txt`). A speed-up must keep them; a deliberate change of
//! behaviour updates the file in the same commit, says why in the commit
//! message, and is regenerated with `WEFT_UPDATE_DIGESTS=1 cargo test
//! --release -p weft-tests digests`.

use crate::{run, shipped};
use emu_orchestrator::experiment::{RunOptions, Transport, WorkloadOptions};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fabric/digests.txt");

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A `--set key=value` pair.
type Set = (&'static str, &'static str);

/// (name, scheme, transport, --set, load).
const RUNS: &[(&str, &str, Transport, &[Set], f64)] = &[
    ("conweave-roce-lossless", "conweave", Transport::RoceLossless, &[], 0.8),
    ("drill-roce-irn", "drill", Transport::RoceIrn, &[], 0.5),
    ("letflow-dctcp", "letflow", Transport::Tcp, &[("tcp.cc", "dctcp")], 0.5),
    ("conga-udp", "conga", Transport::Udp, &[], 0.5),
    // TCP hosts with flows finishing while others wait to start (the
    // senders' round robin order: 17a021d changed it unseen by the runs
    // above).
    ("rps-tcp", "rps", Transport::Tcp, &[], 0.8),
];

fn digests() -> BTreeMap<String, (String, String)> {
    let cdf = emu_node::workload::FlowSizeCdf::named("alistorage").expect("shipped workload");
    RUNS.iter()
        .map(|(name, scheme, transport, set, load)| {
            let opts = RunOptions {
                scheme: Some(scheme.to_string()),
                transport: *transport,
                transport_params: set.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                seed: 7,
                workload: Some(WorkloadOptions { cdf: cdf.clone(), load: *load, flows: Some(1500), duration: u64::MAX }),
                ..RunOptions::default()
            };
            let s = run(shipped("leaf-spine-8x8"), &opts).summary;
            assert!(s.flows.iter().filter(|f| f.fct.is_some()).count() > 1200, "{name}: most flows complete");
            (name.to_string(), (hex((s.to_json() + "\n").as_bytes()), hex(s.flows_csv().as_bytes())))
        })
        .collect()
}

#[test]
fn fixed_runs_hash_to_the_checked_in_digests() {
    let got = digests();
    let text: String = got.iter().map(|(n, (s, f))| format!("{n} summary.json {s}\n{n} flows.csv {f}\n")).collect();
    if std::env::var("WEFT_UPDATE_DIGESTS").is_ok_and(|v| v == "1") {
        std::fs::write(FILE, &text).expect("write digests.txt");
        return;
    }
    let want = std::fs::read_to_string(FILE).expect("tests/tests/fabric/digests.txt");
    assert!(
        want == text,
        "results changed: a speed-up must keep them; for a deliberate change run \
         WEFT_UPDATE_DIGESTS=1 cargo test --release -p weft-tests digests and say why in the commit.\nwant:\n{want}\ngot:\n{text}"
    );
}
