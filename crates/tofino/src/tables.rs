//! Match tables at run time: exact-match tables a program declares, whose
//! entries the switch CPU writes and the pipelines look up.
//!
//! On the hardware a table's entries are installed by the control plane
//! (the switch CPU, through the driver) and matched by the pipeline; this
//! is how a scheme keeps state that changes on control-plane time scales
//! (LBSP's failed address ranges, P4TE's routing groups). A table holds at
//! most its declared number of entries: a write beyond that fails, as the
//! driver's add does when the table is full. Keys and action data are plain
//! integers of at most 64 bits whose layout the program defines (its
//! `key_bits` and `action_bits` are what the resource check charges).
//!
//! Invariants: only the CPU writes ([`TableFile::cpu_write`], which the
//! switch applies after the control-plane latency); the pipelines only
//! read ([`TableFile::lookup`]); a table never holds more than its declared
//! entries. The switch's own L3 tables are declared like any other but
//! hold nothing here (they live in [`crate::l3`]).

use super::registers::ProgramError;
use super::resources::TableDecl;
use rustc_hash::FxHashMap;
use serde::Serialize;

/// Handle of a declared table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct TableId(pub u16);

struct Table {
    decl: TableDecl,
    entries: FxHashMap<u64, u64>,
}

/// Every declared table of a loaded program.
#[derive(Default)]
pub struct TableFile {
    tables: Vec<Table>,
}

impl TableFile {
    /// Empty tables for `decls` (in declaration order: `TableId(i)` is
    /// `decls[i]`).
    pub fn new(decls: &[TableDecl]) -> Self {
        TableFile { tables: decls.iter().map(|d| Table { decl: d.clone(), entries: FxHashMap::default() }).collect() }
    }

    /// Every entry of `table` as (key, action data), sorted by key (the
    /// control plane's dump of a table).
    pub fn entries(&self, table: TableId) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> =
            self.tables.get(table.0 as usize).map(|t| t.entries.iter().map(|(k, d)| (*k, *d)).collect()).unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// The action data of `key` in `table` (a pipeline match).
    #[inline]
    pub fn lookup(&self, table: TableId, key: u64) -> Result<Option<u64>, ProgramError> {
        let t = self.tables.get(table.0 as usize).ok_or(ProgramError::UnknownTable(table.0))?;
        Ok(t.entries.get(&key).copied())
    }

    /// Control-plane write: installs (`Some`) or removes (`None`) the entry
    /// of `key`. A new entry in a full table is an error.
    pub fn cpu_write(&mut self, table: TableId, key: u64, data: Option<u64>) -> Result<(), ProgramError> {
        let t = self.tables.get_mut(table.0 as usize).ok_or(ProgramError::UnknownTable(table.0))?;
        match data {
            None => {
                t.entries.remove(&key);
            }
            Some(v) => {
                if !t.entries.contains_key(&key) && t.entries.len() >= t.decl.entries as usize {
                    return Err(ProgramError::TableFull { table: t.decl.name.clone(), entries: t.decl.entries });
                }
                t.entries.insert(key, v);
            }
        }
        Ok(())
    }

    /// Entries installed in `table`.
    pub fn len(&self, table: TableId) -> usize {
        self.tables.get(table.0 as usize).map_or(0, |t| t.entries.len())
    }

    /// Whether no table holds an entry.
    pub fn is_empty(&self) -> bool {
        self.tables.iter().all(|t| t.entries.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Gress, TableKind};

    #[test]
    fn writes_install_and_remove_and_a_full_table_refuses_new_keys() {
        let decl = TableDecl {
            name: "t".into(),
            gress: Gress::Ingress,
            stage: 2,
            kind: TableKind::Exact,
            entries: 2,
            key_bits: 32,
            action_bits: 16,
        };
        let mut f = TableFile::new(&[decl]);
        let t = TableId(0);
        f.cpu_write(t, 1, Some(10)).unwrap();
        f.cpu_write(t, 2, Some(20)).unwrap();
        assert_eq!(f.cpu_write(t, 3, Some(30)), Err(ProgramError::TableFull { table: "t".into(), entries: 2 }));
        f.cpu_write(t, 2, Some(21)).unwrap();
        assert_eq!(f.lookup(t, 2), Ok(Some(21)));
        f.cpu_write(t, 1, None).unwrap();
        assert_eq!(f.lookup(t, 1), Ok(None));
        assert_eq!(f.len(t), 1);
        assert_eq!(f.lookup(TableId(9), 1), Err(ProgramError::UnknownTable(9)));
    }
}
