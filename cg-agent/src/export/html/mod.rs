//! The HTML report (`cg-trace report RUN.json -o report.html`, `--html FILE` on a run,
//! `cg-trace diff ... --format html`): one self-contained page that opens offline, with
//! tables drawn here and the time charts drawn in the browser by uPlot (inlined from
//! `cg-agent/vendor/uplot`).
//!
//! It reads the report through the one typed model every reader shares
//! ([`crate::report::view`], a [`PageReport`]): a report that is not schema 1 is refused
//! naming the field, a figure an earlier 1.x report lacks shows as `—`, and fields this
//! version does not know are passed over. Every string from the report (commands, function
//! names, notes) is HTML-escaped, its control characters shown escaped ([`printable`]); the
//! chart data travels as JSON in a `<script type="application/json">` block with `<`, `>`,
//! `&`, U+2028 and U+2029 escaped.

pub mod diff;
mod gpus;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::{self, Write as _},
    io,
    path::Path,
};

use serde_json::{Value, json};

use crate::{
    output::{self, OutputError},
    printable::{fit, printable},
    privileges::Invoker,
    report::{
        Report, read,
        view::{
            Fields, FunctionView, MAX_COMMAND_CHARS, PageReport, PointProcessView, PointView,
            ProcessView, ProcessesView, RepeatView, RunView, SplitView, StatsView, Sums,
        },
    },
};

/// The version of the inlined chart library (`cg-agent/vendor/uplot`).
pub const UPLOT_VERSION: &str = "1.6.32";
const UPLOT_JS: &str = include_str!("../../../vendor/uplot/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../../../vendor/uplot/uPlot.min.css");
const ERRORS_JS: &str = include_str!("errors.js");
const CHARTS_JS: &str = include_str!("charts.js");
const PAGE_CSS: &str = include_str!("page.css");

/// Points per chart series at most: a longer time series is averaged over buckets of
/// consecutive intervals (the page says so). 2,000 points is more than a screen's width.
pub const MAX_CHART_POINTS: usize = 2_000;
/// Processes drawn in the per-process power chart.
const CHART_PROCESSES: usize = 8;
/// Rows of the process-group and function tables.
const TABLE_ROWS: usize = 40;
/// Characters of a command line or name shown (the whole is in the JSON report).
const MAX_TEXT_CHARS: usize = MAX_COMMAND_CHARS;

/// Writes the page for a finished run to `path` (`-` for stdout), through
/// [`crate::output`]; with the energy flamegraph when the run sampled stacks.
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    // Through its JSON text and the model every reader reads, as `cg-trace report` reads it.
    let name = path.display().to_string();
    let view = serde_json::to_vec(report)
        .map_err(io::Error::other)
        .and_then(|bytes| read::parse_as(&name, &bytes).map_err(io::Error::other))
        .map_err(|source| OutputError::Write {
            path: name.clone(),
            source,
        })?;
    let flamegraph = if report.meta.function_profiling.is_some() && !report.stacks.is_empty() {
        let mut svg = Vec::new();
        super::flamegraph::draw(report, &mut svg)
            .ok()
            .and_then(|()| String::from_utf8(svg).ok())
    } else {
        None
    };
    let page = render(&view, flamegraph.as_deref());
    output::write_file_or_stdout(path, who, |out| out.write_all(page.as_bytes()))
}

/// `cg-trace report RUN.json -o FILE.html`: reads `input` (through [`read::load_as`]'s checks)
/// and writes its page to `html_output` (`-` for stdout); returns the exit status (2 on a
/// report it cannot read or a page it may not create, 1 when writing the page fails).
pub fn main(input: &Path, html_output: &Path, who: &Invoker) -> i32 {
    if html_output != Path::new("-")
        && let Err(err) = output::check(html_output, who)
    {
        crate::console::write_line(format_args!("cg-trace report: -o: {err}"));
        return read::EXIT_BAD_INPUT;
    }
    let report: PageReport = match read::load_as(input) {
        Ok(report) => report,
        Err(err) => {
            crate::console::write_line(format_args!(
                "cg-trace report: {}",
                crate::printable::printable(&err.to_string())
            ));
            return read::EXIT_BAD_INPUT;
        }
    };
    let page = render(&report, None);
    match output::write_file_or_stdout(html_output, who, |out| out.write_all(page.as_bytes())) {
        Ok(()) => 0,
        Err(err) => {
            crate::console::write_line(format_args!(
                "cg-trace report: {}",
                crate::printable::printable(&err.to_string())
            ));
            1
        }
    }
}

// ---------------------------------------------------------------------------------------
// Escaping and formatting

/// `text` escaped for HTML text and attribute values (quoted with `"`), its control
/// characters and bidirectional overrides shown escaped ([`printable`]).
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in printable(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// At most [`MAX_TEXT_CHARS`] characters of `text`, escaped.
fn esc_short(text: &str) -> String {
    esc(&fit(text, MAX_TEXT_CHARS))
}

/// JSON for a `<script type="application/json">` block: nothing in it can end the element
/// or start a comment (`<`, `>`, `&` as `\u` escapes; they only occur inside strings), and
/// U+2028/U+2029 are escaped as well.
pub fn script_json(value: &Value) -> String {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// A figure with its unit, or `—` when there is none (absent, `null`, not finite).
fn fig(value: Option<f64>, unit: &str) -> String {
    match value.filter(|v| v.is_finite()) {
        None => "—".into(),
        Some(v) => {
            let a = v.abs();
            let text = if a == 0.0 {
                "0".to_string()
            } else if a >= 1000.0 {
                format!("{v:.0}")
            } else if a >= 10.0 {
                format!("{v:.1}")
            } else if a >= 0.01 {
                format!("{v:.3}")
            } else if a >= 1e-4 {
                format!("{v:.5}")
            } else {
                format!("{v:.2e}")
            };
            if unit.is_empty() {
                text
            } else {
                format!("{text} {unit}")
            }
        }
    }
}

/// A whole number (a count, a pid, an exit status) as text, `—` when the report has none.
fn whole<T: fmt::Display>(n: Option<T>) -> String {
    n.map_or("—".into(), |n| n.to_string())
}

/// A change: [`fig`] with its sign.
fn signed(value: f64, unit: &str) -> String {
    let text = fig(Some(value), unit);
    if value > 0.0 {
        format!("+{text}")
    } else {
        text
    }
}

/// A value of any kind as short text (strings unquoted).
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n
            .as_f64()
            .filter(|v| v.fract() != 0.0)
            .map(|v| fig(Some(v), ""))
            .unwrap_or_else(|| n.to_string()),
        Value::Array(a) => a.iter().map(scalar).collect::<Vec<_>>().join(", "),
        Value::Null => "—".into(),
        other => other.to_string(),
    }
}

/// A bar `fraction` (0..=1) of its full width.
fn bar(fraction: f64, class: &str) -> String {
    let pct = if fraction.is_finite() {
        (fraction * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    };
    format!("<span class=\"bar {class}\"><span style=\"width:{pct:.1}%\"></span></span>")
}

/// A number rounded for the chart data (keeps the page small).
fn round3(v: f64) -> Value {
    if v.is_finite() {
        json!((v * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

// ---------------------------------------------------------------------------------------
// The page

/// One page: the head (styles, the error recorder, the chart library), `body`, the chart
/// data and the script that draws them.
fn page(title: &str, body: &str, data: &Value) -> String {
    let mut html = String::with_capacity(body.len() + UPLOT_JS.len() + 16_384);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"cg-trace {version}\">\n\
         <title>{title}</title>\n<style>{UPLOT_CSS}\n{PAGE_CSS}</style>\n\
         <script>{ERRORS_JS}</script>\n\
         <script>{UPLOT_JS}</script>\n</head>\n<body>\n\
         <pre id=\"cg-errors\" hidden></pre>\n",
        version = env!("CARGO_PKG_VERSION"),
        title = esc(title),
    );
    html.push_str(body);
    let _ = write!(
        html,
        "<footer>Written by cg-trace {version}; charts drawn by uPlot {UPLOT_VERSION} (MIT \
         licence, inlined: this page needs no network).</footer>\n\
         <script type=\"application/json\" id=\"cg-data\">{data}</script>\n\
         <script>{CHARTS_JS}</script>\n</body>\n</html>\n",
        version = env!("CARGO_PKG_VERSION"),
        data = script_json(data),
    );
    html
}

/// The page of one report. `flamegraph`: the energy flamegraph's SVG, shown in a sandboxed
/// frame (its own script keeps search and zoom; it cannot reach the page).
pub fn render(report: &PageReport, flamegraph: Option<&str>) -> String {
    let mut body = String::new();
    let mut data = serde_json::Map::new();
    let meta = &report.meta;
    let estimated = meta.measurement_quality.grade == "estimated";
    let prov = if estimated { "estimated" } else { "measured" };
    let points: &[PointView] = report.timeseries.as_deref().unwrap_or_default();

    header(&mut body, report);
    totals(&mut body, report, prov);
    // The time series names processes by pid: their program, from the process list (only
    // those the series names).
    let named: BTreeSet<u64> = points
        .iter()
        .flat_map(|p| p.processes.iter().filter_map(|q| q.pid))
        .collect();
    let names: BTreeMap<u64, String> = named
        .into_iter()
        .filter_map(|pid| Some((pid, report.processes.program_of(pid)?.to_string())))
        .collect();
    let domains = chart_domains(points);
    power_over_time(&mut body, &mut data, points, &domains, &names, prov);
    gpus::section(&mut body, &mut data, &meta.gpus, points, &domains);
    budgets(&mut body, report);
    if let Some(r) = &report.repeat {
        repeat(&mut body, &mut data, r, prov);
    }
    process_groups(&mut body, &report.processes, prov);
    processes_table(&mut body, &report.processes, prov);
    functions(&mut body, report, prov);
    flamegraph_section(&mut body, report, flamegraph);
    sources(&mut body, report);

    let command = meta.command.join(" ");
    let title = if command.is_empty() {
        format!("cg-trace report ({})", meta.mode)
    } else {
        format!("cg-trace report: {}", fit(&command, 120))
    };
    page(&title, &body, &Value::Object(data))
}

/// Why an `estimated` run is estimated, naming the domains a hardware counter did measure
/// (a GPU beside a modelled CPU, as on a cloud GPU machine without RAPL).
fn estimated_because(report: &PageReport) -> String {
    let measured: Vec<String> = report
        .totals
        .domains
        .iter()
        .filter(|(_, d)| d.provenance == "measured")
        .map(|(name, _)| esc(name))
        .collect();
    if measured.is_empty() {
        "a power model produced them: no hardware counter measured this run".into()
    } else {
        format!(
            "partly: a power model produced the CPUs' figures; {} measured by hardware \
             counters",
            measured.join(", ")
        )
    }
}

fn header(body: &mut String, report: &PageReport) {
    let meta = &report.meta;
    let command = meta.command.join(" ");
    let pids = || {
        let pids: Vec<String> = meta.pids.iter().map(u64::to_string).collect();
        pids.join(", ")
    };
    let heading = match meta.mode.as_str() {
        _ if !command.is_empty() => esc_short(&command),
        "attach" => format!("processes {}", esc(&pids())),
        "system" => "the whole machine".into(),
        mode => esc(mode),
    };
    let grade = meta.measurement_quality.grade.as_str();
    let _ = write!(
        body,
        "<h1>Energy of {heading}</h1>\n<p>Energy figures are <span class=\"badge {class}\">{grade}</span> \
         ({what}). Run <code>{run}</code> on {host}, {start} to {end}.</p>\n",
        class = esc(grade),
        grade = esc(if grade.is_empty() { "unknown" } else { grade }),
        what = match grade {
            "estimated" => estimated_because(report),
            "degraded" => {
                "measured, but something was lost or approximated: see the quality notes".into()
            }
            "measured" => "hardware counters, nothing lost".into(),
            _ => "see the quality notes".into(),
        },
        run = esc(&meta.run_id),
        host = esc(&meta.hostname),
        start = esc(&meta.started_at),
        end = esc(&meta.ended_at),
    );
    body.push_str("<dl class=\"kv\">\n");
    let mut kv = |key: &str, value: String| {
        let _ = writeln!(body, "<dt>{}</dt><dd>{}</dd>", esc(key), value);
    };
    kv("duration", fig(meta.duration_s, "s"));
    kv("mode", esc(&meta.mode));
    kv("stopped", esc(&meta.stop_reason));
    if let Some(code) = meta.command_exit_code {
        kv("command exit status", code.to_string());
    }
    if let Some(signal) = meta.command_exit_signal {
        kv("command killed by signal", signal.to_string());
    }
    kv(
        "machine",
        format!(
            "{} ({} CPUs), kernel {}",
            esc(&meta.cpu_model),
            whole(meta.cpu_count),
            esc(&meta.kernel)
        ),
    );
    kv("interval", fig(meta.interval_ms, "ms"));
    kv(
        "cg-trace",
        format!(
            "{} (report schema {})",
            esc(&meta.tool_version),
            esc(&meta.schema_version)
        ),
    );
    body.push_str("</dl>\n");
}

fn totals(body: &mut String, report: &PageReport, prov: &str) {
    let t = &report.totals;
    let _ = write!(
        body,
        "<h2>Summary</h2>\n<table>\n<tr><th></th><th class=\"n\">energy (J, {prov})</th>\
         <th class=\"n\">attributed to targets (J)</th><th class=\"n\">other tasks (J)</th>\
         <th class=\"n\">idle (J)</th><th class=\"n\">average power (W)</th>\
         <th class=\"n\">idle power (W)</th><th>provenance</th></tr>\n"
    );
    let row = |body: &mut String, name: &str, split: &SplitView, provenance: &str| {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            name,
            fig(Some(split.energy_j), "J"),
            fig(Some(split.attributed_energy_j), "J"),
            fig(split.other_energy_j, "J"),
            fig(split.idle_energy_j, "J"),
            fig(split.avg_power_w, "W"),
            fig(split.idle_power_w, "W"),
            esc(provenance),
        );
    };
    row(body, "<b>total</b> (top-level domains)", &t.split, prov);
    for (name, d) in &t.domains {
        let label = if d.top_level {
            esc(name)
        } else {
            format!(
                "{} <span class=\"note\">(inside another domain)</span>",
                esc(name)
            )
        };
        row(body, &label, &d.split, &d.provenance);
    }
    body.push_str("</table>\n");
    let _ = writeln!(
        body,
        "<p class=\"note\">Targets' CPU time: {}; {} intervals. Targets + other + idle = \
         energy, per domain.</p>",
        fig(Some(t.cpu_time_s), "s"),
        whole(t.intervals_count),
    );
}

/// A process's name in the charts: its own, else its program's from the report's process
/// list (`names`, by pid); the folded rest as "other targets".
fn label(process: &PointProcessView, names: &BTreeMap<u64, String>) -> String {
    if process.pid.is_none() && process.folded_processes_count.is_some() {
        return "other targets (folded)".to_string();
    }
    let p = process;
    let name = [&p.command, &p.comm, &p.group, &p.name]
        .into_iter()
        .find_map(Option::as_deref)
        .or_else(|| p.pid.and_then(|pid| names.get(&pid)).map(String::as_str))
        .unwrap_or("");
    match p.pid {
        Some(pid) => format!("{name} ({pid})"),
        None => name.to_string(),
    }
}

/// A process's exit as the table shows it: its status, `signal N`, or nothing.
fn exit(p: &ProcessView) -> String {
    match (p.exit_code, p.exit_signal) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => String::new(),
    }
}

/// `[start, end)` of each bucket of at most [`MAX_CHART_POINTS`] buckets over `n` points.
fn buckets(n: usize) -> (usize, Vec<(usize, usize)>) {
    let per = n.div_ceil(MAX_CHART_POINTS).max(1);
    let ranges = (0..n)
        .step_by(per)
        .map(|start| (start, (start + per).min(n)))
        .collect();
    (per, ranges)
}

/// Mean power of each bucket: the joules `energy` gives over the seconds it covers (points
/// it gives nothing for are left out; a bucket with none is a gap).
fn bucket_power(
    points: &[PointView],
    ranges: &[(usize, usize)],
    energy: impl Fn(&PointView) -> Option<(f64, f64)>,
) -> Vec<Value> {
    ranges
        .iter()
        .map(|&(start, end)| {
            let (mut j, mut s) = (0.0, 0.0);
            for p in &points[start..end] {
                if let Some((pj, ps)) = energy(p) {
                    j += pj;
                    s += ps;
                }
            }
            if s > 0.0 { round3(j / s) } else { Value::Null }
        })
        .collect()
}

/// The energy domains the power chart draws, in its order (those of the first point that
/// names any).
fn chart_domains(points: &[PointView]) -> Vec<String> {
    points
        .iter()
        .find(|p| !p.domains.is_empty())
        .map(|p| p.domains.keys().cloned().collect())
        .unwrap_or_default()
}

fn power_over_time(
    body: &mut String,
    data: &mut serde_json::Map<String, Value>,
    points: &[PointView],
    domain_names: &[String],
    names: &BTreeMap<u64, String>,
    prov: &str,
) {
    body.push_str("<h2>Power over time</h2>\n");
    if points.is_empty() {
        body.push_str(
            "<p class=\"note\">No time series in this report: run cg-trace with \
             <code>--timeseries</code> to record power per interval.</p>\n",
        );
        return;
    }
    let (per, ranges) = buckets(points.len());
    let t: Vec<Value> = ranges
        .iter()
        .map(|&(start, _)| round3(points[start].t_s.unwrap_or(f64::NAN)))
        .collect();
    let known = |p: &PointView| p.energy_known.unwrap_or(true);
    let total = "total (top-level domains)";
    let mut series = vec![json!({
        "name": total,
        "colour": gpus::part_colour(total),
        "values": bucket_power(points, &ranges, |p| {
            known(p).then(|| p.energy_j.zip(p.duration_s)).flatten()
        }),
    })];
    for (i, name) in domain_names.iter().enumerate() {
        series.push(json!({
            "name": printable(name),
            "colour": gpus::domain_colour(i),
            "values": bucket_power(points, &ranges, |p| {
                let d = p.domains.get(name)?;
                d.energy_known.unwrap_or(true).then(|| d.energy_j.zip(p.duration_s)).flatten()
            }),
        }));
    }
    type Field = fn(&PointView) -> Option<f64>;
    let parts: [(Field, &str); 3] = [
        (|p| p.attributed_energy_j, "targets"),
        (|p| p.other_energy_j, "other tasks"),
        (|p| p.idle_energy_j, "idle"),
    ];
    for (field, label) in parts {
        if points.iter().any(|p| field(p).is_some()) {
            series.push(json!({
                "name": label,
                "colour": gpus::part_colour(label),
                "values": bucket_power(points, &ranges, |p| {
                    known(p).then(|| field(p).zip(p.duration_s)).flatten()
                }),
            }));
        }
    }
    let x_label = "time since the start (s)";
    data.insert(
        "power".into(),
        json!({"t": t, "series": series, "x_label": x_label,
               "y_label": format!("power (W, {prov})"), "emphasis": total}),
    );
    body.push_str("<div class=\"chart\" id=\"chart-power\"></div>\n");
    let _ = writeln!(
        body,
        "<p class=\"note\">{} intervals{}. Gaps: intervals whose energy is not known (see the \
         quality notes).</p>",
        points.len(),
        if per > 1 {
            format!(
                "; drawn as {} points, each the mean power of {per} consecutive intervals (the \
                 JSON report has every interval)",
                ranges.len()
            )
        } else {
            String::new()
        }
    );
    process_power(body, data, points, &ranges, per, x_label, &t, names, prov);
}

#[allow(clippy::too_many_arguments)]
fn process_power(
    body: &mut String,
    data: &mut serde_json::Map<String, Value>,
    points: &[PointView],
    ranges: &[(usize, usize)],
    per: usize,
    x_label: &str,
    t: &[Value],
    names: &BTreeMap<u64, String>,
    prov: &str,
) {
    // Each process's label once per point, and its energy over the run.
    let labels: Vec<Vec<(String, f64)>> = points
        .iter()
        .map(|p| {
            p.processes
                .iter()
                .filter_map(|q| Some((label(q, names), q.energy_j?)))
                .collect()
        })
        .collect();
    let mut totals: BTreeMap<&str, f64> = BTreeMap::new();
    for list in &labels {
        for (name, j) in list {
            *totals.entry(name.as_str()).or_default() += j;
        }
    }
    if totals.is_empty() {
        return;
    }
    let mut top: Vec<(&str, f64)> = totals.into_iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    top.truncate(CHART_PROCESSES);
    let series: Vec<Value> = top
        .iter()
        .map(|(name, _)| {
            let values: Vec<Value> = ranges
                .iter()
                .map(|&(start, end)| {
                    let (mut j, mut s) = (0.0, 0.0);
                    for i in start..end {
                        s += points[i].duration_s.unwrap_or(0.0);
                        j += labels[i]
                            .iter()
                            .filter(|(n, _)| n == name)
                            .map(|(_, j)| j)
                            .sum::<f64>();
                    }
                    if s > 0.0 { round3(j / s) } else { Value::Null }
                })
                .collect();
            json!({"name": fit(name, 80), "values": values})
        })
        .collect();
    data.insert(
        "process_power".into(),
        json!({"t": t, "series": series, "x_label": x_label,
               "y_label": format!("power (W, {prov})")}),
    );
    let _ = writeln!(
        body,
        "<h3>Power of the top processes</h3>\n<div class=\"chart\" id=\"chart-process-power\"></div>\n\
         <p class=\"note\">The {} processes with the most energy over the run{}.</p>",
        series.len(),
        if per > 1 {
            ", averaged over the same buckets"
        } else {
            ""
        }
    );
}

fn budgets(body: &mut String, report: &PageReport) {
    if report.budgets.is_empty() {
        return;
    }
    body.push_str(
        "<h2>Budgets</h2>\n<table>\n<tr><th>limit</th><th>applies to</th><th class=\"n\">limit</th>\
         <th class=\"n\">value</th><th>statistic</th><th>verdict</th></tr>\n",
    );
    for b in &report.budgets {
        let unit = b.unit.as_str();
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>\
             <td><span class=\"badge {}\">{}</span></td></tr>",
            esc(&b.kind),
            esc(b.program.as_deref().unwrap_or("the whole run")),
            fig(b.limit, unit),
            fig(b.value, unit),
            esc(&b.statistic),
            if b.exceeded { "bad" } else { "ok" },
            if b.exceeded {
                format!("exceeded by {}", fig(b.excess_pct, "%"))
            } else {
                "within".into()
            },
        );
    }
    body.push_str("</table>\n");
}

fn stats_cells(s: Option<&StatsView>, unit: &str) -> String {
    let empty = StatsView::default();
    let s = s.unwrap_or(&empty);
    let outliers: Vec<String> = s.outlier_runs.iter().map(u64::to_string).collect();
    format!(
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td>{}</td>",
        fig(s.median, unit),
        fig(s.mean, unit),
        fig(s.std_dev, unit),
        fig(s.cv_pct, "%"),
        fig(s.min, unit),
        fig(s.max, unit),
        fig(s.q1, unit),
        fig(s.q3, unit),
        if outliers.is_empty() {
            "none".into()
        } else {
            outliers.join(", ")
        },
    )
}

const STATS_HEAD: &str = "<th class=\"n\">median</th><th class=\"n\">mean</th>\
    <th class=\"n\">std dev</th><th class=\"n\">CV</th><th class=\"n\">min</th>\
    <th class=\"n\">max</th><th class=\"n\">Q1</th><th class=\"n\">Q3</th><th>outlier runs</th>";

/// The `--repeat` section: the set and its noise, the runs' chart, the statistics over the
/// runs, and every run.
fn repeat(
    body: &mut String,
    data: &mut serde_json::Map<String, Value>,
    r: &RepeatView,
    prov: &str,
) {
    repeat_heading(body, r);
    if !r.runs.is_empty() {
        runs_chart(data, r, prov);
        body.push_str("<div class=\"chart\" id=\"chart-runs\"></div>\n");
    }
    repeat_statistics(body, r, prov);
    repeat_lists(body, r);
    every_run(body, &r.runs);
}

/// How many runs, how noisy, which run the other sections show.
fn repeat_heading(body: &mut String, r: &RepeatView) {
    let verdict = r.noise_verdict.as_str();
    // Reports before schema 1.6 judged the noise on the whole machine's energy.
    let noise_of = r
        .noise_of
        .as_deref()
        .filter(|f| *f == crate::report::repeat::NOISE_OF)
        .unwrap_or("energy_j");
    let _ = writeln!(
        body,
        "<h2>Repeated runs</h2>\n<p>{} measured runs (asked {}, {} warm-up, cooldown {}); noise \
         <span class=\"badge {}\">{}</span> (the {} energy's CV is {}: excellent &lt; 2 %, \
         good &lt; 5 %, moderate &lt; 10 %). The sections below show run {} (the one closest \
         to the median).</p>",
        r.runs.len(),
        whole(r.runs_requested_count),
        whole(r.warmup_runs_count),
        fig(r.cooldown_s, "s"),
        esc(verdict),
        esc(if verdict.is_empty() {
            "unknown"
        } else {
            verdict
        }),
        if noise_of == "energy_j" {
            "whole machine's"
        } else {
            "targets'"
        },
        fig(r.statistics.of(noise_of).and_then(|s| s.cv_pct), "%"),
        whole(r.representative_run),
    );
    if matches!(verdict, "moderate" | "high-noise") {
        body.push_str(
            "<p><span class=\"badge bad\">warning</span> the runs are noisy: quiet the machine, \
             add <code>--warmup</code> or more <code>--repeat</code> runs.</p>\n",
        );
    }
    if let Some(reason) = &r.stopped_early {
        let _ = writeln!(body, "<p>Stopped early: {}</p>", esc(reason));
    }
}

/// The chart data of the runs' energies: the outliers apart, the median as a line.
fn runs_chart(data: &mut serde_json::Map<String, Value>, r: &RepeatView, prov: &str) {
    let median = r.statistics.energy_j.as_ref().and_then(|s| s.median);
    let index: Vec<Value> = r.runs.iter().map(|run| json!(run.index)).collect();
    let energy = |outliers: bool| -> Vec<Value> {
        r.runs
            .iter()
            .map(|run| {
                if run.outlier == outliers {
                    round3(run.energy_j)
                } else {
                    Value::Null
                }
            })
            .collect()
    };
    data.insert(
        "runs".into(),
        json!({"index": index, "energy_j": energy(false), "outlier_energy_j": energy(true),
               "median_j": r.runs.iter().map(|_| median.map(round3).unwrap_or(Value::Null)).collect::<Vec<_>>(),
               "y_label": format!("energy (J, {prov})")}),
    );
}

/// The statistics of the set's energy, duration and power, and of each domain's energy.
fn repeat_statistics(body: &mut String, r: &RepeatView, prov: &str) {
    let stats = &r.statistics;
    let _ = writeln!(
        body,
        "<h3>Statistics over the runs</h3>\n<table>\n<tr><th></th>{STATS_HEAD}</tr>"
    );
    for (s, label, unit) in [
        (&stats.energy_j, format!("energy ({prov})"), "J"),
        (&stats.duration_s, "duration".into(), "s"),
        (&stats.avg_power_w, format!("average power ({prov})"), "W"),
    ] {
        if let Some(s) = s {
            let _ = writeln!(
                body,
                "<tr><td>{}</td>{}</tr>",
                esc(&label),
                stats_cells(Some(s), unit)
            );
        }
    }
    for (name, d) in &stats.domains {
        let _ = writeln!(
            body,
            "<tr><td>{} energy</td>{}</tr>",
            esc(name),
            stats_cells(Some(&d.energy_j), "J")
        );
    }
    body.push_str("</table>\n");
}

/// The statistics of each process group's and function's energy over the runs.
fn repeat_lists(body: &mut String, r: &RepeatView) {
    let stats = &r.statistics;
    for (list, title, is_function) in [
        (
            &stats.process_groups,
            "Energy per process group over the runs",
            false,
        ),
        (&stats.functions, "Energy per function over the runs", true),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(
            body,
            "<h3>{title}</h3>\n<table>\n<tr><th>{}</th>{STATS_HEAD}</tr>",
            if is_function { "function" } else { "command" }
        );
        for item in list.iter().take(TABLE_ROWS) {
            let name = if is_function {
                &item.function
            } else {
                &item.command
            };
            let _ = writeln!(
                body,
                "<tr><td class=\"cmd\">{}</td>{}</tr>",
                esc_short(name),
                stats_cells(Some(&item.energy_j), "J")
            );
        }
        if list.len() > TABLE_ROWS {
            let _ = writeln!(
                body,
                "<tr><td colspan=\"10\" class=\"note\">{} more in the JSON report</td></tr>",
                list.len() - TABLE_ROWS
            );
        }
        body.push_str("</table>\n");
    }
}

/// One line per run: when, how long, its energy and power, its exit status, outlier or not.
fn every_run(body: &mut String, runs: &[RunView]) {
    body.push_str(
        "<h3>Every run</h3>\n<table>\n<tr><th class=\"n\">run</th><th>started</th>\
         <th class=\"n\">duration</th><th class=\"n\">energy</th><th class=\"n\">average power</th>\
         <th class=\"n\">exit status</th><th>IQR outlier</th></tr>\n",
    );
    for run in runs {
        let _ = writeln!(
            body,
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            whole(run.index),
            esc(&run.started_at),
            fig(run.duration_s, "s"),
            fig(Some(run.energy_j), "J"),
            fig(run.avg_power_w, "W"),
            whole(run.command_exit_code),
            if run.outlier {
                "<span class=\"badge bad\">outlier</span>"
            } else {
                ""
            },
        );
    }
    body.push_str("</table>\n");
}

fn process_groups(body: &mut String, procs: &ProcessesView, prov: &str) {
    if procs.groups.is_empty() {
        return;
    }
    let mut groups: Vec<&(String, Sums)> = procs.groups.iter().collect();
    groups.sort_by(|a, b| {
        b.1.energy_j
            .total_cmp(&a.1.energy_j)
            .then_with(|| a.0.cmp(&b.0))
    });
    let max = groups.first().map(|g| g.1.energy_j).unwrap_or(0.0);
    let _ = writeln!(
        body,
        "<h2>Energy per process group</h2>\n<p class=\"note\">Processes grouped by program (the \
         file name of their first argument).</p>\n<table>\n<tr><th>program</th>\
         <th class=\"n\">processes</th><th class=\"n\">CPU time</th>\
         <th class=\"n\">energy ({prov})</th><th></th></tr>"
    );
    for (name, sums) in groups.iter().take(TABLE_ROWS) {
        let _ = writeln!(
            body,
            "<tr><td class=\"cmd\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{}</td></tr>",
            esc_short(name),
            sums.count,
            fig(Some(sums.cpu_time_s), "s"),
            fig(Some(sums.energy_j), "J"),
            bar(if max > 0.0 { sums.energy_j / max } else { 0.0 }, ""),
        );
    }
    rollup(
        body,
        &groups[groups.len().min(TABLE_ROWS)..],
        |(_, sums)| (sums.count, sums.cpu_time_s, sums.energy_j),
        5,
    );
    body.push_str("</table>\n");
}

/// One line for the rows not shown, so that the table still adds up.
fn rollup<T>(
    body: &mut String,
    rest: &[T],
    figures: impl Fn(&T) -> (usize, f64, f64),
    columns: usize,
) {
    if rest.is_empty() {
        return;
    }
    let (mut n, mut cpu, mut j) = (0, 0.0, 0.0);
    for item in rest {
        let (a, b, c) = figures(item);
        n += a;
        cpu += b;
        j += c;
    }
    let _ = writeln!(
        body,
        "<tr><td class=\"note\">{} more rows ({n} processes)</td><td></td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td>{}</tr>",
        rest.len(),
        fig(Some(cpu), "s"),
        fig(Some(j), "J"),
        "<td></td>".repeat(columns.saturating_sub(4)),
    );
}

fn processes_table(body: &mut String, procs: &ProcessesView, prov: &str) {
    if procs.top.is_empty() {
        body.push_str("<h2>Processes</h2>\n<p class=\"note\">No process ran on a CPU.</p>\n");
        return;
    }
    let _ = writeln!(
        body,
        "<h2>Processes</h2>\n<table>\n<tr><th class=\"n\">PID</th><th>command</th>\
         <th class=\"n\">CPU time</th><th class=\"n\">energy ({prov})</th>\
         <th class=\"n\">average power</th><th class=\"n\">share</th><th class=\"n\">alive</th>\
         <th class=\"n\">exit</th></tr>"
    );
    for p in &procs.top {
        let _ = writeln!(
            body,
            "<tr><td class=\"n\">{}</td><td class=\"cmd\"><b>{}</b> {}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            whole(p.pid),
            esc_short(p.program()),
            esc_short(&p.command()),
            fig(Some(p.cpu_time_s), "s"),
            fig(Some(p.energy_j), "J"),
            fig(p.avg_power_w, "W"),
            fig(p.share_pct, "%"),
            fig(p.alive_s, "s"),
            exit(p),
        );
    }
    let rest = &procs.rest;
    if rest.count > 0 {
        let _ = writeln!(
            body,
            "<tr><td></td><td class=\"note\">{} more processes</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td colspan=\"4\"></td></tr>",
            rest.count,
            fig(Some(rest.cpu_time_s), "s"),
            fig(Some(rest.energy_j), "J"),
        );
    }
    body.push_str("</table>\n");
}

fn functions(body: &mut String, report: &PageReport, prov: &str) {
    let (list, per_process) = if report.function_totals.is_empty() {
        (&report.functions, true)
    } else {
        (&report.function_totals, false)
    };
    if list.is_empty() {
        return;
    }
    let mut sorted: Vec<&FunctionView> = list.iter().collect();
    sorted.sort_by(|a, b| b.energy_j.total_cmp(&a.energy_j));
    let max = sorted.first().map(|f| f.energy_j).unwrap_or(0.0);
    let _ = writeln!(
        body,
        "<h2>Energy per function</h2>\n<p class=\"note\">{} Energy is the function's share of its \
         process's ({prov}); self: without the functions it called.</p>\n<table>\n\
         <tr><th>function</th><th>module</th><th class=\"n\">{}</th><th class=\"n\">CPU time</th>\
         <th class=\"n\">energy ({prov})</th><th class=\"n\">self energy</th><th></th></tr>",
        if per_process {
            "Per process."
        } else {
            "Over all processes."
        },
        if sorted.iter().any(|f| f.calls.is_some()) {
            "calls"
        } else {
            "samples"
        },
    );
    for f in sorted.iter().take(TABLE_ROWS) {
        let _ = writeln!(
            body,
            "<tr><td class=\"cmd\">{}</td><td class=\"cmd\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc_short(&f.symbol),
            esc_short(&f.module),
            whole(f.calls.or(f.samples)),
            fig(Some(f.cpu_time_s), "s"),
            fig(Some(f.energy_j), "J"),
            fig(f.self_energy_j, "J"),
            bar(if max > 0.0 { f.energy_j / max } else { 0.0 }, ""),
        );
    }
    if sorted.len() > TABLE_ROWS {
        let _ = writeln!(
            body,
            "<tr><td colspan=\"7\" class=\"note\">{} more functions in the JSON report</td></tr>",
            sorted.len() - TABLE_ROWS
        );
    }
    body.push_str("</table>\n");
}

/// Standard base64 (the flamegraph's data URL).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn flamegraph_section(body: &mut String, report: &PageReport, flamegraph: Option<&str>) {
    match flamegraph {
        Some(svg) => {
            // As tall as the drawing (its root's `height`), within reason.
            let height_px = svg
                .find("<svg")
                .and_then(|i| {
                    let tag = &svg[i..i + svg[i..].find('>')?];
                    let h = &tag[tag.find(" height=\"")? + 9..];
                    h[..h.find('"')?].parse::<f64>().ok()
                })
                .filter(|h| h.is_finite())
                .map_or(640.0, |h| (h + 8.0).clamp(120.0, 4000.0));
            let _ = writeln!(
                body,
                "<h2>Energy flamegraph</h2>\n<p class=\"note\">Each frame as wide as the energy \
                 (µJ) of the sampled stacks that contain it; click to zoom, Ctrl-F to search.</p>\n\
                 <iframe class=\"flamegraph\" id=\"flamegraph\" sandbox=\"allow-scripts\" \
                 style=\"height:{height_px:.0}px\" title=\"energy flamegraph\" \
                 src=\"data:image/svg+xml;base64,{}\"></iframe>",
                base64(svg.as_bytes())
            );
        }
        None if report
            .meta
            .function_profiling
            .as_ref()
            .is_some_and(|f| f.contains_key("sampling")) =>
        {
            body.push_str(
                "<h2>Energy flamegraph</h2>\n<p class=\"note\">The JSON report does not carry the \
                 sampled stacks: write the page during the run (<code>--profile --html \
                 FILE</code>) to include the flamegraph, or see <code>--flamegraph \
                 FILE.svg</code>.</p>\n",
            );
        }
        None => {}
    }
}

fn sources(body: &mut String, report: &PageReport) {
    let meta = &report.meta;
    body.push_str("<h2>Sources and quality</h2>\n<table>\n<tr><th>source</th><th>provenance</th><th>what</th><th>domains</th></tr>\n");
    for s in &meta.sources {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td><span class=\"badge {}\">{}</span></td><td>{}</td><td>{}</td></tr>",
            esc(&s.name),
            esc(&s.provenance),
            esc(&s.provenance),
            esc_short(&s.description),
            esc_short(&s.domains.join(", ")),
        );
    }
    body.push_str("</table>\n");
    let _ = writeln!(
        body,
        "<p class=\"note\">Why these: {}</p>",
        esc_short(&meta.source_selection)
    );
    if !meta.idle_baseline.is_empty() {
        body.push_str(
            "<h3>Idle baseline</h3>\n<table>\n<tr><th>domain</th><th class=\"n\">idle power</th>\
             <th>method</th></tr>\n",
        );
        for i in &meta.idle_baseline {
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                esc(&i.domain),
                fig(i.power_w, "W"),
                esc(&i.method),
            );
        }
        body.push_str("</table>\n");
    }
    let quality = &meta.measurement_quality;
    let _ = writeln!(
        body,
        "<h3>Quality notes</h3>\n<p>Grade: <span class=\"badge {g}\">{g}</span></p>",
        g = esc(&quality.grade)
    );
    if quality.notes.is_empty() {
        body.push_str("<p class=\"note\">None.</p>\n");
    } else {
        body.push_str("<ul>\n");
        for n in &quality.notes {
            let _ = writeln!(body, "<li>{}</li>", esc_short(n));
        }
        body.push_str("</ul>\n");
    }
    for (title, fields) in [
        ("Lost events", &report.totals.lost_events),
        ("cg-trace's own cost", &meta.profiler),
        ("Power meter", &meta.power_meter),
        ("Function profiling", &meta.function_profiling),
    ] {
        if let Some(fields) = fields {
            fields_list(body, title, fields);
        }
    }
}

/// A section's fields one by one, whatever they are: scalars (nested objects are in the JSON
/// report); fields this version does not know show under their own names.
fn fields_list(body: &mut String, title: &str, fields: &Fields) {
    let _ = writeln!(body, "<h3>{title}</h3>\n<dl class=\"kv\">");
    for (k, v) in fields.iter().filter(|(_, v)| !v.is_object()) {
        let shown = match v {
            Value::Array(a) if a.iter().any(Value::is_object) => {
                format!("{} entries", a.len())
            }
            v => scalar(v),
        };
        let _ = writeln!(body, "<dt>{}</dt><dd>{}</dd>", esc(k), esc_short(&shown));
    }
    body.push_str("</dl>\n");
}

#[cfg(test)]
mod tests;
