//! Keeps the run's intervals (and the calibration window's) for the report, which attributes
//! them once the idle baseline is known. Memory stays bounded: past a budget of stored
//! slices, adjacent intervals are merged in pairs, halving the time resolution of the stored
//! record (the report says so); the totals of energy and CPU time are unchanged by a merge.

use std::collections::BTreeMap;

use crate::attribution::{CpuTime, Interval, Slice, gpu::GpuUsage};

/// Default budget of stored (process, CPU) slices: about 16 bytes each, so ~6 MB.
pub const DEFAULT_SLICE_BUDGET: usize = 400_000;
/// The budget of a run whose memory must stay small (`cg-trace serve`): ~64 KB.
pub const BOUNDED_SLICE_BUDGET: usize = 4_096;

#[derive(Debug)]
pub struct Recorder {
    intervals: Vec<Interval>,
    calibration: Vec<Interval>,
    budget: usize,
    stored: usize,
    /// How many times the record was halved.
    pub merges: u32,
}

impl Recorder {
    pub fn new(budget: usize) -> Self {
        Recorder {
            intervals: Vec::new(),
            calibration: Vec::new(),
            budget: budget.max(2),
            stored: 0,
            merges: 0,
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
        self.stored = merged.iter().map(|i| i.slices.len() + 1).sum();
        self.intervals = merged;
        self.merges += 1;
    }
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
    let mut slices: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for s in a.slices.iter().chain(&b.slices) {
        *slices.entry((s.process, s.cpu)).or_default() += s.on_cpu_ns;
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
            .map(|((process, cpu), on_cpu_ns)| Slice {
                process,
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
                    cpu: 0,
                    on_cpu_ns: 70,
                },
                Slice {
                    process: 9,
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

    #[test]
    fn merge_adds_matching_slices() {
        let m = merge(&interval(0), &interval(3));
        assert_eq!(m.slices.len(), 2);
        assert_eq!(m.slices[0].on_cpu_ns, 140);
        assert_eq!(m.cpus[0].other_ns, 40);
    }
}
