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
//! An interval never shows a CPU busier than the interval was long: time read beyond that is
//! cut in proportion and carried into the next intervals (see [`ActivityTracker`]).
//!
//! Pure: the probes module fills the snapshots; tests write them by hand.

use crate::fast_hash::{HashMap, HashMapExt, HashSet, HashSetExt};

use cg_common::ThreadKey;

use crate::attribution::CpuTime;

/// The task a CPU was running when the snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Running {
    pub tgid: u32,
    pub tid: u32,
    /// The thread's start time (with tgid and tid, its [`ThreadKey`]).
    pub start_ns: u64,
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
    /// Cumulative on-CPU ns of each accounted thread, indexed by CPU id. Iterator
    /// accounting gives only the threads whose totals grew since the previous snapshot: a
    /// thread left out keeps the totals it last showed.
    pub threads: Vec<(ThreadKey, Vec<u64>)>,
    /// Threads that exited and whose final time has not come in yet (iterator accounting:
    /// their FREE event is still to come).
    pub unfinished: Vec<ThreadKey>,
}

impl Snapshot {
    /// Whether some CPU still runs, or holds cached time of, thread `tid` of process `tgid`
    /// (any of its threads when `tid` is `None`), or the thread is unfinished: its kernel
    /// totals are not final yet.
    pub fn holds(&self, tgid: u32, tid: Option<u32>) -> bool {
        let matches =
            |key_tgid: u32, key_tid: u32| key_tgid == tgid && tid.is_none_or(|t| t == key_tid);
        self.cpus.iter().any(|c| {
            c.running.is_some_and(|r| matches(r.tgid, r.tid))
                || c.cached.iter().any(|(k, _)| matches(k.tgid, k.tid))
        }) || self.unfinished.iter().any(|k| matches(k.tgid, k.tid))
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

/// How far one cumulative counter (a thread's time on one CPU, or a CPU's other time) has
/// been seen and how much of it has been charged to intervals so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Mark {
    /// The highest total read so far.
    seen_ns: u64,
    /// How much of it the intervals so far were given.
    charged_ns: u64,
}

impl Mark {
    fn see(&mut self, total_ns: u64) {
        self.seen_ns = self.seen_ns.max(total_ns);
    }

    fn owed_ns(&self) -> u64 {
        self.seen_ns - self.charged_ns
    }
}

/// Time read but not yet charged to an interval, handed over when a run ends: a slice the
/// kernel reported only when it ended (it missed the switch that started it, so no read
/// showed it running) can be longer than the run's last intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// (thread, CPU, nanoseconds owed).
    pub threads: Vec<(ThreadKey, u32, u64)>,
    /// Other tasks' time owed, per CPU id.
    pub other_ns_per_cpu: Vec<u64>,
}

/// Remembers the previous cumulative values (see the module docs).
///
/// An interval never shows more busy time on a CPU than the interval lasted: when the time
/// read for a CPU exceeds it (a slice that ran partly in earlier intervals is charged when it
/// ends, a read that came late, an agent that was not scheduled for a while), targets' time
/// comes first (cut in the same proportion for every target if even it exceeds the interval),
/// other tasks' time fills what room is left, and the rest is carried, still owed, into the
/// next intervals. Nothing is lost: a thread's kernel entry is kept until what it is owed has
/// been charged (see [`ActivityTracker::owes`]).
#[derive(Debug, Default)]
pub struct ActivityTracker {
    last_taken_ns: Option<u64>,
    threads: HashMap<(ThreadKey, u32), Mark>,
    /// Counters that were owed time at the end of the last interval.
    carrying: Vec<(ThreadKey, u32)>,
    /// Other time per CPU.
    cpus: Vec<Mark>,
}

impl ActivityTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns what ran since the previous snapshot, or `None` for the first one (which only
    /// sets the starting point). `is_target(thread)` says whether a running task's time is
    /// accounted per thread (as the kernel does) or as other.
    pub fn advance(
        &mut self,
        snapshot: &Snapshot,
        is_target: impl Fn(&ThreadKey) -> bool,
    ) -> Option<Activity> {
        let (seen, other_totals) = totals(snapshot, is_target);
        let owing = self.see(seen, &other_totals);
        let Some(start_ns) = self.last_taken_ns.replace(snapshot.taken_ns) else {
            // The first snapshot only sets the starting point.
            for mark in self.threads.values_mut().chain(self.cpus.iter_mut()) {
                mark.charged_ns = mark.seen_ns;
            }
            return None;
        };
        let duration_ns = snapshot.taken_ns.saturating_sub(start_ns);
        let (mut threads, busy) = self.charge_targets(owing, duration_ns);
        let cpus = self.charge_others(&busy, duration_ns);
        threads.sort_by_key(|s| (s.thread, s.cpu));
        Some(Activity {
            start_ns,
            duration_ns,
            cpus,
            threads,
        })
    }

    /// Raises the marks to the totals read now; returns the counters that may be owed time:
    /// those that grew and those still carrying, each once, in order.
    fn see(&mut self, seen: Vec<CounterTotal>, other_totals: &[u64]) -> Vec<(ThreadKey, u32)> {
        if self.cpus.len() < other_totals.len() {
            self.cpus.resize(other_totals.len(), Mark::default());
        }
        for (mark, &total) in self.cpus.iter_mut().zip(other_totals) {
            mark.see(total);
        }
        let mut owing: Vec<(ThreadKey, u32)> = std::mem::take(&mut self.carrying);
        owing.reserve(seen.len());
        for (id, total) in seen {
            let mark = self.threads.entry(id).or_default();
            if total > mark.seen_ns {
                mark.see(total);
                owing.push(id);
            }
        }
        owing.sort_unstable();
        owing.dedup();
        owing
    }

    /// Charges the targets' counters in `owing` what an interval of `duration_ns` can hold
    /// (targets come first: all of what they are owed when it fits on their CPU, else the
    /// same share for each); what is left stays owed. Returns the slices and the busy time
    /// per CPU.
    fn charge_targets(
        &mut self,
        owing: Vec<(ThreadKey, u32)>,
        duration_ns: u64,
    ) -> (Vec<ThreadSlice>, Vec<u64>) {
        let cpu_count = self.cpus.len();
        let mut owed_per_cpu = vec![0u64; cpu_count];
        for id in &owing {
            let owed = self.threads.get(id).map_or(0, Mark::owed_ns);
            if let Some(o) = owed_per_cpu.get_mut(id.1 as usize) {
                *o += owed;
            }
        }
        let mut threads = Vec::new();
        let mut busy = vec![0u64; cpu_count];
        for id in owing {
            let Some(mark) = self.threads.get_mut(&id) else {
                continue;
            };
            let owed = mark.owed_ns();
            let total = owed_per_cpu.get(id.1 as usize).copied().unwrap_or(owed);
            let given = granted_ns(owed, total, duration_ns);
            mark.charged_ns += given;
            if mark.owed_ns() > 0 {
                self.carrying.push(id);
            }
            if given > 0 {
                if let Some(b) = busy.get_mut(id.1 as usize) {
                    *b += given;
                }
                threads.push(ThreadSlice {
                    thread: id.0,
                    cpu: id.1,
                    on_cpu_ns: given,
                });
            }
        }
        (threads, busy)
    }

    /// Charges other tasks' time the room the targets left on each CPU; the rest of the
    /// room is idle.
    fn charge_others(&mut self, busy: &[u64], duration_ns: u64) -> Vec<CpuTime> {
        let mut cpus = Vec::with_capacity(self.cpus.len());
        for (cpu, mark) in self.cpus.iter_mut().enumerate() {
            let room = duration_ns.saturating_sub(busy[cpu]);
            let given = mark.owed_ns().min(room);
            mark.charged_ns += given;
            cpus.push(CpuTime {
                idle_ns: room - given,
                other_ns: given,
            });
        }
        cpus
    }

    /// Whether time of `tid` of process `tgid` (any of its threads when `tid` is `None`) was
    /// read but is still carried, not yet charged to an interval: its kernel entry must stay
    /// until it is.
    pub fn owes(&self, tgid: u32, tid: Option<u32>) -> bool {
        self.carrying
            .iter()
            .any(|(key, _)| key.tgid == tgid && tid.is_none_or(|t| t == key.tid))
    }

    /// Nanoseconds of target threads read but not yet charged to any interval, all CPUs
    /// together.
    pub fn carried_target_ns(&self) -> u64 {
        self.carrying
            .iter()
            .filter_map(|id| self.threads.get(id))
            .map(Mark::owed_ns)
            .sum()
    }

    /// The same for other tasks' time.
    pub fn carried_other_ns(&self) -> u64 {
        self.cpus.iter().map(Mark::owed_ns).sum()
    }

    /// Everything still carried, marked as charged: what the run's intervals could not hold
    /// by its end (see [`Carried`]).
    pub fn take_carried(&mut self) -> Carried {
        let mut carrying = std::mem::take(&mut self.carrying);
        carrying.sort_unstable();
        carrying.dedup();
        let mut threads = Vec::new();
        for (thread, cpu) in carrying {
            if let Some(mark) = self.threads.get_mut(&(thread, cpu)) {
                let owed_ns = mark.owed_ns();
                mark.charged_ns = mark.seen_ns;
                if owed_ns > 0 {
                    threads.push((thread, cpu, owed_ns));
                }
            }
        }
        let other_ns_per_cpu = self
            .cpus
            .iter_mut()
            .map(|mark| {
                let owed_ns = mark.owed_ns();
                mark.charged_ns = mark.seen_ns;
                owed_ns
            })
            .collect();
        Carried {
            threads,
            other_ns_per_cpu,
        }
    }

    /// Forgets a thread whose kernel entry was deleted (it exited and its last time was read
    /// and charged), so that a later thread with the same id starts from zero.
    pub fn forget(&mut self, thread: ThreadKey) {
        self.threads.retain(|(key, _), _| *key != thread);
        self.carrying.retain(|(key, _)| *key != thread);
    }

    /// [`Self::forget`] for many threads at once, in one pass over what is remembered (the
    /// threads of a fork storm exit together).
    pub fn forget_all(&mut self, threads: &[ThreadKey]) {
        match threads {
            [] => {}
            [one] => self.forget(*one),
            _ => {
                let mut gone = HashSet::with_capacity(threads.len());
                gone.extend(threads.iter().copied());
                self.threads.retain(|(key, _), _| !gone.contains(key));
                self.carrying.retain(|(key, _)| !gone.contains(key));
            }
        }
    }

    /// Number of (thread, CPU) totals remembered.
    pub fn tracked(&self) -> usize {
        self.threads.len()
    }
}

/// One counter (a target thread on a CPU) and the total a snapshot shows of it.
type CounterTotal = ((ThreadKey, u32), u64);

/// The totals a snapshot shows: per (target thread, CPU), the map's time plus what the CPU
/// still caches and the slice running now (each pair once); per CPU, other tasks' time (with
/// target time the kernel could not store, and a non-target's slice running now).
fn totals(
    snapshot: &Snapshot,
    is_target: impl Fn(&ThreadKey) -> bool,
) -> (Vec<CounterTotal>, Vec<u64>) {
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
            let key = ThreadKey {
                tgid: run.tgid,
                tid: run.tid,
                start_ns: run.start_ns,
            };
            if is_target(&key) {
                *running_target.entry((key, cpu as u32)).or_default() += in_progress;
            } else {
                other += in_progress;
            }
        }
        other_totals.push(other);
    }
    // The snapshot holds each thread once.
    let mut seen = Vec::with_capacity(snapshot.threads.len() + running_target.len());
    for (key, per_cpu) in &snapshot.threads {
        for (cpu, &ns) in per_cpu.iter().enumerate() {
            let id = (*key, cpu as u32);
            let total = ns + running_target.remove(&id).unwrap_or(0);
            if total > 0 {
                seen.push((id, total));
            }
        }
    }
    // A thread with nothing in the map yet: only cached or running time.
    seen.extend(running_target.into_iter().filter(|(_, ns)| *ns > 0));
    (seen, other_totals)
}

/// The part of `owed_ns` an interval of `duration_ns` holds when the CPU's targets are owed
/// `total_ns` in it: all of it when the total fits, else the same share for each.
fn granted_ns(owed_ns: u64, total_ns: u64, duration_ns: u64) -> u64 {
    if total_ns <= duration_ns {
        owed_ns
    } else {
        (u128::from(owed_ns) * u128::from(duration_ns) / u128::from(total_ns)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn key(tgid: u32, tid: u32) -> ThreadKey {
        ThreadKey {
            tgid,
            tid,
            start_ns: 0,
        }
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
            unfinished: Vec::new(),
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
                start_ns: 0,
                in_progress_ns: Some(for_ns),
            }),
            ..CpuSnapshot::default()
        };
        let mut snap = Snapshot {
            taken_ns: 1_000 * MS,
            cpus: vec![running(0)],
            threads: vec![],
            unfinished: Vec::new(),
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
            unfinished: Vec::new(),
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
            unfinished: Vec::new(),
        };
        tracker.advance(&snap, |_| false);
        snap.taken_ns = 100 * MS;
        snap.cpus = vec![CpuSnapshot {
            other_ns: 20 * MS,
            unstored_ns: 5 * MS,
            running: Some(Running {
                tgid: 9,
                tid: 9,
                start_ns: 0,
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
            unfinished: Vec::new(),
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
            unfinished: Vec::new(),
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
                        start_ns: 0,
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
            unfinished: Vec::new(),
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
            unfinished: Vec::new(),
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

    #[test]
    fn a_cpu_is_never_busier_than_the_interval_and_the_rest_is_carried() {
        // cpu0, 100 ms intervals: thread 1/1 is read with 150 ms and other tasks with 50 ms
        // (a slice that began in earlier intervals, charged when it ended). The interval holds
        // 100 ms, the target's first; the 50 + 50 ms left over follow in the next interval.
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![idle_cpu()],
            threads: vec![],
            unfinished: Vec::new(),
        };
        tracker.advance(&snap, |_| true);
        snap.taken_ns = 100 * MS;
        snap.cpus[0].other_ns = 50 * MS;
        snap.threads = vec![(key(1, 1), vec![150 * MS])];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(1, 1)), 100 * MS);
        assert_eq!(a.cpus[0].other_ns, 0);
        assert_eq!(a.cpus[0].idle_ns, 0);
        assert!(tracker.owes(1, Some(1)));
        assert!(tracker.owes(1, None));
        assert!(!tracker.owes(2, None));
        assert_eq!(tracker.carried_target_ns(), 50 * MS);
        assert_eq!(tracker.carried_other_ns(), 50 * MS);
        // Nothing new ran: the carried 100 ms fill this interval exactly.
        snap.taken_ns = 200 * MS;
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(1, 1)), 50 * MS);
        assert_eq!(a.cpus[0].other_ns, 50 * MS);
        assert_eq!(tracker.carried_target_ns() + tracker.carried_other_ns(), 0);
        assert!(!tracker.owes(1, None));
        // And then it is all charged: nothing more.
        snap.taken_ns = 300 * MS;
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(1, 1)), 0);
        assert_eq!(a.cpus[0].idle_ns, 100 * MS);
    }

    #[test]
    fn what_is_still_carried_is_handed_over_once() {
        // A slice whose start the kernel never reported shows up whole when it ends: 900 ms
        // of thread 1/1 on cpu0 read at the end of a 100 ms interval; 800 ms stay owed.
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![idle_cpu()],
            threads: vec![],
            unfinished: Vec::new(),
        };
        tracker.advance(&snap, |_| true);
        snap.taken_ns = 100 * MS;
        snap.cpus[0].other_ns = 130 * MS;
        snap.threads = vec![(key(1, 1), vec![900 * MS])];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(1, 1)), 100 * MS);
        let carried = tracker.take_carried();
        assert_eq!(carried.threads, vec![(key(1, 1), 0, 800 * MS)]);
        assert_eq!(carried.other_ns_per_cpu, vec![130 * MS]);
        assert!(!tracker.owes(1, None));
        assert_eq!(tracker.carried_target_ns() + tracker.carried_other_ns(), 0);
        // Handed over: neither owed again nor charged twice.
        assert_eq!(tracker.take_carried().threads, vec![]);
        snap.taken_ns = 200 * MS;
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(1, 1)), 0);
        assert_eq!(a.cpus[0].other_ns, 0);
    }

    #[test]
    fn targets_over_an_interval_share_it_in_proportion() {
        // cpu0 in a 100 ms interval: two targets read with 150 and 50 ms: 75 and 25 fit.
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![idle_cpu()],
            threads: vec![],
            unfinished: Vec::new(),
        };
        tracker.advance(&snap, |_| true);
        snap.taken_ns = 100 * MS;
        snap.cpus[0].other_ns = 10 * MS;
        snap.threads = vec![(key(1, 1), vec![150 * MS]), (key(1, 2), vec![50 * MS])];
        let a = tracker.advance(&snap, |_| true).unwrap();
        assert_eq!(slices_of(&a, key(1, 1)), 75 * MS);
        assert_eq!(slices_of(&a, key(1, 2)), 25 * MS);
        assert_eq!(a.cpus[0].other_ns, 0);
        assert_eq!(tracker.carried_target_ns(), 100 * MS);
    }

    #[test]
    fn carried_time_shares_the_next_interval_with_new_time() {
        // cpu0: 30 ms carried from a starved read, then 90 ms more of thread 2/2 in a 100 ms
        // interval: 120 ms owed, 100 ms fit. Per interval busy <= duration, exactly; over
        // the three intervals every nanosecond read is charged once.
        let mut tracker = ActivityTracker::new();
        let mut snap = Snapshot {
            taken_ns: 0,
            cpus: vec![idle_cpu(), idle_cpu()],
            threads: vec![],
            unfinished: Vec::new(),
        };
        tracker.advance(&snap, |_| true);
        snap.taken_ns = 10 * MS;
        snap.threads = vec![(key(2, 2), vec![40 * MS, 3 * MS])];
        let a1 = tracker.advance(&snap, |_| true).unwrap();
        snap.taken_ns = 110 * MS;
        snap.threads = vec![(key(2, 2), vec![130 * MS, 3 * MS])];
        let a2 = tracker.advance(&snap, |_| true).unwrap();
        snap.taken_ns = 210 * MS;
        let a3 = tracker.advance(&snap, |_| true).unwrap();
        let mut total = 0;
        for a in [&a1, &a2, &a3] {
            for (cpu, time) in a.cpus.iter().enumerate() {
                let busy: u64 = a
                    .threads
                    .iter()
                    .filter(|s| s.cpu == cpu as u32)
                    .map(|s| s.on_cpu_ns)
                    .sum::<u64>()
                    + time.other_ns;
                assert!(
                    busy <= a.duration_ns,
                    "cpu{cpu}: {busy} ns in {} ns",
                    a.duration_ns
                );
                assert_eq!(busy + time.idle_ns, a.duration_ns);
            }
            total += slices_of(a, key(2, 2));
        }
        assert_eq!(slices_of(&a1, key(2, 2)), 10 * MS + 3 * MS);
        assert_eq!(total, 133 * MS);
    }

    /// ```text
    /// interval      |<---- 100 ns ---->|
    /// target a owes  60 ns              } 60 + 90 = 150 ns owed: more than fits,
    /// target b owes  90 ns              } so each gets 100/150 of what it is owed
    /// ```
    #[test]
    fn targets_owed_more_than_the_interval_get_the_same_share_each() {
        assert_eq!(granted_ns(60, 150, 100), 40);
        assert_eq!(granted_ns(90, 150, 100), 60);
        // It fits: all of it.
        assert_eq!(granted_ns(60, 100, 100), 60);
        assert_eq!(granted_ns(0, 0, 0), 0);
    }
}
