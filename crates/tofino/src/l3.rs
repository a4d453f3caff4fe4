//! The switch's L3 table: longest-prefix match from destination IPv4 to an
//! equal-cost group of egress ports and the loaded program's data of the
//! route (the `ipv4_lpm` + `nexthop_group` tables every program is loaded
//! with; the data is the route's action data, which the program defines
//! through `Program::route_data`).
//!
//! Layout: one level per prefix length present, longest first, each
//! mapping the destination's top `len` bits to a route word (32 bits). A
//! route whose equal-cost ports are consecutive (a rack's uplinks, one
//! host port) and whose data is small is the word itself: first port,
//! count, data, its ports a slice of one static list of port ids that
//! every switch shares (`RouteWord`). Any other route's word numbers an
//! entry (32 bytes, half a cache line) with its ports inline (up to
//! [`INLINE_PORTS`]; larger groups sit in a side list) and its data;
//! routes with the same ports and data share one entry.
//!
//! A level whose keys are dense (the /32s of a rack's hosts, the /24s of
//! the racks of a fabric numbered pod by pod) is a direct array of words
//! over its keys' span: a lookup reads one element, and in a Clos fabric
//! that element is the whole answer, with no hash and no probe. A sparse
//! level (an explicit topology's scattered prefixes) is an open-addressed
//! array of (key, word) slots with a 256-bit filter of the keys present,
//! so that a lookup whose bit is clear skips the probe.
//!
//! Invariant: levels are probed longest first and a lookup stops at the
//! first hit, so it returns the longest matching prefix; it costs at most
//! one probe per distinct prefix length present (two in Clos fabrics); a
//! direct level's span is at most [`DIRECT_SPREAD`] times its keys plus
//! [`DIRECT_SLACK`] elements (at most [`DIRECT_MAX_SPAN`]); a filter's bit
//! is set for every key of its level, so a skipped probe would have missed;
//! a hashed level is at most half full, so a probe ends at an empty slot.

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

/// Equal-cost ports an entry holds inline.
pub const INLINE_PORTS: usize = 10;

/// A direct level spans at most this many elements a key...
pub const DIRECT_SPREAD: u64 = 32;
/// ...plus this many (a small level is always direct)...
pub const DIRECT_SLACK: u64 = 64;
/// ...and never more than this many.
pub const DIRECT_MAX_SPAN: u64 = 1 << 20;

/// `Entry::ports_n` of a group in the side list (`ports[0]` and `ports[1]`
/// hold its index, low and high 16 bits).
const WIDE: u8 = u8::MAX;
/// The word of no route (an empty slot of a hashed level, a key without a
/// route in a direct one).
const NO_ROUTE: u32 = 0;

/// The encoding of a route word (see the module documentation).
///
/// Bit 31 set: an inline group, ports `first..first + count` with
/// `count` in bits 26..31 (1 to 31), `first` in bits 16..26 (below
/// [`INLINE_FIRST_LIMIT`]), data in bits 0..15 if bit 15 is set. Bit 31
/// clear: entry number + 1 (so that no word of a route is [`NO_ROUTE`]).
struct RouteWord;

impl RouteWord {
    const INLINE: u32 = 1 << 31;
    const HAS_DATA: u32 = 1 << 15;
    const DATA_LIMIT: u32 = 1 << 15;
    const COUNT_LIMIT: usize = 32;

    /// The inline word of ports `ports` and data `data`, if they fit one.
    fn inline(ports: &[PortId], data: Option<u32>) -> Option<u32> {
        let first = ports.first()?.0 as usize;
        let consecutive = ports.iter().enumerate().all(|(i, p)| p.0 as usize == first + i);
        if !consecutive || ports.len() >= Self::COUNT_LIMIT || first >= INLINE_FIRST_LIMIT || data.is_some_and(|d| d >= Self::DATA_LIMIT) {
            return None;
        }
        let d = data.map_or(0, |d| Self::HAS_DATA | d);
        Some(Self::INLINE | (ports.len() as u32) << 26 | (first as u32) << 16 | d)
    }

    /// The ports of inline word `w`.
    #[inline(always)]
    fn ports(w: u32) -> &'static [PortId] {
        let first = ((w >> 16) & 0x3ff) as usize;
        let count = ((w >> 26) & 0x1f) as usize;
        PORT_IDS.get(first..first + count).unwrap_or(&[])
    }

    /// The data of inline word `w`.
    #[inline(always)]
    fn data(w: u32) -> Option<u32> {
        (w & Self::HAS_DATA != 0).then_some(w & (Self::DATA_LIMIT - 1))
    }
}

/// An inline group's first port is below this.
const INLINE_FIRST_LIMIT: usize = 1 << 10;

/// Port ids `0, 1, 2, …`: every inline group is a slice of it.
static PORT_IDS: [PortId; INLINE_FIRST_LIMIT + RouteWord::COUNT_LIMIT] = {
    let mut a = [PortId(0); INLINE_FIRST_LIMIT + RouteWord::COUNT_LIMIT];
    let mut i = 0;
    while i < a.len() {
        a[i] = PortId(i as u16);
        i += 1;
    }
    a
};

/// A route's ports and data: 32 bytes, so an entry never straddles a cache
/// line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(32))]
struct Entry {
    ports_n: u8,
    has_data: bool,
    data: u32,
    ports: [PortId; INLINE_PORTS],
}

const _: () = assert!(std::mem::size_of::<Entry>() == 32);

/// A slot of a hashed level: a key (the destination's top bits) and its
/// route word ([`NO_ROUTE`]: an empty slot).
#[derive(Debug, Clone, Copy)]
struct HashSlot {
    key: u32,
    word: u32,
}

/// The routes of one prefix length: a direct array of route words
/// (`direct[offset + key - base]` for `key - base < span`) or a hashed array (`hashed[offset..=offset + span]`, probed from
/// [`home`], with the filter `filters[base]`). 16 bytes: the first
/// [`INLINE_LEVELS`] sit in one cache line of the table itself.
#[derive(Debug, Clone, Copy, Default)]
struct Level {
    len: u8,
    /// `32 - len`: the key is the destination shifted right by it.
    shift: u8,
    direct: bool,
    /// Direct: the first key; hashed: the level's filter.
    base: u32,
    /// Direct: the keys spanned; hashed: the slots less one (a mask).
    span: u32,
    offset: u32,
}

/// Levels kept in the table's own cache line (a Clos fabric has two or
/// three prefix lengths); more go to a side list.
const INLINE_LEVELS: usize = 3;

/// The first levels, longest prefix first, and how many there are.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
struct InlineLevels {
    first: [Level; INLINE_LEVELS],
    n: u8,
}

const _: () = assert!(std::mem::size_of::<InlineLevels>() == 64);

/// LPM table with equal-cost groups.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    levels: InlineLevels,
    /// Levels after the first [`INLINE_LEVELS`].
    more: Vec<Level>,
    direct: Vec<u32>,
    hashed: Vec<HashSlot>,
    filters: Vec<[u64; 4]>,
    entries: Vec<Entry>,
    /// Groups of more than [`INLINE_PORTS`] ports, each once.
    wide: Vec<Vec<PortId>>,
    routes: usize,
}

/// The hash of (key, length): its bits 32 and up choose the first slot to
/// probe ([`home`]), bits 24..32 the filter bit ([`filter_bit`]).
#[inline(always)]
fn hash(key: u32, len: u8) -> u64 {
    ((key as u64) | (len as u64) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// The first slot to probe for hash `h` in a level of `mask + 1` slots.
#[inline(always)]
fn home(h: u64, mask: u32) -> usize {
    ((h >> 32) as u32 & mask) as usize
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
        let mut t = RouteTable { routes: routes.len(), ..RouteTable::default() };
        // The route of each (length, key): the last one given.
        let mut last: FxHashMap<(u8, u32), usize> = FxHashMap::default();
        for (i, r) in routes.iter().enumerate() {
            let len = r.len.min(32);
            last.insert((len, key_of(r.prefix.0, len)), i);
        }
        let mut prefixes: Vec<((u8, u32), usize)> = last.into_iter().collect();
        prefixes.sort_unstable_by_key(|&((len, key), _)| (std::cmp::Reverse(len), key));
        // A word for each route: inline, or an entry, each (ports, data) once.
        let mut entry_of: FxHashMap<Entry, u32> = FxHashMap::default();
        let mut wide_index: FxHashMap<&[PortId], u32> = FxHashMap::default();
        let mut keyed: Vec<(u8, u32, u32)> = Vec::with_capacity(prefixes.len());
        for &((len, key), i) in &prefixes {
            let r = &routes[i];
            let d = data(r);
            if let Some(w) = RouteWord::inline(&r.ports, d) {
                keyed.push((len, key, w));
                continue;
            }
            let mut e = Entry { ports_n: 0, has_data: d.is_some(), data: d.unwrap_or(0), ports: [PortId(0); INLINE_PORTS] };
            if r.ports.len() <= INLINE_PORTS {
                e.ports_n = r.ports.len() as u8;
                e.ports[..r.ports.len()].copy_from_slice(&r.ports);
            } else {
                let w = *wide_index.entry(&r.ports).or_insert_with(|| {
                    t.wide.push(r.ports.clone());
                    (t.wide.len() - 1) as u32
                });
                e.ports_n = WIDE;
                e.ports[0] = PortId(w as u16);
                e.ports[1] = PortId((w >> 16) as u16);
            }
            let n = *entry_of.entry(e).or_insert_with(|| {
                t.entries.push(e);
                t.entries.len() as u32
            });
            keyed.push((len, key, n));
        }
        // Levels, longest first (`keyed` is sorted so).
        for group in keyed.chunk_by(|a, b| a.0 == b.0) {
            let len = group[0].0;
            let (lo, hi) = (group[0].1, group[group.len() - 1].1);
            let span = u64::from(hi - lo) + 1;
            let level = if span <= (DIRECT_SPREAD * group.len() as u64 + DIRECT_SLACK).min(DIRECT_MAX_SPAN) {
                let offset = t.direct.len();
                t.direct.resize(offset + span as usize, 0);
                for &(_, key, w) in group {
                    t.direct[offset + (key - lo) as usize] = w;
                }
                Level { len, shift: (32 - len as u32) as u8, direct: true, base: lo, span: span as u32, offset: offset as u32 }
            } else {
                let size = (group.len() * 2).next_power_of_two().max(4);
                let offset = t.hashed.len();
                t.hashed.resize(offset + size, HashSlot { key: 0, word: NO_ROUTE });
                let mask = (size - 1) as u32;
                let mut filter = [0u64; 4];
                for &(_, key, w) in group {
                    let h = hash(key, len);
                    let (word, bit) = filter_bit(h);
                    filter[word] |= bit;
                    let mut i = home(h, mask);
                    while t.hashed[offset + i].word != NO_ROUTE {
                        i = (i + 1) & mask as usize;
                    }
                    t.hashed[offset + i] = HashSlot { key, word: w };
                }
                t.filters.push(filter);
                let base = (t.filters.len() - 1) as u32;
                Level { len, shift: (32 - len as u32) as u8, direct: false, base, span: mask, offset: offset as u32 }
            };
            let n = usize::from(t.levels.n);
            if n < INLINE_LEVELS {
                t.levels.first[n] = level;
                t.levels.n += 1;
            } else {
                t.more.push(level);
            }
        }
        t
    }

    /// The word of `dst`'s longest-prefix route.
    #[inline]
    fn find(&self, dst: Ipv4Address) -> Option<u32> {
        let inline = &self.levels.first[..usize::from(self.levels.n).min(INLINE_LEVELS)];
        inline.iter().chain(&self.more).find_map(|lv| self.probe(lv, dst))
    }

    /// The word of `dst` in level `lv`, if it has a route there.
    #[inline(always)]
    fn probe(&self, lv: &Level, dst: Ipv4Address) -> Option<u32> {
        let key = (u64::from(dst.0) >> lv.shift) as u32;
        if lv.direct {
            let i = key.wrapping_sub(lv.base);
            if i >= lv.span {
                return None;
            }
            let w = *self.direct.get((lv.offset + i) as usize)?;
            return (w != NO_ROUTE).then_some(w);
        }
        let h = hash(key, lv.len);
        let (w, bit) = filter_bit(h);
        if self.filters.get(lv.base as usize)?[w] & bit == 0 {
            return None;
        }
        let slots = self.hashed.get(lv.offset as usize..=(lv.offset + lv.span) as usize)?;
        let mut i = home(h, lv.span);
        loop {
            let s = slots[i];
            if s.word == NO_ROUTE {
                return None;
            }
            if s.key == key {
                return Some(s.word);
            }
            i = (i + 1) & lv.span as usize;
        }
    }

    /// The ports of route word `w`.
    #[inline]
    fn ports(&self, w: u32) -> &[PortId] {
        if w & RouteWord::INLINE != 0 {
            return RouteWord::ports(w);
        }
        let Some(e) = (w as usize).checked_sub(1).and_then(|i| self.entries.get(i)) else { return &[] };
        if e.ports_n == WIDE {
            let w = e.ports[0].0 as usize | (e.ports[1].0 as usize) << 16;
            self.wide.get(w).map_or(&[], Vec::as_slice)
        } else {
            &e.ports[..e.ports_n as usize]
        }
    }

    /// The program data of route word `w`.
    #[inline]
    fn data(&self, w: u32) -> Option<u32> {
        if w & RouteWord::INLINE != 0 {
            return RouteWord::data(w);
        }
        let e = (w as usize).checked_sub(1).and_then(|i| self.entries.get(i))?;
        e.has_data.then_some(e.data)
    }

    /// The group for `dst` (longest-prefix match).
    #[inline]
    pub fn lookup(&self, dst: Ipv4Address) -> Option<&[PortId]> {
        self.lookup_with_data(dst).map(|(g, _)| g)
    }

    /// The group and route data of `dst`'s longest-prefix route, by handle
    /// (see [`RouteTable::group`]).
    #[inline]
    pub fn lookup_group(&self, dst: Ipv4Address) -> Option<(GroupId, Option<u32>)> {
        let w = self.find(dst)?;
        Some((GroupId(w), self.data(w)))
    }

    /// The egress ports of group `g`, a handle this table's lookups gave
    /// (another table's handle may name another group or none).
    #[inline]
    pub fn group(&self, g: GroupId) -> &[PortId] {
        self.ports(g.0)
    }

    /// The group for `dst` and the program's data of its route.
    #[inline]
    pub fn lookup_with_data(&self, dst: Ipv4Address) -> Option<(&[PortId], Option<u32>)> {
        let w = self.find(dst)?;
        Some((self.ports(w), self.data(w)))
    }

    /// Number of routes it was built from.
    pub fn len(&self) -> usize {
        self.routes
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }
}

/// The key of `addr` in the level of `len`: its top `len` bits.
#[inline(always)]
fn key_of(addr: u32, len: u8) -> u32 {
    (u64::from(addr) >> (32 - u32::from(len.min(32)))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(len: u8) -> u32 {
        if len == 0 {
            0
        } else {
            u32::MAX << (32 - len.min(32))
        }
    }

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
        // Every other port: not consecutive, so not an inline word.
        let wide: Vec<PortId> = (0..(INLINE_PORTS as u16 + 5)).map(|i| PortId(2 * i)).collect();
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
        assert_eq!(t.group(GroupId(u32::MAX >> 1)), &[] as &[PortId], "an entry number past the last");
        assert_eq!(RouteTable::default().lookup(Ipv4Address::new(1, 2, 3, 4)), None);
    }

    #[test]
    fn consecutive_ports_are_inline_words_and_other_groups_share_entries() {
        // A ToR of a fat-tree: two hosts, and every other rack's /24 via
        // the same four uplinks.
        let up: Vec<PortId> = (10..14).map(PortId).collect();
        let mut routes = vec![
            Route { prefix: Ipv4Address::new(10, 0, 0, 2), len: 32, ports: vec![PortId(0)], dst_leaf: Some(0) },
            Route { prefix: Ipv4Address::new(10, 0, 0, 3), len: 32, ports: vec![PortId(1)], dst_leaf: Some(0) },
        ];
        for p in 0..4u8 {
            for e in 0..4u8 {
                routes.push(Route {
                    prefix: Ipv4Address::new(10, p, e, 0),
                    len: 24,
                    ports: up.clone(),
                    dst_leaf: Some((4 * p + e) as u16),
                });
            }
        }
        let t = RouteTable::with_data(&routes, |r| r.dst_leaf.map(u32::from));
        assert!(t.entries.is_empty(), "every group consecutive, every datum small: all inline");
        assert_eq!(t.lookup_with_data(Ipv4Address::new(10, 2, 3, 1)), Some((&up[..], Some(11))));
        assert_eq!(t.lookup_with_data(Ipv4Address::new(10, 0, 0, 3)), Some((&[PortId(1)][..], Some(0))));
        assert_eq!(t.lookup(Ipv4Address::new(10, 0, 0, 4)), Some(&up[..]), "the own rack's /24 below the /32s");
        assert_eq!(t.lookup(Ipv4Address::new(10, 4, 0, 2)), None);
        let (g, _) = t.lookup_group(Ipv4Address::new(10, 1, 1, 1)).expect("a route");
        assert_eq!(t.group(g), &up[..]);
        // Uplinks that are not consecutive, data too large for a word, a
        // first port too high: entries, each (ports, data) once.
        let spread = vec![PortId(10), PortId(12), PortId(14)];
        for r in &mut routes[2..] {
            r.ports = spread.clone();
        }
        routes[0].ports = vec![PortId(2000)];
        let t = RouteTable::new(&routes);
        assert_eq!(t.entries.len(), 2, "port 2000, and one entry for the sixteen /24s");
        assert_eq!(t.lookup(Ipv4Address::new(10, 3, 0, 9)), Some(&spread[..]));
        assert_eq!(t.lookup(Ipv4Address::new(10, 0, 0, 2)), Some(&[PortId(2000)][..]));
        let t = RouteTable::with_data(&routes, |r| r.dst_leaf.map(|l| 40_000 + u32::from(l)));
        assert_eq!(t.entries.len(), 2 + 16);
        assert_eq!(t.lookup_with_data(Ipv4Address::new(10, 2, 3, 1)), Some((&spread[..], Some(40_011))));
        assert_eq!(t.lookup_with_data(Ipv4Address::new(10, 0, 0, 3)), Some((&[PortId(1)][..], Some(40_000))));
    }

    #[test]
    fn lookups_agree_with_a_scan_of_every_route() {
        // A ToR's table in a large fabric: its hosts' /32s, a /24 per other
        // rack, /16s and a default route, each a direct level.
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
        // Scattered /28s: a level too sparse for a direct array.
        let mut y: u32 = 7;
        for _ in 0..40 {
            y = y.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            routes.push(Route { prefix: Ipv4Address(y & mask(28)), len: 28, ports: vec![PortId((y >> 20) as u16)], dst_leaf: None });
        }
        let t = RouteTable::new(&routes);
        assert_eq!((t.levels.n, t.more.len()), (3, 2));
        let kinds: Vec<(u8, bool)> = t.levels.first.iter().chain(&t.more).map(|l| (l.len, l.direct)).collect();
        assert_eq!(kinds, [(32, true), (28, false), (24, true), (16, true), (0, true)], "dense levels direct, the scattered one hashed");
        // Every eighth destination inside one of the /28s.
        let sparse = &routes[routes.len() - 40..];
        let probe = |dst: Ipv4Address, i: u32, x: u32| {
            if i.is_multiple_of(8) {
                Ipv4Address(sparse[(i as usize / 8) % 40].prefix.0 | (x & 15))
            } else {
                dst
            }
        };
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
            let dst = probe(dst, i, x);
            assert_eq!(t.lookup(dst), scan(dst), "{dst:?}");
        }
    }
}
