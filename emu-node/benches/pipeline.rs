//! Per-packet cost of the switch pipeline (parse, L3 lookup, ECMP program,
//! MAC/TTL rewrite, traffic manager, serializer) on a warm cache, and of the
//! frame parser alone. `cargo bench -p emu-node --bench pipeline`.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use emu_node::fabric::FabricSpec;
use emu_node::ids::{NodeId, PortId};
use emu_node::schemes::ecmp::Ecmp;
use emu_node::switch::{Switch, SwitchConfig, Transmit};
use emu_node::time::BitRate;
use emu_node::wire::frame::FrameInfo;
use emu_node::wire::ipv4;
use std::hint::black_box;

fn leaf_with_8_uplinks() -> FabricSpec {
    weft_testkit::leaf_pair(1, 8, BitRate::gbps(100))
}

fn frame(f: &FabricSpec, sport: u16) -> BytesMut {
    weft_testkit::leaf_pair_udp_frame(f, sport, 4791, 1500)
}

fn bench(c: &mut Criterion) {
    let f = leaf_with_8_uplinks();
    let cfg = SwitchConfig::tofino2(1, true);
    let mut s = Switch::with_program(NodeId(0), &f.nodes[0], cfg, Box::new(Ecmp::default())).expect("switch");
    let frames: Vec<BytesMut> = (0..1024).map(|i| frame(&f, 49152 + i)).collect();
    let mut out: Vec<Transmit> = Vec::with_capacity(4);
    let mut now = 0u64;
    let port_mac = f.nodes[0].ports[0].mac;
    let mut g = c.benchmark_group("switch");
    g.throughput(Throughput::Elements(1));
    g.bench_function("ecmp_forward_1500B", |b| {
        // Frames are recycled: the frame that left is turned back into an
        // arriving one (MACs, TTL, checksum restored: ~10 ns of the figure),
        // so the measurement holds no allocation and no page fault.
        let mut pool: Vec<BytesMut> = frames.clone();
        let mut i = 0usize;
        b.iter(|| {
            i = (i + 1) & 1023;
            let fr = std::mem::take(&mut pool[i]);
            // 1 us apart: the egress port is idle, so the frame goes through
            // parse, L3, ECMP, rewrite, TM enqueue + dequeue and serializer.
            now += 1_000;
            s.handle_frame(now, PortId(0), fr, &mut out);
            let mut t = out.pop().expect("forwarded").frame;
            t[0..6].copy_from_slice(&port_mac.0);
            t[14 + 8] = 64;
            ipv4::Packet::new_unchecked(&mut t[14..]).fill_checksum();
            pool[i] = t;
        })
    });
    g.bench_function("frame_parse", |b| b.iter(|| black_box(FrameInfo::parse(black_box(&frames[7])))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
