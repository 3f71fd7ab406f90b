//! The functions section of the summary on stderr: the heaviest functions by energy, with
//! calls or samples, on-CPU time, inclusive and self energy, per process and (when several
//! processes ran them) over all processes, and what the probes cost.

use std::fmt::{Display, Write as _};

use crate::{
    printable::{fit, printable},
    report::{
        FunctionEntry, Report,
        functions::{
            FunctionFigures, FunctionProfiling, FunctionTotal, SamplingStats, UprobeStats,
        },
    },
};

/// Rows of the summary's function table (the report lists `--top-functions`).
const MAX_ROWS: usize = 20;
/// Rows of the table of functions over all processes.
const MAX_TOTAL_ROWS: usize = 10;

/// Renders the section; empty when the run did no function-level profiling.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let Some(profiling) = &report.meta.function_profiling else {
        return out;
    };
    render_entries(&mut out, &report.functions, profiling);
    render_totals(&mut out, &report.function_totals, profiling);
    if let Some(u) = &profiling.uprobes {
        render_probes(&mut out, u);
    }
    if let Some(s) = &profiling.sampling {
        render_sampling(&mut out, s);
    }
    for note in &profiling.notes {
        let _ = writeln!(out, "  - {}", printable(note));
    }
    out
}

/// The column titles of both function tables; `first` names the first column.
fn write_header(out: &mut String, first: &str) {
    let _ = writeln!(
        out,
        "{:>8}  {:<34} {:<16} {:>10} {:>9} {:>11} {:>10}",
        first, "FUNCTION", "MODULE", "CALLS/SMPL", "CPU [s]", "ENERGY [J]", "SELF [J]"
    );
}

/// One row of a function table: `first` (a pid, or a count of processes), the function
/// with `mark` after its name, and its figures.
fn write_row<Who>(out: &mut String, first: impl Display, f: &FunctionFigures<Who>, mark: &str) {
    let count = match (f.calls, f.samples) {
        (Some(calls), _) => format!("{calls}"),
        (None, Some(samples)) => format!("{samples} smp"),
        _ => String::new(),
    };
    let module = match f.line {
        Some(line) => format!("{}:{line}", tail(&printable(&f.module), 12)),
        None => f.module.clone(),
    };
    let _ = writeln!(
        out,
        "{:>8}  {:<34} {:<16} {:>10} {:>9.3} {:>11.3} {:>10.3}",
        first,
        fit(&format!("{}{mark}", f.symbol), 34),
        fit(&module, 16),
        count,
        f.cpu_time_s,
        f.energy_j,
        f.self_energy_j
    );
}

/// The heaviest functions per process, and how many more the report lists.
fn render_entries(out: &mut String, functions: &[FunctionEntry], profiling: &FunctionProfiling) {
    let provenance = profiling.provenance.as_str();
    let _ = writeln!(
        out,
        "\nFUNCTIONS (by energy; {provenance}; inclusive = with callees; smp = samples)"
    );
    write_header(out, "PID");
    for f in functions.iter().take(MAX_ROWS) {
        let mark = if f.entry_only == Some(true) {
            " (entry only)"
        } else if f.partial == Some(true) {
            " (partial)"
        } else {
            ""
        };
        write_row(out, f.who.pid, f, mark);
    }
    if functions.len() > MAX_ROWS {
        let _ = writeln!(
            out,
            "{:>8}  … {} more in the report ({} in all)",
            "",
            functions.len() - MAX_ROWS,
            profiling.functions_count
        );
    }
}

/// The functions over all processes, when some function ran in several.
fn render_totals(out: &mut String, totals: &[FunctionTotal], profiling: &FunctionProfiling) {
    if !totals.iter().any(|t| t.who.processes_count > 1) {
        return;
    }
    let _ = writeln!(
        out,
        "\nFUNCTIONS, ALL PROCESSES (sums of every process's figures, including those not listed)"
    );
    write_header(out, "PROCS");
    for t in totals.iter().take(MAX_TOTAL_ROWS) {
        write_row(out, t.who.processes_count, t, "");
    }
    if profiling.function_totals_count > MAX_TOTAL_ROWS {
        let _ = writeln!(
            out,
            "{:>8}  … {} functions in all (`function_totals` in the report)",
            "", profiling.function_totals_count
        );
    }
}

/// What the probes cost, and the busiest probed functions.
fn render_probes(out: &mut String, u: &UprobeStats) {
    let _ = writeln!(
        out,
        "probes: {} entry hits (measured, all processes), {} calls of targets; estimated \
         probe cost {:.3} s of CPU ({} functions probed)",
        u.probe_hits_count,
        u.target_calls_count,
        u.estimated_probe_cost_s,
        u.functions.len()
    );
    for p in u
        .functions
        .iter()
        .filter(|p| p.max_calls_per_s > 0.0)
        .take(MAX_ROWS)
    {
        let _ = writeln!(
            out,
            "  {}: up to {:.0} calls/s (measured); first instruction {} (~{:.0} µs per \
             call, estimated)",
            printable(&p.symbol),
            p.max_calls_per_s,
            p.first_instruction.describe(),
            p.estimated_probe_pair_cost_us
        );
    }
}

/// What the sampler took and lost, how it walked stacks, and the Python it met.
fn render_sampling(out: &mut String, s: &SamplingStats) {
    let _ = writeln!(
        out,
        "samples: {} at {} Hz (measured), {} stacks; sampled {:.3} J, unsampled {:.3} J",
        s.samples_count, s.sample_hz, s.stacks_count, s.sampled_energy_j, s.unsampled_energy_j
    );
    let _ = writeln!(
        out,
        "  lost (measured): {} kernel stacks, {} user stacks, {} whole samples ({:.2} per \
         100 samples)",
        s.lost_kernel_stacks_count,
        s.lost_user_stacks_count,
        s.lost_samples_count,
        s.lost_stacks_pct
    );
    let w = &s.stack_walk;
    let _ = writeln!(
        out,
        "  user stacks (--stacks {}, measured): {} unwound by .eh_frame ({} short of an \
         entry point), {} walked by frame pointer ({} short)",
        w.mode,
        w.dwarf_samples_count,
        w.dwarf_truncated_count,
        w.frame_pointer_samples_count,
        w.frame_pointer_truncated_count
    );
    for p in &s.python {
        let _ = writeln!(
            out,
            "  pid {}: CPython {}{}",
            p.pid,
            printable(&p.version),
            if p.python_frames {
                ": Python frames"
            } else {
                ": not supported, native frames only"
            }
        );
    }
}

/// The end of a path, for narrow columns.
fn tail(text: &str, width: usize) -> String {
    let count = text.chars().count();
    if count <= width {
        text.to_string()
    } else {
        let s: String = text.chars().skip(count - width + 1).collect();
        format!("…{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        report::functions::{InProcess, OverProcesses},
        sources::Provenance,
    };

    fn figures<Who>(who: Who, symbol: &str, calls: Option<u64>) -> FunctionFigures<Who> {
        FunctionFigures {
            symbol: symbol.into(),
            module: "app".into(),
            who,
            calls,
            samples: calls.is_none().then_some(12),
            cpu_time_s: 0.25,
            energy_j: 1.5,
            self_cpu_time_s: 0.125,
            self_energy_j: 0.75,
            source: if calls.is_some() {
                "uprobe"
            } else {
                "sampling"
            },
            line: None,
            partial: None,
            entry_only: None,
            provenance: Provenance::Measured,
        }
    }

    fn profiling(functions_count: usize, function_totals_count: usize) -> FunctionProfiling {
        FunctionProfiling {
            functions_count,
            functions_listed_count: functions_count,
            function_totals_count,
            function_totals_listed_count: function_totals_count,
            provenance: Provenance::Measured,
            uprobes: None,
            sampling: None,
            method: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn rows(text: &str) -> Vec<Vec<&str>> {
        text.lines()
            .skip(3)
            .map(|l| l.split_whitespace().collect())
            .collect()
    }

    #[test]
    fn rows_show_calls_or_samples_and_mark_partial_and_entry_only_calls() {
        let at = |pid| InProcess { pid };
        let mut partial = figures(at(7), "loop", Some(3));
        partial.partial = Some(true);
        let mut entry_only = figures(at(7), "main", Some(1));
        entry_only.entry_only = Some(true);
        entry_only.partial = Some(true);
        let mut python = figures(at(8), "work", None);
        python.module = "/srv/app/handlers/work.py".into();
        python.line = Some(42);
        let entries = [partial, entry_only, python];
        let mut out = String::new();
        render_entries(&mut out, &entries, &profiling(3, 0));
        assert!(out.contains("FUNCTIONS (by energy; measured;"), "{out}");
        assert_eq!(
            rows(&out),
            [
                vec![
                    "7",
                    "loop",
                    "(partial)",
                    "app",
                    "3",
                    "0.250",
                    "1.500",
                    "0.750"
                ],
                vec![
                    "7", "main", "(entry", "only)", "app", "1", "0.250", "1.500", "0.750"
                ],
                // A Python function: its file's tail and first line, and its samples.
                vec![
                    "8",
                    "work",
                    "…ers/work.py:42",
                    "12",
                    "smp",
                    "0.250",
                    "1.500",
                    "0.750"
                ],
            ]
        );
    }

    #[test]
    fn more_entries_than_rows_say_how_many_more_the_report_has() {
        let entries: Vec<FunctionEntry> = (0..MAX_ROWS as u32 + 3)
            .map(|pid| figures(InProcess { pid }, "f", Some(1)))
            .collect();
        let mut out = String::new();
        render_entries(&mut out, &entries, &profiling(40, 0));
        let last = out.lines().last().expect("a last line");
        assert_eq!(last.trim(), "… 3 more in the report (40 in all)");
        assert_eq!(out.lines().count(), 3 + MAX_ROWS + 1);
    }

    #[test]
    fn totals_show_only_when_a_function_ran_in_several_processes() {
        let over = |processes_count| OverProcesses { processes_count };
        let mut out = String::new();
        let alone = [figures(over(1), "f", Some(2)), figures(over(1), "g", None)];
        render_totals(&mut out, &alone, &profiling(2, 2));
        assert_eq!(out, "");

        let shared = [figures(over(3), "f", Some(9)), figures(over(1), "g", None)];
        render_totals(&mut out, &shared, &profiling(4, 2));
        assert!(out.contains("FUNCTIONS, ALL PROCESSES"), "{out}");
        assert_eq!(
            rows(&out),
            [
                vec!["3", "f", "app", "9", "0.250", "1.500", "0.750"],
                vec!["1", "g", "app", "12", "smp", "0.250", "1.500", "0.750"],
            ]
        );
        // Past the rows shown, the count in the report.
        let mut out = String::new();
        render_totals(&mut out, &shared, &profiling(4, MAX_TOTAL_ROWS + 5));
        assert!(
            out.ends_with("15 functions in all (`function_totals` in the report)\n"),
            "{out}"
        );
    }

    #[test]
    fn outside_names_are_escaped_and_long_paths_keep_their_end() {
        let mut f = figures(InProcess { pid: 1 }, "evil\x1b[2Jname", Some(1));
        f.module = "lib\nx.so".into();
        let mut out = String::new();
        write_row(&mut out, 1, &f, "");
        assert_eq!(out.lines().count(), 1, "{out:?}");
        assert!(!out.contains('\x1b'), "{out:?}");
        assert_eq!(tail("abcdef", 6), "abcdef");
        assert_eq!(tail("/very/long/path.py", 8), "…path.py");
    }
}
