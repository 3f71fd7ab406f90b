//! The per-interval step: a snapshot's [`Activity`] becomes an [`Interval`] of the run
//! ([`interval_of`]: each thread's time charged to its process, per thread and CPU), and an
//! interval with its sources' readings becomes an attributed one ([`Attributor`]: split with
//! the idle baselines fitted so far). The session runs the first for every interval; the live
//! view and `serve` run the second as intervals arrive, and the report runs the same split
//! over the whole run once its baselines are final.

use crate::fast_hash::{HashMap, HashMapExt};

use cg_common::ThreadKey;

use crate::{
    attribution::{Coverage, DomainSplit, Interval, ProcId, idle::IdleBaseline, split_interval},
    probes::activity::Activity,
    sources::DomainSpec,
};

use super::baseline::{BaselineInputs, RunningFit};

/// The interval of `activity`, its times relative to `run_start_ns` (CLOCK_MONOTONIC) and
/// starting at `wall_start_ns` (wall clock). With `process_of` (the run), each thread's time
/// goes to the process it returns, summed per (process, thread, CPU); without it (before the
/// run: calibration, the gaps of a set), the threads' time is other activity like any task's.
/// The energy is the caller's to fill in from its sources' readings.
pub fn interval_of(
    activity: &Activity,
    run_start_ns: u64,
    wall_start_ns: u64,
    process_of: Option<&mut dyn FnMut(ThreadKey) -> ProcId>,
) -> Interval {
    let mut cpus = activity.cpus.clone();
    let mut sums: HashMap<(ProcId, u32, u32), u64> = HashMap::with_capacity(activity.threads.len());
    match process_of {
        Some(process_of) => {
            for s in &activity.threads {
                let process = process_of(s.thread);
                *sums.entry((process, s.thread.tid, s.cpu)).or_default() += s.on_cpu_ns;
            }
        }
        None => {
            for s in &activity.threads {
                if let Some(c) = cpus.get_mut(s.cpu as usize) {
                    c.other_ns += s.on_cpu_ns;
                }
            }
        }
    }
    Interval {
        start_ns: activity.start_ns.saturating_sub(run_start_ns),
        duration_ns: activity.duration_ns,
        cpus,
        slices: crate::attribution::sorted_slices(sums),
        energy_j: Vec::new(),
        energy_state: Vec::new(),
        wall_start_ns,
        gpus: Vec::new(),
    }
}

/// Attributes a run's intervals as they arrive, with the idle baselines fitted so far (the
/// live view's and `serve`'s books).
#[derive(Clone, Debug)]
pub struct Attributor {
    fit: RunningFit,
    coverage: Vec<Coverage>,
}

impl Attributor {
    /// Starts from the run's baseline inputs and its calibration intervals, if any.
    pub fn new(inputs: BaselineInputs, calibration: &[Interval]) -> Self {
        let coverage = inputs.domains.iter().map(|d| d.coverage.clone()).collect();
        Attributor {
            fit: RunningFit::new(inputs, calibration),
            coverage,
        }
    }

    /// One interval's split per domain: idle at the baseline fitted with this interval in,
    /// the rest over targets and other (targets + other + idle = measured).
    pub fn attribute(&mut self, interval: &Interval) -> Vec<DomainSplit> {
        self.fit.add(interval);
        split_interval(interval, &self.coverage, &self.fit.idle_w())
    }

    /// Per domain, the baseline now.
    pub fn baselines(&self) -> &[IdleBaseline] {
        self.fit.baselines()
    }

    pub fn domains(&self) -> &[DomainSpec] {
        self.fit.domains()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        accounting::IdleWatts,
        attribution::CpuTime,
        probes::activity::ThreadSlice,
        sources::{DomainKind, Provenance},
    };

    const MS: u64 = 1_000_000;

    /// Thread `tid` of process `tgid` ran `ms` on `cpu`.
    fn ran(tgid: u32, tid: u32, cpu: u32, ms: u64) -> ThreadSlice {
        let thread = ThreadKey {
            tgid,
            tid,
            start_ns: 0,
        };
        let on_cpu_ns = ms * MS;
        ThreadSlice {
            thread,
            cpu,
            on_cpu_ns,
        }
    }

    fn cpu(idle_ms: u64, other_ms: u64) -> CpuTime {
        CpuTime {
            idle_ns: idle_ms * MS,
            other_ns: other_ms * MS,
        }
    }

    /// 100 ms from t = 1 s (CLOCK_MONOTONIC), two CPUs:
    ///   cpu0 |AAAAAaaaoo|   A: pid 10 tid 10, 50 ms; a: pid 10 tid 11, 30 ms; o: other
    ///   cpu1 |AAB.......|   A: pid 10 tid 10, 20 ms; B: pid 20, 10 ms
    fn activity() -> Activity {
        Activity {
            start_ns: 1_000 * MS,
            duration_ns: 100 * MS,
            cpus: vec![cpu(0, 20), cpu(70, 0)],
            threads: vec![
                ran(10, 10, 0, 50),
                ran(10, 11, 0, 30),
                ran(10, 10, 1, 20),
                ran(20, 20, 1, 10),
            ],
        }
    }

    #[test]
    fn the_run_charges_each_thread_to_its_process_per_cpu() {
        // Processes are numbered by the caller: pid 10 is process 0, pid 20 process 1.
        let mut ids = |t: ThreadKey| if t.tgid == 10 { 0 } else { 1 };
        let iv = interval_of(&activity(), 900 * MS, 42, Some(&mut ids));
        assert_eq!(
            (iv.start_ns, iv.duration_ns, iv.wall_start_ns),
            (100 * MS, 100 * MS, 42)
        );
        let slices: Vec<(ProcId, u32, u32, u64)> = iv
            .slices
            .iter()
            .map(|s| (s.process, s.tid, s.cpu, s.on_cpu_ns / MS))
            .collect();
        assert_eq!(
            slices,
            vec![
                (0, 10, 0, 50),
                (0, 10, 1, 20),
                (0, 11, 0, 30),
                (1, 20, 1, 10)
            ]
        );
        assert_eq!(iv.cpus, activity().cpus);
        // Every CPU's 100 ms is accounted for: idle + other + slices.
        assert_eq!(iv.busy_ns_per_cpu(), vec![100 * MS, 30 * MS]);
    }

    #[test]
    fn before_the_run_the_targets_time_is_other() {
        //   cpu0 |oooooooooo|   all of A, a and the o before are other
        //   cpu1 |ooo.......|
        let iv = interval_of(&activity(), 0, 0, None);
        assert!(iv.slices.is_empty());
        assert_eq!(iv.cpus, vec![cpu(0, 100), cpu(70, 30)]);
    }

    #[test]
    fn each_attributed_interval_adds_up_to_what_was_measured() {
        // A model domain with a known 5 W idle; 2 J over 100 ms:
        //   cpu0 |AAAAAaaaoo|  process 0: 100 ms busy of 130, other 20 + 10 (pid 20 is other
        //   cpu1 |AAB.......|  here: not a target)
        // idle 0.5 J; active 1.5 J: process 0 gets 1.5 * 100/130.
        let spec = DomainSpec {
            name: "model".into(),
            kind: DomainKind::Package,
            parent: None,
            coverage: Coverage::AllCpus,
            provenance: Provenance::Estimated,
            source: "model",
        };
        let inputs = BaselineInputs {
            domains: vec![spec],
            idle_watts: IdleWatts::Estimate,
            known_idle_w: vec![Some(5.0)],
            rest_power: vec![None],
            busy_slope_w: vec![None],
            interval: std::time::Duration::from_millis(100),
            prior_slope_w_per_cpu: 10.0,
        };
        let mut attributor = Attributor::new(inputs, &[]);
        let mut ids = |t: ThreadKey| if t.tgid == 10 { 0 } else { 1 };
        let mut iv = interval_of(&activity(), 0, 0, Some(&mut ids));
        // pid 20 is not a target: its time is other.
        iv.slices.retain(|s| s.process == 0);
        iv.cpus[1].other_ns += 10 * MS;
        iv.energy_j = vec![2.0];
        let split = &attributor.attribute(&iv)[0];
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(split.idle_j, 0.5));
        assert!(
            close(split.attributed_j(), 1.5 * 100.0 / 130.0),
            "{split:?}"
        );
        assert!(close(
            split.attributed_j() + split.other_j + split.idle_j,
            split.measured_j
        ));
        assert_eq!(attributor.baselines()[0].method.name(), "model");
    }
}
