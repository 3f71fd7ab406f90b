//! Energy and power budgets (`--max-energy`, `--max-power`): each limit checked against the
//! run's figure (the median over the runs of a `--repeat` set), for the targets (the traced
//! command and its descendants, not the whole machine) or for the processes of one program.
//! Pure: reads a finished report.

use serde::Serialize;

use super::{ProcessEntry, Report, repeat};

/// What a budget limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Joules over the run.
    Energy,
    /// Average watts over the run.
    Power,
}

impl Kind {
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Energy => "J",
            Kind::Power => "W",
        }
    }

    fn option(self) -> &'static str {
        match self {
            Kind::Energy => "--max-energy",
            Kind::Power => "--max-power",
        }
    }
}

/// A limit as given on the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    pub kind: Kind,
    /// The program whose processes it covers (their energy summed); `None`: the targets.
    pub program: Option<String>,
    pub limit: f64,
}

/// A budget checked, as the report's `budgets[]` records it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Budget {
    pub kind: Kind,
    /// `J` or `W`: the unit of `limit` and `value`.
    pub unit: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    pub limit: f64,
    /// The run's figure; with `--repeat`, the median over the measured runs.
    pub value: f64,
    pub exceeded: bool,
    /// How far over (or under, negative) the limit, in percent of it (0 for a limit of 0).
    pub excess_pct: f64,
    /// `single run` or `median of N runs`.
    pub statistic: String,
    /// Whether the figure is measured or estimated.
    pub provenance: crate::sources::Provenance,
    /// Named budgets: the processes of that program found (over all runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes_count: Option<usize>,
}

/// Whether `p` runs `program` (its kernel name or its command's first word).
fn runs(p: &ProcessEntry, program: &str) -> bool {
    p.comm == program
        || p.cmdline
            .first()
            .is_some_and(|argv0| super::names::file_name(argv0) == program)
}

/// The figure `limit` is about in one run's report, and the processes it covered.
fn value_of(report: &Report, limit: &Limit) -> (f64, usize) {
    let totals = &report.totals;
    match (&limit.program, limit.kind) {
        (None, Kind::Energy) => (totals.attributed_energy_j, 0),
        (None, Kind::Power) if totals.duration_s > 0.0 => {
            (totals.attributed_energy_j / totals.duration_s, 0)
        }
        (None, Kind::Power) => (0.0, 0),
        (Some(program), kind) => {
            let matched: Vec<&ProcessEntry> = report
                .processes
                .iter()
                .filter(|p| runs(p, program))
                .collect();
            let energy_j: f64 = matched.iter().map(|p| p.energy_j).sum();
            let value = match kind {
                Kind::Energy => energy_j,
                Kind::Power if totals.duration_s > 0.0 => energy_j / totals.duration_s,
                Kind::Power => 0.0,
            };
            (value, matched.len())
        }
    }
}

/// Checks every limit against `report`.
pub fn evaluate(report: &Report, limits: &[Limit]) -> Vec<Budget> {
    let provenance =
        crate::sources::Provenance::of_all(report.meta.sources.iter().map(|s| s.provenance));
    limits
        .iter()
        .map(|limit| {
            let (value, count, statistic) = match &report.repeat {
                Some(set) => {
                    let per_run: Vec<(f64, usize)> = set
                        .runs
                        .iter()
                        .map(|r| value_of(&r.report, limit))
                        .collect();
                    let mut values: Vec<f64> = per_run.iter().map(|v| v.0).collect();
                    values.sort_by(f64::total_cmp);
                    (
                        repeat::quantile(&values, 0.5),
                        per_run.iter().map(|v| v.1).sum(),
                        format!("median of {} runs", values.len()),
                    )
                }
                None => {
                    let (value, count) = value_of(report, limit);
                    (value, count, "single run".to_string())
                }
            };
            Budget {
                kind: limit.kind,
                unit: limit.kind.unit(),
                program: limit.program.clone(),
                limit: limit.limit,
                value,
                exceeded: value > limit.limit,
                excess_pct: if limit.limit > 0.0 {
                    100.0 * (value - limit.limit) / limit.limit
                } else {
                    0.0
                },
                statistic,
                provenance,
                processes_count: limit.program.as_ref().map(|_| count),
            }
        })
        .collect()
}

/// The stderr line for an exceeded budget, or a named one that matched no process.
pub fn message(budget: &Budget) -> Option<String> {
    let what = match &budget.program {
        Some(program) => format!("{} of the `{program}` processes", kind_word(budget.kind)),
        None => format!("{} of the targets", kind_word(budget.kind)),
    };
    let marking = match budget.provenance {
        crate::sources::Provenance::Measured => "measured",
        crate::sources::Provenance::Estimated => "ESTIMATED",
    };
    let option = budget.kind.option();
    let unit = budget.unit;
    if budget.exceeded {
        Some(format!(
            "cg-trace: budget exceeded: {what} {:.3} {unit} ({marking}, {}) is over {option} \
             {} {unit} by {:.3} {unit} ({:.1}%)",
            budget.value,
            budget.statistic,
            budget.limit,
            budget.value - budget.limit,
            budget.excess_pct
        ))
    } else if budget.processes_count == Some(0) {
        Some(format!(
            "cg-trace: warning: {option} {}={}: no process of the run runs `{}`",
            budget.program.as_deref().unwrap_or(""),
            budget.limit,
            budget.program.as_deref().unwrap_or("")
        ))
    } else {
        None
    }
}

fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Kind::Energy => "energy",
        Kind::Power => "average power",
    }
}
