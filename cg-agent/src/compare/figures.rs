//! One report reduced to the rows a comparison meets on: `(kind, name) -> per-run figures`,
//! from a single run's totals, processes and functions, or from each `--repeat` run.

use std::collections::BTreeMap;

use super::RowKind;
use crate::report::view::{ReportView, RunView, TotalsView};

/// One side's figures for a row: one value per run (one for a single run).
#[derive(Clone, Debug, Default)]
pub(super) struct Samples {
    pub energy_j: Vec<f64>,
    pub cpu_time_s: Option<Vec<f64>>,
}

/// One report reduced to rows: `(kind, key) -> samples`.
pub(super) struct Figures {
    pub rows: BTreeMap<(RowKind, String), Samples>,
    /// Runs on this side (1 without `--repeat`).
    pub runs: usize,
    /// Whether the figures are per `--repeat` run.
    pub repeat: bool,
    /// Each domain: whether it is top-level (its energy is in the total).
    pub top_level: BTreeMap<String, bool>,
}

impl Figures {
    fn new(report: &ReportView, runs: usize, repeat: bool) -> Figures {
        let top_level = report
            .totals
            .domains
            .iter()
            .map(|(name, d)| (name.clone(), d.top_level))
            .collect();
        Figures {
            rows: BTreeMap::new(),
            runs,
            repeat,
            top_level,
        }
    }

    /// Adds to a row's figures in run `run`. A row missing from a run counts 0 in that run
    /// (the program did not run, the function was not sampled).
    fn add(&mut self, key: (RowKind, String), run: usize, energy_j: f64, cpu: Option<f64>) {
        let runs = self.runs;
        let s = self.rows.entry(key).or_insert_with(|| Samples {
            energy_j: vec![0.0; runs],
            cpu_time_s: None,
        });
        s.energy_j[run] += energy_j;
        if let Some(cpu) = cpu {
            s.cpu_time_s.get_or_insert_with(|| vec![0.0; runs])[run] += cpu;
        }
    }

    /// A report's (or one run's) targets' rows: their energy in total (with their CPU time)
    /// and per domain.
    fn add_targets(&mut self, totals: &TotalsView, run: usize) {
        let targets = (RowKind::Targets, "energy".to_string());
        self.add(
            targets,
            run,
            totals.split.attributed_energy_j,
            Some(totals.cpu_time_s),
        );
        for (name, d) in &totals.domains {
            let key = (RowKind::TargetDomain, name.clone());
            self.add(key, run, d.split.attributed_energy_j, None);
        }
    }

    /// One `--repeat` run's rows.
    fn add_run(&mut self, run: &RunView, i: usize) {
        let cpu: f64 = run.process_groups.iter().filter_map(|g| g.cpu_time_s).sum();
        let any_cpu = run.process_groups.iter().any(|g| g.cpu_time_s.is_some());
        let total = (RowKind::Total, "energy".to_string());
        self.add(total, i, run.energy_j, any_cpu.then_some(cpu));
        self.add_targets(&run.report.totals, i);
        for (name, d) in &run.domains {
            self.add((RowKind::Domain, name.clone()), i, d.energy_j, None);
        }
        // By program, as a single run's processes are, so that a repeat report and a plain
        // one (or two repeat sets whose arguments differ) meet row for row; the finer groups
        // of one set are in its own statistics.
        for g in &run.process_groups {
            let key = (RowKind::ProcessGroup, g.program());
            self.add(key, i, g.energy_j, g.cpu_time_s);
        }
        for f in &run.functions {
            self.add((RowKind::Function, f.function.clone()), i, f.energy_j, None);
        }
    }

    /// A single run's rows, from the report's top level.
    fn add_single(&mut self, report: &ReportView) {
        let totals = &report.totals;
        let total = (RowKind::Total, "energy".to_string());
        self.add(total, 0, totals.split.energy_j, Some(totals.cpu_time_s));
        self.add_targets(totals, 0);
        for (name, d) in &totals.domains {
            self.add((RowKind::Domain, name.clone()), 0, d.split.energy_j, None);
        }
        for (program, sums) in &report.processes.groups {
            let key = (RowKind::ProcessGroup, program.clone());
            self.add(key, 0, sums.energy_j, Some(sums.cpu_time_s));
        }
        for f in &report.function_totals {
            // As `repeat.runs[].functions[].function` names it.
            let key = (RowKind::Function, f.function());
            self.add(key, 0, f.energy_j, Some(f.cpu_time_s));
        }
    }
}

/// A report's rows: per `--repeat` run when it has runs, else its single run's.
pub(super) fn figures(report: &ReportView) -> Figures {
    match report.repeat.as_ref().map(|r| r.runs.as_slice()) {
        Some(runs) if !runs.is_empty() => {
            let mut figures = Figures::new(report, runs.len(), true);
            for (i, run) in runs.iter().enumerate() {
                figures.add_run(run, i);
            }
            figures
        }
        _ => {
            let mut figures = Figures::new(report, 1, false);
            figures.add_single(report);
            figures
        }
    }
}
