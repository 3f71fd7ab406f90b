//! The threads of the machine created or exiting, as the kernel's hooks write them to the
//! `THREAD_CHANGES` ring (cg-ebpf's `iterator::note_thread_change`), kept until no amend can
//! need them ([`super::amend`]).

use aya::maps::{Array, MapData, RingBuf};
use cg_common::ThreadChange;

/// The most changes kept; more (a storm of threads between two reads) counts as a loss and
/// the next read walks the list.
const MAX_KEPT: usize = 1 << 16;

/// The ring, the kernel's count of changes it could not write, and the changes read.
pub struct ThreadChanges {
    ring: RingBuf<MapData>,
    lost: Array<MapData, u64>,
    /// The lost count when last read; `None` when it could not be read.
    lost_seen: Option<u64>,
    /// CLOCK_MONOTONIC ns when a loss was last noticed (the changes lost are older).
    lost_at_ns: Option<u64>,
    kept: Vec<ThreadChange>,
}

impl ThreadChanges {
    pub fn new(ring: RingBuf<MapData>, lost: Array<MapData, u64>) -> Self {
        let lost_seen = lost.get(&0, 0).ok();
        ThreadChanges {
            ring,
            lost,
            lost_seen,
            lost_at_ns: None,
            kept: Vec::new(),
        }
    }

    /// Reads every change the ring holds; `now_ns` is when (a loss noticed is dated then).
    pub fn drain(&mut self, now_ns: u64) {
        while let Some(item) = self.ring.next() {
            if let Some(change) = parse(&item) {
                self.kept.push(change);
            }
        }
        let lost = self.lost.get(&0, 0).ok();
        if lost.is_none() || lost != self.lost_seen || self.kept.len() > MAX_KEPT {
            self.lost_at_ns = Some(now_ns);
            self.kept.clear();
        }
        self.lost_seen = lost;
    }

    /// The changes written from `from_ns` on, or `None` where some may have been lost then.
    pub fn since(&self, from_ns: u64) -> Option<Vec<ThreadChange>> {
        if self.lost_at_ns.is_some_and(|at| at >= from_ns) {
            return None;
        }
        Some(
            self.kept
                .iter()
                .filter(|c| c.at_ns >= from_ns)
                .copied()
                .collect(),
        )
    }

    /// Forgets the changes written before `ns`.
    pub fn forget_before(&mut self, ns: u64) {
        self.kept.retain(|c| c.at_ns >= ns);
    }
}

/// One change from the ring's bytes; `None` for a record of another size.
fn parse(bytes: &[u8]) -> Option<ThreadChange> {
    let bytes: &[u8; 16] = bytes.try_into().ok()?;
    let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
    Some(ThreadChange {
        tid: word(0),
        kind: word(4),
        at_ns: u64::from_ne_bytes(bytes[8..16].try_into().unwrap()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_change_and_refuses_other_sizes() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&77u32.to_ne_bytes());
        bytes.extend_from_slice(&2u32.to_ne_bytes());
        bytes.extend_from_slice(&123_456u64.to_ne_bytes());
        assert_eq!(
            parse(&bytes),
            Some(ThreadChange {
                tid: 77,
                kind: 2,
                at_ns: 123_456
            })
        );
        assert_eq!(parse(&bytes[..15]), None);
        bytes.push(0);
        assert_eq!(parse(&bytes), None);
    }
}
