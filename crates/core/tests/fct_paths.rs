//! The best path of the base FCT ([`weft_core::fct::path`] and its memo
//! [`weft_core::fct::Paths`]): highest bottleneck rate, then lowest delay.

use weft_core::fabric::FabricSpec;
use weft_core::fct::{path, PathLink, Paths};
use weft_wire::ids::NodeId;
use weft_wire::time::{BitRate, Nanos};

#[test]
fn the_best_path_has_the_highest_bottleneck_then_the_lowest_delay() {
    let mut f = weft_testkit::fat_tree4(BitRate::gbps(100));
    let link = |f: &FabricSpec, name: &str| f.links.iter().position(|l| l.name == name).unwrap();
    // Of pod 0's four ways up, one is slow, one long, one a nanosecond longer: core1 is best.
    let slow = link(&f, "agg0_1-core2");
    f.links[slow].rate = BitRate::gbps(25);
    let long = link(&f, "agg0_0-core0");
    f.links[long].delay += 5000;
    let longer = link(&f, "agg0_1-core3");
    f.links[longer].delay += 1;
    let node = |name: &str| NodeId(f.nodes.iter().position(|n| n.name == name).unwrap() as u32);
    let (h0, h1, h8) = (node("h0"), node("h1"), node("h8"));
    let best = vec![PathLink { rate: BitRate::gbps(100), delay: 1000 }; 6];
    assert_eq!(path(&f, h0, h8), Some(best.clone()));
    // h1 sits behind the same edge switch: the same path, from the memo too.
    let mut paths = Paths::new(&f);
    assert_eq!(paths.get(h0, h8), Some(&best[..]));
    assert_eq!(paths.get(h1, h8), Some(&best[..]));
    assert_eq!(path(&f, h1, h8), Some(best));
    // Back from h8, pod 0's links are the last hops: the same rule.
    let back = path(&f, h8, h0).unwrap();
    assert_eq!((back.iter().map(|l| l.rate).min(), back.iter().map(|l| l.delay).sum::<Nanos>()), (Some(BitRate::gbps(100)), 6000));
}
