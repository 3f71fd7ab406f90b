//! Hash maps for the per-interval path, keyed by what the kernel assigns (pids, thread ids,
//! thread keys): foldhash instead of the standard library's SipHash, which was the largest
//! part of the idle agent's own work after the read itself (docs/overhead.md). Nobody chooses
//! these keys to aim collisions at a map (the kernel hands them out, and foldhash seeds each
//! map at random), so SipHash's protection buys nothing here; maps keyed by text from outside
//! keep the standard hasher.

pub use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
