//! A written report read back: the checks every reader puts a file from outside through
//! first (a regular file of bounded size, JSON, written by cg-trace, of a schema major
//! version this build reads: `diff`, `compare`, `cg-trace report`), and the typed views of
//! the report schema (as [`crate::report::Report`] writes it) that the comparison reads.
//! Fields a reader does not need are skipped, not built; serde refuses numbers JSON cannot
//! hold finite (`1e999`), so every figure read is finite. (The HTML page still reads the
//! checked bytes its own way, leniently: see [`crate::export::html::parse`].)

use std::{collections::BTreeMap, fs::File, io::Read, os::unix::fs::OpenOptionsExt, path::Path};

use serde::Deserialize;
use serde_json::Value;

/// The report schema's major version this build understands.
pub const SCHEMA_MAJOR: u64 = 1;
/// The largest report `diff` reads (a one-hour run with a 100 ms time series is ~30 MB).
pub const MAX_REPORT_BYTES: u64 = 256 * 1024 * 1024;
/// Exit status on a report that cannot be read or compared.
pub const EXIT_BAD_INPUT: i32 = 2;

/// Why a report cannot be read (to compare it or show it); each says which file and what to do.
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

// The parts of a report that its readers use (schema 1; other fields are ignored).

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

impl ProcessView {
    /// The program it ran ([`super::names::program_of`]).
    pub fn program(&self) -> String {
        super::names::program_of(self.first_argument.as_deref(), &self.comm)
    }
}

impl FunctionView {
    /// `module:symbol`, as `repeat.runs[].functions[].function` names it.
    pub fn function(&self) -> String {
        format!("{}:{}", self.module, self.symbol)
    }
}

impl RunGroupView {
    /// The program of a `--repeat` process group: its command's first word without the
    /// directory (the group's key when the command says nothing).
    pub fn program(&self) -> String {
        command_label(&self.command)
            .and_then(|c| {
                // A process without a command line is named `[comm]`: its program is its
                // comm, as for a single run's processes.
                let c = c
                    .strip_prefix('[')
                    .and_then(|c| c.strip_suffix(']'))
                    .unwrap_or(&c);
                let first = c.split_whitespace().next()?;
                Some(super::names::file_name(first).to_string())
            })
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| self.group.clone())
    }
}

/// A group's `command`, a string or (from other versions) a list of words, as one line.
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
pub(crate) fn chars(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The smallest report the model reads: one process, one domain, one function.
    fn minimal() -> Value {
        json!({
            "meta": {"tool": "cg-trace", "schema_version": "1.6", "run_id": "r1",
                     "sources": [{"name": "rapl", "provenance": "measured"}]},
            "processes": [{"comm": "python3.12", "cmdline": ["/usr/bin/python3", "-c", "x"],
                           "cpu_time_s": 1.5, "energy_j": 3.0}],
            "function_totals": [{"symbol": "deflate", "module": "libz.so",
                                 "cpu_time_s": 0.5, "energy_j": 1.0}],
            "totals": {"energy_j": 10.0, "attributed_energy_j": 3.0, "cpu_time_s": 1.5,
                       "domains": {"package-0": {"energy_j": 10.0, "attributed_energy_j": 3.0,
                                                 "top_level": true, "provenance": "measured"}}},
            "timeseries": [{"t_s": 0.0}]
        })
    }

    fn parsed(report: &Value) -> Result<ReportView, LoadError> {
        parse("r.json", report.to_string().as_bytes())
    }

    #[test]
    fn reads_the_fields_its_readers_use_and_names_programs_once() {
        let report = parsed(&minimal()).unwrap();
        assert_eq!(report.meta.run_id, "r1");
        assert_eq!(report.processes[0].program(), "python3");
        assert_eq!(report.function_totals[0].function(), "libz.so:deflate");
        assert!(report.totals.domains["package-0"].top_level);
        assert!(report.repeat.is_none());
    }

    #[test]
    fn a_figure_json_cannot_hold_finite_is_refused() {
        // serde_json reads 1e999 as an error, never as infinity.
        let text = minimal()
            .to_string()
            .replace("\"energy_j\":10.0", "\"energy_j\":1e999");
        assert!(text.contains("1e999"));
        assert!(parse("r.json", text.as_bytes()).is_err());
    }

    #[test]
    fn a_missing_or_mistyped_figure_is_a_shape_error() {
        let mut report = minimal();
        report["processes"][0]["energy_j"] = json!("3 J");
        assert!(matches!(parsed(&report), Err(LoadError::Shape { .. })));
        let mut report = minimal();
        report["totals"]
            .as_object_mut()
            .unwrap()
            .remove("cpu_time_s");
        let err = parsed(&report).unwrap_err();
        assert!(err.to_string().contains("cpu_time_s"), "{err}");
    }

    #[test]
    fn a_long_version_is_cut_in_the_message() {
        let mut report = minimal();
        report["meta"]["schema_version"] = json!("9".repeat(500));
        let err = parsed(&report).unwrap_err().to_string();
        assert!(err.contains(&format!("{}…", "9".repeat(40))), "{err}");
        assert!(!err.contains(&"9".repeat(41)));
    }

    #[test]
    fn a_repeat_groups_program_is_its_commands_first_words_file_name() {
        let group = |command: Value| RunGroupView {
            group: "key#1".into(),
            command,
            energy_j: 1.0,
            cpu_time_s: None,
        };
        assert_eq!(group(json!("/usr/bin/make -j2")).program(), "make");
        // A process gone before its command line was read: its comm, in brackets.
        assert_eq!(group(json!("[gzip]")).program(), "gzip");
        assert_eq!(group(json!(["/opt/app", "--fast"])).program(), "app");
        // A command that says nothing: the group's key.
        for nothing in [json!(""), json!([]), Value::Null, json!(5)] {
            assert_eq!(group(nothing).program(), "key#1");
        }
    }

    #[test]
    fn the_first_argument_is_read_alone() {
        let mut report = minimal();
        report["processes"][0]["cmdline"] = json!(["a", "b", {"not": "a string"}]);
        let report = parsed(&report).unwrap();
        assert_eq!(report.processes[0].first_argument.as_deref(), Some("a"));
    }

    #[test]
    fn refuses_what_is_not_a_report_of_a_known_major_version() {
        let mut report = minimal();
        report["meta"]["schema_version"] = json!("2.0");
        let err = parse("x.json", report.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, LoadError::UnknownVersion { .. }), "{err}");
        assert!(err.to_string().contains("2.0"));
        for version in [json!("1"), json!("one.two"), json!(1.3), Value::Null] {
            report["meta"]["schema_version"] = version;
            assert!(matches!(
                parse("x.json", report.to_string().as_bytes()),
                Err(LoadError::UnknownVersion { .. })
            ));
        }
        let mut other = minimal();
        other["meta"]["tool"] = json!("perf");
        assert!(matches!(
            parse("x.json", other.to_string().as_bytes()),
            Err(LoadError::NotCgTrace { .. })
        ));
        assert!(matches!(
            parse("x.json", b"[1, 2"),
            Err(LoadError::NotJson { .. })
        ));
        for not_a_report in [&b"[1, 2]"[..], b"{}", b"{\"meta\": 5}", b"null"] {
            assert!(matches!(
                parse("x.json", not_a_report),
                Err(LoadError::NotCgTrace { .. })
            ));
        }
        // A report cut short is not JSON (however far its header got).
        let text = minimal().to_string();
        assert!(matches!(
            parse("x.json", &text.as_bytes()[..text.len() - 3]),
            Err(LoadError::NotJson { .. })
        ));
        let mut broken = minimal();
        broken["totals"]["energy_j"] = json!("a lot");
        let err = parse("x.json", broken.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, LoadError::Shape { .. }), "{err}");
    }

    #[test]
    fn load_refuses_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.json");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert!(matches!(load(&fifo), Err(LoadError::NotRegular { .. })));
        assert!(matches!(
            load(dir.path()),
            Err(LoadError::NotRegular { .. })
        ));
        assert!(matches!(
            load(&dir.path().join("missing.json")),
            Err(LoadError::Read { .. })
        ));
        let file = dir.path().join("r.json");
        std::fs::write(&file, minimal().to_string()).unwrap();
        assert!(load(&file).is_ok());
    }
}
