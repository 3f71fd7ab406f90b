//! The human summary printed on stderr at the end of a run: per process, then other, idle and
//! total, per domain, the sources, and whether the figures are measured or estimated. Every
//! figure goes through [`fixed`], which prints `-` for one that is not finite (the report's
//! quality notes then say which and why) rather than `inf` or `NaN`.

use std::{collections::BTreeMap, fmt::Write as _};

use crate::{
    grouping::GroupBy,
    printable::{fit, printable},
    report::{DomainTotals, Meta, ProcessEntry, Report, Totals},
    sources::human_duration,
};

/// How many processes the summary lists (the report has them all).
const MAX_ROWS: usize = 15;

/// What the summary shows beyond the defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SummaryOptions {
    /// Thread rows under each process (`--threads`).
    pub threads: bool,
    pub group_by: GroupBy,
}

/// Renders the summary as text, with the default options.
pub fn render(report: &Report) -> String {
    render_with(report, SummaryOptions::default())
}

/// Renders the summary as text.
pub fn render_with(report: &Report, options: SummaryOptions) -> String {
    let mut out = String::new();
    render_heading(&mut out, &report.meta);
    let _ = writeln!(
        out,
        "\n{:>8}  {:<26} {:>9} {:>11} {:>9} {:>7}",
        "PID", "COMMAND", "CPU [s]", "ENERGY [J]", "AVG [W]", "SHARE"
    );
    render_processes(&mut out, &report.processes, report.totals.energy_j, options);
    let estimated = report.meta.measurement_quality.grade == "estimated";
    render_split(&mut out, &report.totals, estimated);
    render_domains(&mut out, &report.meta, &report.totals);
    render_devices(&mut out, report);
    out.push_str(&super::functions::render(report));
    let quality = &report.meta.measurement_quality;
    let _ = writeln!(out, "\nquality: {}", quality.grade);
    for note in &quality.notes {
        let _ = writeln!(out, "  - {}", printable(note));
    }
    out
}

/// What ran, for how long and how it ended, what is still running untraced, and the energy
/// sources.
fn render_heading(out: &mut String, meta: &Meta) {
    let what = match (&meta.command, &meta.pids) {
        (Some(command), _) => format!("`{}`", fit(&command.join(" "), 60)),
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
            fit(&process.command.join(" "), 60)
        );
    }
    let sources: Vec<String> = meta
        .sources
        .iter()
        .map(|s| format!("{} ({})", printable(s.name), s.provenance.as_str()))
        .collect();
    let _ = writeln!(out, "energy source: {}", sources.join(", "));
}

/// The rows under the processes: targets, other and idle, which add up to the total
/// below them.
fn render_split(out: &mut String, totals: &Totals, estimated: bool) {
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
}

/// The domain table: each domain (nested ones under their parent) split into targets,
/// other and idle, with its idle baseline and provenance.
fn render_domains(out: &mut String, meta: &Meta, totals: &Totals) {
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
        let name = match &entry.parent {
            Some(parent) => format!("  {} ⊂ {parent}", entry.name),
            None => entry.name.clone(),
        };
        let _ = writeln!(
            out,
            "{:<16} {} {} {} {} {}  {} [{}{}]",
            fit(&name, 16),
            fixed(d.energy_j, 11, 3),
            fixed(d.attributed_energy_j, 11, 3),
            fixed(d.other_energy_j, 11, 3),
            fixed(d.idle_energy_j, 11, 3),
            fixed(d.avg_power_w, 9, 2),
            baseline,
            d.provenance.as_str(),
            unknown_energy(d)
        );
    }
}

/// What a domain row says of intervals whose energy is not known.
fn unknown_energy(d: &DomainTotals) -> String {
    if d.unknown_energy_intervals_count > 0 {
        format!(
            "; energy unknown for {} interval(s), {}: not counted",
            d.unknown_energy_intervals_count,
            human_duration((d.unknown_energy_duration_s.max(0.0) * 1e9) as u64)
        )
    } else {
        String::new()
    }
}

/// One row of the process table: a process, or a group of them (`--group-by`).
struct Row<'a> {
    processes: Vec<&'a ProcessEntry>,
}

impl Row<'_> {
    fn energy_j(&self) -> f64 {
        self.processes.iter().map(|p| p.energy_j).sum()
    }

    fn cpu_time_s(&self) -> f64 {
        self.processes.iter().map(|p| p.cpu_time_s).sum()
    }

    fn share_pct(&self) -> f64 {
        self.processes.iter().map(|p| p.share_pct).sum()
    }

    /// Energy over the time from the first member's start to the last one's end.
    fn avg_power_w(&self) -> f64 {
        if let [only] = self.processes[..] {
            return only.avg_power_w;
        }
        let start = self
            .processes
            .iter()
            .map(|p| p.started_s)
            .fold(f64::INFINITY, f64::min);
        let end = self
            .processes
            .iter()
            .map(|p| p.started_s + p.alive_s)
            .fold(f64::NEG_INFINITY, f64::max);
        let span = end - start;
        if span > 0.0 {
            self.energy_j() / span
        } else {
            0.0
        }
    }
}

/// The process rows (at most [`MAX_ROWS`], then one line rolling up the rest so that the
/// rows still add up to the targets' line), with thread rows under each process when asked.
fn render_processes(
    out: &mut String,
    processes: &[ProcessEntry],
    total_j: f64,
    options: SummaryOptions,
) {
    let rows = group(processes, options.group_by);
    for row in rows.iter().take(MAX_ROWS) {
        let first = row.processes[0];
        let (id, name) = match row.processes.len() {
            1 => (first.pid.to_string(), command_name(first)),
            n => (
                format!("×{n}"),
                match options.group_by {
                    GroupBy::Comm => program_of(first),
                    GroupBy::Cgroup => cgroup_of(first),
                    _ => format!("{} +{} below", command_name(first), n - 1),
                },
            ),
        };
        let _ = writeln!(
            out,
            "{:>8}  {:<26} {} {} {} {}%",
            id,
            fit(&name, 26),
            fixed(row.cpu_time_s(), 9, 3),
            fixed(row.energy_j(), 11, 3),
            fixed(row.avg_power_w(), 9, 2),
            fixed(row.share_pct(), 6, 1)
        );
        if options.threads && row.processes.len() == 1 {
            render_threads(out, total_j, first);
        }
    }
    if rows.len() > MAX_ROWS {
        let rest = &rows[MAX_ROWS..];
        let count: usize = rest.iter().map(|r| r.processes.len()).sum();
        let _ = writeln!(
            out,
            "{:>8}  {:<26} {} {} {:>9} {}%",
            "",
            format!(
                "… {count} more process{}",
                if count == 1 { "" } else { "es" }
            ),
            fixed(rest.iter().map(Row::cpu_time_s).sum(), 9, 3),
            fixed(rest.iter().map(Row::energy_j).sum(), 11, 3),
            "",
            fixed(rest.iter().map(Row::share_pct).sum(), 6, 1)
        );
    }
}

/// A process's threads (`--threads`), as the report lists them.
fn render_threads(out: &mut String, total_j: f64, process: &ProcessEntry) {
    for thread in &process.threads {
        let name = match (thread.tid, thread.folded_threads_count) {
            (Some(tid), _) => format!("  tid {tid} {}", thread.comm.as_deref().unwrap_or("?")),
            (None, Some(0)) => "  (not per thread: GPU)".to_string(),
            (None, count) => format!("  … {} more threads", count.unwrap_or(0)),
        };
        let share = if total_j > 0.0 {
            100.0 * thread.energy_j / total_j
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "{:>8}  {:<26} {} {} {:>9} {}%",
            "",
            fit(&name, 26),
            fixed(thread.cpu_time_s, 9, 3),
            fixed(thread.energy_j, 11, 3),
            "",
            fixed(share, 6, 1)
        );
    }
}

/// A process's cgroup as the rows name it: the container, pod or unit its path names, else
/// the path (`[cgroup unknown]` when it could not be read).
fn cgroup_of(process: &ProcessEntry) -> String {
    process
        .cgroup
        .as_ref()
        .map_or_else(|| "[cgroup unknown]".to_string(), |c| c.group_name())
}

/// The processes in rows, by energy (see [`GroupBy`]).
fn group(processes: &[ProcessEntry], by: GroupBy) -> Vec<Row<'_>> {
    let mut rows: Vec<Row<'_>> = match by {
        // `unit` is no way of the summary's rows ([`GroupBy::ROWS`]): one row per process.
        GroupBy::None | GroupBy::Unit => processes
            .iter()
            .map(|p| Row { processes: vec![p] })
            .collect(),
        GroupBy::Comm => {
            let mut by_name: BTreeMap<String, Vec<&ProcessEntry>> = BTreeMap::new();
            // `processes` is sorted by energy: so is each group.
            for p in processes {
                by_name.entry(program_of(p)).or_default().push(p);
            }
            by_name
                .into_values()
                .map(|processes| Row { processes })
                .collect()
        }
        GroupBy::Cgroup => {
            let mut by_cgroup: BTreeMap<String, Vec<&ProcessEntry>> = BTreeMap::new();
            for p in processes {
                by_cgroup.entry(cgroup_of(p)).or_default().push(p);
            }
            by_cgroup
                .into_values()
                .map(|processes| Row { processes })
                .collect()
        }
        GroupBy::Tree => {
            let heads = tree_heads(processes);
            let mut by_head: BTreeMap<usize, Vec<&ProcessEntry>> = BTreeMap::new();
            for (i, p) in processes.iter().enumerate() {
                by_head.entry(heads[i]).or_default().push(p);
            }
            by_head
                .into_iter()
                .map(|(head, mut members)| {
                    // The head first (the row is named after it), then by energy.
                    members.sort_by(|a, b| {
                        (a.pid != processes[head].pid)
                            .cmp(&(b.pid != processes[head].pid))
                            .then(b.energy_j.total_cmp(&a.energy_j))
                    });
                    Row { processes: members }
                })
                .collect()
        }
    };
    rows.sort_by(|a, b| {
        b.energy_j()
            .total_cmp(&a.energy_j())
            .then(a.processes[0].pid.cmp(&b.processes[0].pid))
    });
    rows
}

/// For each process, the index of the head of its subtree: the nearest ancestor (or itself)
/// that is a root target, a child of one, or a process whose parent is not in the list.
fn tree_heads(processes: &[ProcessEntry]) -> Vec<usize> {
    let parents = crate::report::tree::parents(processes);
    let parent = |i: usize| parents[i];
    let is_head = |i: usize| match parent(i) {
        None => true,
        Some(j) => processes[j].root,
    };
    (0..processes.len())
        .map(|i| {
            let mut at = i;
            // At most one step per process: a loop in the parent links (a reused pid) ends.
            for _ in 0..processes.len() {
                if is_head(at) {
                    break;
                }
                match parent(at) {
                    Some(j) => at = j,
                    None => break,
                }
            }
            at
        })
        .collect()
}

/// The program a process runs ([`crate::report::names::program_of`]).
fn program_of(p: &ProcessEntry) -> String {
    crate::report::names::program_of(p.cmdline.first().map(String::as_str), &p.comm).to_string()
}

/// COMMAND: the program's name, then the rest of its arguments.
fn command_name(p: &ProcessEntry) -> String {
    let mut words = vec![program_of(p)];
    words.extend(p.cmdline.iter().skip(1).cloned());
    words.join(" ")
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
            printable(&gpu.name),
            printable(&gpu.uuid),
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
            printable(&meter.path),
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::{report::threads::ThreadEntry, sources::Provenance};

    fn process(pid: u32, ppid: u32, argv: &str, energy_j: f64) -> ProcessEntry {
        ProcessEntry {
            pid,
            ppid: Some(ppid),
            comm: argv
                .split(' ')
                .next()
                .unwrap_or("")
                .rsplit('/')
                .next()
                .unwrap()
                .into(),
            cmdline: argv.split(' ').map(String::from).collect(),
            root: false,
            cpu_time_s: energy_j / 10.0,
            energy_j,
            avg_power_w: energy_j,
            share_pct: energy_j,
            domains: Default::default(),
            started_s: 0.0,
            ended_s: Some(1.0),
            alive_s: 1.0,
            exit_code: Some(0),
            exit_signal: None,
            threads: Vec::new(),
            cgroup: None,
        }
    }

    /// A shell (pid 10, the command) that ran 20 `sh -c` children, each a `sleep`'s parent,
    /// and one `python3`; energy falls with the pid so the order is fixed. Total: 100 J.
    fn shell_run() -> Vec<ProcessEntry> {
        let mut ps = vec![process(10, 1, "/bin/bash ./run.sh", 10.0)];
        ps[0].root = true;
        ps.push(process(
            11,
            10,
            "/usr/bin/python3 -u work.py --long-option",
            30.0,
        ));
        for i in 0..20 {
            ps.push(process(100 + 2 * i, 10, "sh -c sleep 0", 2.5));
            ps.push(process(101 + 2 * i, 100 + 2 * i, "sleep 0", 0.5));
        }
        ps.sort_by(|a, b| b.energy_j.total_cmp(&a.energy_j).then(a.pid.cmp(&b.pid)));
        ps
    }

    /// (the PID and COMMAND columns, CPU, energy) of each row.
    fn rows_of(text: &str) -> Vec<(String, f64, f64)> {
        text.lines()
            .map(|l| {
                let label: String = l.chars().take(36).collect();
                let rest: String = l.chars().skip(36).collect();
                let figures: Vec<f64> = rest
                    .split_whitespace()
                    .map(|w| w.parse().unwrap())
                    .take(2)
                    .collect();
                (label.trim().to_string(), figures[0], figures[1])
            })
            .collect()
    }

    fn table(processes: &[ProcessEntry], options: SummaryOptions) -> String {
        let mut out = String::new();
        render_processes(&mut out, processes, 100.0, options);
        out
    }

    #[test]
    fn rows_past_the_limit_roll_up_into_one_line_so_the_table_adds_up() {
        let ps = shell_run();
        let text = table(&ps, SummaryOptions::default());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), MAX_ROWS + 1, "{text}");
        let last = lines[MAX_ROWS];
        assert!(
            last.contains(&format!("… {} more processes", ps.len() - MAX_ROWS)),
            "{last}"
        );
        let sum_j: f64 = rows_of(&text).iter().map(|r| r.2).sum();
        let sum_cpu: f64 = rows_of(&text).iter().map(|r| r.1).sum();
        assert!((sum_j - 100.0).abs() < 0.01, "{sum_j}\n{text}");
        assert!((sum_cpu - 10.0).abs() < 0.01, "{sum_cpu}\n{text}");
    }

    #[test]
    fn command_starts_with_the_programs_name() {
        let ps = shell_run();
        let text = table(&ps[..1], SummaryOptions::default());
        assert!(
            text.contains("      11  python3 -u work.py --long…"),
            "{text}"
        );
    }

    #[test]
    fn group_by_cgroup_gives_one_row_per_container_unit_or_path() {
        let mut ps = shell_run();
        let id = "3f4e1b2c5d6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c";
        for (i, p) in ps.iter_mut().enumerate() {
            p.cgroup = match i % 3 {
                0 => Some(crate::cgroup::classify(&format!(
                    "/system.slice/docker-{id}.scope"
                ))),
                1 => Some(crate::cgroup::classify("/system.slice/nginx.service")),
                _ => None,
            };
        }
        let text = table(
            &ps,
            SummaryOptions {
                group_by: GroupBy::Cgroup,
                ..SummaryOptions::default()
            },
        );
        let rows = rows_of(&text);
        let mut names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "×14  [cgroup unknown]",
                "×14  docker:3f4e1b2c5d6a",
                "×14  nginx.service"
            ],
            "{text}"
        );
        let sum_j: f64 = rows.iter().map(|r| r.2).sum();
        assert!((sum_j - 100.0).abs() < 0.01, "{sum_j}\n{text}");
    }

    #[test]
    fn group_by_comm_gives_one_row_per_program() {
        let text = table(
            &shell_run(),
            SummaryOptions {
                group_by: GroupBy::Comm,
                ..SummaryOptions::default()
            },
        );
        let rows = rows_of(&text);
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "×20  sh",
                "11  python3 -u work.py --long…",
                "10  bash ./run.sh",
                "×20  sleep"
            ]
            .map(|n| n),
            "{text}"
        );
        assert!((rows[0].2 - 50.0).abs() < 1e-9);
        let sum_j: f64 = rows.iter().map(|r| r.2).sum();
        assert!((sum_j - 100.0).abs() < 0.01, "{text}");
    }

    #[test]
    fn group_by_tree_folds_each_childs_subtree_into_it() {
        let text = table(
            &shell_run(),
            SummaryOptions {
                group_by: GroupBy::Tree,
                ..SummaryOptions::default()
            },
        );
        // The root alone, python3 alone, each `sh -c` with its `sleep`: 22 rows, 15 shown.
        let rows = rows_of(&text);
        assert_eq!(rows.len(), MAX_ROWS + 1, "{text}");
        assert!(rows[0].0.contains("python3"), "{text}");
        assert!(rows[1].0.starts_with("10  bash"), "{text}");
        assert!(
            rows[2].0.starts_with("×2  sh -c sleep 0 +1 below"),
            "{text}"
        );
        assert!((rows[2].2 - 3.0).abs() < 1e-9, "{text}");
        assert!(text.contains("… 14 more processes"), "{text}");
        let sum_j: f64 = rows.iter().map(|r| r.2).sum();
        assert!((sum_j - 100.0).abs() < 0.01, "{text}");
    }

    #[test]
    fn outside_text_is_shown_escaped_on_one_row() {
        // argv[0] set by `exec -a` to a clipboard write and hidden text, an argument with a
        // forged line, a thread named by prctl with a C1 CSI and a right-to-left override.
        let mut ps = vec![process(10, 1, "x", 10.0)];
        ps[0].cmdline = vec![
            "/tmp/\x1b]52;c;QUJD\x07\x1b[8m".into(),
            "a\r\nresult: OK".into(),
        ];
        ps[0].threads = vec![ThreadEntry {
            tid: Some(11),
            comm: Some("w\u{9b}2J\u{202e}".into()),
            folded_threads_count: None,
            cpu_time_s: 1.0,
            energy_j: 10.0,
            domains: Default::default(),
            provenance: Provenance::Measured,
        }];
        let text = table(
            &ps,
            SummaryOptions {
                threads: true,
                ..SummaryOptions::default()
            },
        );
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "      10  \\x1b]52;c;QUJD\\x07\\x1b[8m…     1.000      10.000     10.00   10.0%",
                "            tid 11 w\\u009b2J\\u202e       1.000      10.000             10.0%",
            ],
            "{text}"
        );
    }

    #[test]
    fn threads_are_listed_under_their_process() {
        let mut ps = vec![process(10, 1, "pool", 10.0)];
        let thread = |tid: Option<u32>, comm: Option<&str>, folded, energy_j| ThreadEntry {
            tid,
            comm: comm.map(String::from),
            folded_threads_count: folded,
            cpu_time_s: energy_j / 10.0,
            energy_j,
            domains: Default::default(),
            provenance: Provenance::Measured,
        };
        ps[0].threads = vec![
            thread(Some(12), Some("busy"), None, 9.0),
            thread(Some(10), Some("pool"), None, 0.5),
            thread(None, None, Some(3), 0.5),
        ];
        let plain = table(&ps, SummaryOptions::default());
        assert_eq!(plain.lines().count(), 1, "{plain}");
        let text = table(
            &ps,
            SummaryOptions {
                threads: true,
                ..SummaryOptions::default()
            },
        );
        let rows = rows_of(&text);
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            ["10  pool", "tid 12 busy", "tid 10 pool", "… 3 more threads"],
            "{text}"
        );
        assert!((rows[1].2 - 9.0).abs() < 1e-9);
    }

    #[test]
    fn a_figure_that_is_not_finite_is_never_printed() {
        use crate::{
            report::tests::{interval, recording},
            session::IdleWatts,
        };
        let mut intervals: Vec<_> = (0..3).map(|i| interval(i, 100)).collect();
        intervals[1].energy_j[0] = f64::INFINITY;
        let summary = render(&crate::report::build(&recording(
            intervals,
            IdleWatts::Total(10.0),
        )));
        // The quality notes ("- ...") name the figure; no table line prints it.
        for word in ["inf", "NaN"] {
            assert!(
                !summary
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("- "))
                    .any(|l| l.contains(word)),
                "{summary}"
            );
        }
    }
}
