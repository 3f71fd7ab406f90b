//! Keeps the run's intervals (and the calibration window's) for the report, which attributes
//! them once the idle baseline is known. Memory stays bounded: past a budget of stored
//! slices, adjacent intervals are merged in pairs, halving the time resolution of the stored
//! record (the report says so); the totals of energy and CPU time are unchanged by a merge.
//! A merge adds up only the slices of the same thread on the same CPU, so under process churn
//! it frees little: a run that writes no report (`serve`, [`Recorder::windowed`]) also folds
//! the targets' slices of its older half into the CPUs' other time once merging is not
//! enough, which keeps it within its budget whatever the churn.

use std::collections::BTreeMap;

use crate::attribution::{CpuTime, Interval, Slice, ThreadId, gpu::GpuUsage};

/// Default budget of stored (process, thread, CPU) slices: about 20 bytes each, so ~8 MB.
pub const DEFAULT_SLICE_BUDGET: usize = 400_000;
/// The budget of a run whose memory must stay small (`cg-trace serve`): ~100 KB.
pub const BOUNDED_SLICE_BUDGET: usize = 4_096;

#[derive(Debug)]
pub struct Recorder {
    intervals: Vec<Interval>,
    calibration: Vec<Interval>,
    budget: usize,
    stored: usize,
    /// How many times the record was halved.
    pub merges: u32,
    /// Whether the slices of older intervals may be folded away ([`Recorder::windowed`]).
    windowed: bool,
}

impl Recorder {
    pub fn new(budget: usize) -> Self {
        Recorder {
            intervals: Vec::new(),
            calibration: Vec::new(),
            budget: budget.max(2),
            stored: 0,
            merges: 0,
            windowed: false,
        }
    }

    /// The record of a run: windowed within [`BOUNDED_SLICE_BUDGET`] when its memory must
    /// stay small (`serve`, and the churn benchmark that stands for it), else merged within
    /// [`DEFAULT_SLICE_BUDGET`] for the report.
    pub fn for_run(bounded_memory: bool) -> Self {
        if bounded_memory {
            Recorder::windowed(BOUNDED_SLICE_BUDGET)
        } else {
            Recorder::new(DEFAULT_SLICE_BUDGET)
        }
    }

    /// A record for a run that writes no report (`serve`): within `budget` slices whatever
    /// the churn, as older intervals keep their targets' time only as the CPUs' other time
    /// (per CPU, every interval still adds up; who ran then is forgotten).
    pub fn windowed(budget: usize) -> Self {
        Recorder {
            windowed: true,
            ..Recorder::new(budget)
        }
    }

    pub fn push(&mut self, interval: Interval) {
        self.stored += interval.slices.len() + 1;
        self.intervals.push(interval);
        if self.stored > self.budget && self.intervals.len() >= 2 {
            self.compact();
        }
    }

    /// Intervals measured before the run started, used only to estimate the idle baseline.
    pub fn push_calibration(&mut self, interval: Interval) {
        self.calibration.push(interval);
    }

    /// Forgets the calibration window (its energy came from a source the run no longer uses).
    pub fn drop_calibration(&mut self) {
        self.calibration.clear();
    }

    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    pub fn calibration(&self) -> &[Interval] {
        &self.calibration
    }

    /// Every stored interval, calibration first, for sources that revise their figures once
    /// the run is over (a power meter's log that the logger completes after the last read),
    /// and for the books of energy that arrives late or turns out unknown (newest first,
    /// reversed).
    pub fn all_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut Interval> {
        self.calibration.iter_mut().chain(self.intervals.iter_mut())
    }

    /// Places `ns` of thread `thread`'s time on `cpu` that was read only after the run's
    /// last interval (see [`crate::probes::activity::Carried`]) back into the latest
    /// intervals, newest first, that end after `not_before_ns` (the process's start, in run
    /// time). It ran then, while its CPU looked idle (the kernel missed the switch that
    /// started it): idle room is taken first, in every interval; then other tasks' time,
    /// since targets' time is exact and other time comes second (as in
    /// [`crate::probes::activity::ActivityTracker`]). No interval becomes busier than it was
    /// long. `busier(interval, ns)` is told of idle time that became busy (energy estimated
    /// from CPU activity follows it).
    pub fn place_late(
        &mut self,
        (process, tid): ThreadId,
        cpu: u32,
        ns: u64,
        not_before_ns: u64,
        busier: &mut dyn FnMut(&mut Interval, u64),
    ) -> LatePlacement {
        let mut left_ns = ns;
        let mut displaced_other_ns = 0;
        for take_other in [false, true] {
            for interval in self.intervals.iter_mut().rev() {
                if left_ns == 0 {
                    break;
                }
                let end_ns = interval.start_ns + interval.duration_ns;
                if end_ns <= not_before_ns {
                    break;
                }
                let after_start_ns = end_ns - not_before_ns.max(interval.start_ns);
                let busy_ns: u64 = interval
                    .slices
                    .iter()
                    .filter(|s| s.process == process && s.tid == tid && s.cpu == cpu)
                    .map(|s| s.on_cpu_ns)
                    .sum();
                let Some(time) = interval.cpus.get_mut(cpu as usize) else {
                    continue;
                };
                let room_ns = if take_other {
                    time.other_ns
                } else {
                    time.idle_ns
                };
                let take_ns = left_ns
                    .min(room_ns)
                    .min(after_start_ns.saturating_sub(busy_ns));
                if take_ns == 0 {
                    continue;
                }
                if take_other {
                    time.other_ns -= take_ns;
                    displaced_other_ns += take_ns;
                } else {
                    time.idle_ns -= take_ns;
                }
                left_ns -= take_ns;
                if !take_other {
                    busier(interval, take_ns);
                }
                match interval
                    .slices
                    .iter_mut()
                    .find(|s| s.process == process && s.tid == tid && s.cpu == cpu)
                {
                    Some(slice) => slice.on_cpu_ns += take_ns,
                    None => {
                        interval.slices.push(Slice {
                            process,
                            tid,
                            cpu,
                            on_cpu_ns: take_ns,
                        });
                        interval.slices.sort_by_key(|s| (s.process, s.tid, s.cpu));
                        self.stored += 1;
                    }
                }
            }
        }
        LatePlacement {
            placed_ns: ns - left_ns,
            displaced_other_ns,
        }
    }

    /// Places other tasks' time on `cpu` read after the run's last interval into the idle
    /// room of the latest intervals; returns how much found room. (`busier` as in
    /// [`Self::place_late`].)
    pub fn place_late_other(
        &mut self,
        cpu: u32,
        ns: u64,
        busier: &mut dyn FnMut(&mut Interval, u64),
    ) -> u64 {
        let mut left_ns = ns;
        for interval in self.intervals.iter_mut().rev() {
            if left_ns == 0 {
                break;
            }
            if let Some(time) = interval.cpus.get_mut(cpu as usize) {
                let take_ns = left_ns.min(time.idle_ns);
                time.idle_ns -= take_ns;
                time.other_ns += take_ns;
                left_ns -= take_ns;
                if take_ns > 0 {
                    busier(interval, take_ns);
                }
            }
        }
        ns - left_ns
    }

    fn compact(&mut self) {
        let old = std::mem::take(&mut self.intervals);
        let mut merged = Vec::with_capacity(old.len().div_ceil(2));
        let mut iter = old.into_iter();
        while let Some(a) = iter.next() {
            merged.push(match iter.next() {
                Some(b) => merge(&a, &b),
                None => a,
            });
        }
        self.intervals = merged;
        self.merges += 1;
        if self.windowed {
            let older = self.intervals.len() / 2;
            let mut stored: usize = self.intervals.iter().map(|i| i.slices.len() + 1).sum();
            for interval in &mut self.intervals[..older] {
                if stored <= self.budget / 2 {
                    break;
                }
                stored -= interval.slices.len();
                fold_slices(interval);
            }
        }
        self.stored = self.intervals.iter().map(|i| i.slices.len() + 1).sum();
    }
}

/// Moves an interval's targets' slices into its CPUs' other time (each CPU's total stays).
fn fold_slices(interval: &mut Interval) {
    for slice in std::mem::take(&mut interval.slices) {
        if let Some(cpu) = interval.cpus.get_mut(slice.cpu as usize) {
            cpu.other_ns += slice.on_cpu_ns;
        }
    }
}

/// What [`Recorder::place_late`] did with late time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatePlacement {
    pub placed_ns: u64,
    /// Other tasks' time it took the place of (no longer in any interval).
    pub displaced_other_ns: u64,
}

/// One interval covering `a` then `b`.
pub fn merge(a: &Interval, b: &Interval) -> Interval {
    let cpu_count = a.cpus.len().max(b.cpus.len());
    let cpus = (0..cpu_count)
        .map(|i| {
            let (x, y) = (
                a.cpus.get(i).copied().unwrap_or_default(),
                b.cpus.get(i).copied().unwrap_or_default(),
            );
            CpuTime {
                idle_ns: x.idle_ns + y.idle_ns,
                other_ns: x.other_ns + y.other_ns,
            }
        })
        .collect();
    let mut slices: BTreeMap<(u32, u32, u32), u64> = BTreeMap::new();
    for s in a.slices.iter().chain(&b.slices) {
        *slices.entry((s.process, s.tid, s.cpu)).or_default() += s.on_cpu_ns;
    }
    let domain_count = a.energy_j.len().max(b.energy_j.len());
    let energy_j = (0..domain_count)
        .map(|d| a.energy_j.get(d).unwrap_or(&0.0) + b.energy_j.get(d).unwrap_or(&0.0))
        .collect();
    let energy_state = (0..domain_count)
        .map(|d| a.energy_state(d).merge(&b.energy_state(d)))
        .collect();
    let gpu_count = a.gpus.len().max(b.gpus.len());
    let gpus = (0..gpu_count)
        .map(|g| {
            let none = GpuUsage::default();
            GpuUsage::merge(
                a.gpus.get(g).unwrap_or(&none),
                a.duration_ns,
                b.gpus.get(g).unwrap_or(&none),
                b.duration_ns,
            )
        })
        .collect();
    Interval {
        start_ns: a.start_ns,
        wall_start_ns: a.wall_start_ns,
        gpus,
        duration_ns: a.duration_ns + b.duration_ns,
        cpus,
        slices: slices
            .into_iter()
            .map(|((process, tid, cpu), on_cpu_ns)| Slice {
                process,
                tid,
                cpu,
                on_cpu_ns,
            })
            .collect(),
        energy_j,
        energy_state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::{Coverage, attribute};

    fn interval(i: u64) -> Interval {
        Interval {
            start_ns: i * 100,
            duration_ns: 100,
            cpus: vec![CpuTime {
                idle_ns: 10,
                other_ns: 20,
            }],
            slices: vec![
                Slice {
                    process: (i % 3) as u32,
                    tid: 100 + (i % 3) as u32,
                    cpu: 0,
                    on_cpu_ns: 70,
                },
                Slice {
                    process: 9,
                    tid: 9,
                    cpu: 1,
                    on_cpu_ns: 5,
                },
            ],
            energy_j: vec![1.0 + i as f64],
            ..Interval::default()
        }
    }

    #[test]
    fn merging_keeps_totals_and_the_invariant() {
        let mut rec = Recorder::new(12);
        for i in 0..20 {
            rec.push(interval(i));
        }
        assert!(rec.merges > 0);
        assert!(rec.intervals().len() < 20);
        let total_ns: u64 = rec.intervals().iter().map(|i| i.duration_ns).sum();
        assert_eq!(total_ns, 2000);
        let energy: f64 = rec.intervals().iter().map(|i| i.energy_j[0]).sum();
        assert!((energy - (20.0 + 190.0)).abs() < 1e-9);
        let ledger = attribute(rec.intervals(), &[Coverage::AllCpus], &[0.5]);
        let d = &ledger.domains[0];
        assert!((d.attributed_j() + d.other_j + d.idle_j - d.measured_j).abs() < 1e-9);
        assert_eq!(ledger.cpu_ns[&9], 100);
        // Starts stay in order and the first interval starts at 0.
        assert_eq!(rec.intervals()[0].start_ns, 0);
    }

    fn busy_at_most_long(rec: &Recorder) {
        for interval in rec.intervals() {
            for (cpu, time) in interval.cpus.iter().enumerate() {
                let targets_ns: u64 = interval
                    .slices
                    .iter()
                    .filter(|s| s.cpu == cpu as u32)
                    .map(|s| s.on_cpu_ns)
                    .sum();
                assert_eq!(
                    targets_ns + time.other_ns + time.idle_ns,
                    interval.duration_ns,
                    "{interval:?}"
                );
            }
        }
    }

    fn quiet(i: u64, idle_ns: u64, other_ns: u64) -> Interval {
        Interval {
            start_ns: i * 100,
            duration_ns: 100,
            cpus: vec![CpuTime { idle_ns, other_ns }],
            ..Interval::default()
        }
    }

    #[test]
    fn late_time_goes_back_to_where_its_cpu_looked_idle() {
        // Process 4 spun on cpu0 for 250 ns while the kernel had not reported its start: the
        // intervals showed cpu0 idle (the last one partly busy with it). Read only at the
        // end, its time goes back into the idle room, newest first.
        let mut rec = Recorder::new(1000);
        rec.push(quiet(0, 100, 0));
        rec.push(quiet(1, 90, 10));
        rec.push(quiet(2, 80, 20));
        let mut last = quiet(3, 30, 20);
        last.slices.push(Slice {
            process: 4,
            tid: 4,
            cpu: 0,
            on_cpu_ns: 50,
        });
        rec.push(last);
        let placed = rec.place_late((4, 4), 0, 150, 0, &mut |_, _| {});
        assert_eq!(
            placed,
            LatePlacement {
                placed_ns: 150,
                displaced_other_ns: 0
            }
        );
        let on_cpu0 = |i: usize| -> u64 {
            rec.intervals()[i]
                .slices
                .iter()
                .filter(|s| s.process == 4)
                .map(|s| s.on_cpu_ns)
                .sum()
        };
        assert_eq!(
            [on_cpu0(0), on_cpu0(1), on_cpu0(2), on_cpu0(3)],
            [0, 40, 80, 80]
        );
        busy_at_most_long(&rec);
    }

    #[test]
    fn late_time_displaces_other_time_only_when_idle_room_is_short() {
        let mut rec = Recorder::new(1000);
        rec.push(quiet(0, 10, 90));
        rec.push(quiet(1, 20, 80));
        let mut busier_ns = 0;
        let placed = rec.place_late((7, 7), 0, 100, 0, &mut |_, ns| busier_ns += ns);
        assert_eq!(placed.placed_ns, 100);
        // 30 ns of idle room first (both intervals), then 70 ns of other time, newest first.
        assert_eq!(placed.displaced_other_ns, 70);
        assert_eq!(busier_ns, 30, "only idle room becomes busier");
        assert_eq!(rec.intervals()[1].cpus[0].other_ns, 10);
        assert_eq!(rec.intervals()[0].cpus[0].other_ns, 90);
        busy_at_most_long(&rec);
        // More than the run had room for: the rest stays unplaced.
        let placed = rec.place_late((7, 7), 0, 1000, 0, &mut |_, _| {});
        assert_eq!(placed.placed_ns, 100);
        busy_at_most_long(&rec);
        // Other tasks' late time only fills idle room.
        let mut rec = Recorder::new(1000);
        rec.push(quiet(0, 10, 90));
        assert_eq!(rec.place_late_other(0, 25, &mut |_, _| {}), 10);
        busy_at_most_long(&rec);
    }

    #[test]
    fn late_time_never_lands_before_its_process_started() {
        let mut rec = Recorder::new(1000);
        for i in 0..4 {
            rec.push(quiet(i, 100, 0));
        }
        // Started at 250 ns: half of interval 2 and interval 3 can hold it.
        let placed = rec.place_late((3, 3), 0, 400, 250, &mut |_, _| {});
        assert_eq!(placed.placed_ns, 150);
        assert!(rec.intervals()[..2].iter().all(|i| i.slices.is_empty()));
        assert_eq!(rec.intervals()[2].slices[0].on_cpu_ns, 50);
        busy_at_most_long(&rec);
    }

    #[test]
    fn a_windowed_record_stays_within_its_budget_under_churn() {
        // Every interval a new process runs 60 ns on cpu0 (idle 40 ns):
        //   cpu0  |p0 p0 p0 . .|p1 p1 p1 . .|p2 p2 p2 . .| ... 1,000 intervals
        // Merging adds up no slices (each process runs once), so a record that keeps every
        // slice holds them all; a windowed one folds the older ones into other time.
        let churn = |i: u64| {
            let mut interval = quiet(i, 40, 0);
            interval.slices.push(Slice {
                process: i as u32,
                tid: i as u32,
                cpu: 0,
                on_cpu_ns: 60,
            });
            interval
        };
        let (mut kept, mut windowed) = (Recorder::new(64), Recorder::windowed(64));
        for i in 0..1_000 {
            kept.push(churn(i));
            windowed.push(churn(i));
        }
        let slices =
            |rec: &Recorder| -> usize { rec.intervals().iter().map(|i| i.slices.len()).sum() };
        assert_eq!(slices(&kept), 1_000);
        assert!(slices(&windowed) <= 64, "{} slices", slices(&windowed));
        assert!(windowed.intervals().len() <= 64);
        // The newest process is still known by name; every CPU still adds up.
        let last = windowed.intervals().last().unwrap();
        assert!(last.slices.iter().any(|s| s.process == 999));
        let total = |rec: &Recorder, f: fn(&CpuTime) -> u64| -> u64 {
            rec.intervals().iter().map(|i| f(&i.cpus[0])).sum()
        };
        let busy = |rec: &Recorder| -> u64 {
            total(rec, |c| c.other_ns)
                + rec
                    .intervals()
                    .iter()
                    .flat_map(|i| &i.slices)
                    .map(|s| s.on_cpu_ns)
                    .sum::<u64>()
        };
        assert_eq!(busy(&windowed), 60_000);
        assert_eq!(total(&windowed, |c| c.idle_ns), 40_000);
        let duration: u64 = windowed.intervals().iter().map(|i| i.duration_ns).sum();
        assert_eq!(duration, 100_000);
        busy_at_most_long(&windowed);
    }

    #[test]
    fn merge_adds_matching_slices() {
        let m = merge(&interval(0), &interval(3));
        assert_eq!(m.slices.len(), 2);
        assert_eq!(m.slices[0].on_cpu_ns, 140);
        assert_eq!(m.cpus[0].other_ns, 40);
    }
}
