//! The switch's L3 table: longest-prefix match from destination IPv4 to an
//! equal-cost group of egress ports and the loaded program's data of the
//! route (the `ipv4_lpm` + `nexthop_group` tables every program is loaded
//! with; the data is the route's action data, which the program defines
//! through `Program::route_data`).
//!
//! Layout: the table is one open-addressed array of 32-byte slots keyed by
//! (masked prefix, prefix length), each holding its route's equal-cost
//! ports inline (up to [`INLINE_PORTS`]; larger groups sit in a side list)
//! and its program data, so a probe that hits touches one cache line and
//! the ports come with it. The prefix lengths present are kept inline in
//! the table, longest first.
//!
//! The two longest prefix lengths each have a 256-bit filter of the keys
//! present: a lookup whose bit is clear skips that length's probe. In a
//! Clos fabric a ToR holds its own hosts' /32 routes and a /24 per other
//! ToR; a packet for another rack would otherwise pay a probe (a cache
//! miss once the tables outgrow the caches) for a /32 that is not there.
//!
//! Invariant: prefix lengths are probed longest first; a lookup costs at
//! most one probe per distinct prefix length present (two in Clos
//! fabrics); a filter's bit is set for every key of its length present,
//! so a skipped probe would have missed; the array is at most half full,
//! so a probe ends at an empty slot.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use weft_wire::ids::PortId;
use weft_wire::Ipv4Address;

/// An IPv4 route: prefix → equal-cost egress ports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Route {
    /// Network address.
    pub prefix: Ipv4Address,
    /// Prefix length.
    pub len: u8,
    /// Equal-cost egress ports.
    pub ports: Vec<PortId>,
    /// Index of the leaf (ToR) the prefix's hosts attach to, in the order of
    /// the fabric's leaf index (`SwitchSpec::leaf_index`); schemes that keep
    /// per-destination-ToR state use it (CONGA's tables, ConWeave's path
    /// status).
    #[serde(default)]
    pub dst_leaf: Option<u16>,
}

/// Handle of a route's equal-cost group in the table that gave it
/// ([`RouteTable::lookup_group`], [`RouteTable::group`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupId(pub u32);

/// Equal-cost ports a slot holds inline.
pub const INLINE_PORTS: usize = 10;

/// `Slot::len` of an empty slot (prefix lengths are 0..=32).
const EMPTY: u8 = u8::MAX;
/// `Slot::ports_n` of a group in the side list (`ports[0]` and `ports[1]`
/// hold its index, low and high 16 bits).
const WIDE: u8 = u8::MAX;

/// One route: 32 bytes, so a slot never straddles a cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(32))]
struct Slot {
    key: u32,
    len: u8,
    ports_n: u8,
    has_data: bool,
    data: u32,
    ports: [PortId; INLINE_PORTS],
}

const _: () = assert!(std::mem::size_of::<Slot>() == 32);

const EMPTY_SLOT: Slot = Slot { key: 0, len: EMPTY, ports_n: 0, has_data: false, data: 0, ports: [PortId(0); INLINE_PORTS] };

/// LPM table with equal-cost groups.
#[derive(Debug, Clone)]
pub struct RouteTable {
    slots: Vec<Slot>,
    /// Prefix lengths present, longest first (`lens[..lens_n]`).
    lens: [u8; 33],
    lens_n: u8,
    /// For `lens[k]`, k < [`FILTERED`]: bit [`filter_bit`] of every key of
    /// that length present.
    filters: [[u64; 4]; FILTERED],
    /// Groups of more than [`INLINE_PORTS`] ports, each once.
    wide: Vec<Vec<PortId>>,
    entries: usize,
}

impl Default for RouteTable {
    fn default() -> Self {
        RouteTable { slots: Vec::new(), lens: [0; 33], lens_n: 0, filters: [[0; 4]; FILTERED], wide: Vec::new(), entries: 0 }
    }
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32))
    }
}

/// Prefix lengths (the longest ones) with a filter of the keys present.
const FILTERED: usize = 2;

/// The hash of (masked prefix, length): its bits 32 and up choose the
/// first slot to probe ([`home`]), bits 24..32 the filter bit
/// ([`filter_bit`]).
#[inline(always)]
fn hash(key: u32, len: u8) -> u64 {
    ((key as u64) | (len as u64) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The first slot to probe for hash `h` in a table of `slots_mask + 1` slots.
#[inline(always)]
fn home(h: u64, slots_mask: usize) -> usize {
    (h >> 32) as usize & slots_mask
}

/// The filter bit of hash `h`: (word, mask).
#[inline(always)]
fn filter_bit(h: u64) -> (usize, u64) {
    let b = (h >> 24) as u8;
    ((b >> 6) as usize, 1 << (b & 63))
}

impl RouteTable {
    /// Builds the table from routes, with no program data.
    pub fn new(routes: &[Route]) -> Self {
        Self::with_data(routes, |_| None)
    }

    /// Builds the table from routes, each with the data `data` gives it (a
    /// later route for the same prefix replaces an earlier one).
    pub fn with_data(routes: &[Route], data: impl Fn(&Route) -> Option<u32>) -> Self {
        let mut t = RouteTable::default();
        let size = (routes.len() * 2).next_power_of_two().max(4);
        t.slots = vec![EMPTY_SLOT; size];
        let slots_mask = size - 1;
        let mut wide_index: FxHashMap<&[PortId], u32> = FxHashMap::default();
        for r in routes {
            let len = r.len.min(32);
            let key = r.prefix.0 & mask(len);
            let d = data(r);
            let mut slot = Slot { key, len, ports_n: 0, has_data: d.is_some(), data: d.unwrap_or(0), ports: [PortId(0); INLINE_PORTS] };
            if r.ports.len() <= INLINE_PORTS {
                slot.ports_n = r.ports.len() as u8;
                slot.ports[..r.ports.len()].copy_from_slice(&r.ports);
            } else {
                let w = *wide_index.entry(&r.ports).or_insert_with(|| {
                    t.wide.push(r.ports.clone());
                    (t.wide.len() - 1) as u32
                });
                slot.ports_n = WIDE;
                slot.ports[0] = PortId(w as u16);
                slot.ports[1] = PortId((w >> 16) as u16);
            }
            let mut i = home(hash(key, len), slots_mask);
            while t.slots[i].len != EMPTY && (t.slots[i].key, t.slots[i].len) != (key, len) {
                i = (i + 1) & slots_mask;
            }
            t.slots[i] = slot;
            if !t.lens[..t.lens_n as usize].contains(&len) {
                t.lens[t.lens_n as usize] = len;
                t.lens_n += 1;
            }
            t.entries += 1;
        }
        t.lens[..t.lens_n as usize].sort_by_key(|&l| std::cmp::Reverse(l));
        for s in t.slots.iter().filter(|s| s.len != EMPTY) {
            if let Some(k) = t.lens[..(t.lens_n as usize).min(FILTERED)].iter().position(|&l| l == s.len) {
                let (w, bit) = filter_bit(hash(s.key, s.len));
                t.filters[k][w] |= bit;
            }
        }
        t
    }

    /// The slot of `dst`'s longest-prefix route.
    #[inline]
    fn find(&self, dst: Ipv4Address) -> Option<usize> {
        let slots_mask = self.slots.len().wrapping_sub(1);
        for (k, &len) in self.lens[..self.lens_n as usize].iter().enumerate() {
            let key = dst.0 & mask(len);
            let h = hash(key, len);
            if let Some(filter) = self.filters.get(k) {
                let (w, bit) = filter_bit(h);
                if filter[w] & bit == 0 {
                    continue;
                }
            }
            let mut i = home(h, slots_mask);
            loop {
                let s = &self.slots[i];
                if s.len == len && s.key == key {
                    return Some(i);
                }
                if s.len == EMPTY {
                    break;
                }
                i = (i + 1) & slots_mask;
            }
        }
        None
    }

    #[inline]
    fn slot_data(s: &Slot) -> Option<u32> {
        s.has_data.then_some(s.data)
    }

    /// The ports of the route in slot `i`.
    #[inline]
    fn ports(&self, i: usize) -> &[PortId] {
        let Some(s) = self.slots.get(i) else { return &[] };
        if s.ports_n == WIDE {
            let w = s.ports[0].0 as usize | (s.ports[1].0 as usize) << 16;
            self.wide.get(w).map_or(&[], Vec::as_slice)
        } else {
            &s.ports[..s.ports_n as usize]
        }
    }

    /// The group for `dst`, longest prefix first.
    #[inline]
    pub fn lookup(&self, dst: Ipv4Address) -> Option<&[PortId]> {
        self.lookup_with_data(dst).map(|(g, _)| g)
    }

    /// The group and route data of `dst`'s longest-prefix route, by handle
    /// (see [`RouteTable::group`]).
    #[inline]
    pub fn lookup_group(&self, dst: Ipv4Address) -> Option<(GroupId, Option<u32>)> {
        let i = self.find(dst)?;
        Some((GroupId(i as u32), Self::slot_data(&self.slots[i])))
    }

    /// The egress ports of group `g` (empty for a handle of another table).
    #[inline]
    pub fn group(&self, g: GroupId) -> &[PortId] {
        self.ports(g.0 as usize)
    }

    /// The group for `dst` and the program's data of its route.
    #[inline]
    pub fn lookup_with_data(&self, dst: Ipv4Address) -> Option<(&[PortId], Option<u32>)> {
        let i = self.find(dst)?;
        Some((self.ports(i), Self::slot_data(&self.slots[i])))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let t = RouteTable::new(&[
            Route { prefix: Ipv4Address::new(10, 0, 1, 0), len: 24, ports: vec![PortId(4), PortId(5)], dst_leaf: Some(1) },
            Route { prefix: Ipv4Address::new(10, 0, 1, 7), len: 32, ports: vec![PortId(1)], dst_leaf: Some(1) },
        ]);
        assert_eq!(t.lookup(Ipv4Address::new(10, 0, 1, 7)), Some(&[PortId(1)][..]));
        assert_eq!(t.lookup(Ipv4Address::new(10, 0, 1, 8)), Some(&[PortId(4), PortId(5)][..]));
        assert_eq!(t.lookup(Ipv4Address::new(10, 0, 2, 8)), None);
    }

    #[test]
    fn data_default_route_wide_groups_and_replacement() {
        let wide: Vec<PortId> = (0..(INLINE_PORTS as u16 + 5)).map(PortId).collect();
        let mut routes = vec![
            Route { prefix: Ipv4Address::new(0, 0, 0, 0), len: 0, ports: wide.clone(), dst_leaf: None },
            Route { prefix: Ipv4Address::new(10, 1, 0, 0), len: 16, ports: vec![PortId(3)], dst_leaf: Some(2) },
        ];
        // Many /24s, so probes collide and wrap.
        for i in 0..200u8 {
            routes.push(Route { prefix: Ipv4Address::new(10, 2, i, 0), len: 24, ports: vec![PortId(i as u16), PortId(7)], dst_leaf: None });
        }
        // A later route for the same prefix replaces the earlier one.
        routes.push(Route { prefix: Ipv4Address::new(10, 2, 9, 0), len: 24, ports: vec![PortId(99)], dst_leaf: None });
        routes.push(Route { prefix: Ipv4Address::new(10, 3, 0, 0), len: 16, ports: wide.clone(), dst_leaf: None });
        let t = RouteTable::with_data(&routes, |r| r.dst_leaf.map(u32::from));
        assert_eq!(t.wide.len(), 1, "a wide group is kept once");
        assert_eq!(t.lookup(Ipv4Address::new(10, 3, 1, 1)), Some(&wide[..]));
        assert_eq!(t.len(), routes.len());
        assert_eq!(t.lookup_with_data(Ipv4Address::new(10, 1, 4, 4)), Some((&[PortId(3)][..], Some(2))));
        assert_eq!(t.lookup_with_data(Ipv4Address::new(192, 168, 0, 1)), Some((&wide[..], None)));
        for i in 0..200u8 {
            let want: &[PortId] = if i == 9 { &[PortId(99)] } else { &[PortId(i as u16), PortId(7)] };
            assert_eq!(t.lookup(Ipv4Address::new(10, 2, i, 1)), Some(want));
        }
        let (g, data) = t.lookup_group(Ipv4Address::new(10, 1, 0, 1)).expect("a route");
        assert_eq!((t.group(g), data), (&[PortId(3)][..], Some(2)));
        assert_eq!(t.group(GroupId(u32::MAX)), &[] as &[PortId]);
        assert_eq!(RouteTable::default().lookup(Ipv4Address::new(1, 2, 3, 4)), None);
    }

    #[test]
    fn lookups_agree_with_a_scan_of_every_route() {
        // A ToR's table in a large fabric: its hosts' /32s, a /24 per other
        // rack, /16s and a default route: four lengths, two of them filtered.
        let mut routes = Vec::new();
        for h in 0..8u8 {
            routes.push(Route { prefix: Ipv4Address::new(10, 0, 5, 2 + h), len: 32, ports: vec![PortId(h as u16)], dst_leaf: None });
        }
        for r in 0..=255u8 {
            routes.push(Route { prefix: Ipv4Address::new(10, 0, r, 0), len: 24, ports: vec![PortId(100 + r as u16)], dst_leaf: None });
        }
        for p in 1..4u8 {
            routes.push(Route { prefix: Ipv4Address::new(10, p, 0, 0), len: 16, ports: vec![PortId(400 + p as u16)], dst_leaf: None });
        }
        routes.push(Route { prefix: Ipv4Address::new(0, 0, 0, 0), len: 0, ports: vec![PortId(999)], dst_leaf: None });
        let t = RouteTable::new(&routes);
        let scan = |dst: Ipv4Address| {
            routes.iter().filter(|r| dst.0 & mask(r.len) == r.prefix.0 & mask(r.len)).max_by_key(|r| r.len).map(|r| &r.ports[..])
        };
        let mut x: u32 = 1;
        for i in 0..20_000u32 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // Mostly inside 10.0/16 and 10.1-3/16, some anywhere.
            let dst = match i % 4 {
                0 => Ipv4Address(x),
                1 => Ipv4Address(0x0a00_0500 | (x >> 24)),
                _ => Ipv4Address(0x0a00_0000 | (x >> 14)),
            };
            assert_eq!(t.lookup(dst), scan(dst), "{dst:?}");
        }
    }
}
