//! The CSV report (`-o FILE.csv`, `--format csv`): one row per domain, process, function
//! and function total, and with `--repeat` per run (its total, domains, process groups and
//! functions), for spreadsheets and data frames. RFC 4180 (the `csv` crate quotes), one
//! fixed header whose figure columns carry their unit (`energy_j`, `cpu_time_s`, ...). It is
//! written from the report's JSON form, so its figures are the JSON's, digit for digit.

use std::{
    io::{self, Write},
    path::Path,
};

use serde_json::Value;

use crate::{
    output::{self, OutputError},
    privileges::Invoker,
    report::Report,
};

/// The columns, in order. `record` says what a row is: `domain`, `process`, `function`,
/// `function_total`, and with `--repeat` `run`, `run_domain`, `run_process_group`,
/// `run_function`.
pub const HEADER: [&str; 22] = [
    "record",
    "run",
    "domain",
    "pid",
    "ppid",
    "group",
    "comm",
    "command",
    "symbol",
    "module",
    "source",
    "provenance",
    "duration_s",
    "cpu_time_s",
    "energy_j",
    "avg_power_w",
    "share_pct",
    "self_cpu_time_s",
    "self_energy_j",
    "calls_count",
    "samples_count",
    "outlier",
];

/// One row being filled, by column name.
struct Row([String; HEADER.len()]);

impl Row {
    fn new(record: &str) -> Self {
        let mut row = Row(Default::default());
        row.0[0] = record.to_string();
        row
    }

    fn col(name: &str) -> usize {
        HEADER
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("no CSV column {name}"))
    }

    /// Text from outside (command lines, symbols): a cell that a spreadsheet would take
    /// for a formula (`=`, `+`, `-`, `@`, tab, CR first) gets a leading `'`.
    fn text(mut self, name: &str, value: &str) -> Self {
        let risky = value.starts_with(['=', '+', '-', '@', '\t', '\r']);
        self.0[Self::col(name)] = if risky {
            format!("'{value}")
        } else {
            value.to_string()
        };
        self
    }

    /// A JSON value as the JSON writes it (numbers digit for digit; null and absent: empty).
    fn value(mut self, name: &str, value: &Value) -> Self {
        self.0[Self::col(name)] = match value {
            Value::Null => String::new(),
            Value::String(s) => return self.text(name, s),
            Value::Array(items) => {
                let words: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                return self.text(name, &words.join(" "));
            }
            other => other.to_string(),
        };
        self
    }

    /// The fields of `object` named in `names` (JSON name, column).
    fn fields(mut self, object: &Value, names: &[(&str, &str)]) -> Self {
        for (field, column) in names {
            self = self.value(column, &object[*field]);
        }
        self
    }
}

const FUNCTION_FIELDS: [(&str, &str); 11] = [
    ("symbol", "symbol"),
    ("module", "module"),
    ("source", "source"),
    ("provenance", "provenance"),
    ("cpu_time_s", "cpu_time_s"),
    ("energy_j", "energy_j"),
    ("self_cpu_time_s", "self_cpu_time_s"),
    ("self_energy_j", "self_energy_j"),
    ("calls", "calls_count"),
    ("samples", "samples_count"),
    ("pid", "pid"),
];

/// Whether the energy of the top-level domains was estimated anywhere.
fn report_provenance(report: &Value) -> &'static str {
    let estimated = report["totals"]["domains"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, d)| d["top_level"] == true)
        .any(|(_, d)| d["provenance"] == "estimated");
    if estimated { "estimated" } else { "measured" }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// The rows of a report in its JSON form.
fn rows(report: &Value) -> Vec<Row> {
    let provenance = Value::from(report_provenance(report));
    let mut rows = Vec::new();
    for (name, d) in report["totals"]["domains"]
        .as_object()
        .into_iter()
        .flatten()
    {
        rows.push(
            Row::new("domain")
                .text("domain", name)
                .fields(
                    d,
                    &[
                        ("provenance", "provenance"),
                        ("energy_j", "energy_j"),
                        ("avg_power_w", "avg_power_w"),
                    ],
                )
                .value("duration_s", &report["totals"]["duration_s"]),
        );
    }
    for p in items(&report["processes"]) {
        rows.push(
            Row::new("process")
                .fields(
                    p,
                    &[
                        ("pid", "pid"),
                        ("ppid", "ppid"),
                        ("comm", "comm"),
                        ("cmdline", "command"),
                        ("cpu_time_s", "cpu_time_s"),
                        ("energy_j", "energy_j"),
                        ("avg_power_w", "avg_power_w"),
                        ("share_pct", "share_pct"),
                        ("alive_s", "duration_s"),
                    ],
                )
                .value("provenance", &provenance),
        );
    }
    for f in items(&report["functions"]) {
        rows.push(Row::new("function").fields(f, &FUNCTION_FIELDS));
    }
    for f in items(&report["function_totals"]) {
        rows.push(Row::new("function_total").fields(f, &FUNCTION_FIELDS[..10]));
    }
    for run in items(&report["repeat"]["runs"]) {
        let index = &run["index"];
        rows.push(
            Row::new("run")
                .value("run", index)
                .fields(
                    run,
                    &[
                        ("duration_s", "duration_s"),
                        ("energy_j", "energy_j"),
                        ("outlier", "outlier"),
                    ],
                )
                .value("provenance", &provenance),
        );
        for (name, d) in run["domains"].as_object().into_iter().flatten() {
            rows.push(
                Row::new("run_domain")
                    .value("run", index)
                    .text("domain", name)
                    .value("energy_j", &d["energy_j"])
                    .value("provenance", &provenance),
            );
        }
        for g in items(&run["process_groups"]) {
            rows.push(
                Row::new("run_process_group")
                    .value("run", index)
                    .fields(
                        g,
                        &[
                            ("group", "group"),
                            ("command", "command"),
                            ("cpu_time_s", "cpu_time_s"),
                            ("energy_j", "energy_j"),
                        ],
                    )
                    .value("provenance", &provenance),
            );
        }
        for f in items(&run["functions"]) {
            rows.push(
                Row::new("run_function")
                    .value("run", index)
                    .fields(f, &[("function", "symbol"), ("energy_j", "energy_j")])
                    .value("provenance", &provenance),
            );
        }
    }
    rows
}

/// Writes a report in its JSON form as CSV.
pub fn write_value(report: &Value, out: &mut dyn Write) -> io::Result<()> {
    let mut writer = csv::Writer::from_writer(out);
    writer.write_record(HEADER).map_err(io::Error::other)?;
    for row in rows(report) {
        writer.write_record(&row.0).map_err(io::Error::other)?;
    }
    writer.flush()
}

/// Writes the report as CSV.
pub fn write(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    let value = serde_json::to_value(report).map_err(io::Error::other)?;
    write_value(&value, out)
}

/// Writes the report as CSV to `path` (`-` for stdout), through [`crate::output`] as the
/// JSON report is.
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    output::write_file_or_stdout(path, who, |out| write(report, out))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(report: &Value) -> Vec<csv::StringRecord> {
        let mut bytes = Vec::new();
        write_value(report, &mut bytes).unwrap();
        let mut reader = csv::Reader::from_reader(bytes.as_slice());
        assert_eq!(
            reader.headers().unwrap(),
            &csv::StringRecord::from(&HEADER[..])
        );
        reader.records().map(Result::unwrap).collect()
    }

    fn sample() -> Value {
        json!({
            "meta": {},
            "processes": [{"pid": 7, "ppid": null, "comm": "sh",
                           "cmdline": ["sh", "-c", "echo \"a, b\"\nx"], "root": true,
                           "cpu_time_s": 0.25, "energy_j": 1.5, "avg_power_w": 3.0,
                           "share_pct": 50.0, "alive_s": 0.5}],
            "functions": [{"symbol": "=cmd|' /C calc'!A0", "module": "m", "pid": 7,
                           "samples": 3, "cpu_time_s": 0.1, "energy_j": 0.6,
                           "self_cpu_time_s": 0.05, "self_energy_j": 0.3,
                           "source": "sampling", "provenance": "measured"}],
            "function_totals": [],
            "totals": {"duration_s": 0.5, "domains": {
                "package-0": {"energy_j": 3.0, "avg_power_w": 6.0, "provenance": "measured",
                              "top_level": true}}},
        })
    }

    #[test]
    fn quotes_per_rfc_4180_and_defuses_formulas() {
        let rows = parse(&sample());
        assert_eq!(rows.len(), 3);
        let process = &rows[1];
        assert_eq!(&process[0], "process");
        // Commas, quotes and a newline survive the round trip.
        assert_eq!(&process[Row::col("command")], "sh -c echo \"a, b\"\nx");
        assert_eq!(&process[Row::col("ppid")], "");
        assert_eq!(&process[Row::col("energy_j")], "1.5");
        assert_eq!(&process[Row::col("provenance")], "measured");
        let function = &rows[2];
        assert_eq!(&function[Row::col("symbol")], "'=cmd|' /C calc'!A0");
        assert_eq!(&function[Row::col("samples_count")], "3");
        assert_eq!(&function[Row::col("calls_count")], "");
    }

    #[test]
    fn one_row_per_run_its_domains_groups_and_functions_when_repeating() {
        let mut report = sample();
        report["repeat"] = json!({"runs": [
            {"index": 1, "duration_s": 1.0, "energy_j": 10.0, "outlier": false,
             "domains": {"package-0": {"energy_j": 10.0}},
             "process_groups": [{"group": "sh", "command": "sh -c x", "energy_j": 4.0,
                                 "cpu_time_s": 0.5}],
             "functions": [{"function": "main", "energy_j": 1.0}]},
            {"index": 2, "duration_s": 1.1, "energy_j": 12.5, "outlier": true,
             "domains": {"package-0": {"energy_j": 12.5}}, "process_groups": [],
             "functions": []}]});
        let rows = parse(&report);
        let runs: Vec<_> = rows.iter().filter(|r| &r[0] == "run").collect();
        assert_eq!(runs.len(), 2);
        assert_eq!(&runs[1][Row::col("run")], "2");
        assert_eq!(&runs[1][Row::col("energy_j")], "12.5");
        assert_eq!(&runs[1][Row::col("outlier")], "true");
        let kinds: Vec<&str> = rows.iter().map(|r| &r[0]).collect();
        for kind in ["run_domain", "run_process_group", "run_function"] {
            assert!(kinds.contains(&kind), "{kinds:?}");
        }
        let function = rows.iter().find(|r| &r[0] == "run_function").unwrap();
        assert_eq!(&function[Row::col("symbol")], "main");
        // Every row says whether its figures were measured or estimated.
        for row in &rows {
            assert_eq!(&row[Row::col("provenance")], "measured", "{row:?}");
        }
    }

    #[test]
    fn estimated_when_a_top_level_domain_is() {
        let mut report = sample();
        report["totals"]["domains"]["model"] =
            json!({"energy_j": 1.0, "provenance": "estimated", "top_level": true});
        let rows = parse(&report);
        let process = rows.iter().find(|r| &r[0] == "process").unwrap();
        assert_eq!(&process[Row::col("provenance")], "estimated");
    }
}
