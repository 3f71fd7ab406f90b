//! Idle baseline: the power a domain draws with nothing running, which attribution takes off
//! the top of every interval before splitting the rest by on-CPU time.
//!
//! Where it comes from, in order of preference (the report says which was used):
//! 1. `--idle-watts`, given by the user;
//! 2. the power model's own idle term (the model source);
//! 3. for a GPU, its rest power ([`RestPower`], found by `sources::gpu_rest`);
//! 4. a least-squares fit of interval power against busy CPUs over the run (and, in wrap
//!    mode, a short calibration window before the command starts), whose intercept is the
//!    power at zero busy CPUs; it is clamped to `[0, lowest interval power]`;
//! 5. when the busy level hardly varied (no fit possible): the lowest interval power, less an
//!    assumed per-CPU slope times the CPUs busy in that interval (marked as a prior).

/// Energy and activity of one interval, seen from one domain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerPoint {
    pub duration_s: f64,
    pub energy_j: f64,
    /// CPUs busy on average among those the domain covers.
    pub busy_cpus: f64,
}

/// Where a rest power came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RestOrigin {
    SeenThisRun,
    /// Seen in an earlier run, `age_s` before this one.
    StateFile {
        age_s: f64,
    },
    ModelTable,
}

impl RestOrigin {
    /// The report's name for it (`meta.idle_baseline[].rest_source`).
    pub fn name(self) -> &'static str {
        match self {
            RestOrigin::SeenThisRun => "rest_seen_this_run",
            RestOrigin::StateFile { .. } => "rest_from_state_file",
            RestOrigin::ModelTable => "model_table",
        }
    }

    /// Whether it is a typical figure of the model rather than this GPU's own.
    pub fn is_estimated(self) -> bool {
        self == RestOrigin::ModelTable
    }
}

/// A GPU's rest power and where it came from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestPower {
    pub power_w: f64,
    pub origin: RestOrigin,
}

/// How a baseline was obtained.
#[derive(Clone, Debug, PartialEq)]
pub enum IdleMethod {
    /// `--idle-watts`.
    Given,
    /// The power model's idle term.
    Model,
    /// A GPU's rest power.
    Rest(RestOrigin),
    /// Intercept of a duration-weighted least-squares fit of power against busy CPUs.
    Regression {
        points: usize,
        slope_w_per_cpu: f64,
        r_squared: f64,
    },
    /// No usable fit; lowest observed power less an assumed slope times the busy CPUs then.
    Prior { points: usize, slope_w_per_cpu: f64 },
    /// Nothing measured.
    NoData,
}

impl IdleMethod {
    /// Short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            IdleMethod::Given => "given",
            IdleMethod::Model => "model",
            IdleMethod::Rest(_) => "rest",
            IdleMethod::Regression { .. } => "regression",
            IdleMethod::Prior { .. } => "prior",
            IdleMethod::NoData => "none",
        }
    }
}

/// A domain's idle baseline and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct IdleBaseline {
    pub power_w: f64,
    pub method: IdleMethod,
}

/// Fewest intervals a fit is tried on.
const MIN_FIT_POINTS: usize = 6;
/// Least spread (standard deviation, in CPUs) of the busy level a fit needs.
const MIN_BUSY_SPREAD_CPUS: f64 = 0.15;

/// Estimates a domain's idle power from its intervals (see the module docs, steps 3 and 4).
/// `prior_slope_w_per_cpu` is what one busy CPU is assumed to add when no fit is possible.
pub fn estimate(points: &[PowerPoint], prior_slope_w_per_cpu: f64) -> IdleBaseline {
    let points: Vec<PowerPoint> = points
        .iter()
        .copied()
        .filter(|p| p.duration_s > 0.0 && p.energy_j.is_finite() && p.busy_cpus.is_finite())
        .collect();
    let Some(lowest) = points
        .iter()
        .min_by(|a, b| power(a).total_cmp(&power(b)))
        .copied()
    else {
        return IdleBaseline {
            power_w: 0.0,
            method: IdleMethod::NoData,
        };
    };
    let lowest_w = power(&lowest).max(0.0);

    if let Some((intercept, slope, r_squared)) = fit(&points) {
        return IdleBaseline {
            power_w: intercept.clamp(0.0, lowest_w),
            method: IdleMethod::Regression {
                points: points.len(),
                slope_w_per_cpu: slope,
                r_squared,
            },
        };
    }
    IdleBaseline {
        power_w: (lowest_w - prior_slope_w_per_cpu * lowest.busy_cpus).clamp(0.0, lowest_w),
        method: IdleMethod::Prior {
            points: points.len(),
            slope_w_per_cpu: prior_slope_w_per_cpu,
        },
    }
}

fn power(p: &PowerPoint) -> f64 {
    p.energy_j / p.duration_s
}

/// Duration-weighted least squares of power on busy CPUs: (intercept W, slope W/CPU, r²),
/// or `None` when there are too few points, too little spread, or a non-physical slope.
fn fit(points: &[PowerPoint]) -> Option<(f64, f64, f64)> {
    if points.len() < MIN_FIT_POINTS {
        return None;
    }
    let total_w: f64 = points.iter().map(|p| p.duration_s).sum();
    let mean_x = points
        .iter()
        .map(|p| p.duration_s * p.busy_cpus)
        .sum::<f64>()
        / total_w;
    let mean_y = points.iter().map(|p| p.duration_s * power(p)).sum::<f64>() / total_w;
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for p in points {
        let (dx, dy) = (p.busy_cpus - mean_x, power(p) - mean_y);
        sxx += p.duration_s * dx * dx;
        sxy += p.duration_s * dx * dy;
        syy += p.duration_s * dy * dy;
    }
    if (sxx / total_w).sqrt() < MIN_BUSY_SPREAD_CPUS {
        return None;
    }
    let slope = sxy / sxx;
    if slope <= 0.0 || !slope.is_finite() {
        return None;
    }
    let intercept = mean_y - slope * mean_x;
    let r_squared = if syy > 0.0 {
        (sxy * sxy) / (sxx * syy)
    } else {
        1.0
    };
    Some((intercept, slope, r_squared))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(busy: f64, watts: f64) -> PowerPoint {
        PowerPoint {
            duration_s: 0.1,
            energy_j: watts * 0.1,
            busy_cpus: busy,
        }
    }

    #[test]
    fn recovers_the_intercept_of_a_linear_machine() {
        // P = 12 W + 7 W per busy CPU, busy level varying between 0.1 and 2 CPUs.
        let points: Vec<_> = (0..40)
            .map(|i| {
                let busy = 0.1 + (i % 5) as f64 * 0.45;
                point(busy, 12.0 + 7.0 * busy)
            })
            .collect();
        let b = estimate(&points, 5.0);
        assert!((b.power_w - 12.0).abs() < 1e-9, "{b:?}");
        match b.method {
            IdleMethod::Regression {
                slope_w_per_cpu,
                r_squared,
                ..
            } => {
                assert!((slope_w_per_cpu - 7.0).abs() < 1e-9);
                assert!(r_squared > 0.999);
            }
            other => panic!("expected a regression, got {other:?}"),
        }
    }

    #[test]
    fn concave_machine_is_clamped_to_the_lowest_power_seen() {
        // The first busy CPU costs more than the second: the fit's intercept overshoots.
        let points: Vec<_> = (0..30)
            .map(|i| match i % 3 {
                0 => point(0.0, 10.0),
                1 => point(1.0, 30.0),
                _ => point(2.0, 40.0),
            })
            .collect();
        let b = estimate(&points, 5.0);
        assert!(b.power_w <= 10.0 + 1e-9, "{b:?}");
    }

    #[test]
    fn steady_load_falls_back_to_the_prior_slope() {
        // Always one CPU busy at 20 W: no spread to fit; assume 6 W per CPU -> 14 W idle.
        let points: Vec<_> = (0..30).map(|_| point(1.0, 20.0)).collect();
        let b = estimate(&points, 6.0);
        assert!((b.power_w - 14.0).abs() < 1e-9);
        assert_eq!(b.method.name(), "prior");
    }

    #[test]
    fn prior_never_goes_negative() {
        let points: Vec<_> = (0..3).map(|_| point(2.0, 3.0)).collect();
        assert_eq!(estimate(&points, 10.0).power_w, 0.0);
    }

    #[test]
    fn no_points_means_no_baseline() {
        let b = estimate(&[], 5.0);
        assert_eq!(b.power_w, 0.0);
        assert_eq!(b.method, IdleMethod::NoData);
    }

    #[test]
    fn negative_slope_is_not_trusted() {
        let points: Vec<_> = (0..20)
            .map(|i| {
                let busy = (i % 4) as f64 * 0.5;
                point(busy, 30.0 - 4.0 * busy)
            })
            .collect();
        assert_eq!(estimate(&points, 5.0).method.name(), "prior");
    }
}
