//! The report's formats: the JSON Schema (`docs/report.schema.json`) against the documented
//! example and broken reports, the guard that every test reads reports through the
//! validating helpers, CSV output checked against the JSON of the same run, and
//! `cg-trace diff`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Output,
};

use cg_tests::{
    REPORT_SCHEMA, assert_adds_up, assert_valid_report, bin, cg_trace, cg_trace_as_given as cg,
    read_report, require_root, schema_errors,
};
use serde_json::{Value, json};

/// The example report in `docs/report.md` (its first ```json block).
fn documented_example() -> Value {
    let doc = include_str!("../../docs/report.md");
    let start = doc
        .find("```json\n")
        .expect("docs/report.md has a JSON example")
        + 8;
    let end = start + doc[start..].find("```").expect("the example block ends");
    serde_json::from_str(&doc[start..end]).expect("the documented example is JSON")
}

#[test]
fn the_schema_is_draft_2020_12_and_pins_the_major_version() {
    let schema: Value = serde_json::from_str(REPORT_SCHEMA).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let mut report = documented_example();
    for (version, valid) in [("1.3", true), ("1.99", true), ("2.0", false), ("1", false)] {
        report["meta"]["schema_version"] = json!(version);
        assert_eq!(schema_errors(&report).is_empty(), valid, "{version}");
    }
}

#[test]
fn the_documented_example_validates() {
    assert_valid_report(&documented_example());
}

/// One error at least, and one naming `pointer`.
fn assert_rejected(report: &Value, pointer: &str) {
    let errors = schema_errors(report);
    assert!(
        errors.iter().any(|e| e.starts_with(pointer)),
        "expected an error at {pointer}, got {errors:#?}"
    );
}

#[test]
fn the_schema_rejects_a_missing_field_a_wrong_type_and_an_unknown_enum() {
    let good = documented_example();

    let mut missing = good.clone();
    missing["totals"]
        .as_object_mut()
        .unwrap()
        .remove("energy_j");
    assert_rejected(&missing, "/totals");

    let mut wrong_type = good.clone();
    wrong_type["processes"][0]["energy_j"] = json!("1.4 J");
    assert_rejected(&wrong_type, "/processes/0/energy_j");

    let mut negative_count = good.clone();
    negative_count["totals"]["intervals_count"] = json!(-1);
    assert_rejected(&negative_count, "/totals/intervals_count");

    let mut provenance = good.clone();
    provenance["meta"]["sources"][0]["provenance"] = json!("guessed");
    assert_rejected(&provenance, "/meta/sources/0/provenance");

    let mut mode = good.clone();
    mode["meta"]["mode"] = json!("daemon");
    assert_rejected(&mode, "/meta/mode");

    let mut not_ours = good.clone();
    not_ours["meta"]["tool"] = json!("other-tool");
    assert_rejected(&not_ours, "/meta/tool");

    // Minor versions may add fields anywhere.
    let mut added = good;
    added["meta"]["new_field_pct"] = json!(1.0);
    added["totals"]["domains"]["model"]["new_figure_j"] = json!(2.0);
    assert_valid_report(&added);
}

#[test]
fn a_null_figure_is_valid_only_where_the_report_says_it_was_not_finite() {
    let mut report = documented_example();
    report["totals"]["domains"]["model"]["avg_power_w"] = Value::Null;
    assert_rejected(&report, "/totals/domains/model/avg_power_w");
    // cg-trace's own note for a figure found not to be finite (report::check_finite).
    report["meta"]["measurement_quality"]["grade"] = json!("degraded");
    report["meta"]["measurement_quality"]["notes"]
        .as_array_mut()
        .unwrap()
        .push(json!(
            "not a finite figure: totals.domains.model.avg_power_w is not a number (shown as \
             null; this is a bug in cg-trace, please report it)"
        ));
    assert_valid_report(&report);
    // Null still is no string, and counts are never null.
    report["totals"]["intervals_count"] = Value::Null;
    assert_rejected(&report, "/totals/intervals_count");
}

#[test]
fn the_repeat_object_follows_its_contract() {
    let mut report = documented_example();
    let run = |index: u64, outlier: bool| {
        json!({
            "index": index, "started_at": "2026-11-21T05:56:54.234Z",
            "ended_at": "2026-11-21T05:56:55.234Z", "duration_s": 1.0, "energy_j": 10.0,
            "domains": {"model": {"energy_j": 10.0}},
            "process_groups": [{"group": "sh", "command": "sh -c x", "energy_j": 4.0,
                                "cpu_time_s": 0.5}],
            "functions": [{"function": "main", "energy_j": 1.0}],
            "outlier": outlier
        })
    };
    report["repeat"] = json!({
        "runs": [run(1, false), run(2, true)],
        "statistics": {"energy_j": {"median": 10.0}},
        "noise_verdict": "excellent"
    });
    assert_valid_report(&report);

    let mut bad = report.clone();
    bad["repeat"]["noise_verdict"] = json!("fine");
    assert_rejected(&bad, "/repeat/noise_verdict");
    let mut bad = report.clone();
    bad["repeat"]["runs"][1]["index"] = json!(0);
    assert_rejected(&bad, "/repeat/runs/1/index");
    let mut bad = report.clone();
    bad["repeat"]["runs"][0]
        .as_object_mut()
        .unwrap()
        .remove("energy_j");
    assert_rejected(&bad, "/repeat/runs/0");

    // Each run may carry its complete report: validated as a report.
    let mut nested = report;
    nested["repeat"]["runs"][0]["report"] = documented_example();
    assert_valid_report(&nested);
    nested["repeat"]["runs"][0]["report"]["totals"]["energy_j"] = json!("a lot");
    assert_rejected(&nested, "/repeat/runs/0/report/totals/energy_j");
}

#[test]
fn budgets_follow_their_contract() {
    let mut report = documented_example();
    report["budgets"] = json!([{
        "kind": "energy", "unit": "J", "program": "build.sh", "limit": 1.0, "value": 1.4,
        "exceeded": true, "excess_pct": 40.0, "statistic": "single run",
        "provenance": "estimated", "processes_count": 1
    }]);
    assert_valid_report(&report);
    report["budgets"][0]["kind"] = json!("time");
    assert_rejected(&report, "/budgets/0/kind");
}

/// Every test file reads reports through `cg_tests::read_report`/`parse_report` (which
/// validate them) or, where it must parse by hand, says so on the line before and validates.
#[test]
fn every_test_reads_reports_through_the_validating_helpers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut unchecked = Vec::new();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") || path.ends_with("formats.rs") {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.contains("serde_json::from_") {
                continue;
            }
            let before = if i > 0 { lines[i - 1] } else { "" };
            if !(before.contains("// Validated below") || before.contains("// Not a report")) {
                unchecked.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        unchecked.is_empty(),
        "parse reports with cg_tests::read_report/parse_report (they validate against \
         docs/report.schema.json), or say on the line before why not:\n{}",
        unchecked.join("\n")
    );
}

// ---- CSV ----

/// A run of cg-burn (a parent and two children with known CPU times), sampled so that there
/// are function rows too, written as JSON (`-o`) and CSV (`--csv`) at once.
fn burn_run(dir: &Path) -> (Value, PathBuf) {
    let csv_path = dir.join("run.csv");
    let burn = bin("cg-burn").display().to_string();
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "10:30",
        "--profile",
        "-q",
        "--csv",
        csv_path.to_str().unwrap(),
        "--",
        &burn,
        "--children",
        "150,80",
        "--self",
        "50",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    (run.report().clone(), csv_path)
}

fn csv_records(text: &str) -> (csv::StringRecord, Vec<csv::StringRecord>) {
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().expect("a header").clone();
    let records = reader
        .records()
        .map(|r| r.expect("an RFC 4180 record"))
        .collect();
    (header, records)
}

fn cell<'a>(header: &csv::StringRecord, record: &'a csv::StringRecord, column: &str) -> &'a str {
    let i = header
        .iter()
        .position(|h| h == column)
        .unwrap_or_else(|| panic!("no column {column} in {header:?}"));
    &record[i]
}

/// The CSV's figure is the JSON's, digit for digit (both come from the same numbers).
fn same(csv_cell: &str, json: &Value) {
    match json {
        Value::Null => assert_eq!(csv_cell, ""),
        Value::Number(n) => assert_eq!(csv_cell, n.to_string()),
        other => panic!("not a figure: {other}"),
    }
}

#[test]
fn csv_rows_match_the_json_report_of_the_same_run() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (report, csv_path) = burn_run(dir.path());
    assert_adds_up(&report);
    let (header, records) = csv_records(&fs::read_to_string(&csv_path).unwrap());
    for column in [
        "energy_j",
        "cpu_time_s",
        "avg_power_w",
        "share_pct",
        "duration_s",
        "self_energy_j",
        "self_cpu_time_s",
        "calls_count",
        "samples_count",
    ] {
        assert!(header.iter().any(|h| h == column), "{column} in {header:?}");
    }
    let of = |record: &str| -> Vec<&csv::StringRecord> {
        records.iter().filter(|r| &r[0] == record).collect()
    };

    let processes = report["processes"].as_array().unwrap();
    let rows = of("process");
    assert_eq!(rows.len(), processes.len());
    assert!(processes.len() >= 3, "cg-burn and two children");
    for (row, p) in rows.iter().zip(processes) {
        same(cell(&header, row, "pid"), &p["pid"]);
        same(cell(&header, row, "energy_j"), &p["energy_j"]);
        same(cell(&header, row, "cpu_time_s"), &p["cpu_time_s"]);
        same(cell(&header, row, "share_pct"), &p["share_pct"]);
        assert_eq!(cell(&header, row, "comm"), p["comm"]);
        assert_eq!(cell(&header, row, "provenance"), "estimated");
    }
    let rows = of("domain");
    let domains = report["totals"]["domains"].as_object().unwrap();
    assert_eq!(rows.len(), domains.len());
    for row in rows {
        same(
            cell(&header, row, "energy_j"),
            &domains[cell(&header, row, "domain")]["energy_j"],
        );
    }
    let functions = report["functions"].as_array().unwrap();
    assert!(!functions.is_empty(), "--profile gives function rows");
    let rows = of("function");
    assert_eq!(rows.len(), functions.len());
    for (row, f) in rows.iter().zip(functions) {
        same(cell(&header, row, "pid"), &f["pid"]);
        same(cell(&header, row, "self_energy_j"), &f["self_energy_j"]);
        same(cell(&header, row, "samples_count"), &f["samples"]);
    }
    assert_eq!(
        of("function_total").len(),
        report["function_totals"].as_array().unwrap().len()
    );
}

#[test]
fn csv_by_extension_and_on_stdout_with_format() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let by_name = dir.path().join("r.csv");
    let out = cg(&[
        "--source",
        "model",
        "-q",
        "-o",
        by_name.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (header, records) = csv_records(&fs::read_to_string(&by_name).unwrap());
    assert_eq!(&header[0], "record");
    assert!(records.iter().any(|r| &r[0] == "process"));

    let out = cg(&[
        "--source", "model", "-q", "-o", "-", "--format", "csv", "--", "true",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (header, _) = csv_records(&String::from_utf8_lossy(&out.stdout));
    assert!(header.iter().any(|h| h == "energy_j"));

    // An unknown extension is refused before anything is traced, naming both formats.
    let out = cg(&[
        "--source",
        "model",
        "-q",
        "-o",
        dir.path().join("r.txt").to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("*.csv"));
}

#[test]
fn csv_goes_through_the_safe_output_path() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    fs::write(&victim, "keep me").unwrap();
    let link = dir.path().join("r.csv");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    for args in [
        vec!["-o", link.to_str().unwrap()],
        vec!["--csv", link.to_str().unwrap(), "-o", "-"],
    ] {
        let mut all = vec!["--source", "model", "-q"];
        all.extend(args);
        all.extend(["--", "true"]);
        let out = cg(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("symbolic link"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me");
    }
}

// ---- diff ----

fn diff(args: &[&str]) -> Output {
    let mut all = vec!["diff"];
    all.extend_from_slice(args);
    cg(&all)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The documented example with `--repeat` runs of these total energies (its one domain,
/// one group and the targets' energy following the total), written to `dir/name`.
fn repeat_report(dir: &Path, name: &str, energies: &[f64]) -> PathBuf {
    let mut report = documented_example();
    let runs: Vec<Value> = energies
        .iter()
        .enumerate()
        .map(|(i, e)| {
            // Each run's own report: the example, with this run's energy (half of it the
            // targets').
            let mut own = documented_example();
            for (pointer, j) in [
                ("/totals/energy_j", *e),
                ("/totals/attributed_energy_j", e / 2.0),
                ("/totals/domains/model/energy_j", *e),
                ("/totals/domains/model/attributed_energy_j", e / 2.0),
            ] {
                *own.pointer_mut(pointer).unwrap() = json!(j);
            }
            json!({
                "index": i + 1, "started_at": "2026-11-21T05:56:54.234Z",
                "ended_at": "2026-11-21T05:56:55.234Z", "duration_s": 1.0, "energy_j": e,
                "attributed_energy_j": e / 2.0,
                "domains": {"model": {"energy_j": e}},
                "process_groups": [{"group": "build.sh", "command": "./build.sh",
                                    "energy_j": e / 2.0, "cpu_time_s": 0.3}],
                "functions": [], "outlier": false, "report": own
            })
        })
        .collect();
    report["repeat"] = json!({"runs": runs, "statistics": {}, "noise_verdict": "good"});
    // The hand-made report keeps the contract the tests hold cg-trace's own to.
    assert_valid_report(&report);
    let path = dir.join(name);
    fs::write(&path, report.to_string()).unwrap();
    path
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn diff_tells_a_significant_regression_from_noise() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = repeat_report(
        d,
        "base.json",
        &[10.0, 10.3, 9.8, 10.1, 9.9, 10.2, 10.05, 9.95],
    );
    // +10 %, every new run above every base run: significant.
    let worse = repeat_report(
        d,
        "worse.json",
        &[11.0, 11.3, 10.8, 11.1, 10.9, 11.2, 11.05, 10.95],
    );
    // +8 % in the median, but as noisy as that: not significant.
    let noisy = repeat_report(
        d,
        "noisy.json",
        &[8.0, 12.9, 9.0, 11.7, 10.9, 13.0, 10.8, 9.2],
    );

    let out = diff(&[s(&base), s(&worse), "--max-increase", "5"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("significant increase"), "{stdout}");
    assert!(stdout.contains("Mann-Whitney U"), "{stdout}");
    assert!(text(&out.stderr).contains("energy regression beyond --max-increase 5 %"));

    // Within the threshold: significant, but allowed.
    let out = diff(&[s(&base), s(&worse), "--max-increase", "15"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = diff(&[
        s(&base),
        s(&noisy),
        "--max-increase",
        "5",
        "--format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The first row is the gated one: the targets' energy.
    let total = &v["rows"][0];
    assert_eq!(total["kind"], "targets");
    assert_eq!(total["gated"], true);
    assert!(
        total["change_energy_pct"].as_f64().unwrap() > 5.0,
        "{total}"
    );
    assert_eq!(
        total["significance"]["verdict"],
        "no significant difference"
    );
    assert_eq!(total["significance"]["method"], "exact");
    assert_eq!(v["regression"], false);

    // Markdown: a table for a pull-request comment.
    let out = diff(&[
        s(&base),
        s(&worse),
        "--max-increase",
        "5",
        "--format",
        "markdown",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let md = text(&out.stdout);
    assert!(
        md.starts_with("### cg-trace energy diff: **regression**"),
        "{md}"
    );
    assert!(md.contains("|---|---:|"), "{md}");
}

#[test]
fn diff_refuses_unknown_schemas_and_what_is_not_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = repeat_report(d, "good.json", &[1.0, 2.0, 3.0]);
    let mut future = documented_example();
    future["meta"]["schema_version"] = json!("2.0");
    let future_path = d.join("future.json");
    fs::write(&future_path, future.to_string()).unwrap();
    let other = d.join("other.json");
    fs::write(&other, r#"{"meta": {"tool": "perf"}, "totals": {}}"#).unwrap();
    let truncated = d.join("truncated.json");
    let full = fs::read_to_string(&good).unwrap();
    fs::write(&truncated, &full[..full.len() / 2]).unwrap();
    for (bad, says) in [
        (
            &future_path,
            "schema version 2.0 is not one this cg-trace reads",
        ),
        (&other, "not a cg-trace report"),
        (&truncated, "not JSON"),
        (&d.join("missing.json"), "cannot read it"),
    ] {
        for (a, b) in [(bad, &good), (&good, bad)] {
            let out = diff(&[s(a), s(b)]);
            assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
            assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
            assert!(out.stdout.is_empty());
        }
    }
    let out = diff(&[s(&good), s(&good), "--max-increase", "-5"]);
    assert_eq!(out.status.code(), Some(2));
    let out = cg(&["-o", "x.json", "diff", s(&good), s(&good)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn diff_of_two_real_runs() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = burn_run(dir.path());
    let (second, _) = burn_run(dir.path());
    let base = dir.path().join("base.json");
    let new = dir.path().join("new.json");
    fs::write(&base, first.to_string()).unwrap();
    fs::write(&new, second.to_string()).unwrap();
    // Re-read through the validating helper: these are the files diff reads.
    read_report(&base);

    let out = diff(&[s(&base), s(&new), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tested"], false);
    let rows = v["rows"].as_array().unwrap();
    let row = |kind: &str, name: &str| {
        rows.iter()
            .find(|r| r["kind"] == kind && r["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}: {rows:#?}"))
    };
    let total = row("total", "energy");
    assert_eq!(
        total["base_energy_j"].as_f64(),
        first["totals"]["energy_j"].as_f64()
    );
    assert_eq!(
        total["new_energy_j"].as_f64(),
        second["totals"]["energy_j"].as_f64()
    );
    // The burner's processes form one group (the parent and its forked children).
    let group = row("process_group", "cg-burn");
    let sum = |r: &Value| -> f64 {
        r["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["comm"] == "cg-burn")
            .map(|p| p["energy_j"].as_f64().unwrap())
            .sum()
    };
    assert!((group["base_energy_j"].as_f64().unwrap() - sum(&first)).abs() < 1e-9);
    assert!((group["new_energy_j"].as_f64().unwrap() - sum(&second)).abs() < 1e-9);
    assert!(rows.iter().any(|r| r["kind"] == "function"));
    // Same machine, same source: no warning.
    assert!(v["warnings"].as_array().unwrap().is_empty(), "{v}");

    // The same pair, gated: the energy of the same workload does not double.
    let out = diff(&[s(&base), s(&new), "--max-increase", "100"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("untested for significance"));

    // The new run's command made to cost twice as much: a regression beyond 5 %, untested.
    let mut doubled = second.clone();
    for pointer in [
        "/totals/attributed_energy_j",
        "/totals/domains/model/attributed_energy_j",
    ] {
        let v = doubled.pointer_mut(pointer).unwrap();
        *v = json!(v.as_f64().unwrap() * 2.0);
    }
    fs::write(&new, doubled.to_string()).unwrap();
    let out = diff(&[s(&base), s(&new), "--max-increase", "5"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stdout));
}
