//! Slices the kernel never reported the start of, found while they run.
//!
//! Each CPU's record names the task the `sched_switch` program saw arrive there last. Now and
//! then the kernel does not report a switch (on the VM this is developed on, those that take
//! its init process's threads off a CPU: ftrace misses them too), and the record names a task
//! that is no longer running there. Whatever runs there meanwhile is invisible to the reads:
//! a target's time shows up whole when it next leaves a CPU, in a later interval, where it
//! takes energy from whatever ran then and leaves the intervals it ran in to others.
//!
//! When a record is stale, the targets the CPUs last charged (their cache slots) are looked
//! up in `/proc`: one that is runnable on that CPU and was created while cg-trace watched has
//! been charged exactly what the maps and caches hold of it, so its runtime now minus that is
//! the time it ran since it was last charged, on that CPU. It is read as the slice running
//! there, and the interval it ran in gets it; when the kernel charges it later, on that CPU,
//! the total only catches up (see [`super::activity`]). A thread that existed before the run
//! was first charged from a runtime user space does not know, and stays as before.
//!
//! ```text
//! cpu1   | T runs ..........| init thread | T runs (switch in not reported) ....| U
//! record | T                | init        | init (stale)                        | U
//! reads      T 100 ms         T charged       T: runtime - charged = 150 ms       T charged,
//!                                             found, read as running                its total
//!                                                                                   catches up
//! ```

use cg_common::{CpuState, ThreadKey};

/// At most this many targets are looked up for one stale record (every CPU's cache slots
/// together, without repeats).
const MAX_LOOKUPS: usize = 16;

/// A target thread found running on a CPU whose record is stale, and how long it has run
/// there since it was last charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hidden {
    pub thread: ThreadKey,
    pub in_progress_ns: u64,
}

/// The target thread that runs on `cpu` unseen, if one of the recently charged targets does:
/// `states` are every CPU's records (`states[cpu]` is the stale one), `threads` the per-thread
/// totals read just before, `shown` the tasks other CPUs' records show running, and
/// `runtime_on(thread)` the CPU the thread is runnable on and its runtime now (from `/proc`;
/// `None` when it is not runnable or gone).
pub fn find(
    cpu: usize,
    states: &[CpuState],
    threads: &[(ThreadKey, Vec<u64>)],
    trace_start_ns: u64,
    shown: &[ThreadKey],
    mut runtime_on: impl FnMut(&ThreadKey) -> Option<(usize, u64)>,
) -> Option<Hidden> {
    let mut candidates: Vec<ThreadKey> = Vec::new();
    for key in states.iter().flat_map(|s| s.cache.iter().map(|c| c.key)) {
        // Only a thread created while watched was charged all its runtime from zero.
        if key.tid == 0 || key.start_ns <= trace_start_ns || shown.contains(&key) {
            continue;
        }
        if !candidates.contains(&key) && candidates.len() < MAX_LOOKUPS {
            candidates.push(key);
        }
    }
    candidates.into_iter().find_map(|thread| {
        let (on, runtime_ns) = runtime_on(&thread)?;
        if on != cpu {
            return None;
        }
        let charged = charged_ns(&thread, states, threads);
        let in_progress_ns = runtime_ns.checked_sub(charged).filter(|ns| *ns > 0)?;
        Some(Hidden {
            thread,
            in_progress_ns,
        })
    })
}

/// Everything the kernel side charged to `thread` so far: its map totals and what any CPU's
/// cache still holds of it.
fn charged_ns(thread: &ThreadKey, states: &[CpuState], threads: &[(ThreadKey, Vec<u64>)]) -> u64 {
    let stored: u64 = threads
        .iter()
        .filter(|(key, _)| key == thread)
        .flat_map(|(_, per_cpu)| per_cpu.iter())
        .sum();
    let cached: u64 = states
        .iter()
        .flat_map(|s| s.cache.iter())
        .filter(|c| c.key == *thread)
        .map(|c| c.pending_ns)
        .sum();
    stored + cached
}

#[cfg(test)]
mod tests {
    use cg_common::CachedTime;

    use super::*;

    const MS: u64 = 1_000_000;
    const START: u64 = 1_000;

    fn thread(tid: u32, start_ns: u64) -> ThreadKey {
        ThreadKey {
            tgid: 500,
            tid,
            start_ns,
        }
    }

    fn cpu(cache: &[(ThreadKey, u64)]) -> CpuState {
        let mut state = CpuState::default();
        for (slot, &(key, pending_ns)) in state.cache.iter_mut().zip(cache) {
            *slot = CachedTime { key, pending_ns };
        }
        state
    }

    #[test]
    fn a_target_running_unseen_is_read_as_running_since_its_last_charge() {
        // cpu1  | T 100 ms (charged: 60 in the map, 40 in cpu1's cache) | init | T ... now
        //                                                           T's runtime now: 250 ms
        let t = thread(501, START + 1);
        let states = [cpu(&[]), cpu(&[(t, 40 * MS)])];
        let threads = [(t, vec![0, 60 * MS])];
        let found = find(1, &states, &threads, START, &[], |key| {
            (*key == t).then_some((1, 250 * MS))
        });
        assert_eq!(
            found,
            Some(Hidden {
                thread: t,
                in_progress_ns: 150 * MS
            })
        );
    }

    #[test]
    fn a_target_elsewhere_shown_or_older_than_the_run_is_not_taken() {
        let (old, shown) = (thread(501, START), thread(502, START + 1));
        let elsewhere = thread(503, START + 9);
        let states = [cpu(&[(old, MS), (shown, MS)]), cpu(&[(elsewhere, MS)])];
        let mut looked_up = Vec::new();
        let found = find(1, &states, &[], START, &[shown], |key| {
            looked_up.push(key.tid);
            // Only `elsewhere` is looked up: the others cannot be measured or are counted.
            Some((0, 500 * MS))
        });
        assert_eq!(found, None);
        assert_eq!(looked_up, vec![503]);
    }

    #[test]
    fn a_target_charged_all_its_runtime_is_not_running_unseen() {
        // Runnable on cpu0 but waiting: it has not run since its last charge.
        let t = thread(501, START + 1);
        let states = [cpu(&[(t, 5 * MS)])];
        let threads = [(t, vec![95 * MS])];
        assert_eq!(
            find(0, &states, &threads, START, &[], |_| Some((0, 100 * MS))),
            None
        );
    }

    #[test]
    fn gone_or_sleeping_targets_are_skipped_for_the_next_one() {
        let (gone, running) = (thread(501, START + 1), thread(502, START + 2));
        let states = [cpu(&[(gone, MS), (running, MS)])];
        let found = find(0, &states, &[], START, &[], |key| {
            (key.tid == 502).then_some((0, 3 * MS))
        });
        assert_eq!(
            found.map(|h| (h.thread.tid, h.in_progress_ns)),
            Some((502, 2 * MS))
        );
    }
}
