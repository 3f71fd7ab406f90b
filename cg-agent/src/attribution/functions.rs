//! Function-level attribution: turns what a process spent in each interval (energy and
//! on-CPU time, from [`split_interval`](super::split_interval)) into energy per function,
//! so that functions are a breakdown of their process's energy at the same rate.
//!
//! - **Probed functions** (uprobes): in each interval a process's energy per on-CPU
//!   nanosecond is `rate = E_process / cpu_process`; a function's energy is its on-CPU time
//!   (inclusive, or self) in that interval times that rate.
//! - **Samples**: in each interval, a thread's energy is `rate x` its on-CPU time, divided
//!   equally over its samples in that interval (each sample also carries an equal share of
//!   the thread's on-CPU time). A function's inclusive energy is the sum over the samples
//!   whose stack contains it (once per sample, however deep the recursion), its self energy
//!   the sum over the samples whose stack ends in it. So the self energies of a process's
//!   samples add up to the energy of the threads that were sampled; what ran but was never
//!   sampled is the report's explicit `[unsampled]` remainder.
//!
//! Pure: no I/O, no clocks. Tests write the scenarios as small timelines.

use std::collections::{BTreeMap, BTreeSet};

use super::ProcId;

/// An interned stack frame (the session's symbol table gives its name).
pub type FrameId = u32;
/// An interned stack: frames from the outermost to the innermost.
pub type StackId = u32;

/// What one process spent in one attribution interval (top-level domains summed).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessSpend {
    pub energy_j: f64,
    pub cpu_ns: u64,
}

/// One attribution interval's spend per process, as the report computed it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntervalSpend {
    /// Nanoseconds since the run started.
    pub start_ns: u64,
    pub duration_ns: u64,
    pub processes: BTreeMap<ProcId, ProcessSpend>,
}

/// On-CPU time of one thread in a function-data interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadTime {
    pub process: ProcId,
    pub tid: u32,
    pub on_cpu_ns: u64,
}

/// Samples of one thread with one stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleCount {
    pub process: ProcId,
    pub tid: u32,
    pub stack: StackId,
    pub count: u64,
}

/// What a probed function did in one process during one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallDelta {
    pub process: ProcId,
    pub func: u32,
    /// Calls that completed.
    pub calls: u64,
    /// On-CPU ns of outermost calls (in progress ones up to the interval's end).
    pub incl_ns: u64,
    /// On-CPU ns in the function itself.
    pub self_ns: u64,
}

/// Function data of one interval (aligned with the attribution intervals, or coarser or
/// finer after merges: they are matched by time).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FunctionInterval {
    pub start_ns: u64,
    pub duration_ns: u64,
    pub threads: Vec<ThreadTime>,
    pub samples: Vec<SampleCount>,
    pub calls: Vec<CallDelta>,
}

impl FunctionInterval {
    /// Entries stored (for memory budgets).
    pub fn len(&self) -> usize {
        self.threads.len() + self.samples.len() + self.calls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One interval covering `self` then `next`.
    pub fn merge(&self, next: &FunctionInterval) -> FunctionInterval {
        let mut threads: BTreeMap<(ProcId, u32), u64> = BTreeMap::new();
        for t in self.threads.iter().chain(&next.threads) {
            *threads.entry((t.process, t.tid)).or_default() += t.on_cpu_ns;
        }
        let mut samples: BTreeMap<(ProcId, u32, StackId), u64> = BTreeMap::new();
        for s in self.samples.iter().chain(&next.samples) {
            *samples.entry((s.process, s.tid, s.stack)).or_default() += s.count;
        }
        let mut calls: BTreeMap<(ProcId, u32), CallDelta> = BTreeMap::new();
        for c in self.calls.iter().chain(&next.calls) {
            let e = calls.entry((c.process, c.func)).or_insert(CallDelta {
                process: c.process,
                func: c.func,
                ..CallDelta::default()
            });
            e.calls += c.calls;
            e.incl_ns += c.incl_ns;
            e.self_ns += c.self_ns;
        }
        FunctionInterval {
            start_ns: self.start_ns,
            duration_ns: (next.start_ns + next.duration_ns).saturating_sub(self.start_ns),
            threads: threads
                .into_iter()
                .map(|((process, tid), on_cpu_ns)| ThreadTime {
                    process,
                    tid,
                    on_cpu_ns,
                })
                .collect(),
            samples: samples
                .into_iter()
                .map(|((process, tid, stack), count)| SampleCount {
                    process,
                    tid,
                    stack,
                    count,
                })
                .collect(),
            calls: calls.into_values().collect(),
        }
    }
}

/// Totals of one function in one process.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FunctionTotals {
    pub calls: u64,
    /// Samples whose stack contains the function.
    pub samples: u64,
    /// Samples whose stack ends in it.
    pub self_samples: u64,
    pub cpu_ns: f64,
    pub self_cpu_ns: f64,
    pub energy_j: f64,
    pub self_energy_j: f64,
}

/// What the samples of a run come to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampledEnergy {
    /// Per (process, frame).
    pub frames: BTreeMap<(ProcId, FrameId), FunctionTotals>,
    /// Per (process, stack): energy, on-CPU ns and samples (for folded stacks).
    pub stacks: BTreeMap<(ProcId, StackId), FunctionTotals>,
    /// Per process: energy and on-CPU time carried by its samples.
    pub sampled: BTreeMap<ProcId, ProcessSpend>,
}

/// Per process, the energy per on-CPU nanosecond over the attribution intervals that
/// `[start, start + duration)` covers (or the one it falls in).
fn rates(spend: &[IntervalSpend], start_ns: u64, duration_ns: u64) -> BTreeMap<ProcId, f64> {
    let end = start_ns + duration_ns.max(1);
    let first = spend.partition_point(|s| s.start_ns < start_ns);
    let mut covered: Vec<&IntervalSpend> = spend[first..]
        .iter()
        .take_while(|s| s.start_ns < end)
        .collect();
    if covered.is_empty()
        && let Some(containing) = first.checked_sub(1).and_then(|i| spend.get(i))
    {
        covered.push(containing);
    }
    let mut sums: BTreeMap<ProcId, (f64, u64)> = BTreeMap::new();
    for s in covered {
        for (&p, spend) in &s.processes {
            let e = sums.entry(p).or_default();
            e.0 += spend.energy_j;
            e.1 += spend.cpu_ns;
        }
    }
    sums.into_iter()
        .map(|(p, (energy_j, cpu_ns))| {
            (
                p,
                if cpu_ns > 0 {
                    energy_j / cpu_ns as f64
                } else {
                    0.0
                },
            )
        })
        .collect()
}

/// Energy per sample (see the module docs). `stacks[id]` lists a stack's frames, outermost
/// first. `spend` and `data` are sorted by start.
pub fn attribute_samples(
    spend: &[IntervalSpend],
    data: &[FunctionInterval],
    stacks: &[Vec<FrameId>],
) -> SampledEnergy {
    let mut out = SampledEnergy::default();
    for interval in data {
        if interval.samples.is_empty() {
            continue;
        }
        let rate = rates(spend, interval.start_ns, interval.duration_ns);
        let mut thread_ns: BTreeMap<(ProcId, u32), u64> = BTreeMap::new();
        for t in &interval.threads {
            *thread_ns.entry((t.process, t.tid)).or_default() += t.on_cpu_ns;
        }
        let mut thread_samples: BTreeMap<(ProcId, u32), u64> = BTreeMap::new();
        for s in &interval.samples {
            *thread_samples.entry((s.process, s.tid)).or_default() += s.count;
        }
        for s in &interval.samples {
            let key = (s.process, s.tid);
            let n = thread_samples.get(&key).copied().unwrap_or(0).max(1) as f64;
            let ns = thread_ns.get(&key).copied().unwrap_or(0) as f64;
            let per_sample_ns = ns / n;
            let per_sample_j = per_sample_ns * rate.get(&s.process).copied().unwrap_or(0.0);
            let (energy_j, cpu_ns) = (
                per_sample_j * s.count as f64,
                per_sample_ns * s.count as f64,
            );
            let sampled = out.sampled.entry(s.process).or_default();
            sampled.energy_j += energy_j;
            sampled.cpu_ns += cpu_ns.round() as u64;
            let stack = out.stacks.entry((s.process, s.stack)).or_default();
            stack.samples += s.count;
            stack.self_samples += s.count;
            stack.energy_j += energy_j;
            stack.self_energy_j += energy_j;
            stack.cpu_ns += cpu_ns;
            stack.self_cpu_ns += cpu_ns;
            let frames = stacks.get(s.stack as usize).map_or(&[][..], Vec::as_slice);
            let distinct: BTreeSet<FrameId> = frames.iter().copied().collect();
            for frame in distinct {
                let f = out.frames.entry((s.process, frame)).or_default();
                f.samples += s.count;
                f.energy_j += energy_j;
                f.cpu_ns += cpu_ns;
            }
            if let Some(&leaf) = frames.last() {
                let f = out.frames.entry((s.process, leaf)).or_default();
                f.self_samples += s.count;
                f.self_energy_j += energy_j;
                f.self_cpu_ns += cpu_ns;
            }
        }
    }
    out
}

/// Energy of probed functions, per (process, function id).
///
/// A function's on-CPU time in an interval can exceed its process's by a little (the probes
/// and the scheduler's accounting are read at slightly different moments, so one interval
/// can see time the next one would have): inclusive time is capped at the process's time in
/// that interval, and self times are scaled down together when they add up to more, so
/// that probed functions never hold more than their process's energy. What a cap holds
/// back is carried to the function's next interval (at that interval's rate), so a run's
/// totals lose only what is still held back at the end.
pub fn attribute_calls(
    spend: &[IntervalSpend],
    data: &[FunctionInterval],
) -> BTreeMap<(ProcId, u32), FunctionTotals> {
    let mut out: BTreeMap<(ProcId, u32), FunctionTotals> = BTreeMap::new();
    // Per (process, function): inclusive and self ns held back by a cap.
    let mut held: BTreeMap<(ProcId, u32), (f64, f64)> = BTreeMap::new();
    for interval in data {
        if interval.calls.is_empty() {
            continue;
        }
        let rate = rates(spend, interval.start_ns, interval.duration_ns);
        let mut process_ns: BTreeMap<ProcId, u64> = BTreeMap::new();
        for t in &interval.threads {
            *process_ns.entry(t.process).or_default() += t.on_cpu_ns;
        }
        // What each function wants this interval: its own time plus what was held back.
        let mut wanted: BTreeMap<(ProcId, u32), (u64, f64, f64)> = BTreeMap::new();
        for c in &interval.calls {
            let w = wanted.entry((c.process, c.func)).or_default();
            w.0 += c.calls;
            w.1 += c.incl_ns as f64;
            w.2 += c.self_ns as f64;
        }
        for (&(process, func), &(incl, own)) in &held {
            if process_ns.contains_key(&process) {
                let w = wanted.entry((process, func)).or_default();
                w.1 += incl;
                w.2 += own;
            }
        }
        let mut self_sum: BTreeMap<ProcId, f64> = BTreeMap::new();
        for (&(process, _), w) in &wanted {
            *self_sum.entry(process).or_default() += w.2;
        }
        for (&(process, func), &(calls, incl_want, self_want)) in &wanted {
            let cap = process_ns.get(&process).map(|&ns| ns as f64);
            let incl_ns = cap.map_or(incl_want, |cap| incl_want.min(cap));
            let total_self = self_sum.get(&process).copied().unwrap_or(0.0);
            let scale = match cap {
                Some(cap) if total_self > cap && total_self > 0.0 => cap / total_self,
                _ => 1.0,
            };
            let self_ns = self_want * scale;
            let back = (incl_want - incl_ns, self_want - self_ns);
            if back.0 > 0.0 || back.1 > 0.0 {
                held.insert((process, func), back);
            } else {
                held.remove(&(process, func));
            }
            let r = rate.get(&process).copied().unwrap_or(0.0);
            let f = out.entry((process, func)).or_default();
            f.calls += calls;
            f.cpu_ns += incl_ns;
            f.self_cpu_ns += self_ns;
            f.energy_j += incl_ns * r;
            f.self_energy_j += self_ns * r;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    fn spend(start_ms: u64, processes: &[(ProcId, f64, u64)]) -> IntervalSpend {
        IntervalSpend {
            start_ns: start_ms * MS,
            duration_ns: 100 * MS,
            processes: processes
                .iter()
                .map(|&(p, energy_j, cpu_ms)| {
                    (
                        p,
                        ProcessSpend {
                            energy_j,
                            cpu_ns: cpu_ms * MS,
                        },
                    )
                })
                .collect(),
        }
    }

    fn thread(process: ProcId, tid: u32, ms: u64) -> ThreadTime {
        ThreadTime {
            process,
            tid,
            on_cpu_ns: ms * MS,
        }
    }

    fn samples(process: ProcId, tid: u32, stack: StackId, count: u64) -> SampleCount {
        SampleCount {
            process,
            tid,
            stack,
            count,
        }
    }

    #[test]
    fn samples_split_each_threads_energy_and_self_adds_up_to_the_process() {
        // One 100 ms interval, process 1 got 6 J for 60 ms of CPU (0.1 J/ms):
        //   thread 10 |aaaaabbbbb|  50 ms, 5 samples: main>a x2, main>a>b x3
        //   thread 11 |cc........|  10 ms, 1 sample: main>c
        // frames: 0 main, 1 a, 2 b, 3 c; stacks: 0 [main a], 1 [main a b], 2 [main c]
        let spend = [spend(0, &[(1, 6.0, 60)])];
        let data = [FunctionInterval {
            start_ns: 0,
            duration_ns: 100 * MS,
            threads: vec![thread(1, 10, 50), thread(1, 11, 10)],
            samples: vec![
                samples(1, 10, 0, 2),
                samples(1, 10, 1, 3),
                samples(1, 11, 2, 1),
            ],
            calls: vec![],
        }];
        let stacks = vec![vec![0, 1], vec![0, 1, 2], vec![0, 3]];
        let out = attribute_samples(&spend, &data, &stacks);
        let f = |frame| out.frames[&(1, frame)];
        // Thread 10: 5 J over 5 samples, 1 J each; thread 11: 1 J in its one sample.
        assert!(close(f(0).energy_j, 6.0));
        assert_eq!(f(0).samples, 6);
        assert_eq!(f(0).self_samples, 0);
        assert!(close(f(1).energy_j, 5.0));
        assert!(close(f(1).self_energy_j, 2.0));
        assert!(close(f(2).self_energy_j, 3.0));
        assert!(close(f(3).self_energy_j, 1.0));
        assert!(close(f(3).cpu_ns, 10.0 * MS as f64));
        let self_sum: f64 = out.frames.values().map(|t| t.self_energy_j).sum();
        assert!(close(self_sum, 6.0));
        assert!(close(out.sampled[&1].energy_j, 6.0));
        assert!(close(out.stacks[&(1, 1)].energy_j, 3.0));
    }

    #[test]
    fn recursion_counts_once_inclusive_and_unsampled_threads_carry_nothing() {
        // 100 ms: process 2 got 4 J for 80 ms; thread 20 ran 40 ms (2 samples, both
        // f>f>f), thread 21 ran 40 ms and was never sampled.
        //   t20 |ffff......|   t21 |....gggg..|  (no samples)
        let spend = [spend(0, &[(2, 4.0, 80)])];
        let data = [FunctionInterval {
            start_ns: 0,
            duration_ns: 100 * MS,
            threads: vec![thread(2, 20, 40), thread(2, 21, 40)],
            samples: vec![samples(2, 20, 0, 2)],
            calls: vec![],
        }];
        let out = attribute_samples(&spend, &data, &[vec![5, 5, 5]]);
        let f = out.frames[&(2, 5)];
        assert_eq!(f.samples, 2);
        assert!(close(f.energy_j, 2.0));
        assert!(close(f.self_energy_j, 2.0));
        // The report shows the other 2 J as [unsampled].
        assert!(close(out.sampled[&2].energy_j, 2.0));
    }

    #[test]
    fn each_interval_uses_its_own_rate() {
        // Two intervals, same CPU time, different energy per ms:
        //   0-100 ms   |aaaa|  40 ms of a at 0.1 J/ms
        //   100-200 ms |aaaa|  40 ms of a at 0.2 J/ms
        let spend = [spend(0, &[(1, 4.0, 40)]), spend(100, &[(1, 8.0, 40)])];
        let data: Vec<FunctionInterval> = [0, 100]
            .iter()
            .map(|&start| FunctionInterval {
                start_ns: start * MS,
                duration_ns: 100 * MS,
                threads: vec![thread(1, 1, 40)],
                samples: vec![samples(1, 1, 0, 4)],
                calls: vec![CallDelta {
                    process: 1,
                    func: 7,
                    calls: 10,
                    incl_ns: 40 * MS,
                    self_ns: 30 * MS,
                }],
            })
            .collect();
        let sampled = attribute_samples(&spend, &data, &[vec![0]]);
        assert!(close(sampled.frames[&(1, 0)].energy_j, 12.0));
        let calls = attribute_calls(&spend, &data);
        let f = calls[&(1, 7)];
        assert_eq!(f.calls, 20);
        assert!(close(f.energy_j, 12.0));
        assert!(close(f.self_energy_j, 9.0));
        assert!(close(f.cpu_ns, 80.0 * MS as f64));
        // Merged function data meets the same two attribution intervals: same totals.
        let merged = [data[0].merge(&data[1])];
        let f2 = attribute_calls(&spend, &merged)[&(1, 7)];
        assert!(close(f2.cpu_ns, f.cpu_ns));
        assert!(close(f2.energy_j, 12.0));
    }

    #[test]
    fn probed_time_never_exceeds_the_process_time() {
        // The probes saw 110 ms inside f and 30 ms in g in an interval where the scheduler
        // charged the process 100 ms (clock skew): inclusive capped at 100 ms, self scaled.
        //   |ffffffffff| + 10 ms of skew
        let spend = [spend(0, &[(3, 10.0, 100)])];
        let data = [FunctionInterval {
            start_ns: 0,
            duration_ns: 100 * MS,
            threads: vec![thread(3, 30, 100)],
            samples: vec![],
            calls: vec![
                CallDelta {
                    process: 3,
                    func: 0,
                    calls: 1,
                    incl_ns: 110 * MS,
                    self_ns: 80 * MS,
                },
                CallDelta {
                    process: 3,
                    func: 1,
                    calls: 5,
                    incl_ns: 30 * MS,
                    self_ns: 30 * MS,
                },
            ],
        }];
        let out = attribute_calls(&spend, &data);
        assert!(close(out[&(3, 0)].energy_j, 10.0));
        let self_sum = out[&(3, 0)].self_energy_j + out[&(3, 1)].self_energy_j;
        assert!(close(self_sum, 10.0));
        assert!(close(out[&(3, 1)].self_energy_j, 10.0 * 30.0 / 110.0));
    }

    #[test]
    fn time_held_back_by_the_cap_comes_back_in_the_next_interval() {
        // The probes were read a little after the scheduler's accounting: the first
        // interval sees 10 ms of f that the scheduler charges to the second.
        //   0-100 ms   |ffffffffff| probes: 110 ms, scheduler: 100 ms (1 J/10 ms)
        //   100-200 ms |fffff.....| probes:  40 ms, scheduler:  50 ms (1 J/10 ms)
        let spend = [spend(0, &[(3, 10.0, 100)]), spend(100, &[(3, 5.0, 50)])];
        let data: Vec<FunctionInterval> = [(0, 100, 110), (100, 50, 40)]
            .iter()
            .map(|&(start, cpu, probed)| FunctionInterval {
                start_ns: start * MS,
                duration_ns: 100 * MS,
                threads: vec![thread(3, 30, cpu)],
                samples: vec![],
                calls: vec![CallDelta {
                    process: 3,
                    func: 0,
                    calls: 1,
                    incl_ns: probed * MS,
                    self_ns: probed * MS,
                }],
            })
            .collect();
        let f = attribute_calls(&spend, &data)[&(3, 0)];
        // All 150 ms of f, inclusive and self, and all of the process's 15 J.
        assert!(close(f.cpu_ns, 150.0 * MS as f64));
        assert!(close(f.self_cpu_ns, 150.0 * MS as f64));
        assert!(close(f.energy_j, 15.0));
        assert!(close(f.self_energy_j, 15.0));
        assert_eq!(f.calls, 2);
    }

    #[test]
    fn a_coarse_attribution_interval_lends_its_rate_to_finer_function_data() {
        // The recorder merged 0-200 ms into one interval (0.05 J/ms); function data kept
        // two 100 ms intervals.
        let spend = [IntervalSpend {
            start_ns: 0,
            duration_ns: 200 * MS,
            processes: [(
                1,
                ProcessSpend {
                    energy_j: 5.0,
                    cpu_ns: 100 * MS,
                },
            )]
            .into(),
        }];
        let data = [
            FunctionInterval {
                start_ns: 0,
                duration_ns: 100 * MS,
                threads: vec![thread(1, 1, 50)],
                samples: vec![samples(1, 1, 0, 1)],
                calls: vec![],
            },
            FunctionInterval {
                start_ns: 100 * MS,
                duration_ns: 100 * MS,
                threads: vec![thread(1, 1, 50)],
                samples: vec![samples(1, 1, 0, 1)],
                calls: vec![],
            },
        ];
        let out = attribute_samples(&spend, &data, &[vec![0]]);
        assert!(close(out.frames[&(1, 0)].energy_j, 5.0));
    }
}
