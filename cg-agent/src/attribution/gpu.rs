//! GPU attribution: splits a GPU's measured energy in an interval into **idle**, **targets**
//! and **other** by the processes' shares of the GPU's busy time (NVML's per-process
//! utilisation), with the same invariant as CPU domains: `targets + other + idle == measured`.
//!
//! Busy time the per-process figures do not explain (the GPU was busy for more of the interval
//! than its processes' shares add up to: coarse sampling, processes NVML does not list) goes to
//! other and is also counted separately as **unexplained**, so that the report can show it.

use std::collections::BTreeMap;

use super::{DomainSplit, ProcId};

/// Who used a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GpuUser {
    /// A target process.
    Target(ProcId),
    /// Any process that is not a target.
    Other,
}

/// One user's share of a GPU's time in an interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuShare {
    pub user: GpuUser,
    /// Fraction of the interval the GPU was busy for this user, 0 to 1.
    pub busy_fraction: f64,
}

/// How busy one GPU was in an interval, and for whom.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuUsage {
    /// Fraction of the interval the GPU was busy (a kernel running), 0 to 1.
    pub busy_fraction: f64,
    /// Per user, at most one entry per target and one for other.
    pub shares: Vec<GpuShare>,
    /// What the GPU reported of itself: carried to the report's time series, not used to split.
    pub telemetry: GpuTelemetry,
}

/// One GPU's own figures (NVML, measured) for an interval: those of the last poll at or
/// before the interval's end; intervals merged into one average them by duration. `None`:
/// the GPU did not give that figure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuTelemetry {
    /// Percent of the time a kernel ran (NVML's sample period), 0 to 100.
    pub utilization_pct: Option<f64>,
    pub memory_used_bytes: Option<f64>,
    pub temperature_c: Option<f64>,
    /// NVML's power reading (the domain's power in the series comes from its energy counter).
    pub power_w: Option<f64>,
}

impl GpuTelemetry {
    /// `a` weighted `wa`, then `b` weighted `wb` (weights adding up to 1), figure by figure;
    /// a figure only one side has is that side's.
    fn merge(a: &GpuTelemetry, wa: f64, b: &GpuTelemetry, wb: f64) -> GpuTelemetry {
        let mean = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) => Some(wa * x + wb * y),
            (x, y) => x.or(y),
        };
        GpuTelemetry {
            utilization_pct: mean(a.utilization_pct, b.utilization_pct),
            memory_used_bytes: mean(a.memory_used_bytes, b.memory_used_bytes),
            temperature_c: mean(a.temperature_c, b.temperature_c),
            power_w: mean(a.power_w, b.power_w),
        }
    }
}

impl GpuUsage {
    /// One usage covering `a` (for `a_ns`) then `b` (for `b_ns`): fractions are averaged,
    /// weighted by duration.
    pub fn merge(a: &GpuUsage, a_ns: u64, b: &GpuUsage, b_ns: u64) -> GpuUsage {
        let total = (a_ns + b_ns) as f64;
        if total == 0.0 {
            return a.clone();
        }
        let (wa, wb) = (a_ns as f64 / total, b_ns as f64 / total);
        let mut shares: BTreeMap<GpuUser, f64> = BTreeMap::new();
        for (usage, w) in [(a, wa), (b, wb)] {
            for s in &usage.shares {
                *shares.entry(s.user).or_default() += w * s.busy_fraction;
            }
        }
        GpuUsage {
            busy_fraction: wa * a.busy_fraction + wb * b.busy_fraction,
            shares: shares
                .into_iter()
                .map(|(user, busy_fraction)| GpuShare {
                    user,
                    busy_fraction,
                })
                .collect(),
            telemetry: GpuTelemetry::merge(&a.telemetry, wa, &b.telemetry, wb),
        }
    }
}

/// Splits one GPU domain's energy for one interval.
///
/// With `busy` the GPU's busy fraction and `S` the sum of the users' shares, the active energy
/// `E - idle` is split over `D = max(busy, S)`: each user gets `active * share / D`, and the
/// rest, `active * (D - S) / D`, is unexplained (charged to other). A GPU that was not busy
/// at all (or has no usage figures) is all idle, as a CPU domain on which nothing ran.
pub fn split(usage: Option<&GpuUsage>, measured_j: f64, baseline_j: f64) -> DomainSplit {
    let all_idle = DomainSplit {
        measured_j,
        idle_j: measured_j,
        ..DomainSplit::default()
    };
    let Some(usage) = usage else {
        return all_idle;
    };
    let valid = |f: f64| {
        if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        }
    };
    let mut targets: BTreeMap<ProcId, f64> = BTreeMap::new();
    let mut other_share = 0.0;
    for share in &usage.shares {
        match share.user {
            GpuUser::Target(p) => *targets.entry(p).or_default() += valid(share.busy_fraction),
            GpuUser::Other => other_share += valid(share.busy_fraction),
        }
    }
    let shares_sum = other_share + targets.values().sum::<f64>();
    let denominator = valid(usage.busy_fraction).max(shares_sum);
    if denominator <= 0.0 || measured_j <= 0.0 {
        return all_idle;
    }
    let idle_j = baseline_j.max(0.0).min(measured_j);
    let active_j = measured_j - idle_j;
    let per_share = active_j / denominator;
    let targets_j: Vec<(ProcId, f64)> = targets
        .into_iter()
        .map(|(p, share)| (p, share * per_share))
        .collect();
    let attributed: f64 = targets_j.iter().map(|(_, j)| j).sum();
    // Other takes the remainder (as for CPUs), so the parts add up to the measurement.
    let other_j = (active_j - attributed).max(0.0);
    let unexplained_j = (other_j - other_share * per_share).max(0.0);
    DomainSplit {
        measured_j,
        idle_j,
        other_j,
        targets_j,
        threads_j: Vec::new(),
        unexplained_j,
    }
}

/// One process's share of a GPU's active energy by cg-trace and by NVIDIA's accounting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShareCheck {
    pub pid: u32,
    /// Percent of the energy charged to the processes both name.
    pub ours_pct: f64,
    /// Percent of their GPU-busy time (utilisation x time) by the accounting stats.
    pub theirs_pct: f64,
}

/// Compares the split of a GPU's energy (`ours_j`: per pid, joules charged) with NVIDIA's
/// accounting (`theirs_busy_s`: per pid, GPU-busy seconds over its life), over the processes
/// both name: each side's shares are of their total there. Empty when they share none or
/// either side's total is 0.
pub fn against_accounting(ours_j: &[(u32, f64)], theirs_busy_s: &[(u32, f64)]) -> Vec<ShareCheck> {
    let valid = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
    let both: Vec<(u32, f64, f64)> = ours_j
        .iter()
        .filter_map(|&(pid, j)| {
            let busy = theirs_busy_s.iter().find(|(p, _)| *p == pid)?.1;
            Some((pid, valid(j), valid(busy)))
        })
        .collect();
    let ours: f64 = both.iter().map(|b| b.1).sum();
    let theirs: f64 = both.iter().map(|b| b.2).sum();
    if ours <= 0.0 || theirs <= 0.0 {
        return Vec::new();
    }
    both.into_iter()
        .map(|(pid, j, busy)| ShareCheck {
            pid,
            ours_pct: 100.0 * j / ours,
            theirs_pct: 100.0 * busy / theirs,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_is_compared_with_accounting_over_the_processes_both_name() {
        // trace2's accounting: heavy 86 % over 11.2 s, light 1 % over 11.4 s, and a warm-up
        // (0 %) cg-trace never saw; cg-trace charged heavy 6,870 J, light 68.7 J and a
        // process the accounting does not know 5 J.
        let ours = [(494, 6870.0), (495, 68.7), (7, 5.0)];
        let theirs = [(446, 0.0), (494, 0.86 * 11.247), (495, 0.01 * 11.361)];
        let checks = against_accounting(&ours, &theirs);
        assert_eq!(checks.len(), 2);
        assert!((checks[0].ours_pct - 100.0 * 6870.0 / 6938.7).abs() < 1e-9);
        assert!((checks[0].theirs_pct - 100.0 * 9.672_42 / (9.672_42 + 0.113_61)).abs() < 1e-6);
        assert!((checks[0].ours_pct + checks[1].ours_pct - 100.0).abs() < 1e-9);
        // Nothing in common, or nothing charged: nothing to compare.
        assert!(against_accounting(&[(1, 5.0)], &theirs).is_empty());
        assert!(against_accounting(&[(494, 0.0)], &theirs).is_empty());
        assert!(against_accounting(&[(494, f64::NAN)], &theirs).is_empty());
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    fn share(user: GpuUser, busy_fraction: f64) -> GpuShare {
        GpuShare {
            user,
            busy_fraction,
        }
    }

    fn target(split: &DomainSplit, p: ProcId) -> f64 {
        split
            .targets_j
            .iter()
            .find(|(q, _)| *q == p)
            .map_or(0.0, |(_, j)| *j)
    }

    fn assert_adds_up(s: &DomainSplit) {
        let sum = s.attributed_j() + s.other_j + s.idle_j;
        assert!(close(sum, s.measured_j), "{s:?}");
        assert!(s.unexplained_j <= s.other_j + 1e-12, "{s:?}");
    }

    #[test]
    fn splits_active_gpu_energy_by_utilisation_share() {
        // 100 ms, GPU busy 90 % of it, 30 J measured, 50 W idle (5 J):
        //   gpu0 |AAAAAABBB.|   A (target 1): 60 %, B (not a target): 30 %, idle 10 %
        // active 25 J over 90 %: A 25 * 6/9, B (other) 25 * 3/9, nothing unexplained.
        let usage = GpuUsage {
            busy_fraction: 0.9,
            shares: vec![share(GpuUser::Target(1), 0.6), share(GpuUser::Other, 0.3)],
            ..Default::default()
        };
        let s = split(Some(&usage), 30.0, 5.0);
        assert_adds_up(&s);
        assert!(close(s.idle_j, 5.0));
        assert!(close(target(&s, 1), 25.0 * 6.0 / 9.0));
        assert!(close(s.other_j, 25.0 * 3.0 / 9.0));
        assert!(close(s.unexplained_j, 0.0));
    }

    #[test]
    fn busy_time_no_process_explains_is_reported_as_unexplained() {
        //   gpu0 |AAAA????..|   A: 40 %, ?: busy 80 % but no process accounts for 40 %
        // active 8 J: A gets half, the other half is other and unexplained.
        let usage = GpuUsage {
            busy_fraction: 0.8,
            shares: vec![share(GpuUser::Target(7), 0.4)],
            ..Default::default()
        };
        let s = split(Some(&usage), 10.0, 2.0);
        assert_adds_up(&s);
        assert!(close(target(&s, 7), 4.0));
        assert!(close(s.other_j, 4.0));
        assert!(close(s.unexplained_j, 4.0));
    }

    #[test]
    fn shares_adding_up_past_the_busy_figure_are_normalised() {
        // Two processes each report 70 % (concurrent kernels, MPS); the GPU says 100 %.
        //   gpu0 |AAAAAAA...|
        //        |BBBBBBB...|  -> each gets half of the active energy
        let usage = GpuUsage {
            busy_fraction: 1.0,
            shares: vec![
                share(GpuUser::Target(1), 0.7),
                share(GpuUser::Target(2), 0.7),
            ],
            ..Default::default()
        };
        let s = split(Some(&usage), 12.0, 2.0);
        assert_adds_up(&s);
        assert!(close(target(&s, 1), 5.0));
        assert!(close(target(&s, 2), 5.0));
        assert!(close(s.unexplained_j, 0.0));
    }

    #[test]
    fn an_idle_gpu_is_all_idle_even_above_baseline() {
        //   gpu0 |..........|  resident processes, but no kernel ran
        let usage = GpuUsage {
            busy_fraction: 0.0,
            shares: vec![],
            ..Default::default()
        };
        let s = split(Some(&usage), 6.0, 3.0);
        assert_adds_up(&s);
        assert!(close(s.idle_j, 6.0));
        let s = split(None, 6.0, 3.0);
        assert!(close(s.idle_j, 6.0));
    }

    #[test]
    fn measured_below_baseline_goes_to_idle_and_nothing_is_negative() {
        let usage = GpuUsage {
            busy_fraction: 0.5,
            shares: vec![share(GpuUser::Target(1), 0.5)],
            ..Default::default()
        };
        let s = split(Some(&usage), 1.0, 4.0);
        assert_adds_up(&s);
        assert!(close(s.idle_j, 1.0));
        assert!(target(&s, 1).abs() < 1e-12);
        // Garbage fractions are clamped, not propagated.
        let usage = GpuUsage {
            busy_fraction: f64::NAN,
            shares: vec![share(GpuUser::Target(1), 3.0)],
            ..Default::default()
        };
        let s = split(Some(&usage), 5.0, 1.0);
        assert_adds_up(&s);
        assert!(close(target(&s, 1), 4.0));
    }

    #[test]
    fn merging_averages_by_duration() {
        //   a (100 ms) |AAAAAAAAAA|   b (300 ms) |..........|...
        let a = GpuUsage {
            busy_fraction: 1.0,
            shares: vec![share(GpuUser::Target(1), 1.0)],
            ..Default::default()
        };
        let b = GpuUsage {
            busy_fraction: 0.2,
            shares: vec![share(GpuUser::Other, 0.2)],
            ..Default::default()
        };
        let m = GpuUsage::merge(&a, 100, &b, 300);
        assert!(close(m.busy_fraction, 0.25 + 0.15));
        assert_eq!(m.shares.len(), 2);
        assert!(close(m.shares[0].busy_fraction, 0.25));
        assert!(close(m.shares[1].busy_fraction, 0.15));
    }

    #[test]
    fn merging_averages_telemetry_by_duration_and_keeps_a_figure_only_one_side_has() {
        //   a (100 ms) util 100 %, 60 °C | b (300 ms) util 20 %, no temperature
        let a = GpuUsage {
            telemetry: GpuTelemetry {
                utilization_pct: Some(100.0),
                temperature_c: Some(60.0),
                ..GpuTelemetry::default()
            },
            ..Default::default()
        };
        let b = GpuUsage {
            telemetry: GpuTelemetry {
                utilization_pct: Some(20.0),
                ..GpuTelemetry::default()
            },
            ..Default::default()
        };
        let m = GpuUsage::merge(&a, 100, &b, 300).telemetry;
        assert!(close(m.utilization_pct.unwrap(), 25.0 + 15.0));
        assert_eq!(m.temperature_c, Some(60.0));
        assert_eq!(m.power_w, None);
    }
}
