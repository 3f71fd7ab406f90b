//! The HTML report (`cg-trace report RUN.json -o report.html`, `--html FILE` on a run,
//! `cg-trace diff ... --format html`): one self-contained page that opens offline, with
//! tables drawn here and the time charts drawn in the browser by uPlot (inlined from
//! `cg-agent/vendor/uplot`).
//!
//! It reads the report in its JSON form (a [`Value`]), so that a report written by another
//! cg-trace version renders, fields this one does not know are passed over, and a figure
//! that is missing shows as `—`; the process list and the time series, which can hold
//! millions of entries, are read entry by entry into the few figures the page shows
//! ([`ProcessRow`], [`Point`]), never held as JSON values all at once. Every string from the report (commands, function names,
//! notes) is HTML-escaped, its control characters shown escaped ([`printable`]); the chart data travels as JSON in a `<script type=
//! "application/json">` block with `<`, `>`, `&`, U+2028 and U+2029 escaped.

pub mod diff;
mod gpus;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::{self, Write as _},
    io,
    marker::PhantomData,
    path::Path,
};

use serde::{Deserialize, Deserializer, de};
use serde_json::{Value, json};

use crate::{
    output::{self, OutputError},
    printable::{fit, printable},
    privileges::Invoker,
    report::{Report, read},
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
/// Rows of the process table (the rest are rolled up into one line).
const TABLE_PROCESSES: usize = 50;
/// Rows of the process-group and function tables.
const TABLE_ROWS: usize = 40;
/// Characters of a command line or name shown (the whole is in the JSON report).
const MAX_TEXT_CHARS: usize = 400;

/// Writes the page for a finished run to `path` (`-` for stdout), through
/// [`crate::output`]; with the energy flamegraph when the run sampled stacks.
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    // Through its JSON text and [`parse`], as `cg-trace report` reads it: a JSON value of the
    // whole report would take about 20 times its text with a long process list.
    let parsed = serde_json::to_vec(report)
        .and_then(|bytes| parse(&bytes))
        .map_err(|err| OutputError::Write {
            path: path.display().to_string(),
            source: io::Error::other(err),
        })?;
    let flamegraph = if report.meta.function_profiling.is_some() && !report.stacks.is_empty() {
        let mut svg = Vec::new();
        super::flamegraph::draw(report, &mut svg)
            .ok()
            .and_then(|()| String::from_utf8(svg).ok())
    } else {
        None
    };
    let page = render_parts(
        &parsed.report,
        &parsed.processes,
        &parsed.points,
        flamegraph.as_deref(),
    );
    output::write_file_or_stdout(path, who, |out| out.write_all(page.as_bytes()))
}

/// `cg-trace report RUN.json -o FILE.html`: reads `input` (through [`read::load_bytes`]'s
/// checks) and writes its page to `html_output` (`-` for stdout); returns the exit status (2
/// on a report it cannot read or a page it may not create, 1 when writing the page fails).
pub fn main(input: &Path, html_output: &Path, who: &Invoker) -> i32 {
    if html_output != Path::new("-")
        && let Err(err) = output::check(html_output, who)
    {
        crate::console::write_line(format_args!("cg-trace report: -o: {err}"));
        return read::EXIT_BAD_INPUT;
    }
    let parsed = read::load_bytes(input).and_then(|bytes| {
        parse(&bytes).map_err(|source| read::LoadError::NotJson {
            path: input.display().to_string(),
            source,
        })
    });
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(err) => {
            crate::console::write_line(format_args!(
                "cg-trace report: {}",
                crate::printable::printable(&err.to_string())
            ));
            return read::EXIT_BAD_INPUT;
        }
    };
    let page = render_parts(&parsed.report, &parsed.processes, &parsed.points, None);
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

/// A change: [`fig`] with its sign.
fn signed(value: f64, unit: &str) -> String {
    let text = fig(Some(value), unit);
    if value > 0.0 {
        format!("+{text}")
    } else {
        text
    }
}

fn num(value: &Value, path: &[&str]) -> Option<f64> {
    get(value, path).and_then(Value::as_f64)
}

fn get<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    get(value, path).and_then(Value::as_str).unwrap_or("")
}

fn array<'a>(value: &'a Value, path: &[&str]) -> &'a [Value] {
    get(value, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
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

/// The program a process ran: its first argument's file name (its comm when none), as the
/// summary and `diff` name it.
fn program(process: &Value) -> String {
    let argv0 = array(process, &["cmdline"]).first().and_then(Value::as_str);
    crate::report::names::program_of(argv0, text(process, &["comm"]))
}

/// A process's command line, program name first (`[comm]` when it has none).
fn command_line(process: &Value) -> String {
    let args: Vec<&str> = array(process, &["cmdline"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if args.is_empty() {
        format!("[{}]", text(process, &["comm"]))
    } else {
        args.join(" ")
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

/// The page of one report (its JSON form). `flamegraph`: the energy flamegraph's SVG, shown
/// in a sandboxed frame (its own script keeps search and zoom; it cannot reach the page).
pub fn render(report: &Value, flamegraph: Option<&str>) -> String {
    let processes: Vec<ProcessRow> = array(report, &["processes"])
        .iter()
        .map(ProcessRow::of)
        .collect();
    let points: Vec<Point> = array(report, &["timeseries"])
        .iter()
        .map(point_of)
        .collect();
    render_parts(report, &processes, &points, flamegraph)
}

/// [`render`] with the process list and the time series apart (as [`parse`] reads them;
/// those of `report` are not read).
pub fn render_parts(
    report: &Value,
    processes: &[ProcessRow],
    points: &[Point],
    flamegraph: Option<&str>,
) -> String {
    let mut body = String::new();
    let mut data = serde_json::Map::new();
    let estimated = text(report, &["meta", "measurement_quality", "grade"]) == "estimated";
    let prov = if estimated { "estimated" } else { "measured" };

    header(&mut body, report);
    totals(&mut body, report, prov);
    // The time series names processes by pid: their program, from the process list (only
    // those the series names).
    let named: BTreeSet<u64> = points
        .iter()
        .flat_map(|p| p.processes.iter().filter_map(|q| q.pid))
        .collect();
    let names: BTreeMap<u64, String> = processes
        .iter()
        .filter_map(|p| Some((p.pid.filter(|pid| named.contains(pid))?, p.program.clone())))
        .collect();
    let domains = chart_domains(points);
    power_over_time(&mut body, &mut data, points, &domains, &names, prov);
    gpus::section(&mut body, &mut data, report, points, &domains);
    budgets(&mut body, report);
    repeat(&mut body, &mut data, report, prov);
    process_groups(&mut body, processes, prov);
    processes_table(&mut body, processes, prov);
    functions(&mut body, report, prov);
    flamegraph_section(&mut body, report, flamegraph);
    sources(&mut body, report);

    let command = array(report, &["meta", "command"])
        .iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(" ");
    let title = if command.is_empty() {
        format!("cg-trace report ({})", text(report, &["meta", "mode"]))
    } else {
        format!("cg-trace report: {}", fit(&command, 120))
    };
    page(&title, &body, &Value::Object(data))
}

/// Why an `estimated` run is estimated, naming the domains a hardware counter did measure
/// (a GPU beside a modelled CPU, as on a cloud GPU machine without RAPL).
fn estimated_because(report: &Value) -> String {
    let domains = get(report, &["totals", "domains"])
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let measured: Vec<String> = domains
        .iter()
        .filter(|(_, d)| text(d, &["provenance"]) == "measured")
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

fn header(body: &mut String, report: &Value) {
    let meta = get(report, &["meta"]).unwrap_or(&Value::Null);
    let command = array(meta, &["command"])
        .iter()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join(" ");
    let heading = match text(meta, &["mode"]) {
        _ if !command.is_empty() => esc_short(&command),
        "attach" => format!("processes {}", esc(&scalar(&meta["pids"]))),
        "system" => "the whole machine".into(),
        mode => esc(mode),
    };
    let grade = text(meta, &["measurement_quality", "grade"]);
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
        run = esc(text(meta, &["run_id"])),
        host = esc(text(meta, &["hostname"])),
        start = esc(text(meta, &["started_at"])),
        end = esc(text(meta, &["ended_at"])),
    );
    body.push_str("<dl class=\"kv\">\n");
    let mut kv = |key: &str, value: String| {
        let _ = writeln!(body, "<dt>{}</dt><dd>{}</dd>", esc(key), value);
    };
    kv("duration", fig(num(meta, &["duration_s"]), "s"));
    kv("mode", esc(text(meta, &["mode"])));
    kv("stopped", esc(text(meta, &["stop_reason"])));
    if let Some(code) = meta.get("command_exit_code").filter(|v| !v.is_null()) {
        kv("command exit status", esc(&scalar(code)));
    }
    if let Some(signal) = meta.get("command_exit_signal").filter(|v| !v.is_null()) {
        kv("command killed by signal", esc(&scalar(signal)));
    }
    kv(
        "machine",
        format!(
            "{} ({} CPUs), kernel {}",
            esc(text(meta, &["cpu_model"])),
            esc(&scalar(meta.get("cpu_count").unwrap_or(&Value::Null))),
            esc(text(meta, &["kernel"]))
        ),
    );
    kv("interval", fig(num(meta, &["interval_ms"]), "ms"));
    kv(
        "cg-trace",
        format!(
            "{} (report schema {})",
            esc(text(meta, &["tool_version"])),
            esc(text(meta, &["schema_version"]))
        ),
    );
    body.push_str("</dl>\n");
}

fn totals(body: &mut String, report: &Value, prov: &str) {
    let t = get(report, &["totals"]).unwrap_or(&Value::Null);
    let _ = write!(
        body,
        "<h2>Summary</h2>\n<table>\n<tr><th></th><th class=\"n\">energy (J, {prov})</th>\
         <th class=\"n\">attributed to targets (J)</th><th class=\"n\">other tasks (J)</th>\
         <th class=\"n\">idle (J)</th><th class=\"n\">average power (W)</th>\
         <th class=\"n\">idle power (W)</th><th>provenance</th></tr>\n"
    );
    let row = |body: &mut String, name: &str, d: &Value, provenance: &str| {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            name,
            fig(num(d, &["energy_j"]), "J"),
            fig(num(d, &["attributed_energy_j"]), "J"),
            fig(num(d, &["other_energy_j"]), "J"),
            fig(num(d, &["idle_energy_j"]), "J"),
            fig(num(d, &["avg_power_w"]), "W"),
            fig(num(d, &["idle_power_w"]), "W"),
            esc(provenance),
        );
    };
    row(body, "<b>total</b> (top-level domains)", t, prov);
    if let Some(domains) = t.get("domains").and_then(Value::as_object) {
        for (name, d) in domains {
            let top = d.get("top_level").and_then(Value::as_bool).unwrap_or(true);
            let label = if top {
                esc(name)
            } else {
                format!(
                    "{} <span class=\"note\">(inside another domain)</span>",
                    esc(name)
                )
            };
            row(body, &label, d, text(d, &["provenance"]));
        }
    }
    body.push_str("</table>\n");
    let _ = writeln!(
        body,
        "<p class=\"note\">Targets' CPU time: {}; {} intervals. Targets + other + idle = \
         energy, per domain.</p>",
        fig(num(t, &["cpu_time_s"]), "s"),
        esc(&scalar(t.get("intervals_count").unwrap_or(&Value::Null))),
    );
}

/// One interval of the time series, as the charts read it (every field optional: a report
/// of another version still draws what it has).
#[derive(Debug, Default, Deserialize)]
pub struct Point {
    t_s: Option<f64>,
    duration_s: Option<f64>,
    energy_j: Option<f64>,
    attributed_energy_j: Option<f64>,
    other_energy_j: Option<f64>,
    idle_energy_j: Option<f64>,
    energy_known: Option<bool>,
    #[serde(default)]
    domains: BTreeMap<String, PointDomain>,
    /// Per-process figures of the interval, when the report has them.
    #[serde(default)]
    processes: Vec<PointProcess>,
    /// Each GPU's own figures, when the run measured GPUs.
    #[serde(default)]
    gpus: Vec<gpus::PointGpu>,
}

#[derive(Debug, Default, Deserialize)]
struct PointDomain {
    energy_j: Option<f64>,
    energy_known: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
struct PointProcess {
    pid: Option<u64>,
    command: Option<String>,
    comm: Option<String>,
    group: Option<String>,
    name: Option<String>,
    energy_j: Option<f64>,
    /// The entry of the processes not listed one by one.
    folded_processes_count: Option<u64>,
}

impl PointProcess {
    /// Its name in the chart: its own, else its program's from the report's process list
    /// (`names`, by pid); the folded rest as "other targets".
    fn label(&self, names: &BTreeMap<u64, String>) -> String {
        if self.pid.is_none() && self.folded_processes_count.is_some() {
            return "other targets (folded)".to_string();
        }
        let name = [&self.command, &self.comm, &self.group, &self.name]
            .into_iter()
            .find_map(Option::as_deref)
            .or_else(|| self.pid.and_then(|pid| names.get(&pid)).map(String::as_str))
            .unwrap_or("");
        match self.pid {
            Some(pid) => format!("{name} ({pid})"),
            None => name.to_string(),
        }
    }
}

/// A time point of the JSON, read as [`Point`]; field by field when its shape differs
/// (`processes` as a map from name to figures, a field of another type).
fn point_of(value: &Value) -> Point {
    if let Ok(point) = Point::deserialize(value) {
        return point;
    }
    let processes = match value.get("processes") {
        Some(Value::Array(list)) => list
            .iter()
            .map(|p| PointProcess::deserialize(p).unwrap_or_default())
            .collect(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, p)| PointProcess {
                name: Some(name.clone()),
                energy_j: p.as_f64().or_else(|| num(p, &["energy_j"])),
                ..PointProcess::default()
            })
            .collect(),
        _ => Vec::new(),
    };
    let domains = value
        .get("domains")
        .and_then(Value::as_object)
        .map(|d| {
            d.iter()
                .map(|(name, d)| {
                    (
                        name.clone(),
                        PointDomain {
                            energy_j: num(d, &["energy_j"]),
                            energy_known: d.get("energy_known").and_then(Value::as_bool),
                        },
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    Point {
        t_s: num(value, &["t_s"]),
        duration_s: num(value, &["duration_s"]),
        energy_j: num(value, &["energy_j"]),
        attributed_energy_j: num(value, &["attributed_energy_j"]),
        other_energy_j: num(value, &["other_energy_j"]),
        idle_energy_j: num(value, &["idle_energy_j"]),
        energy_known: value.get("energy_known").and_then(Value::as_bool),
        domains,
        processes,
        gpus: array(value, &["gpus"])
            .iter()
            .map(gpus::PointGpu::lenient)
            .collect(),
    }
}

/// The parts of a report file the page reads: the time series typed (a one-hour run at
/// 100 ms has 36,000 points: building them as JSON values would cost most of the time), or
/// point by point (`S` = [`Each`]) when it has another shape; the processes one by one into
/// rows; the rest as JSON. Top-level fields the page does not show are skipped.
#[derive(Deserialize)]
#[serde(bound = "S: Deserialize<'de>")]
struct ReportFile<S> {
    #[serde(default)]
    meta: Value,
    #[serde(default)]
    processes: Each<ProcessRow>,
    #[serde(default)]
    functions: Value,
    #[serde(default)]
    function_totals: Value,
    #[serde(default)]
    totals: Value,
    #[serde(default)]
    timeseries: Option<S>,
    #[serde(default)]
    repeat: Value,
    #[serde(default)]
    budgets: Value,
}

impl<S: Into<Vec<Point>>> ReportFile<S> {
    fn parts(self) -> Parsed {
        let report = json!({
            "meta": self.meta, "functions": self.functions,
            "function_totals": self.function_totals, "totals": self.totals,
            "repeat": self.repeat, "budgets": self.budgets,
        });
        Parsed {
            report,
            processes: self.processes.0,
            points: self.timeseries.map(Into::into).unwrap_or_default(),
        }
    }
}

/// A report as [`parse`] reads it, for [`render_parts`].
pub struct Parsed {
    /// Its fields but the process list and the time series.
    pub report: Value,
    pub processes: Vec<ProcessRow>,
    pub points: Vec<Point>,
}

/// Reads a report's bytes (already checked by [`read::load_bytes`]) into what
/// [`render_parts`] takes: the typed fast path, or, when the time series has another
/// shape, again with the series read point by point. Either way its peak memory is a small
/// multiple of the file's size (`cargo xtask bench --memory`).
pub fn parse(bytes: &[u8]) -> Result<Parsed, serde_json::Error> {
    match serde_json::from_slice::<ReportFile<Vec<Point>>>(bytes) {
        Ok(file) => Ok(file.parts()),
        Err(_) => Ok(serde_json::from_slice::<ReportFile<Each<Point>>>(bytes)?.parts()),
    }
}

/// What a JSON value reads as, whatever its shape (for [`Each`]).
pub trait FromJson {
    fn from_json(value: &Value) -> Self;
}

impl FromJson for Point {
    fn from_json(value: &Value) -> Self {
        point_of(value)
    }
}

/// A list read entry by entry, each through a JSON value of its own that is dropped once
/// read, so that a list of a million entries never exists as JSON values at once; anything
/// that is not a list reads as empty.
pub struct Each<T>(pub Vec<T>);

impl<T> Default for Each<T> {
    fn default() -> Self {
        Each(Vec::new())
    }
}

impl<T> From<Each<T>> for Vec<T> {
    fn from(each: Each<T>) -> Self {
        each.0
    }
}

impl<'de, T: FromJson> Deserialize<'de> for Each<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(EachVisitor(PhantomData))
    }
}

struct EachVisitor<T>(PhantomData<T>);

impl<'de, T: FromJson> de::Visitor<'de> for EachVisitor<T> {
    type Value = Each<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut list = Vec::new();
        while let Some(value) = seq.next_element::<Value>()? {
            list.push(T::from_json(&value));
        }
        Ok(Each(list))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map
            .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Each::default())
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Each::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Each::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Each::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Each::default())
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Each::default())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Each::default())
    }
}

/// A process of the report as the page shows it: a figure of another type reads as absent.
#[derive(Debug, Default)]
pub struct ProcessRow {
    pid: Option<u64>,
    /// Its `pid` as written (it may not be a number).
    pid_text: String,
    /// The program it ran ([`program`]).
    program: String,
    /// Its command line ([`command_line`]), its first characters: enough for
    /// [`esc_short`] to show what it would show of the whole.
    command: String,
    cpu_time_s: Option<f64>,
    energy_j: Option<f64>,
    avg_power_w: Option<f64>,
    share_pct: Option<f64>,
    alive_s: Option<f64>,
    /// `exit_code`, or `signal N`, or empty.
    exit: String,
}

impl FromJson for ProcessRow {
    fn from_json(value: &Value) -> Self {
        ProcessRow::of(value)
    }
}

impl ProcessRow {
    fn of(p: &Value) -> ProcessRow {
        let exit = match (p.get("exit_code"), p.get("exit_signal")) {
            (Some(code), _) if !code.is_null() => scalar(code),
            (_, Some(sig)) if !sig.is_null() => format!("signal {}", scalar(sig)),
            _ => String::new(),
        };
        ProcessRow {
            pid: p.get("pid").and_then(Value::as_u64),
            pid_text: scalar(p.get("pid").unwrap_or(&Value::Null)),
            program: program(p),
            command: command_line(p).chars().take(MAX_TEXT_CHARS + 1).collect(),
            cpu_time_s: num(p, &["cpu_time_s"]),
            energy_j: num(p, &["energy_j"]),
            avg_power_w: num(p, &["avg_power_w"]),
            share_pct: num(p, &["share_pct"]),
            alive_s: num(p, &["alive_s"]),
            exit,
        }
    }

    /// Its energy when finite, else 0 (for sorting and sums).
    fn energy(&self) -> f64 {
        self.energy_j.filter(|v| v.is_finite()).unwrap_or(0.0)
    }

    fn cpu(&self) -> f64 {
        self.cpu_time_s.filter(|v| v.is_finite()).unwrap_or(0.0)
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
    points: &[Point],
    ranges: &[(usize, usize)],
    energy: impl Fn(&Point) -> Option<(f64, f64)>,
) -> Vec<Value> {
    ranges
        .iter()
        .map(|&(start, end)| {
            let (mut j, mut s) = (0.0, 0.0);
            for p in &points[start..end] {
                if let Some((pj, ps)) = energy(p)
                    && pj.is_finite()
                    && ps.is_finite()
                {
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
fn chart_domains(points: &[Point]) -> Vec<String> {
    points
        .iter()
        .find(|p| !p.domains.is_empty())
        .map(|p| p.domains.keys().cloned().collect())
        .unwrap_or_default()
}

fn power_over_time(
    body: &mut String,
    data: &mut serde_json::Map<String, Value>,
    points: &[Point],
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
    let known = |p: &Point| p.energy_known.unwrap_or(true);
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
    type Field = fn(&Point) -> Option<f64>;
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
    points: &[Point],
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
                .filter_map(|q| Some((q.label(names), q.energy_j.filter(|j| j.is_finite())?)))
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
                        s += points[i]
                            .duration_s
                            .filter(|d| d.is_finite())
                            .unwrap_or(0.0);
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

fn budgets(body: &mut String, report: &Value) {
    let list = array(report, &["budgets"]);
    if list.is_empty() {
        return;
    }
    body.push_str(
        "<h2>Budgets</h2>\n<table>\n<tr><th>limit</th><th>applies to</th><th class=\"n\">limit</th>\
         <th class=\"n\">value</th><th>statistic</th><th>verdict</th></tr>\n",
    );
    for b in list {
        let unit = text(b, &["unit"]);
        let exceeded = b.get("exceeded").and_then(Value::as_bool).unwrap_or(false);
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>\
             <td><span class=\"badge {}\">{}</span></td></tr>",
            esc(&scalar(b.get("kind").unwrap_or(&Value::Null))),
            esc(b
                .get("program")
                .and_then(Value::as_str)
                .unwrap_or("the whole run")),
            fig(num(b, &["limit"]), unit),
            fig(num(b, &["value"]), unit),
            esc(text(b, &["statistic"])),
            if exceeded { "bad" } else { "ok" },
            if exceeded {
                format!("exceeded by {}", fig(num(b, &["excess_pct"]), "%"))
            } else {
                "within".into()
            },
        );
    }
    body.push_str("</table>\n");
}

fn stats_cells(s: &Value, unit: &str) -> String {
    let outliers = array(s, &["outlier_runs"])
        .iter()
        .map(scalar)
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td>{}</td>",
        fig(num(s, &["median"]), unit),
        fig(num(s, &["mean"]), unit),
        fig(num(s, &["std_dev"]), unit),
        fig(num(s, &["cv_pct"]), "%"),
        fig(num(s, &["min"]), unit),
        fig(num(s, &["max"]), unit),
        fig(num(s, &["q1"]), unit),
        fig(num(s, &["q3"]), unit),
        if outliers.is_empty() {
            "none".into()
        } else {
            esc(&outliers)
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
    report: &Value,
    prov: &str,
) {
    let Some(r) = report.get("repeat").filter(|r| r.is_object()) else {
        return;
    };
    let stats = get(r, &["statistics"]).unwrap_or(&Value::Null);
    let runs = array(r, &["runs"]);
    repeat_heading(body, r, stats, runs.len());
    if !runs.is_empty() {
        runs_chart(data, runs, stats, prov);
        body.push_str("<div class=\"chart\" id=\"chart-runs\"></div>\n");
    }
    repeat_statistics(body, stats, prov);
    repeat_lists(body, stats);
    every_run(body, runs);
}

/// How many runs, how noisy, which run the other sections show.
fn repeat_heading(body: &mut String, r: &Value, stats: &Value, runs: usize) {
    let verdict = text(r, &["noise_verdict"]);
    // Reports before schema 1.6 judged the noise on the whole machine's energy.
    let noise_of = r
        .get("noise_of")
        .and_then(Value::as_str)
        .filter(|f| *f == crate::report::repeat::NOISE_OF)
        .unwrap_or("energy_j");
    let _ = writeln!(
        body,
        "<h2>Repeated runs</h2>\n<p>{} measured runs (asked {}, {} warm-up, cooldown {}); noise \
         <span class=\"badge {}\">{}</span> (the {} energy's CV is {}: excellent &lt; 2 %, \
         good &lt; 5 %, moderate &lt; 10 %). The sections below show run {} (the one closest \
         to the median).</p>",
        runs,
        esc(&scalar(
            r.get("runs_requested_count").unwrap_or(&Value::Null)
        )),
        esc(&scalar(r.get("warmup_runs_count").unwrap_or(&Value::Null))),
        fig(num(r, &["cooldown_s"]), "s"),
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
        fig(num(stats, &[noise_of, "cv_pct"]), "%"),
        esc(&scalar(r.get("representative_run").unwrap_or(&Value::Null))),
    );
    if matches!(verdict, "moderate" | "high-noise") {
        body.push_str(
            "<p><span class=\"badge bad\">warning</span> the runs are noisy: quiet the machine, \
             add <code>--warmup</code> or more <code>--repeat</code> runs.</p>\n",
        );
    }
    if let Some(reason) = r.get("stopped_early").and_then(Value::as_str) {
        let _ = writeln!(body, "<p>Stopped early: {}</p>", esc(reason));
    }
}

/// The chart data of the runs' energies: the outliers apart, the median as a line.
fn runs_chart(
    data: &mut serde_json::Map<String, Value>,
    runs: &[Value],
    stats: &Value,
    prov: &str,
) {
    let median = num(stats, &["energy_j", "median"]);
    let index: Vec<Value> = runs
        .iter()
        .map(|run| run.get("index").cloned().unwrap_or(Value::Null))
        .collect();
    let energy = |outliers: bool| -> Vec<Value> {
        runs.iter()
            .map(|run| {
                let outlier = run.get("outlier").and_then(Value::as_bool).unwrap_or(false);
                match num(run, &["energy_j"]) {
                    Some(j) if outlier == outliers => round3(j),
                    _ => Value::Null,
                }
            })
            .collect()
    };
    data.insert(
        "runs".into(),
        json!({"index": index, "energy_j": energy(false), "outlier_energy_j": energy(true),
               "median_j": runs.iter().map(|_| median.map(round3).unwrap_or(Value::Null)).collect::<Vec<_>>(),
               "y_label": format!("energy (J, {prov})")}),
    );
}

/// The statistics of the set's energy, duration and power, and of each domain's energy.
fn repeat_statistics(body: &mut String, stats: &Value, prov: &str) {
    let _ = writeln!(
        body,
        "<h3>Statistics over the runs</h3>\n<table>\n<tr><th></th>{STATS_HEAD}</tr>"
    );
    for (key, label, unit) in [
        ("energy_j", format!("energy ({prov})"), "J"),
        ("duration_s", "duration".into(), "s"),
        ("avg_power_w", format!("average power ({prov})"), "W"),
    ] {
        if let Some(s) = stats.get(key) {
            let _ = writeln!(
                body,
                "<tr><td>{}</td>{}</tr>",
                esc(&label),
                stats_cells(s, unit)
            );
        }
    }
    if let Some(domains) = stats.get("domains").and_then(Value::as_object) {
        for (name, d) in domains {
            if let Some(s) = d.get("energy_j") {
                let _ = writeln!(
                    body,
                    "<tr><td>{} energy</td>{}</tr>",
                    esc(name),
                    stats_cells(s, "J")
                );
            }
        }
    }
    body.push_str("</table>\n");
}

/// The statistics of each process group's and function's energy over the runs.
fn repeat_lists(body: &mut String, stats: &Value) {
    for (key, title, name_key) in [
        (
            "process_groups",
            "Energy per process group over the runs",
            "command",
        ),
        ("functions", "Energy per function over the runs", "function"),
    ] {
        let list = array(stats, &[key]);
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(
            body,
            "<h3>{title}</h3>\n<table>\n<tr><th>{}</th>{STATS_HEAD}</tr>",
            if key == "functions" {
                "function"
            } else {
                "command"
            }
        );
        for item in list.iter().take(TABLE_ROWS) {
            let _ = writeln!(
                body,
                "<tr><td class=\"cmd\">{}</td>{}</tr>",
                esc_short(text(item, &[name_key])),
                stats_cells(item.get("energy_j").unwrap_or(&Value::Null), "J")
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
fn every_run(body: &mut String, runs: &[Value]) {
    body.push_str(
        "<h3>Every run</h3>\n<table>\n<tr><th class=\"n\">run</th><th>started</th>\
         <th class=\"n\">duration</th><th class=\"n\">energy</th><th class=\"n\">average power</th>\
         <th class=\"n\">exit status</th><th>IQR outlier</th></tr>\n",
    );
    for run in runs {
        let outlier = run.get("outlier").and_then(Value::as_bool).unwrap_or(false);
        let _ = writeln!(
            body,
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&scalar(run.get("index").unwrap_or(&Value::Null))),
            esc(text(run, &["started_at"])),
            fig(num(run, &["duration_s"]), "s"),
            fig(num(run, &["energy_j"]), "J"),
            fig(num(run, &["avg_power_w"]), "W"),
            esc(&scalar(
                run.get("command_exit_code").unwrap_or(&Value::Null)
            )),
            if outlier {
                "<span class=\"badge bad\">outlier</span>"
            } else {
                ""
            },
        );
    }
    body.push_str("</table>\n");
}

fn process_groups(body: &mut String, procs: &[ProcessRow], prov: &str) {
    if procs.is_empty() {
        return;
    }
    // Program -> (processes, CPU s, energy J).
    let mut groups: BTreeMap<&str, (usize, f64, f64)> = BTreeMap::new();
    for p in procs {
        let g = groups.entry(&p.program).or_default();
        g.0 += 1;
        g.1 += p.cpu();
        g.2 += p.energy();
    }
    let mut groups: Vec<(&str, (usize, f64, f64))> = groups.into_iter().collect();
    groups.sort_by(|a, b| b.1.2.total_cmp(&a.1.2).then_with(|| a.0.cmp(b.0)));
    let max = groups.first().map(|g| g.1.2).unwrap_or(0.0);
    let _ = writeln!(
        body,
        "<h2>Energy per process group</h2>\n<p class=\"note\">Processes grouped by program (the \
         file name of their first argument).</p>\n<table>\n<tr><th>program</th>\
         <th class=\"n\">processes</th><th class=\"n\">CPU time</th>\
         <th class=\"n\">energy ({prov})</th><th></th></tr>"
    );
    for (name, (count, cpu, energy)) in groups.iter().take(TABLE_ROWS) {
        let _ = writeln!(
            body,
            "<tr><td class=\"cmd\">{}</td><td class=\"n\">{count}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{}</td></tr>",
            esc_short(name),
            fig(Some(*cpu), "s"),
            fig(Some(*energy), "J"),
            bar(if max > 0.0 { energy / max } else { 0.0 }, ""),
        );
    }
    rollup(
        body,
        &groups[groups.len().min(TABLE_ROWS)..],
        |(_, (n, cpu, j))| (*n, *cpu, *j),
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

fn processes_table(body: &mut String, procs: &[ProcessRow], prov: &str) {
    if procs.is_empty() {
        body.push_str("<h2>Processes</h2>\n<p class=\"note\">No process ran on a CPU.</p>\n");
        return;
    }
    let mut sorted: Vec<&ProcessRow> = procs.iter().collect();
    sorted.sort_by(|a, b| b.energy().total_cmp(&a.energy()));
    let _ = writeln!(
        body,
        "<h2>Processes</h2>\n<table>\n<tr><th class=\"n\">PID</th><th>command</th>\
         <th class=\"n\">CPU time</th><th class=\"n\">energy ({prov})</th>\
         <th class=\"n\">average power</th><th class=\"n\">share</th><th class=\"n\">alive</th>\
         <th class=\"n\">exit</th></tr>"
    );
    for p in sorted.iter().take(TABLE_PROCESSES) {
        let _ = writeln!(
            body,
            "<tr><td class=\"n\">{}</td><td class=\"cmd\"><b>{}</b> {}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&p.pid_text),
            esc_short(&p.program),
            esc_short(&p.command),
            fig(p.cpu_time_s, "s"),
            fig(p.energy_j, "J"),
            fig(p.avg_power_w, "W"),
            fig(p.share_pct, "%"),
            fig(p.alive_s, "s"),
            esc(&p.exit),
        );
    }
    let rest = &sorted[sorted.len().min(TABLE_PROCESSES)..];
    if !rest.is_empty() {
        let cpu: f64 = rest.iter().map(|p| p.cpu()).sum();
        let j: f64 = rest.iter().map(|p| p.energy()).sum();
        let _ = writeln!(
            body,
            "<tr><td></td><td class=\"note\">{} more processes</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td colspan=\"4\"></td></tr>",
            rest.len(),
            fig(Some(cpu), "s"),
            fig(Some(j), "J"),
        );
    }
    body.push_str("</table>\n");
}

fn functions(body: &mut String, report: &Value, prov: &str) {
    let (list, per_process) = match array(report, &["function_totals"]) {
        [] => (array(report, &["functions"]), true),
        totals => (totals, false),
    };
    if list.is_empty() {
        return;
    }
    let mut sorted: Vec<&Value> = list.iter().collect();
    let energy = |f: &Value| {
        num(f, &["energy_j"])
            .filter(|v| v.is_finite())
            .unwrap_or(0.0)
    };
    sorted.sort_by(|a, b| energy(b).total_cmp(&energy(a)));
    let max = sorted.first().map(|f| energy(f)).unwrap_or(0.0);
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
        if sorted.iter().any(|f| f.get("calls").is_some()) {
            "calls"
        } else {
            "samples"
        },
    );
    for f in sorted.iter().take(TABLE_ROWS) {
        let count = f
            .get("calls")
            .or_else(|| f.get("samples"))
            .unwrap_or(&Value::Null);
        let _ = writeln!(
            body,
            "<tr><td class=\"cmd\">{}</td><td class=\"cmd\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc_short(text(f, &["symbol"])),
            esc_short(text(f, &["module"])),
            esc(&scalar(count)),
            fig(num(f, &["cpu_time_s"]), "s"),
            fig(num(f, &["energy_j"]), "J"),
            fig(num(f, &["self_energy_j"]), "J"),
            bar(if max > 0.0 { energy(f) / max } else { 0.0 }, ""),
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

fn flamegraph_section(body: &mut String, report: &Value, flamegraph: Option<&str>) {
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
        None if get(report, &["meta", "function_profiling", "sampling"]).is_some() => {
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

fn sources(body: &mut String, report: &Value) {
    let meta = get(report, &["meta"]).unwrap_or(&Value::Null);
    body.push_str("<h2>Sources and quality</h2>\n<table>\n<tr><th>source</th><th>provenance</th><th>what</th><th>domains</th></tr>\n");
    for s in array(meta, &["sources"]) {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td><span class=\"badge {}\">{}</span></td><td>{}</td><td>{}</td></tr>",
            esc(text(s, &["name"])),
            esc(text(s, &["provenance"])),
            esc(text(s, &["provenance"])),
            esc_short(text(s, &["description"])),
            esc_short(&scalar(s.get("domains").unwrap_or(&Value::Null))),
        );
    }
    body.push_str("</table>\n");
    let _ = writeln!(
        body,
        "<p class=\"note\">Why these: {}</p>",
        esc_short(text(meta, &["source_selection"]))
    );
    let idle = array(meta, &["idle_baseline"]);
    if !idle.is_empty() {
        body.push_str(
            "<h3>Idle baseline</h3>\n<table>\n<tr><th>domain</th><th class=\"n\">idle power</th>\
             <th>method</th></tr>\n",
        );
        for i in idle {
            let _ = writeln!(
                body,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                esc(text(i, &["domain"])),
                fig(num(i, &["power_w"]), "W"),
                esc(text(i, &["method"])),
            );
        }
        body.push_str("</table>\n");
    }
    let notes = array(meta, &["measurement_quality", "notes"]);
    let _ = writeln!(
        body,
        "<h3>Quality notes</h3>\n<p>Grade: <span class=\"badge {g}\">{g}</span></p>",
        g = esc(text(meta, &["measurement_quality", "grade"]))
    );
    if notes.is_empty() {
        body.push_str("<p class=\"note\">None.</p>\n");
    } else {
        body.push_str("<ul>\n");
        for n in notes {
            let _ = writeln!(body, "<li>{}</li>", esc_short(&scalar(n)));
        }
        body.push_str("</ul>\n");
    }
    for (title, path) in [
        ("Lost events", &["totals", "lost_events"][..]),
        ("cg-trace's own cost", &["meta", "profiler"][..]),
        ("Power meter", &["meta", "power_meter"][..]),
        ("Function profiling", &["meta", "function_profiling"][..]),
    ] {
        if let Some(obj) = get(report, path).and_then(Value::as_object) {
            let _ = writeln!(body, "<h3>{title}</h3>\n<dl class=\"kv\">");
            // Scalars only (nested objects are in the JSON report); fields this version does
            // not know show under their own names.
            for (k, v) in obj.iter().filter(|(_, v)| !v.is_object()) {
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
    }
}

#[cfg(test)]
mod tests;
