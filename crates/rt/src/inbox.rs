//! A node's frame inbox: where links, TAP readers and local peers put the
//! frames bound for a node, and how they wake its actor.
//!
//! Deliveries push onto the inbox and call the waker only when the inbox
//! was empty, so under load one wake-up (one actor message) carries many
//! frames. This module knows nothing of actors, links or TAP devices: the
//! actor supplies the waker, the transports hold an [`InboxSender`]; so the
//! transports never import the actor and the actor's imports of the
//! transports close no circle.
//!
//! Invariant: frames delivered through one [`Inbox`] are popped in the
//! order they were delivered.

use bytes::BytesMut;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use weft_wire::ids::PortId;
use weft_wire::time::Nanos;

/// Frames waiting for a node: (port, frame, time due).
#[derive(Default)]
pub struct Inbox {
    q: Mutex<VecDeque<(PortId, BytesMut, Nanos)>>,
}

impl Inbox {
    /// The oldest waiting frame (port, frame, due).
    pub fn pop(&self) -> Option<(PortId, BytesMut, Nanos)> {
        self.q.lock().ok()?.pop_front()
    }

    /// Appends a frame; whether the inbox was empty before (the reader
    /// must be woken). A poisoned inbox takes nothing.
    fn push(&self, port: PortId, frame: BytesMut, due: Nanos) -> bool {
        match self.q.lock() {
            Ok(mut q) => {
                q.push_back((port, frame, due));
                q.len() == 1
            }
            Err(_) => false,
        }
    }
}

/// Wakes the reader of an inbox (an actor: one message that makes it drain).
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// The sending side of a node's inbox: cheap to clone, one per port end.
#[derive(Clone)]
pub struct InboxSender {
    inbox: Arc<Inbox>,
    wake: Waker,
}

impl std::fmt::Debug for InboxSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxSender").finish_non_exhaustive()
    }
}

impl InboxSender {
    /// A sender into `inbox` that calls `wake` when a frame lands in an
    /// empty inbox.
    pub fn new(inbox: Arc<Inbox>, wake: Waker) -> Self {
        InboxSender { inbox, wake }
    }

    /// Delivers a frame to `port`, due at `due`.
    pub fn deliver(&self, port: PortId, frame: BytesMut, due: Nanos) {
        if self.inbox.push(port, frame, due) {
            (self.wake)();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn wakes_once_per_empty_to_non_empty_transition_and_keeps_order() {
        let inbox = Arc::new(Inbox::default());
        let wakes = Arc::new(AtomicU32::new(0));
        let w = wakes.clone();
        let tx = InboxSender::new(
            inbox.clone(),
            Arc::new(move || {
                w.fetch_add(1, Ordering::Relaxed);
            }),
        );
        for i in 0..3u64 {
            tx.deliver(PortId(1), BytesMut::from(&[i as u8][..]), i);
        }
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
        let dues: Vec<Nanos> = std::iter::from_fn(|| inbox.pop()).map(|(_, _, d)| d).collect();
        assert_eq!(dues, vec![0, 1, 2]);
        tx.deliver(PortId(0), BytesMut::new(), 9);
        assert_eq!(wakes.load(Ordering::Relaxed), 2);
    }
}
