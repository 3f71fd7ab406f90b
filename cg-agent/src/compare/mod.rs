//! The comparison behind `cg-trace diff BASE.json NEW.json` and `cg-trace compare`: the
//! change in energy and CPU time between two reports, for the targets (the traced command
//! and its descendants), the whole machine, per domain, process group (processes grouped by
//! program) and function; with `--repeat` runs on both sides, a Mann-Whitney U test on the
//! per-run energies and a verdict; and the gate a CI job needs (`--max-increase PCT`: exit 3
//! on a regression beyond it of what `--gate` names, by default the targets' energy).
//!
//! Pure functions over two reports read through [`crate::report::read`]: [`compare`]
//! computes, [`render`] prints the text, Markdown and JSON forms. The subcommand itself
//! (reading the files, choosing the output, the exit status) is [`crate::diff`].

mod figures;
pub mod gate;
pub mod render;
pub mod stats;

use serde::Serialize;

use crate::report::read::chars;
// What `compare` (crate::interleaved) reads its two reports with.
pub use crate::report::{
    read::{EXIT_BAD_INPUT, LoadError, parse},
    view::ReportView,
};
use figures::{Figures, Samples, figures};
pub use gate::Gate;

/// A difference is significant below this p-value.
pub const ALPHA: f64 = 0.05;
/// Exit status of `diff` on a regression beyond `--max-increase` (as a budget exceeded).
pub const EXIT_REGRESSION: i32 = 3;

/// What a row compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowKind {
    /// The targets' energy (the command and its descendants; attributed, over the top-level
    /// domains).
    Targets,
    /// The targets' energy in one domain.
    TargetDomain,
    /// The measured energy of the top-level domains: the whole machine.
    Total,
    Domain,
    ProcessGroup,
    Function,
}

impl RowKind {
    pub fn label(self) -> &'static str {
        match self {
            RowKind::Targets => "targets",
            RowKind::TargetDomain => "targets in",
            RowKind::Total => "total",
            RowKind::Domain => "domain",
            RowKind::ProcessGroup => "group",
            RowKind::Function => "function",
        }
    }

    /// Every kind, in the order the tables show them.
    pub const ALL: [RowKind; 6] = [
        RowKind::Targets,
        RowKind::TargetDomain,
        RowKind::Total,
        RowKind::Domain,
        RowKind::ProcessGroup,
        RowKind::Function,
    ];
}

/// A significance test's outcome on a row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestResult {
    /// `mann-whitney-u`.
    pub test: &'static str,
    /// `exact` or the normal approximation.
    pub method: &'static str,
    pub u: f64,
    pub p_value: f64,
    /// `significant increase`, `significant decrease` or `no significant difference`.
    pub verdict: &'static str,
}

/// One compared row. Energies and CPU times are medians over runs when a side has several.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub kind: RowKind,
    /// The domain, the group's program, the function.
    pub name: String,
    /// Top-level domain (its energy is in the total); domains only (of the machine or the
    /// targets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_level: Option<bool>,
    /// Whether the gate judges this row (`--gate`); the others are context.
    pub gated: bool,
    pub base_energy_j: f64,
    pub new_energy_j: f64,
    pub change_energy_j: f64,
    /// `null` when the base is 0 (the row is new).
    pub change_energy_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_cpu_time_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_cpu_time_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_cpu_time_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change_cpu_time_pct: Option<f64>,
    /// With `--repeat` runs on both sides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub significance: Option<TestResult>,
    /// Whether this row fails the gate (`--max-increase`).
    pub regression: bool,
}

/// One side's identity, as the comparison shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideInfo {
    pub path: String,
    pub run_id: String,
    pub schema_version: String,
    pub hostname: String,
    pub cpu_model: String,
    /// `measured` or `estimated` (any of its sources estimated).
    pub provenance: &'static str,
    pub sources: Vec<String>,
    /// Measured runs (`repeat.runs`; 1 without `--repeat`).
    pub runs_count: usize,
}

/// The whole comparison (`--format json` writes it as is).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub base: SideInfo,
    pub new: SideInfo,
    /// Whether both sides had per-run figures to test (`--repeat` on both).
    pub tested: bool,
    /// The significance level.
    pub alpha: f64,
    pub max_increase_pct: Option<f64>,
    /// What the gate judges (`--gate`; `targets` unless told otherwise).
    pub gates: Vec<Gate>,
    pub warnings: Vec<String>,
    pub rows: Vec<Row>,
    /// Some gated row rose beyond `--max-increase`: with tests, significantly; without, by
    /// its figures alone.
    pub regression: bool,
}

fn side_info(path: &str, report: &ReportView, runs: usize) -> SideInfo {
    let estimated = report
        .meta
        .sources
        .iter()
        .any(|s| s.provenance != "measured")
        || report
            .totals
            .domains
            .values()
            .any(|d| d.top_level && d.provenance != "measured");
    let mut sources: Vec<String> = report.meta.sources.iter().map(|s| s.name.clone()).collect();
    sources.sort();
    SideInfo {
        path: path.to_string(),
        run_id: report.meta.run_id.clone(),
        schema_version: report.meta.schema_version.clone(),
        hostname: report.meta.hostname.clone(),
        cpu_model: report.meta.cpu_model.clone(),
        provenance: if estimated { "estimated" } else { "measured" },
        sources,
        runs_count: runs,
    }
}

fn pct(base: f64, new: f64) -> Option<f64> {
    (base.abs() > 0.0).then(|| (new - base) / base.abs() * 100.0)
}

/// Compares two reports. `max_increase_pct`: the gate (a row that `gates` judge whose energy
/// rose by more, significantly when tested, is a regression); no `gates`: [`Gate::DEFAULT`].
pub fn compare(
    (base_path, base): (&str, &ReportView),
    (new_path, new): (&str, &ReportView),
    max_increase_pct: Option<f64>,
    gates: &[Gate],
) -> Comparison {
    let gates = if gates.is_empty() {
        vec![Gate::DEFAULT]
    } else {
        gates.to_vec()
    };
    let sides = Sides {
        base: figures(base),
        new: figures(new),
    };
    let tested = sides.base.repeat && sides.new.repeat;
    let base_info = side_info(base_path, base, sides.base.runs);
    let new_info = side_info(new_path, new, sides.new.runs);
    let mut warnings = side_warnings(&base_info, &new_info, &sides);
    let judge = Judge {
        tested,
        max_increase_pct,
        gates: &gates,
    };
    let mut rows: Vec<Row> = sides
        .keys()
        .into_iter()
        .map(|key| judge.row(key, &sides))
        .collect();
    warnings.extend(ungated_warnings(&gates, &rows));
    sort_rows(&mut rows);
    Comparison {
        base: base_info,
        new: new_info,
        tested,
        alpha: ALPHA,
        max_increase_pct,
        regression: rows.iter().any(|r| r.regression),
        gates,
        warnings,
        rows,
    }
}

/// Both sides' figures.
struct Sides {
    base: Figures,
    new: Figures,
}

impl Sides {
    /// Every row either side has, in order.
    fn keys(&self) -> Vec<&(RowKind, String)> {
        let mut keys: Vec<&(RowKind, String)> =
            self.base.rows.keys().chain(self.new.rows.keys()).collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

/// What the reader should know before trusting the comparison: the sides measured
/// differently, on different machines, or only one with runs to test.
fn side_warnings(base: &SideInfo, new: &SideInfo, sides: &Sides) -> Vec<String> {
    let mut warnings = Vec::new();
    if base.provenance != new.provenance {
        warnings.push(format!(
            "the base's energy is {} and the new one's {}: the two are not measured alike",
            base.provenance, new.provenance
        ));
    } else if base.sources != new.sources {
        warnings.push(format!(
            "the two come from different energy sources (base: {}, new: {})",
            base.sources.join(", "),
            new.sources.join(", ")
        ));
    }
    if base.hostname != new.hostname || base.cpu_model != new.cpu_model {
        warnings.push(format!(
            "the two come from different machines (base: {} / {}, new: {} / {})",
            base.hostname, base.cpu_model, new.hostname, new.cpu_model
        ));
    }
    if sides.base.repeat != sides.new.repeat {
        warnings.push(
            "only one side has --repeat runs: its medians are compared with a single run, \
             without a significance test"
                .to_string(),
        );
    }
    warnings
}

/// A gate that judges no row of either report.
fn ungated_warnings(gates: &[Gate], rows: &[Row]) -> Vec<String> {
    gates
        .iter()
        .filter(|gate| {
            !rows
                .iter()
                .any(|r| r.gated && gate.covers(r.kind, &r.name, true))
        })
        .map(|gate| {
            format!(
                "--gate {}: no row of either report is that: nothing is gated for it",
                chars(&gate.to_string(), 80)
            )
        })
        .collect()
}

/// Targets, whole machine and domains, then groups and functions by the size of their
/// change.
fn sort_rows(rows: &mut [Row]) {
    rows.sort_by(|a, b| {
        a.kind.cmp(&b.kind).then_with(|| match a.kind {
            RowKind::Targets | RowKind::TargetDomain | RowKind::Total | RowKind::Domain => {
                a.name.cmp(&b.name)
            }
            _ => b
                .change_energy_j
                .abs()
                .total_cmp(&a.change_energy_j.abs())
                .then_with(|| a.name.cmp(&b.name)),
        })
    });
}

/// How each row is judged: tested or not, against which threshold, by which gates.
struct Judge<'a> {
    tested: bool,
    max_increase_pct: Option<f64>,
    gates: &'a [Gate],
}

impl Judge<'_> {
    /// One row: both sides' medians, the change, the test and the gate's verdict.
    fn row(&self, key: &(RowKind, String), sides: &Sides) -> Row {
        let empty = Samples::default();
        let b = sides.base.rows.get(key).unwrap_or(&empty);
        let n = sides.new.rows.get(key).unwrap_or(&empty);
        let (be, ne) = (energies(b, sides.base.runs), energies(n, sides.new.runs));
        let base_energy_j = stats::median(&be).unwrap_or(0.0);
        let new_energy_j = stats::median(&ne).unwrap_or(0.0);
        let (base_cpu, new_cpu) = cpu_medians(b, n);
        let significance = if self.tested {
            test(&be, &ne, base_energy_j, new_energy_j)
        } else {
            None
        };
        let change_energy_pct = pct(base_energy_j, new_energy_j);
        let is_domain = matches!(key.0, RowKind::Domain | RowKind::TargetDomain);
        let top_level = is_domain
            && sides
                .base
                .top_level
                .get(&key.1)
                .or(sides.new.top_level.get(&key.1))
                == Some(&true);
        let gated = self
            .gates
            .iter()
            .any(|g| g.covers(key.0, &key.1, top_level));
        let beyond = match (self.max_increase_pct, change_energy_pct) {
            (Some(max), Some(change)) => change > max,
            // From nothing to something is beyond any threshold.
            (Some(_), None) => new_energy_j > base_energy_j,
            (None, _) => false,
        };
        let significant_rise = match &significance {
            Some(t) => t.verdict == "significant increase",
            None => !self.tested,
        };
        Row {
            kind: key.0,
            name: key.1.clone(),
            top_level: is_domain.then_some(top_level),
            gated,
            base_energy_j,
            new_energy_j,
            change_energy_j: new_energy_j - base_energy_j,
            change_energy_pct,
            base_cpu_time_s: base_cpu,
            new_cpu_time_s: new_cpu,
            change_cpu_time_s: base_cpu.zip(new_cpu).map(|(b, n)| n - b),
            change_cpu_time_pct: base_cpu.zip(new_cpu).and_then(|(b, n)| pct(b, n)),
            significance,
            regression: gated && beyond && significant_rise,
        }
    }
}

/// A side's per-run energies of a row; a row absent from a side is 0 in every run of it.
fn energies(s: &Samples, runs: usize) -> Vec<f64> {
    if s.energy_j.is_empty() {
        vec![0.0; runs]
    } else {
        s.energy_j.clone()
    }
}

/// Both sides' median CPU time of a row: none when neither has any, else 0 for the side
/// without.
fn cpu_medians(b: &Samples, n: &Samples) -> (Option<f64>, Option<f64>) {
    let cpu = |s: &Samples| s.cpu_time_s.as_deref().and_then(stats::median);
    match (cpu(b), cpu(n)) {
        (None, None) => (None, None),
        (b, n) => (Some(b.unwrap_or(0.0)), Some(n.unwrap_or(0.0))),
    }
}

/// The Mann-Whitney U test of the new runs' energies against the base's, with its verdict.
fn test(base: &[f64], new: &[f64], base_median: f64, new_median: f64) -> Option<TestResult> {
    stats::mann_whitney(new, base).map(|t| TestResult {
        test: "mann-whitney-u",
        method: t.method.describe(),
        u: t.u1,
        p_value: t.p_value,
        verdict: if t.p_value >= ALPHA {
            "no significant difference"
        } else if new_median > base_median {
            "significant increase"
        } else if new_median < base_median {
            "significant decrease"
        } else {
            // Equal medians yet different distributions: no direction to call.
            "no significant difference"
        },
    })
}

/// `--max-increase` is a percentage of at least 0.
pub fn check_max_increase(max: Option<f64>) -> Result<(), &'static str> {
    match max {
        Some(max) if !(max.is_finite() && max >= 0.0) => {
            Err("--max-increase takes a percentage >= 0 (e.g. 5)")
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
