//! Handles for the things of a fabric. Identifiers are newtypes, never bare
//! integers, so a port number cannot be passed where a queue id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! handle {
    ($(#[$m:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
        pub struct $name(pub $inner);
        impl $name {
            /// The handle as an index into a dense table.
            #[inline]
            pub const fn index(self) -> usize {
                self.0 as usize
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

handle!(
    /// A node (switch or host) of a fabric: dense index in the fabric's node list.
    NodeId(u32), "node"
);
handle!(
    /// A port of one node (0-based, dense per node).
    PortId(u16), "port"
);
handle!(
    /// A queue of one egress port (0-based; 32 by default, up to 128).
    QueueId(u8), "q"
);
handle!(
    /// A link of a fabric: dense index in the fabric's link list.
    LinkId(u32), "link"
);
handle!(
    /// A flow of a synthetic workload (dense, run-wide).
    FlowId(u32), "flow"
);
