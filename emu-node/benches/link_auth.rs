//! Per-datagram cost of link authentication (`link::auth`):
//! the link header alone (what a datagram cost before) against header +
//! AES-256-GCM seal (or, between processes of one machine, the loopback
//! token) on the sender, and open + replay window on the receiver (on a
//! copy of the datagram, as the receiver's buffer is reused: the copy is in
//! the figure), for frames of 64, 1500 and 9000 bytes.
//! `cargo bench -p emu-node --bench link_auth`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use emu_node::link::auth::{LinkKey, LinkSecret, Protection, ReplayWindow};
use emu_node::link::header::LinkHeader;
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let key = LinkKey::new(&LinkSecret([0x5a; 32]));
    let mut g = c.benchmark_group("link_datagram");
    for len in [64usize, 1500, 9000] {
        let frame = vec![0xabu8; len];
        let h = LinkHeader { dir: 1, fabric: 7, link: 3, seq: 0, due: 1_000_000, sent: 990_000 };
        let mut buf = Vec::with_capacity(len + 64);
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(BenchmarkId::new("header_only", len), &len, |b, _| {
            b.iter(|| {
                h.emit(black_box(&frame), &mut buf);
                black_box(&buf);
            })
        });
        g.bench_with_input(BenchmarkId::new("header_and_seal", len), &len, |b, _| {
            b.iter(|| {
                h.emit(black_box(&frame), &mut buf);
                key.seal(&mut buf);
                black_box(&buf);
            })
        });
        g.bench_with_input(BenchmarkId::new("header_and_loopback_token", len), &len, |b, _| {
            b.iter(|| {
                h.emit(black_box(&frame), &mut buf);
                key.protect(&mut buf, Protection::Loopback);
                black_box(&buf);
            })
        });
        for (name, how) in [("open_and_replay_check", Protection::Sealed), ("loopback_token_and_replay_check", Protection::Loopback)] {
            h.emit(&frame, &mut buf);
            key.protect(&mut buf, how);
            let protected = buf.clone();
            let mut work = protected.clone();
            let mut window = ReplayWindow::default();
            let mut seq = 0u64;
            g.bench_with_input(BenchmarkId::new(name, len), &len, |b, _| {
                b.iter(|| {
                    work.copy_from_slice(black_box(&protected));
                    let body = key.open(&mut work).expect("genuine");
                    seq += 1;
                    black_box((LinkHeader::parse(body).is_ok(), window.accept(seq)))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
