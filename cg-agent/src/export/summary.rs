//! The human summary printed on stderr at the end of a run: per process, then other, idle and
//! total, per domain, the sources, and whether the figures are measured or estimated. Every
//! figure goes through [`fixed`], which prints `-` for one that is not finite (the report's
//! quality notes then say which and why) rather than `inf` or `NaN`.

use std::fmt::Write as _;

use crate::{report::Report, sources::human_duration};

/// How many processes the summary lists (the report has them all).
const MAX_ROWS: usize = 15;

/// Renders the summary as text.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let meta = &report.meta;
    let totals = &report.totals;
    let estimated = meta.measurement_quality.grade == "estimated";
    let what = match (&meta.command, &meta.pids) {
        (Some(command), _) => format!("`{}`", shorten(&command.join(" "), 60)),
        (None, Some(pids)) => format!(
            "pid {}",
            pids.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        (None, None) => "the whole machine".to_string(),
    };
    let status = match (meta.command_exit_code, meta.command_exit_signal) {
        (Some(code), _) => format!(", exit status {code}"),
        (None, Some(sig)) => format!(", killed by signal {sig}"),
        _ => String::new(),
    };
    let _ = writeln!(
        out,
        "\ncg-trace: {what}: {} s ({}{status})",
        fixed(meta.duration_s, 0, 2),
        meta.stop_reason
    );
    for process in &meta.still_running {
        let _ = writeln!(
            out,
            "still running, no longer traced: pid {} ({})",
            process.pid,
            shorten(&process.command.join(" "), 60)
        );
    }
    let sources: Vec<String> = meta
        .sources
        .iter()
        .map(|s| format!("{} ({})", s.name, s.provenance.as_str()))
        .collect();
    let _ = writeln!(out, "energy source: {}", sources.join(", "));

    let _ = writeln!(
        out,
        "\n{:>8}  {:<26} {:>9} {:>11} {:>9} {:>7}",
        "PID", "COMMAND", "CPU [s]", "ENERGY [J]", "AVG [W]", "SHARE"
    );
    for p in report.processes.iter().take(MAX_ROWS) {
        let name = if p.cmdline.is_empty() {
            p.comm.clone()
        } else {
            p.cmdline.join(" ")
        };
        let _ = writeln!(
            out,
            "{:>8}  {:<26} {} {} {} {}%",
            p.pid,
            shorten(&name, 26),
            fixed(p.cpu_time_s, 9, 3),
            fixed(p.energy_j, 11, 3),
            fixed(p.avg_power_w, 9, 2),
            fixed(p.share_pct, 6, 1)
        );
    }
    if report.processes.len() > MAX_ROWS {
        let _ = writeln!(
            out,
            "{:>8}  … {} more processes in the report",
            "",
            report.processes.len() - MAX_ROWS
        );
    }
    let share = |j: f64| {
        if totals.energy_j > 0.0 {
            fixed(100.0 * j / totals.energy_j, 6, 1)
        } else {
            fixed(0.0, 6, 1)
        }
    };
    let _ = writeln!(
        out,
        "{:>8}  {:<26} {} {} {:>9} {}%",
        "",
        "targets",
        fixed(totals.cpu_time_s, 9, 3),
        fixed(totals.attributed_energy_j, 11, 3),
        "",
        share(totals.attributed_energy_j)
    );
    let _ = writeln!(
        out,
        "{:>8}  {:<26} {:>9} {} {:>9} {}%",
        "",
        "other (not traced)",
        "",
        fixed(totals.other_energy_j, 11, 3),
        "",
        share(totals.other_energy_j)
    );
    let _ = writeln!(
        out,
        "{:>8}  {:<26} {:>9} {} {} {}%",
        "",
        format!("idle ({} W baseline)", fixed(totals.idle_power_w, 0, 2)),
        "",
        fixed(totals.idle_energy_j, 11, 3),
        fixed(totals.idle_power_w, 9, 2),
        share(totals.idle_energy_j)
    );
    let _ = writeln!(
        out,
        "{:>8}  {:<26} {:>9} {} {} {}%",
        "",
        if estimated {
            "total (ESTIMATED)"
        } else {
            "total (measured)"
        },
        "",
        fixed(totals.energy_j, 11, 3),
        fixed(totals.avg_power_w, 9, 2),
        fixed(100.0, 6, 1)
    );

    let _ = writeln!(
        out,
        "\n{:<16} {:>11} {:>11} {:>11} {:>11} {:>9}  IDLE BASELINE",
        "DOMAIN", "ENERGY [J]", "TARGETS [J]", "OTHER [J]", "IDLE [J]", "AVG [W]"
    );
    for entry in &meta.domain_topology {
        let Some(d) = totals.domains.get(&entry.name) else {
            continue;
        };
        let baseline = meta
            .idle_baseline
            .iter()
            .find(|b| b.domain == entry.name)
            .map(|b| format!("{} W ({})", fixed(b.power_w, 0, 2), b.method))
            .unwrap_or_default();
        let unknown = if d.unknown_energy_intervals_count > 0 {
            format!(
                "; energy unknown for {} interval(s), {}: not counted",
                d.unknown_energy_intervals_count,
                human_duration((d.unknown_energy_duration_s.max(0.0) * 1e9) as u64)
            )
        } else {
            String::new()
        };
        let name = match &entry.parent {
            Some(parent) => format!("  {} ⊂ {parent}", entry.name),
            None => entry.name.clone(),
        };
        let _ = writeln!(
            out,
            "{:<16} {} {} {} {} {}  {} [{}{unknown}]",
            shorten(&name, 16),
            fixed(d.energy_j, 11, 3),
            fixed(d.attributed_energy_j, 11, 3),
            fixed(d.other_energy_j, 11, 3),
            fixed(d.idle_energy_j, 11, 3),
            fixed(d.avg_power_w, 9, 2),
            baseline,
            d.provenance.as_str()
        );
    }
    render_devices(&mut out, report);
    out.push_str(&super::functions::render(report));
    let quality = &meta.measurement_quality;
    let _ = writeln!(out, "\nquality: {}", quality.grade);
    for note in &quality.notes {
        let _ = writeln!(out, "  - {note}");
    }
    if estimated {
        let _ = writeln!(
            out,
            "All energy figures above are ESTIMATED by the built-in power model (why no \
             measured source was used: see the quality notes above; `cg-trace sources` shows \
             what this machine can measure and what root would change)."
        );
    }
    out
}

/// GPUs and the power meter: what they were, and which of their figures were measured.
fn render_devices(out: &mut String, report: &Report) {
    let meta = &report.meta;
    for gpu in &meta.gpus {
        let domain = report.totals.domains.get(&gpu.domain);
        let num = |v: Option<f64>, unit: &str| {
            v.filter(|v| v.is_finite())
                .map_or("-".to_string(), |v| format!("{v:.1} {unit}"))
        };
        let _ = writeln!(
            out,
            "\n{}: {} ({}), energy from the {}{}",
            gpu.domain,
            gpu.name,
            gpu.uuid,
            gpu.energy_method,
            if gpu.energy_method == "energy counter" {
                " (measured)"
            } else {
                " (derived)"
            }
        );
        let _ = writeln!(
            out,
            "  power avg {} max {}, max {}, utilisation avg {}, memory max {}, status {}",
            num(gpu.avg_power_w, "W"),
            num(gpu.max_power_w, "W"),
            gpu.max_temperature_c
                .map_or("-".to_string(), |c| format!("{c} °C")),
            num(gpu.avg_utilization_pct, "%"),
            gpu.max_memory_used_bytes
                .map_or("-".to_string(), |b| format!(
                    "{:.0} MiB",
                    b as f64 / 1048576.0
                )),
            gpu.status
        );
        if let Some(unexplained) = domain.and_then(|d| d.unexplained_energy_j) {
            let _ = writeln!(
                out,
                "  {} J of its other energy is busy time no process's utilisation \
                 explains (per-process GPU figures are approximate: NVML samples coarsely)",
                fixed(unexplained, 0, 3)
            );
        }
    }
    if let Some(meter) = &meta.power_meter {
        let _ = writeln!(
            out,
            "\npower meter: {} ({}), {} samples in the run{}{}",
            meter.path,
            meter.format,
            meter.run_samples_count,
            meter
                .median_period_s
                .filter(|p| p.is_finite() && *p >= 0.0)
                .map_or(String::new(), |p| format!(
                    ", one every {}",
                    human_duration((p * 1e9) as u64)
                )),
            if meter.gaps.is_empty() {
                String::new()
            } else {
                format!(", {} gap(s)", meter.gaps.len())
            }
        );
    }
}

/// `value` with `precision` decimals, right-aligned in `width`; `-` when it is not finite.
fn fixed(value: f64, width: usize, precision: usize) -> String {
    if value.is_finite() {
        // `+ 0.0`: -0.0 prints as "-0.000".
        format!("{:>width$.precision$}", value + 0.0)
    } else {
        format!("{:>width$}", "-")
    }
}

fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortens_long_names_with_an_ellipsis() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("abcdefgh", 5), "abcd…");
    }
}
