//! Turns the kernel's cumulative counters into what ran during each interval.
//!
//! The eBPF side keeps running totals (per target thread per CPU, and non-target time per CPU)
//! that grow by exact slices (the kernel's `sum_exec_runtime`) when a task leaves a CPU, plus
//! what each CPU runs right now and how long it has been running, and what each CPU still
//! holds in its small cache of pending thread time. Each read becomes a [`Snapshot`];
//! [`ActivityTracker::advance`] adds the cached time and the slice still in progress on every
//! CPU and returns the difference from the previous snapshot; a CPU's idle time is what remains of the
//! interval. Time can only move forward: a total that reads lower than before (a read that
//! raced a switch) keeps its old high-water mark, so a moment may shift to the next interval
//! but is never counted twice.
//!
//! Pure: the probes module fills the snapshots; tests write them by hand.

use std::collections::HashMap;

use cg_common::ThreadKey;

use crate::attribution::CpuTime;

/// The task a CPU was running when the snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub tgid: u32,
    pub tid: u32,
    /// How long it has run since it got the CPU (`None`: unknown, it just left).
    pub in_progress_ns: Option<u64>,
}

/// One CPU's counters as read from the kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSnapshot {
    pub other_ns: u64,
    /// Target time the kernel could not store per thread (its map was full).
    pub unstored_ns: u64,
    pub running: Option<Running>,
    /// Time this CPU charged to threads and still holds in its cache (not yet in the map).
    pub cached: Vec<(ThreadKey, u64)>,
}

/// Everything read from the kernel at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// CLOCK_MONOTONIC ns at which the CPU states were read.
    pub taken_ns: u64,
    /// Indexed by CPU id.
    pub cpus: Vec<CpuSnapshot>,
    /// Cumulative on-CPU ns of each accounted thread, indexed by CPU id.
    pub threads: Vec<(ThreadKey, Vec<u64>)>,
}

impl Snapshot {
    /// Whether some CPU still runs, or holds cached time of, thread `tid` of process `tgid`
    /// (any of its threads when `tid` is `None`): its kernel totals are not final yet.
    pub fn holds(&self, tgid: u32, tid: Option<u32>) -> bool {
        let matches =
            |key_tgid: u32, key_tid: u32| key_tgid == tgid && tid.is_none_or(|t| t == key_tid);
        self.cpus.iter().any(|c| {
            c.running.is_some_and(|r| matches(r.tgid, r.tid))
                || c.cached.iter().any(|(k, _)| matches(k.tgid, k.tid))
        })
    }
}

/// On-CPU time of one thread on one CPU during an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadSlice {
    pub thread: ThreadKey,
    pub cpu: u32,
    pub on_cpu_ns: u64,
}

/// What ran between two snapshots.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Activity {
    /// CLOCK_MONOTONIC ns of the previous snapshot.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Idle and non-target time per CPU (target time the kernel could not store counts as
    /// other; idle is the rest of the interval).
    pub cpus: Vec<CpuTime>,
    pub threads: Vec<ThreadSlice>,
}

/// Remembers the previous cumulative values (see the module docs).
#[derive(Debug, Default)]
pub struct ActivityTracker {
    last_taken_ns: Option<u64>,
    threads: HashMap<(ThreadKey, u32), u64>,
    /// Cumulative other time per CPU.
    cpus: Vec<u64>,
}

impl ActivityTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns what ran since the previous snapshot, or `None` for the first one (which only
    /// sets the starting point). `is_target(tgid)` says whether a running task's time is
    /// accounted per thread (as the kernel does) or as other.
    pub fn advance(
        &mut self,
        snapshot: &Snapshot,
        is_target: impl Fn(u32) -> bool,
    ) -> Option<Activity> {
        // Time not in the map yet: cached per CPU, or in the slice running now.
        let mut running_target: HashMap<(ThreadKey, u32), u64> = HashMap::new();
        let mut other_totals = Vec::with_capacity(snapshot.cpus.len());
        for (cpu, state) in snapshot.cpus.iter().enumerate() {
            for &(key, pending_ns) in &state.cached {
                *running_target.entry((key, cpu as u32)).or_default() += pending_ns;
            }
            let mut other = state.other_ns + state.unstored_ns;
            if let Some(run) = state.running.filter(|r| r.tid != 0) {
                let in_progress = run.in_progress_ns.unwrap_or(0);
                if is_target(run.tgid) {
                    let key = ThreadKey {
                        tgid: run.tgid,
                        tid: run.tid,
                    };
                    *running_target.entry((key, cpu as u32)).or_default() += in_progress;
                } else {
                    other += in_progress;
                }
            }
            other_totals.push(other);
        }

        let mut threads = Vec::new();
        let mut seen: HashMap<(ThreadKey, u32), u64> = HashMap::new();
        for (key, per_cpu) in &snapshot.threads {
            for (cpu, &ns) in per_cpu.iter().enumerate() {
                let id = (*key, cpu as u32);
                let total = ns + running_target.remove(&id).unwrap_or(0);
                if total > 0 {
                    seen.insert(id, total);
                }
            }
        }
        // A thread with nothing in the map yet: only cached or running time.
        seen.extend(running_target.into_iter().filter(|(_, ns)| *ns > 0));

        let first = self.last_taken_ns.is_none();
        for (id, total) in seen {
            let previous = self.threads.entry(id).or_insert(0);
            if total > *previous {
                if !first {
                    threads.push(ThreadSlice {
                        thread: id.0,
                        cpu: id.1,
                        on_cpu_ns: total - *previous,
                    });
                }
                *previous = total;
            }
        }

        if self.cpus.len() < other_totals.len() {
            self.cpus.resize(other_totals.len(), 0);
        }
        let other_deltas: Vec<u64> = other_totals
            .iter()
            .zip(self.cpus.iter_mut())
            .map(|(&other, previous)| {
                let delta = other.saturating_sub(*previous);
                *previous = other.max(*previous);
                delta
            })
            .collect();

        let start_ns = self.last_taken_ns.replace(snapshot.taken_ns)?;
        let duration_ns = snapshot.taken_ns.saturating_sub(start_ns);
        threads.sort_by_key(|s| (s.thread, s.cpu));
        let mut busy = other_deltas.clone();
        for s in &threads {
            if let Some(b) = busy.get_mut(s.cpu as usize) {
                *b += s.on_cpu_ns;
            }
        }
        let cpus = other_deltas
            .iter()
            .zip(&busy)
            .map(|(&other_ns, &busy_ns)| CpuTime {
                idle_ns: duration_ns.saturating_sub(busy_ns),
                other_ns,
            })
            .collect();
        Some(Activity {
            start_ns,
            duration_ns,
            cpus,
            threads,
        })
    }

    /// Forgets a thread whose kernel entry was deleted (it exited and its last time was read),
    /// so that a later thread with the same id starts from zero.
    pub fn forget(&mut self, thread: ThreadKey) {
        self.threads.retain(|(key, _), _| *key != thread);
    }

    /// Number of (thread, CPU) totals remembered.
    pub fn tracked(&self) -> usize {
        self.threads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn key(tgid: u32, tid: u32) -> ThreadKey {
        ThreadKey { tgid, tid }
    }

    fn idle_cpu() -> CpuSnapshot {
        CpuSnapshot::default()
    }

    fn slices_of(activity: &Activity, thread: ThreadKey) -> u64 {
        activity
            .threads
            .iter()
            .filter(|s| s.thread == thread)
            .map(|s| s.on_cpu_ns)
            .sum()
    }

    #[test]
    fn first_snapshot_only_sets_the_start() {
        let mut tracker = ActivityTracker::new();
        let snap = Snapshot {
            taken_ns: 1_000 * MS,
            cpus: vec![idle_cpu()],
            threads: vec![(key(5, 5), vec![30 * MS])],
        };
        assert!(tracker.advance(&snap, |_| true).is_none());
    }

    #[test]
    fn counts_the_slice_still_running_and_never_twice() {
        // cpu0: thread 5/5 runs from t=1000 ms without switching out.
        //   t=1000 snapshot: running for 0 ms -> primes
        //   t=1100 snapshot: still running -> 100 ms in progress
        //   t=1150 switch-out, map total 150 ms; t=1200 snapshot: 50 ms more (not 150)
        let mut tracker = ActivityTracker::new();
        let running = |for_ns| CpuSnapshot {
            running: Some(Running {
                tgid: 5,
                tid: 5,
                in_progress_ns: Some(for_ns),
            }),
            ..CpuSnapshot::default()
        };
        let mut snap = Snapshot {
            taken_ns: 1_000 * MS,
            cpus: vec![running(0)],
            threads: vec![],
        };
        assert!(tracker.advance(&snap, |_| true).is_none());
        snap.taken_ns = 1_100 * MS;
        snap.cpus = vec![running(100 * MS)];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(5, 5)), 100 * MS);
        assert_eq!(a.duration_ns, 100 * MS);

        snap.taken_ns = 1_200 * MS;
        snap.cpus = vec![CpuSnapshot {
            running: None,
            ..CpuSnapshot::default()
        }];
        snap.threads = vec![(key(5, 5), vec![150 * MS])];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(5, 5)), 50 * MS);
        // Idle is the rest of the 100 ms interval.
        assert_eq!(a.cpus[0].idle_ns, 50 * MS);
    }

    #[test]
    fn a_racy_lower_total_shifts_time_forward_without_double_counting() {
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![idle_cpu()],
            threads: vec![(key(1, 1), vec![10 * MS])],
        };
        tracker.advance(&snap, |_| true);
        // In-progress time made the total look like 40 ms...
        snap.taken_ns = 100 * MS;
        snap.threads = vec![(key(1, 1), vec![40 * MS])];
        assert_eq!(
            slices_of(&tracker.advance(&snap, |_| true).unwrap(), key(1, 1)),
            30 * MS
        );
        // ...then the stored total reads 35 ms: nothing new, nothing negative.
        snap.taken_ns = 200 * MS;
        snap.threads = vec![(key(1, 1), vec![35 * MS])];
        assert_eq!(
            slices_of(&tracker.advance(&snap, |_| true).unwrap(), key(1, 1)),
            0
        );
        // ...and only growth beyond 40 ms counts again.
        snap.taken_ns = 300 * MS;
        snap.threads = vec![(key(1, 1), vec![45 * MS])];
        assert_eq!(
            slices_of(&tracker.advance(&snap, |_| true).unwrap(), key(1, 1)),
            5 * MS
        );
    }

    #[test]
    fn non_target_running_task_counts_as_other_and_unstored_too() {
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![CpuSnapshot::default()],
            threads: vec![],
        };
        tracker.advance(&snap, |_| false);
        snap.taken_ns = 100 * MS;
        snap.cpus = vec![CpuSnapshot {
            other_ns: 20 * MS,
            unstored_ns: 5 * MS,
            running: Some(Running {
                tgid: 9,
                tid: 9,
                in_progress_ns: Some(40 * MS),
            }),
            ..CpuSnapshot::default()
        }];
        let a = tracker.advance(&snap, |_| false).unwrap();
        assert_eq!(a.cpus[0].other_ns, 65 * MS);
        assert_eq!(a.cpus[0].idle_ns, 35 * MS);
        assert!(a.threads.is_empty());
    }

    #[test]
    fn forgotten_thread_restarts_from_zero() {
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![idle_cpu()],
            threads: vec![(key(3, 4), vec![80 * MS])],
        };
        tracker.advance(&snap, |_| true);
        tracker.forget(key(3, 4));
        assert_eq!(tracker.tracked(), 0);
        // The kernel entry was deleted; a final switch-out recreated it with 2 ms.
        snap.taken_ns = 100 * MS;
        snap.threads = vec![(key(3, 4), vec![2 * MS])];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(3, 4)), 2 * MS);
    }

    #[test]
    fn cached_time_counts_once_wherever_it_sits() {
        // 20 ms in cpu0's cache, then moved into the map: the total stays 20 ms.
        let mut tracker = ActivityTracker::new();
        let cached = |ns| CpuSnapshot {
            cached: vec![(key(8, 9), ns)],
            ..CpuSnapshot::default()
        };
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![cached(0)],
            threads: vec![],
        };
        tracker.advance(&snap, |_| true);
        snap.taken_ns = 100 * MS;
        snap.cpus = vec![cached(20 * MS)];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(8, 9)), 20 * MS);
        snap.taken_ns = 200 * MS;
        snap.cpus = vec![CpuSnapshot::default()];
        snap.threads = vec![(key(8, 9), vec![20 * MS])];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(8, 9)), 0);
    }

    #[test]
    fn knows_which_threads_are_not_final_yet() {
        let snap = Snapshot {
            taken_ns: 0,
            cpus: vec![
                CpuSnapshot {
                    running: Some(Running {
                        tgid: 4,
                        tid: 6,
                        in_progress_ns: Some(1),
                    }),
                    ..CpuSnapshot::default()
                },
                CpuSnapshot {
                    cached: vec![(key(7, 8), 5)],
                    ..CpuSnapshot::default()
                },
            ],
            threads: vec![(key(9, 9), vec![1, 1])],
        };
        assert!(snap.holds(4, Some(6)));
        assert!(snap.holds(4, None));
        assert!(!snap.holds(4, Some(5)));
        assert!(snap.holds(7, Some(8)));
        assert!(!snap.holds(9, None), "only in the map: final");
    }

    #[test]
    fn per_cpu_totals_are_kept_apart() {
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![idle_cpu(), idle_cpu()],
            threads: vec![(key(1, 2), vec![10 * MS, 0])],
        };
        tracker.advance(&snap, |_| true);
        snap.taken_ns = 100 * MS;
        snap.threads = vec![(key(1, 2), vec![30 * MS, 40 * MS])];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(
            a.threads,
            vec![
                ThreadSlice {
                    thread: key(1, 2),
                    cpu: 0,
                    on_cpu_ns: 20 * MS
                },
                ThreadSlice {
                    thread: key(1, 2),
                    cpu: 1,
                    on_cpu_ns: 40 * MS
                },
            ]
        );
    }
}
