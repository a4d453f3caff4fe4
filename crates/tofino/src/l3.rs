//! The switch's L3 table: longest-prefix match from destination IPv4 to an
//! equal-cost group of egress ports and the loaded program's data of the
//! route (the `ipv4_lpm` + `nexthop_group` tables every program is loaded
//! with; the data is the route's action data, which the program defines
//! through `Program::route_data`).
//!
//! Invariant: prefix lengths are probed longest first; a lookup costs one
//! hash probe per distinct prefix length present (two in Clos fabrics).

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

/// Index of an equal-cost group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupId(pub u16);

/// One prefix length's entries: masked prefix → (group, program data).
type PrefixMap = FxHashMap<u32, (GroupId, Option<u32>)>;

/// LPM table with equal-cost groups.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    by_len: Vec<(u8, PrefixMap)>,
    groups: Vec<Vec<PortId>>,
    entries: usize,
}

fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - len.min(32))
    }
}

impl RouteTable {
    /// Builds the table from routes (identical port sets share a group),
    /// with no program data.
    pub fn new(routes: &[Route]) -> Self {
        Self::with_data(routes, |_| None)
    }

    /// Builds the table from routes, each with the data `data` gives it.
    pub fn with_data(routes: &[Route], data: impl Fn(&Route) -> Option<u32>) -> Self {
        let mut t = RouteTable::default();
        let mut group_ids: FxHashMap<Vec<PortId>, GroupId> = FxHashMap::default();
        for r in routes {
            let g = *group_ids.entry(r.ports.clone()).or_insert_with(|| {
                t.groups.push(r.ports.clone());
                GroupId((t.groups.len() - 1) as u16)
            });
            let slot = match t.by_len.iter().position(|(l, _)| *l == r.len) {
                Some(i) => i,
                None => {
                    t.by_len.push((r.len, FxHashMap::default()));
                    t.by_len.len() - 1
                }
            };
            t.by_len[slot].1.insert(r.prefix.0 & mask(r.len), (g, data(r)));
            t.entries += 1;
        }
        t.by_len.sort_by_key(|e| std::cmp::Reverse(e.0));
        t
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
        for (len, m) in &self.by_len {
            if let Some(r) = m.get(&(dst.0 & mask(*len))) {
                return Some(*r);
            }
        }
        None
    }

    /// The egress ports of group `g` (empty for a handle of another table).
    #[inline]
    pub fn group(&self, g: GroupId) -> &[PortId] {
        self.groups.get(g.0 as usize).map_or(&[], Vec::as_slice)
    }

    /// The group for `dst` and the program's data of its route.
    #[inline]
    pub fn lookup_with_data(&self, dst: Ipv4Address) -> Option<(&[PortId], Option<u32>)> {
        for (len, m) in &self.by_len {
            if let Some((g, data)) = m.get(&(dst.0 & mask(*len))) {
                return Some((&self.groups[g.0 as usize], *data));
            }
        }
        None
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
}
