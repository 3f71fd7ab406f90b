//! A written report read back: the checks every reader puts a file from outside through
//! first (a regular file of bounded size, JSON, written by cg-trace, of a schema major
//! version this build reads), then the report deserialized into the one typed model of it
//! that `diff`, `compare` and `cg-trace report` read ([`super::view`]).

use std::{fs::File, io::Read, os::unix::fs::OpenOptionsExt, path::Path};

use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;

use super::view::ReportView;

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
    #[error("{path}: field `{field}` of the report is missing or not what schema 1 says: {source}")]
    Shape {
        path: String,
        /// Where in the report (`processes[3].energy_j`; `.` for the report itself).
        field: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Reads and checks a report: a regular file of at most [`MAX_REPORT_BYTES`], JSON, written
/// by cg-trace, of a schema major version this build reads; its time series skipped.
pub fn load(path: &Path) -> Result<ReportView, LoadError> {
    load_as(path)
}

/// [`load`], the time series read as `Series` (a [`PageReport`]'s points).
pub fn load_as<Series: DeserializeOwned>(path: &Path) -> Result<ReportView<Series>, LoadError> {
    let name = path.display().to_string();
    let bytes = read(path)?;
    parse_as(&name, &bytes)
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
/// is deserialized straight into the views (fields no reader uses skipped, not built), after
/// a first pass that reads only `meta.tool` and `meta.schema_version`.
pub fn parse(name: &str, bytes: &[u8]) -> Result<ReportView, LoadError> {
    parse_as(name, bytes)
}

/// [`parse`], the time series read as `Series`.
pub fn parse_as<Series: DeserializeOwned>(
    name: &str,
    bytes: &[u8],
) -> Result<ReportView<Series>, LoadError> {
    check_header(name, bytes)?;
    serde_json::from_slice(bytes).map_err(|_| shape_error::<Series>(name, bytes))
}

/// Why `bytes` are not a report of the model's shape, naming the field: the report read
/// again with its path followed (only when the fast read failed: following costs time).
fn shape_error<Series: DeserializeOwned>(name: &str, bytes: &[u8]) -> LoadError {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let (field, source) =
        match serde_path_to_error::deserialize::<_, ReportView<Series>>(&mut deserializer) {
            Err(err) => (err.path().to_string(), err.into_inner()),
            Ok(_) => (
                String::new(),
                serde::de::Error::custom("not what schema 1 says"),
            ),
        };
    LoadError::Shape {
        path: name.to_string(),
        field: chars(&field, 120),
        source,
    }
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
    use crate::report::view::MAX_COMMAND_CHARS;

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
        assert_eq!(report.processes.top[0].program(), "python3");
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
    fn a_command_line_is_kept_to_its_first_argument_and_its_first_characters() {
        let mut report = minimal();
        let long = "x".repeat(MAX_COMMAND_CHARS);
        report["processes"][0]["cmdline"] = json!(["/bin/a", "b", long, {"not": "a string"}]);
        let report = parsed(&report).unwrap();
        let p = &report.processes.top[0];
        assert_eq!(p.cmdline.first.as_deref(), Some("/bin/a"));
        assert_eq!(p.program(), "a");
        // One character past the limit says it was cut; what lies beyond is not read.
        assert_eq!(p.command().chars().count(), MAX_COMMAND_CHARS + 1);
        assert!(p.command().starts_with("/bin/a b xxx"));
        let mut report = minimal();
        report["processes"][0]["cmdline"] = json!([]);
        assert_eq!(
            parsed(&report).unwrap().processes.top[0].command(),
            "[python3.12]"
        );
        report["processes"][0]["cmdline"] = json!(["a", 5]);
        assert!(matches!(parsed(&report), Err(LoadError::Shape { .. })));
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
