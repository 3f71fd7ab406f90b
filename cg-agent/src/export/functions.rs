//! The functions section of the summary on stderr: the heaviest functions by energy, with
//! calls or samples, on-CPU time, inclusive and self energy, per process and (when several
//! processes ran them) over all processes, and what the probes cost.

use std::fmt::Write as _;

use crate::{
    printable::{fit, printable},
    report::Report,
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
    let provenance = profiling.provenance.as_str();
    let _ = writeln!(
        out,
        "\nFUNCTIONS (by energy; {provenance}; inclusive = with callees; smp = samples)"
    );
    let _ = writeln!(
        out,
        "{:>8}  {:<34} {:<16} {:>10} {:>9} {:>11} {:>10}",
        "PID", "FUNCTION", "MODULE", "CALLS/SMPL", "CPU [s]", "ENERGY [J]", "SELF [J]"
    );
    for f in report.functions.iter().take(MAX_ROWS) {
        let count = match (f.calls, f.samples) {
            (Some(calls), _) => format!("{calls}"),
            (None, Some(samples)) => format!("{samples} smp"),
            _ => String::new(),
        };
        let module = match f.line {
            Some(line) => format!("{}:{line}", tail(&printable(&f.module), 12)),
            None => f.module.clone(),
        };
        let partial = if f.entry_only == Some(true) {
            " (entry only)"
        } else if f.partial == Some(true) {
            " (partial)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:>8}  {:<34} {:<16} {:>10} {:>9.3} {:>11.3} {:>10.3}",
            f.pid,
            fit(&format!("{}{partial}", f.symbol), 34),
            fit(&module, 16),
            count,
            f.cpu_time_s,
            f.energy_j,
            f.self_energy_j
        );
    }
    if report.functions.len() > MAX_ROWS {
        let _ = writeln!(
            out,
            "{:>8}  … {} more in the report ({} in all)",
            "",
            report.functions.len() - MAX_ROWS,
            profiling.functions_count
        );
    }
    render_totals(&mut out, report);
    if let Some(u) = &profiling.uprobes {
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
    if let Some(s) = &profiling.sampling {
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
    for note in &profiling.notes {
        let _ = writeln!(out, "  - {}", printable(note));
    }
    out
}

/// The functions over all processes, when some function ran in several.
fn render_totals(out: &mut String, report: &Report) {
    if !report.function_totals.iter().any(|t| t.processes_count > 1) {
        return;
    }
    let _ = writeln!(
        out,
        "\nFUNCTIONS, ALL PROCESSES (sums of every process's figures, including those not listed)"
    );
    let _ = writeln!(
        out,
        "{:>8}  {:<34} {:<16} {:>10} {:>9} {:>11} {:>10}",
        "PROCS", "FUNCTION", "MODULE", "CALLS/SMPL", "CPU [s]", "ENERGY [J]", "SELF [J]"
    );
    for t in report.function_totals.iter().take(MAX_TOTAL_ROWS) {
        let count = match (t.calls, t.samples) {
            (Some(calls), _) => format!("{calls}"),
            (None, Some(samples)) => format!("{samples} smp"),
            _ => String::new(),
        };
        let module = match t.line {
            Some(line) => format!("{}:{line}", tail(&printable(&t.module), 12)),
            None => t.module.clone(),
        };
        let _ = writeln!(
            out,
            "{:>8}  {:<34} {:<16} {:>10} {:>9.3} {:>11.3} {:>10.3}",
            t.processes_count,
            fit(&t.symbol, 34),
            fit(&module, 16),
            count,
            t.cpu_time_s,
            t.energy_j,
            t.self_energy_j
        );
    }
    if let Some(profiling) = &report.meta.function_profiling
        && profiling.function_totals_count > MAX_TOTAL_ROWS
    {
        let _ = writeln!(
            out,
            "{:>8}  … {} functions in all (`function_totals` in the report)",
            "", profiling.function_totals_count
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
