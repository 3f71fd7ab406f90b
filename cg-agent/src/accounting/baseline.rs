//! The idle baselines of a run: what decides them ([`BaselineInputs`], one rule for the
//! report over the whole run and for the live view and `serve` over the run so far) and the
//! running fit over the recent intervals ([`RunningFit`]). The order of preference of the
//! sources of a baseline is [`crate::attribution::idle`]'s.

use std::{collections::BTreeMap, collections::VecDeque, time::Duration};

use crate::{
    attribution::{
        Interval,
        idle::{self, IdleBaseline, IdleMethod, PowerPoint, RestPower},
    },
    sources::{DomainKind, DomainSpec},
};

/// Power points kept per domain for a running fit: the last 10 min at the live view's 100 ms
/// interval, 100 min at serve's 1 s. Bounded so that a fit costs the same on the first day
/// and the hundredth (24 bytes a point: 144 KB per domain at most), and recent, so that the
/// estimate follows the machine.
pub const MAX_FIT_POINTS: usize = 6_000;
/// Intervals between two running fits, once the first few intervals were each fitted.
const REFIT_EVERY: u64 = 10;

/// Idle baselines given with `--idle-watts`.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum IdleWatts {
    #[default]
    Estimate,
    /// One figure: for the only top-level domain.
    Total(f64),
    /// Per domain name.
    PerDomain(BTreeMap<String, f64>),
}

/// What decides a run's idle baselines (the run header's facts, see
/// `session::RunHeader::baseline_inputs`).
#[derive(Clone, Debug)]
pub struct BaselineInputs {
    pub domains: Vec<DomainSpec>,
    pub idle_watts: IdleWatts,
    /// Per domain: idle power a source knows exactly (the model's).
    pub known_idle_w: Vec<Option<f64>>,
    /// Per domain: a GPU's rest power, when known.
    pub rest_power: Vec<Option<RestPower>>,
    /// Per domain: the watts a fully busy unit is assumed to add when no idle fit is possible
    /// (GPUs); `None` uses the CPU prior.
    pub busy_slope_w: Vec<Option<f64>>,
    /// The run's nominal interval.
    pub interval: Duration,
    pub prior_slope_w_per_cpu: f64,
}

impl BaselineInputs {
    /// Domain `d`'s baseline: [`Self::fixed`] when known, else estimated from `points`
    /// (called only when needed: the points may be many).
    pub fn baseline(&self, d: usize, points: impl FnOnce() -> Vec<PowerPoint>) -> IdleBaseline {
        self.fixed(d).unwrap_or_else(|| self.estimate(d, &points()))
    }

    /// Domain `d`'s baseline when it does not depend on a fit: given with `--idle-watts`,
    /// known to its source (the model's idle term), or a GPU's rest power.
    pub fn fixed(&self, d: usize) -> Option<IdleBaseline> {
        let spec = self.domains.get(d)?;
        let top_count = self.domains.iter().filter(|d| d.parent.is_none()).count();
        let given = match &self.idle_watts {
            IdleWatts::Total(w) if spec.parent.is_none() && top_count == 1 => Some(*w),
            IdleWatts::PerDomain(map) => map.get(&spec.name).copied(),
            _ => None,
        };
        if let Some(power_w) = given {
            return Some(IdleBaseline {
                power_w,
                method: IdleMethod::Given,
            });
        }
        let model = self.known_idle_w.get(d).copied().flatten();
        let rest = self.rest_power.get(d).copied().flatten();
        model
            .map(|power_w| IdleBaseline {
                power_w,
                method: IdleMethod::Model,
            })
            .or_else(|| {
                rest.map(|r| IdleBaseline {
                    power_w: r.power_w,
                    method: IdleMethod::Rest(r.origin),
                })
            })
    }

    /// What interval `interval` says about domain `d`'s power, or `None` for intervals much
    /// shorter than nominal (the last one of a window), which say more about when the counter
    /// last ticked than about power, and for intervals whose energy was not measured as it
    /// happened (unknown, or spread from a later reading after failed reads).
    pub fn power_point(&self, interval: &Interval, d: usize) -> Option<PowerPoint> {
        let min_ns = self.interval.as_nanos() as u64 / 2;
        let spec = self.domains.get(d)?;
        let measured = interval.energy_state(d).is_measured();
        (measured && interval.duration_ns >= min_ns).then(|| PowerPoint {
            duration_s: interval.duration_ns as f64 / 1e9,
            energy_j: interval.energy_j.get(d).copied().unwrap_or(0.0),
            busy_cpus: interval.busy_cpus(&spec.coverage),
        })
    }

    /// Domain `d`'s baseline estimated from `points` (see [`idle::estimate`]).
    pub fn estimate(&self, d: usize, points: &[PowerPoint]) -> IdleBaseline {
        let slope = self.busy_slope_w.get(d).copied().flatten();
        let prior = match (slope, self.domains.get(d).map(|s| s.kind)) {
            (Some(slope), _) => slope,
            (None, Some(DomainKind::Dram | DomainKind::Uncore)) => self.prior_slope_w_per_cpu * 0.1,
            (None, _) => self.prior_slope_w_per_cpu,
        };
        idle::estimate(points, prior)
    }
}

/// The idle baselines of a run so far: fitted on each of the first [`REFIT_EVERY`] intervals,
/// then every [`REFIT_EVERY`] intervals, over the last [`MAX_FIT_POINTS`] power points of
/// each domain (the calibration's included).
#[derive(Clone, Debug)]
pub struct RunningFit {
    inputs: BaselineInputs,
    /// Per domain: the recent power points the baseline is estimated from.
    points: Vec<VecDeque<PowerPoint>>,
    baselines: Vec<IdleBaseline>,
    /// Intervals added (not counting the calibration).
    intervals: u64,
    since_fit: u64,
}

impl RunningFit {
    /// A fit that starts from `calibration` (intervals measured before the run).
    pub fn new(inputs: BaselineInputs, calibration: &[Interval]) -> Self {
        let mut fit = RunningFit {
            points: vec![VecDeque::new(); inputs.domains.len()],
            inputs,
            baselines: Vec::new(),
            intervals: 0,
            since_fit: 0,
        };
        for interval in calibration {
            fit.add_points(interval);
        }
        fit.refit();
        fit
    }

    /// Takes one interval of the run; the baselines are fitted again when it is time.
    pub fn add(&mut self, interval: &Interval) {
        self.add_points(interval);
        self.since_fit += 1;
        if self.intervals < REFIT_EVERY || self.since_fit >= REFIT_EVERY {
            self.refit();
        }
        self.intervals += 1;
    }

    /// Per domain, the baseline now.
    pub fn baselines(&self) -> &[IdleBaseline] {
        &self.baselines
    }

    /// Per domain, the baseline's power now (W).
    pub fn idle_w(&self) -> Vec<f64> {
        self.baselines.iter().map(|b| b.power_w).collect()
    }

    pub fn domains(&self) -> &[DomainSpec] {
        &self.inputs.domains
    }

    fn add_points(&mut self, interval: &Interval) {
        for (d, points) in self.points.iter_mut().enumerate() {
            if let Some(point) = self.inputs.power_point(interval, d) {
                points.push_back(point);
                if points.len() > MAX_FIT_POINTS {
                    points.pop_front();
                }
            }
        }
    }

    fn refit(&mut self) {
        self.baselines = (0..self.inputs.domains.len())
            .map(|d| {
                self.inputs
                    .baseline(d, || self.points[d].iter().copied().collect())
            })
            .collect();
        self.since_fit = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        attribution::{Coverage, CpuTime, Glitch, Slice, unknown::EnergyState},
        sources::Provenance,
    };

    const MS: u64 = 1_000_000;

    fn domain(name: &str, parent: Option<&str>) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            kind: DomainKind::Package,
            coverage: Coverage::AllCpus,
            parent: parent.map(str::to_string),
            provenance: Provenance::Measured,
            source: "test",
        }
    }

    fn inputs(domains: Vec<DomainSpec>, idle_watts: IdleWatts) -> BaselineInputs {
        let n = domains.len();
        BaselineInputs {
            domains,
            idle_watts,
            known_idle_w: vec![None; n],
            rest_power: vec![None; n],
            busy_slope_w: vec![None; n],
            interval: Duration::from_millis(100),
            prior_slope_w_per_cpu: 10.0,
        }
    }

    /// A 100 ms interval on one CPU, busy `busy_ms` of it, drawing `watts`.
    fn interval(busy_ms: u64, watts: f64) -> Interval {
        Interval {
            duration_ns: 100 * MS,
            cpus: vec![CpuTime {
                idle_ns: (100 - busy_ms) * MS,
                other_ns: 0,
            }],
            slices: vec![Slice {
                process: 0,
                tid: 1,
                cpu: 0,
                on_cpu_ns: busy_ms * MS,
            }],
            energy_j: vec![watts * 0.1],
            ..Interval::default()
        }
    }

    #[test]
    fn a_given_figure_wins_over_the_fit_and_only_for_the_only_top_domain() {
        let given = inputs(
            vec![domain("package-0", None), domain("core", Some("package-0"))],
            IdleWatts::Total(7.0),
        );
        assert_eq!(given.fixed(0).map(|b| b.power_w), Some(7.0));
        assert_eq!(given.fixed(1), None);
        let two_tops = inputs(
            vec![domain("package-0", None), domain("package-1", None)],
            IdleWatts::Total(7.0),
        );
        assert_eq!(two_tops.fixed(0), None);
    }

    #[test]
    fn the_running_fit_finds_the_intercept_of_power_against_busy_cpus() {
        // One CPU, 5 W at rest, 10 W more when busy; busy levels vary:
        //   iv  0    1    2    3    4    5    6    7
        //   cpu |#...|##..|###.|####|#...|##..|###.|####|   (# = 25 % busy)
        let mut fit = RunningFit::new(inputs(vec![domain("psys", None)], IdleWatts::Estimate), &[]);
        assert_eq!(fit.baselines()[0].method, IdleMethod::NoData);
        for i in 0..8u64 {
            let busy = 25 * (i % 4 + 1);
            fit.add(&interval(busy, 5.0 + 10.0 * busy as f64 / 100.0));
        }
        let b = &fit.baselines()[0];
        assert_eq!(b.method.name(), "regression");
        assert!((b.power_w - 5.0).abs() < 1e-6, "{b:?}");
    }

    #[test]
    fn the_fit_keeps_the_last_points_only_and_refits_every_ten_intervals() {
        // Early on (idle at 20 W) every interval is fitted; once past the bound, only the
        // recent points (idle at 5 W) count, and a change shows at the next refit.
        //   iv  0 .. MAX-1        MAX .. 2*MAX-1
        //       idle 20 W         idle 5 W
        let mut fit = RunningFit::new(inputs(vec![domain("psys", None)], IdleWatts::Estimate), &[]);
        let feed = |fit: &mut RunningFit, i: usize, idle_w: f64| {
            let busy = 25 * (i as u64 % 4 + 1);
            fit.add(&interval(busy, idle_w + 10.0 * busy as f64 / 100.0));
        };
        for i in 0..MAX_FIT_POINTS {
            feed(&mut fit, i, 20.0);
        }
        assert!((fit.idle_w()[0] - 20.0).abs() < 1e-6);
        for i in 0..MAX_FIT_POINTS {
            feed(&mut fit, i, 5.0);
        }
        assert!(
            (fit.idle_w()[0] - 5.0).abs() < 1e-6,
            "{:?}",
            fit.baselines()
        );
        // Between two refits the baseline holds still.
        let before = fit.idle_w();
        feed(&mut fit, 0, 50.0);
        assert_eq!(fit.idle_w(), before);
    }

    #[test]
    fn calibration_counts_and_unmeasured_or_short_intervals_do_not() {
        //   calibration |....|....|....|#...|##..|###.|   5 W at rest, measured
        //   run         |####| unknown energy, |#| 10 ms
        let domains = vec![domain("psys", None)];
        let calibration: Vec<Interval> = (0..6u64)
            .map(|i| {
                let busy = i.saturating_sub(2) * 25;
                interval(busy, 5.0 + 10.0 * busy as f64 / 100.0)
            })
            .collect();
        let mut fit = RunningFit::new(inputs(domains, IdleWatts::Estimate), &calibration);
        assert!(
            (fit.idle_w()[0] - 5.0).abs() < 1e-6,
            "{:?}",
            fit.baselines()
        );
        let mut unknown = interval(100, 500.0);
        unknown.energy_state = vec![EnergyState::unknown(100 * MS, Glitch::ReadFailed)];
        let mut short = interval(10, 900.0);
        short.duration_ns = 10 * MS;
        fit.add(&unknown);
        fit.add(&short);
        assert!(
            (fit.idle_w()[0] - 5.0).abs() < 1e-6,
            "{:?}",
            fit.baselines()
        );
    }
}
