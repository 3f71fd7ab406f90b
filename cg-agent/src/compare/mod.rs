//! `cg-trace diff BASE.json NEW.json`: the change in energy and CPU time between two reports,
//! for the targets (the traced command and its descendants), the whole machine, per domain,
//! process group (processes grouped by program) and function; with `--repeat` runs on both
//! sides, a Mann-Whitney U test on the per-run energies and a verdict; and the gate a CI job
//! needs (`--max-increase PCT`: exit 3 on a regression beyond it of what `--gate` names, by
//! default the targets' energy).
//!
//! Pure functions over the two parsed reports ([`load`] reads and checks a file, [`compare`]
//! computes, [`render`] prints); `main` is the subcommand.

pub mod interleaved;
pub mod render;
pub mod stats;

use std::{
    collections::BTreeMap,
    fs::File,
    io::Read,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{
    cli::{DiffArgs, DiffFormat, OutputArgs},
    privileges::Invoker,
};

/// The report schema's major version this build understands.
pub const SCHEMA_MAJOR: u64 = 1;
/// The largest report `diff` reads (a one-hour run with a 100 ms time series is ~30 MB).
pub const MAX_REPORT_BYTES: u64 = 256 * 1024 * 1024;
/// A difference is significant below this p-value.
pub const ALPHA: f64 = 0.05;
/// Exit status of `diff` on a regression beyond `--max-increase` (as a budget exceeded).
pub const EXIT_REGRESSION: i32 = 3;
/// Exit status on a report that cannot be read or compared.
pub const EXIT_BAD_INPUT: i32 = 2;

/// Why a report cannot be compared; each says which file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: cannot read it: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a regular file")]
    NotRegular { path: String },
    #[error("{path}: larger than {} MiB: not a cg-trace report", MAX_REPORT_BYTES >> 20)]
    TooLarge { path: String },
    #[error("{path}: not JSON ({source}): give two reports written by `cg-trace -o FILE.json`")]
    NotJson {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{path}: not a cg-trace report (no meta.tool \"cg-trace\"): give two reports written \
         by `cg-trace -o FILE.json`"
    )]
    NotCgTrace { path: String },
    #[error(
        "{path}: report schema version {version} is not one this cg-trace reads (major version \
         {SCHEMA_MAJOR}): compare it with the cg-trace version that wrote it"
    )]
    UnknownVersion { path: String, version: String },
    #[error("{path}: a field of the report is missing or not what schema 1 says: {source}")]
    Shape {
        path: String,
        #[source]
        source: serde_json::Error,
    },
}

// The parts of a report that a comparison reads (schema 1; other fields are ignored).

#[derive(Debug, Deserialize)]
pub struct ReportView {
    pub meta: MetaView,
    pub processes: Vec<ProcessView>,
    #[serde(default)]
    pub function_totals: Vec<FunctionView>,
    pub totals: TotalsView,
    #[serde(default)]
    pub repeat: Option<RepeatView>,
}

#[derive(Debug, Deserialize)]
pub struct MetaView {
    pub schema_version: String,
    pub run_id: String,
    #[serde(default)]
    pub hostname: String,
    #[serde(default)]
    pub cpu_model: String,
    pub sources: Vec<SourceView>,
}

#[derive(Debug, Deserialize)]
pub struct SourceView {
    pub name: String,
    pub provenance: String,
}

#[derive(Debug, Deserialize)]
pub struct ProcessView {
    pub comm: String,
    /// The first argument of its command line: all a comparison needs of it (a report may
    /// list a million processes).
    #[serde(default, rename = "cmdline", deserialize_with = "first_argument")]
    pub first_argument: Option<String>,
    pub cpu_time_s: f64,
    pub energy_j: f64,
}

/// The first string of a list of strings, the others read and dropped.
fn first_argument<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    struct First;
    impl<'de> serde::de::Visitor<'de> for First {
        type Value = Option<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of strings")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let first = seq.next_element::<String>()?;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(first)
        }
    }
    deserializer.deserialize_seq(First)
}

#[derive(Debug, Deserialize)]
pub struct FunctionView {
    pub symbol: String,
    #[serde(default)]
    pub module: String,
    pub cpu_time_s: f64,
    pub energy_j: f64,
}

#[derive(Debug, Deserialize)]
pub struct TotalsView {
    pub energy_j: f64,
    /// The targets' share of `energy_j`.
    pub attributed_energy_j: f64,
    pub cpu_time_s: f64,
    pub domains: BTreeMap<String, DomainView>,
}

#[derive(Debug, Deserialize)]
pub struct DomainView {
    pub energy_j: f64,
    pub attributed_energy_j: f64,
    pub top_level: bool,
    pub provenance: String,
}

#[derive(Debug, Deserialize)]
pub struct RepeatView {
    pub runs: Vec<RunView>,
}

#[derive(Debug, Deserialize)]
pub struct RunView {
    pub energy_j: f64,
    #[serde(default)]
    pub domains: BTreeMap<String, RunDomainView>,
    #[serde(default)]
    pub process_groups: Vec<RunGroupView>,
    #[serde(default)]
    pub functions: Vec<RunFunctionView>,
    /// The run's own complete report: its targets' energy.
    pub report: RunReportView,
}

#[derive(Debug, Deserialize)]
pub struct RunReportView {
    pub totals: TotalsView,
}

#[derive(Debug, Deserialize)]
pub struct RunDomainView {
    pub energy_j: f64,
}

#[derive(Debug, Deserialize)]
pub struct RunGroupView {
    pub group: String,
    #[serde(default)]
    pub command: Value,
    pub energy_j: f64,
    #[serde(default)]
    pub cpu_time_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
pub struct RunFunctionView {
    pub function: String,
    pub energy_j: f64,
}

/// Reads and checks a report: a regular file of at most [`MAX_REPORT_BYTES`], JSON, written
/// by cg-trace, of a schema major version this build reads.
pub fn load(path: &Path) -> Result<ReportView, LoadError> {
    let name = path.display().to_string();
    let bytes = read(path)?;
    parse(&name, &bytes)
}

/// [`load`]'s checks, returning the report's bytes (the HTML report reads them its way).
pub fn load_bytes(path: &Path) -> Result<Vec<u8>, LoadError> {
    let bytes = read(path)?;
    check_header(&path.display().to_string(), &bytes)?;
    Ok(bytes)
}

/// The bytes of a regular file of at most [`MAX_REPORT_BYTES`].
fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    let name = path.display().to_string();
    let read_err = |source| LoadError::Read {
        path: name.clone(),
        source,
    };
    // O_NONBLOCK: a FIFO planted under the name must not hang us on open.
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(LoadError::NotRegular { path: name });
    }
    if meta.len() > MAX_REPORT_BYTES {
        return Err(LoadError::TooLarge { path: name });
    }
    let mut bytes = Vec::new();
    file.take(MAX_REPORT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_REPORT_BYTES {
        return Err(LoadError::TooLarge { path: name });
    }
    Ok(bytes)
}

/// What [`parse`] reads first: is this a cg-trace report, and of which schema version?
#[derive(Deserialize)]
struct Header {
    meta: HeaderMeta,
}

#[derive(Deserialize)]
struct HeaderMeta {
    #[serde(default)]
    tool: Value,
    #[serde(default)]
    schema_version: Value,
}

/// [`load`]'s checks on bytes already read (`name` says where they came from). The report
/// is deserialized straight into the views (the time series and other fields skipped, not
/// built), after a first pass that reads only `meta.tool` and `meta.schema_version`.
pub fn parse(name: &str, bytes: &[u8]) -> Result<ReportView, LoadError> {
    check_header(name, bytes)?;
    serde_json::from_slice(bytes).map_err(|source| LoadError::Shape {
        path: name.to_string(),
        source,
    })
}

/// JSON, written by cg-trace, of a schema major version this build reads.
fn check_header(name: &str, bytes: &[u8]) -> Result<(), LoadError> {
    let header: Header = match serde_json::from_slice(bytes) {
        Ok(header) => header,
        // JSON, but not shaped like a report (an array, no `meta` object).
        Err(source)
            if source.classify() == serde_json::error::Category::Data
                && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() =>
        {
            return Err(LoadError::NotCgTrace {
                path: name.to_string(),
            });
        }
        Err(_) => {
            // The syntax error, where it is (the header pass may have stopped earlier).
            let source = serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
                .err()
                .unwrap_or_else(|| serde::de::Error::custom("not a report"));
            return Err(LoadError::NotJson {
                path: name.to_string(),
                source,
            });
        }
    };
    if header.meta.tool.as_str() != Some("cg-trace") {
        return Err(LoadError::NotCgTrace {
            path: name.to_string(),
        });
    }
    let version = header.meta.schema_version.as_str().unwrap_or("(none)");
    let major = version
        .split_once('.')
        .and_then(|(major, minor)| {
            minor.parse::<u64>().ok()?;
            major.parse::<u64>().ok()
        })
        .filter(|major| *major == SCHEMA_MAJOR);
    if major.is_none() {
        return Err(LoadError::UnknownVersion {
            path: name.to_string(),
            version: chars(version, 40),
        });
    }
    Ok(())
}

/// At most `max` characters of outside text, for a message.
fn chars(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

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

/// What the gate (`--max-increase`) judges: `--gate total|targets|group:NAME|function:NAME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// The whole machine: the total and each top-level domain.
    Total,
    /// The targets' energy: in total and in each top-level domain (the default).
    Targets,
    /// One process group, by program name.
    Group(String),
    /// One function, `module:symbol` or the symbol alone.
    Function(String),
}

/// The longest NAME `--gate group:NAME` or `function:NAME` takes.
const GATE_NAME_MAX: usize = 512;

impl std::str::FromStr for Gate {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let named = |name: &str, make: fn(String) -> Gate| {
            if name.is_empty() || name.len() > GATE_NAME_MAX || name.chars().any(char::is_control) {
                Err(format!(
                    "{:?}: give a name of 1 to {GATE_NAME_MAX} printable characters after the colon",
                    chars(text, 60)
                ))
            } else {
                Ok(make(name.to_string()))
            }
        };
        match text.split_once(':') {
            None if text == "total" => Ok(Gate::Total),
            None if text == "targets" => Ok(Gate::Targets),
            Some(("group", name)) => named(name, Gate::Group),
            Some(("function", name)) => named(name, Gate::Function),
            _ => Err(format!(
                "{:?}: the gate is `total` (the whole machine), `targets` (the traced command and \
                 its descendants), `group:NAME` (a program's processes) or `function:NAME`",
                chars(text, 60)
            )),
        }
    }
}

impl std::fmt::Display for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gate::Total => f.write_str("total"),
            Gate::Targets => f.write_str("targets"),
            Gate::Group(name) => write!(f, "group:{name}"),
            Gate::Function(name) => write!(f, "function:{name}"),
        }
    }
}

impl Serialize for Gate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Gate {
    /// What a gate judges when none is named.
    pub const DEFAULT: Gate = Gate::Targets;

    /// Whether this gate judges the row `(kind, name)`; `top_level`: a domain row's domain is
    /// top-level (nested domains' energy is in their parent's, so they are not gated).
    fn covers(&self, kind: RowKind, name: &str, top_level: bool) -> bool {
        match self {
            Gate::Total => kind == RowKind::Total || (kind == RowKind::Domain && top_level),
            Gate::Targets => {
                kind == RowKind::Targets || (kind == RowKind::TargetDomain && top_level)
            }
            Gate::Group(program) => kind == RowKind::ProcessGroup && name == program,
            Gate::Function(function) => {
                kind == RowKind::Function
                    && (name == function
                        || name.split_once(':').map(|(_, symbol)| symbol) == Some(function))
            }
        }
    }

    /// In words, for the outputs.
    pub fn describe(&self) -> String {
        match self {
            Gate::Total => "the whole machine's energy (total and top-level domains)".into(),
            Gate::Targets => "the targets' energy (the traced command and its descendants: in \
                              total and per top-level domain)"
                .into(),
            Gate::Group(name) => format!("the energy of process group {name}"),
            Gate::Function(name) => format!("the energy of function {name}"),
        }
    }
}

/// One side's figures for a row: one value per run (one for a single run).
#[derive(Clone, Debug, Default)]
struct Samples {
    energy_j: Vec<f64>,
    cpu_time_s: Option<Vec<f64>>,
}

/// One report reduced to rows: `(kind, key) -> samples`.
struct Figures {
    rows: BTreeMap<(RowKind, String), Samples>,
    runs: usize,
    repeat: bool,
    top_level: BTreeMap<String, bool>,
}

/// The program a process ran: the file name of its first argument (its comm when none).
fn program(p: &ProcessView) -> String {
    crate::report::names::program_of(p.first_argument.as_deref(), &p.comm)
}

/// The program of a `--repeat` process group: its command's first word without the
/// directory (the group's key when the command says nothing).
fn group_program(g: &RunGroupView) -> String {
    command_label(&g.command)
        .and_then(|c| {
            // A process without a command line is named `[comm]`: its program is its comm,
            // as for a single run's processes.
            let c = c
                .strip_prefix('[')
                .and_then(|c| c.strip_suffix(']'))
                .unwrap_or(&c);
            let first = c.split_whitespace().next()?;
            Some(crate::report::names::file_name(first).to_string())
        })
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| g.group.clone())
}

fn command_label(command: &Value) -> Option<String> {
    match command {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Array(a) if !a.is_empty() => Some(
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// A report's (or one run's) targets' rows: their energy in total (with their CPU time) and
/// per domain, as `(key, energy_j, cpu_time_s)`.
fn target_rows(totals: &TotalsView) -> Vec<((RowKind, String), f64, Option<f64>)> {
    let mut rows = vec![(
        (RowKind::Targets, "energy".to_string()),
        totals.attributed_energy_j,
        Some(totals.cpu_time_s),
    )];
    rows.extend(totals.domains.iter().map(|(name, d)| {
        (
            (RowKind::TargetDomain, name.clone()),
            d.attributed_energy_j,
            None,
        )
    }));
    rows
}

fn figures(report: &ReportView) -> Figures {
    let mut rows: BTreeMap<(RowKind, String), Samples> = BTreeMap::new();
    let top_level = report
        .totals
        .domains
        .iter()
        .map(|(name, d)| (name.clone(), d.top_level))
        .collect();
    let runs = report.repeat.as_ref().map(|r| r.runs.as_slice());
    match runs {
        Some(runs) if !runs.is_empty() => {
            let n = runs.len();
            // A row missing from a run counts 0 in that run (the program did not run, the
            // function was not sampled).
            let mut add = |key: (RowKind, String), i: usize, energy_j: f64, cpu: Option<f64>| {
                let s = rows.entry(key).or_insert_with(|| Samples {
                    energy_j: vec![0.0; n],
                    cpu_time_s: None,
                });
                s.energy_j[i] += energy_j;
                if let Some(cpu) = cpu {
                    s.cpu_time_s.get_or_insert_with(|| vec![0.0; n])[i] += cpu;
                }
            };
            for (i, run) in runs.iter().enumerate() {
                let cpu: f64 = run.process_groups.iter().filter_map(|g| g.cpu_time_s).sum();
                let any_cpu = run.process_groups.iter().any(|g| g.cpu_time_s.is_some());
                add(
                    (RowKind::Total, "energy".into()),
                    i,
                    run.energy_j,
                    any_cpu.then_some(cpu),
                );
                for (key, energy_j, cpu) in target_rows(&run.report.totals) {
                    add(key, i, energy_j, cpu);
                }
                for (name, d) in &run.domains {
                    add((RowKind::Domain, name.clone()), i, d.energy_j, None);
                }
                // By program, as a single run's processes are, so that a repeat report and a
                // plain one (or two repeat sets whose arguments differ) meet row for row; the
                // finer groups of one set are in its own statistics.
                for g in &run.process_groups {
                    let key = (RowKind::ProcessGroup, group_program(g));
                    add(key, i, g.energy_j, g.cpu_time_s);
                }
                for f in &run.functions {
                    add((RowKind::Function, f.function.clone()), i, f.energy_j, None);
                }
            }
            Figures {
                rows,
                runs: n,
                repeat: true,
                top_level,
            }
        }
        _ => {
            let mut add = |key: (RowKind, String), energy_j: f64, cpu: Option<f64>| {
                let s = rows.entry(key).or_insert_with(|| Samples {
                    energy_j: vec![0.0],
                    cpu_time_s: None,
                });
                s.energy_j[0] += energy_j;
                if let Some(cpu) = cpu {
                    s.cpu_time_s.get_or_insert_with(|| vec![0.0])[0] += cpu;
                }
            };
            add(
                (RowKind::Total, "energy".into()),
                report.totals.energy_j,
                Some(report.totals.cpu_time_s),
            );
            for (key, energy_j, cpu) in target_rows(&report.totals) {
                add(key, energy_j, cpu);
            }
            for (name, d) in &report.totals.domains {
                add((RowKind::Domain, name.clone()), d.energy_j, None);
            }
            for p in &report.processes {
                add(
                    (RowKind::ProcessGroup, program(p)),
                    p.energy_j,
                    Some(p.cpu_time_s),
                );
            }
            for f in &report.function_totals {
                // As `repeat.runs[].functions[].function` names it.
                let key = format!("{}:{}", f.module, f.symbol);
                add((RowKind::Function, key), f.energy_j, Some(f.cpu_time_s));
            }
            Figures {
                rows,
                runs: 1,
                repeat: false,
                top_level,
            }
        }
    }
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
    let fb = figures(base);
    let fnew = figures(new);
    let tested = fb.repeat && fnew.repeat;
    let base_info = side_info(base_path, base, fb.runs);
    let new_info = side_info(new_path, new, fnew.runs);

    let mut warnings = Vec::new();
    if base_info.provenance != new_info.provenance {
        warnings.push(format!(
            "the base's energy is {} and the new one's {}: the two are not measured alike",
            base_info.provenance, new_info.provenance
        ));
    } else if base_info.sources != new_info.sources {
        warnings.push(format!(
            "the two come from different energy sources (base: {}, new: {})",
            base_info.sources.join(", "),
            new_info.sources.join(", ")
        ));
    }
    if base_info.hostname != new_info.hostname || base_info.cpu_model != new_info.cpu_model {
        warnings.push(format!(
            "the two come from different machines (base: {} / {}, new: {} / {})",
            base_info.hostname, base_info.cpu_model, new_info.hostname, new_info.cpu_model
        ));
    }
    if fb.repeat != fnew.repeat {
        warnings.push(
            "only one side has --repeat runs: its medians are compared with a single run, \
             without a significance test"
                .to_string(),
        );
    }

    let mut keys: Vec<&(RowKind, String)> = fb.rows.keys().chain(fnew.rows.keys()).collect();
    keys.sort();
    keys.dedup();
    let empty = Samples::default();
    let mut rows = Vec::new();
    let mut regression = false;
    for key in keys {
        let b = fb.rows.get(key).unwrap_or(&empty);
        let n = fnew.rows.get(key).unwrap_or(&empty);
        // A row absent from a side is 0 in every run of it.
        let energy = |s: &Samples, runs: usize| {
            if s.energy_j.is_empty() {
                vec![0.0; runs]
            } else {
                s.energy_j.clone()
            }
        };
        let (be, ne) = (energy(b, fb.runs), energy(n, fnew.runs));
        let base_energy_j = stats::median(&be).unwrap_or(0.0);
        let new_energy_j = stats::median(&ne).unwrap_or(0.0);
        let cpu = |s: &Samples| s.cpu_time_s.as_deref().and_then(stats::median);
        let (base_cpu, new_cpu) = (cpu(b), cpu(n));
        let (base_cpu, new_cpu) = match (base_cpu, new_cpu) {
            (None, None) => (None, None),
            (b, n) => (Some(b.unwrap_or(0.0)), Some(n.unwrap_or(0.0))),
        };
        let significance = if tested {
            stats::mann_whitney(&ne, &be).map(|t| TestResult {
                test: "mann-whitney-u",
                method: t.method.describe(),
                u: t.u1,
                p_value: t.p_value,
                verdict: if t.p_value >= ALPHA {
                    "no significant difference"
                } else if new_energy_j > base_energy_j {
                    "significant increase"
                } else if new_energy_j < base_energy_j {
                    "significant decrease"
                } else {
                    // Equal medians yet different distributions: no direction to call.
                    "no significant difference"
                },
            })
        } else {
            None
        };
        let change_energy_pct = pct(base_energy_j, new_energy_j);
        let is_domain = matches!(key.0, RowKind::Domain | RowKind::TargetDomain);
        let top_level =
            is_domain && fb.top_level.get(&key.1).or(fnew.top_level.get(&key.1)) == Some(&true);
        let gated = gates.iter().any(|g| g.covers(key.0, &key.1, top_level));
        let beyond = match (max_increase_pct, change_energy_pct) {
            (Some(max), Some(change)) => change > max,
            // From nothing to something is beyond any threshold.
            (Some(_), None) => new_energy_j > base_energy_j,
            (None, _) => false,
        };
        let significant_rise = match &significance {
            Some(t) => t.verdict == "significant increase",
            None => !tested,
        };
        let is_regression = gated && beyond && significant_rise;
        regression |= is_regression;
        rows.push(Row {
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
            regression: is_regression,
        });
    }
    for gate in &gates {
        if !rows
            .iter()
            .any(|r| r.gated && gate.covers(r.kind, &r.name, true))
        {
            warnings.push(format!(
                "--gate {}: no row of either report is that: nothing is gated for it",
                chars(&gate.to_string(), 80)
            ));
        }
    }
    // Targets, whole machine and domains, then groups and functions by the size of their
    // change.
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
    Comparison {
        base: base_info,
        new: new_info,
        tested,
        alpha: ALPHA,
        max_increase_pct,
        gates,
        warnings,
        rows,
        regression,
    }
}

/// `cg-trace diff`: returns the exit status (0, [`EXIT_REGRESSION`], [`EXIT_BAD_INPUT`]).
pub fn main(args: &DiffArgs, invoker: &Invoker) -> i32 {
    if let Err(message) = check_max_increase(args.gate.max_increase) {
        crate::console::write_line(format_args!("cg-trace diff: {message}"));
        return EXIT_BAD_INPUT;
    }
    let load_one = |path: &PathBuf| {
        load(path).map_err(|err| {
            crate::console::write_line(format_args!(
                "cg-trace diff: {}",
                crate::printable::printable(&err.to_string())
            ));
        })
    };
    let (Ok(base), Ok(new)) = (load_one(&args.base), load_one(&args.new)) else {
        return EXIT_BAD_INPUT;
    };
    let (base_name, new_name) = (
        args.base.display().to_string(),
        args.new.display().to_string(),
    );
    let comparison = compare(
        (&base_name, &base),
        (&new_name, &new),
        args.gate.max_increase,
        &args.gate.gate,
    );
    emit("cg-trace diff", &comparison, &args.output, invoker)
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

/// Prints a comparison's warnings, writes it in the format asked for (to `-o FILE`, or
/// standard output), says the regression if there is one; returns the exit status. `who`
/// names the subcommand in messages.
pub fn emit(who: &str, comparison: &Comparison, output: &OutputArgs, invoker: &Invoker) -> i32 {
    for warning in &comparison.warnings {
        crate::console::write_line(format_args!(
            "{who}: warning: {}",
            crate::printable::printable(warning)
        ));
    }
    let text = match output.format {
        DiffFormat::Text => render::text(comparison),
        DiffFormat::Markdown => render::markdown(comparison),
        DiffFormat::Json => render::json(comparison),
        DiffFormat::Html => crate::export::html::diff(comparison),
    };
    let path = output.output.as_deref().unwrap_or(Path::new("-"));
    let written =
        crate::output::write_file_or_stdout(path, invoker, |out| out.write_all(text.as_bytes()));
    if let Err(err) = written {
        crate::console::write_line(format_args!("{who}: {err}"));
        return 1;
    }
    if comparison.regression {
        crate::console::write_line(format_args!(
            "{who}: {}",
            render::regression_line(comparison)
        ));
        EXIT_REGRESSION
    } else {
        0
    }
}

#[cfg(test)]
mod tests;
