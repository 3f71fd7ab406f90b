//! `diff` on hand-made reports: rows, medians, the test and its verdicts, the gate (the
//! targets' energy by default, or what `--gate` names), warnings, refusals, and the three
//! renderings.

use serde_json::{Value, json};

use super::*;
use crate::report::read::parse;

/// A single-run report: `processes` as (cmdline, energy_j, cpu_time_s); they are the
/// targets, all in `package-0` (half of it in `core-0`).
fn single(energy_j: f64, processes: &[(&str, f64, f64)]) -> Value {
    let targets_j: f64 = processes.iter().map(|p| p.1).sum();
    json!({
        "meta": {
            "schema_version": "1.3", "tool": "cg-trace", "run_id": "r1", "hostname": "vm",
            "cpu_model": "EPYC", "sources": [{"name": "perf", "provenance": "measured"}]
        },
        "processes": processes.iter().map(|(cmd, e, c)| json!({
            "comm": cmd.rsplit('/').next().unwrap(), "cmdline": [cmd, "--flag"],
            "cpu_time_s": c, "energy_j": e
        })).collect::<Vec<_>>(),
        "functions": [],
        "function_totals": [{"symbol": "hot", "module": "app", "cpu_time_s": 0.5,
                             "energy_j": energy_j / 4.0}],
        "totals": totals(energy_j, targets_j)
    })
}

/// A report's `totals`: the machine's energy and the targets' share of it.
fn totals(energy_j: f64, targets_j: f64) -> Value {
    json!({
        "energy_j": energy_j, "attributed_energy_j": targets_j, "cpu_time_s": 1.0,
        "domains": {
            "package-0": {"energy_j": energy_j, "attributed_energy_j": targets_j,
                          "top_level": true, "provenance": "measured"},
            "core-0": {"energy_j": energy_j / 2.0, "attributed_energy_j": targets_j / 2.0,
                       "top_level": false, "provenance": "measured"}
        }
    })
}

/// A `--repeat` report whose runs have these total energies (one group, `app`, the target,
/// with 60 %).
fn repeated(energies: &[f64]) -> Value {
    let targets: Vec<f64> = energies.iter().map(|e| e * 0.6).collect();
    with_targets(energies, &targets)
}

/// A `--repeat` report whose runs have these total energies and these targets' energies (one
/// group, `app`).
fn with_targets(energies: &[f64], targets: &[f64]) -> Value {
    let mut report = single(energies[0], &[("/usr/bin/app", targets[0], 1.0)]);
    report["repeat"] = json!({
        "runs": energies.iter().zip(targets).enumerate().map(|(i, (e, t))| json!({
            "index": i + 1, "energy_j": e,
            "domains": {"package-0": {"energy_j": e}},
            "process_groups": [{"group": "/opt/app --flag#1", "command": "/opt/app --flag",
                                "energy_j": t, "cpu_time_s": 1.0}],
            "functions": [{"function": "app:hot", "energy_j": e * 0.25}],
            "outlier": false,
            "report": {"totals": totals(*e, *t)}
        })).collect::<Vec<_>>(),
        "statistics": {}, "noise_verdict": "good"
    });
    report
}

fn view(v: &Value) -> ReportView {
    parse("test.json", v.to_string().as_bytes()).unwrap()
}

/// Compared with the default gate (the targets).
fn run(base: &Value, new: &Value, max: Option<f64>) -> Comparison {
    gated(base, new, max, &[])
}

fn gated(base: &Value, new: &Value, max: Option<f64>, gates: &[Gate]) -> Comparison {
    compare(
        ("base.json", &view(base)),
        ("new.json", &view(new)),
        max,
        gates,
    )
}

fn row<'a>(c: &'a Comparison, kind: RowKind, name: &str) -> &'a Row {
    c.rows
        .iter()
        .find(|r| r.kind == kind && r.name == name)
        .unwrap_or_else(|| panic!("no {kind:?} {name} in {:#?}", c.rows))
}

#[test]
fn single_reports_compare_per_domain_group_and_function() {
    let base = single(10.0, &[("/usr/bin/app", 4.0, 1.0), ("/bin/sh", 1.0, 0.5)]);
    let new = single(
        12.0,
        &[
            ("/opt/app", 5.0, 1.5),
            ("/opt/app", 1.0, 0.5),
            ("/usr/bin/gzip", 2.0, 0.2),
        ],
    );
    let c = run(&base, &new, None);
    assert!(!c.tested && !c.regression);
    let total = row(&c, RowKind::Total, "energy");
    assert_eq!((total.base_energy_j, total.new_energy_j), (10.0, 12.0));
    assert!((total.change_energy_pct.unwrap() - 20.0).abs() < 1e-9);
    assert!(total.significance.is_none());
    // Processes group by program, whatever its directory: app's two processes add up.
    let app = row(&c, RowKind::ProcessGroup, "app");
    assert_eq!((app.base_energy_j, app.new_energy_j), (4.0, 6.0));
    assert_eq!(
        (app.base_cpu_time_s, app.new_cpu_time_s),
        (Some(1.0), Some(2.0))
    );
    assert!((app.change_cpu_time_pct.unwrap() - 100.0).abs() < 1e-9);
    // Gone and new groups: 0 on the other side; a new one has no percentage.
    assert_eq!(row(&c, RowKind::ProcessGroup, "sh").new_energy_j, 0.0);
    let gzip = row(&c, RowKind::ProcessGroup, "gzip");
    assert_eq!((gzip.base_energy_j, gzip.change_energy_pct), (0.0, None));
    assert_eq!(row(&c, RowKind::Function, "app:hot").new_energy_j, 3.0);
    assert_eq!(row(&c, RowKind::Domain, "core-0").top_level, Some(false));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn without_runs_the_gate_is_the_figure_alone() {
    let machine = [Gate::Total];
    let base = single(10.0, &[]);
    assert!(
        gated(&base, &single(10.4, &[]), Some(5.0), &machine)
            .rows
            .iter()
            .all(|r| !r.regression)
    );
    let c = gated(&base, &single(10.6, &[]), Some(5.0), &machine);
    assert!(c.regression);
    assert!(row(&c, RowKind::Total, "energy").regression);
    assert!(row(&c, RowKind::Domain, "package-0").regression);
    // A nested domain is not gated (its energy is in its parent's).
    assert!(!row(&c, RowKind::Domain, "core-0").regression);
    assert!(!row(&c, RowKind::Domain, "core-0").gated);
    // No --max-increase, no gate.
    assert!(!gated(&base, &single(20.0, &[]), None, &machine).regression);
    assert!(render::text(&c).contains("untested for significance"));
}

#[test]
fn the_default_gate_is_the_targets_energy_not_the_whole_machines() {
    // A neighbour outside the targets doubles the machine's energy; the targets' is the same.
    let base = with_targets(
        &[10.0, 10.2, 9.9, 10.1, 10.05],
        &[6.0, 6.1, 5.9, 6.05, 5.95],
    );
    let busy = with_targets(
        &[20.0, 20.4, 19.8, 20.2, 20.1],
        &[6.02, 6.08, 5.92, 6.0, 5.97],
    );
    let c = run(&base, &busy, Some(5.0));
    assert!(!c.regression, "{:#?}", c.rows);
    assert_eq!(c.gates, [Gate::Targets]);
    let total = row(&c, RowKind::Total, "energy");
    assert!(!total.gated && total.change_energy_pct.unwrap() > 90.0);
    assert_eq!(
        total.significance.as_ref().unwrap().verdict,
        "significant increase"
    );
    let targets = row(&c, RowKind::Targets, "energy");
    assert!(targets.gated && targets.change_energy_pct.unwrap().abs() < 2.0);
    assert!(row(&c, RowKind::TargetDomain, "package-0").gated);
    assert!(!row(&c, RowKind::TargetDomain, "core-0").gated);
    // Gating the whole machine, as before, calls it a regression.
    assert!(gated(&base, &busy, Some(5.0), &[Gate::Total]).regression);

    // The targets' energy up 10 % while the machine's falls: a regression of the targets.
    let quiet = with_targets(&[8.0, 8.1, 7.9, 8.05, 7.95], &[6.6, 6.7, 6.5, 6.65, 6.55]);
    let c = run(&busy, &quiet, Some(5.0));
    assert!(c.regression);
    let targets = row(&c, RowKind::Targets, "energy");
    assert!(targets.regression && targets.significance.as_ref().unwrap().p_value < 0.05);
    assert!(row(&c, RowKind::TargetDomain, "package-0").regression);
    assert!(!row(&c, RowKind::Total, "energy").regression);
    assert!(!gated(&busy, &quiet, Some(5.0), &[Gate::Total]).regression);
    let text = render::text(&c);
    assert!(text.contains("of the targets' energy"), "{text}");
    assert!(text.contains("context, not gated"), "{text}");
    let line = text.lines().find(|l| l.starts_with("total ")).unwrap();
    assert!(line.contains("context"), "{line}");
    assert!(render::markdown(&c).contains("the targets' energy"));
    let json: Value = serde_json::from_str(&render::json(&c)).unwrap();
    assert_eq!(json["gates"], json!(["targets"]));
    assert_eq!(json["rows"][0]["kind"], "targets");
    assert_eq!(json["rows"][0]["gated"], true);
    assert!(crate::export::html::diff::page(&c).contains("of the targets&#39; energy"));
}

#[test]
fn a_group_or_a_function_can_be_the_gate() {
    let base = single(10.0, &[("/usr/bin/app", 4.0, 1.0), ("/bin/gzip", 1.0, 0.5)]);
    let new = single(10.0, &[("/usr/bin/app", 4.0, 1.0), ("/bin/gzip", 1.5, 0.5)]);
    let group = |name: &str| Gate::Group(name.into());
    assert!(gated(&base, &new, Some(20.0), &[group("gzip")]).regression);
    let c = gated(&base, &new, Some(20.0), &[group("app")]);
    assert!(!c.regression && row(&c, RowKind::ProcessGroup, "app").gated);
    assert!(!row(&c, RowKind::Targets, "energy").gated);
    // The function `app:hot`, by its full name or its symbol; several gates: any fails.
    let hot = |name: &str| Gate::Function(name.into());
    let faster = single(12.0, &[("/usr/bin/app", 4.0, 1.0)]);
    assert!(gated(&base, &faster, Some(5.0), &[hot("app:hot")]).regression);
    assert!(gated(&base, &faster, Some(5.0), &[hot("hot")]).regression);
    assert!(gated(&base, &new, Some(20.0), &[group("app"), group("gzip")]).regression);
    // A gate that names nothing in either report says so.
    let c = gated(&base, &new, Some(5.0), &[group("nginx")]);
    assert!(!c.regression);
    assert!(
        c.warnings.iter().any(|w| w.contains("--gate group:nginx")),
        "{:?}",
        c.warnings
    );
}

#[test]
fn repeated_runs_are_tested_and_told_apart() {
    let base = repeated(&[10.0, 10.2, 9.9, 10.1, 10.05, 9.95, 10.15, 9.85]);
    // Clearly above: every new run beats every base run.
    let higher = repeated(&[11.0, 11.2, 10.9, 11.1, 11.05, 10.95, 11.15, 10.85]);
    let c = run(&base, &higher, Some(5.0));
    assert!(c.tested);
    let total = row(&c, RowKind::Total, "energy");
    let t = total.significance.as_ref().unwrap();
    assert_eq!(t.verdict, "significant increase");
    assert_eq!(t.method, "exact");
    assert!(t.p_value < 0.001, "{}", t.p_value);
    assert!(c.regression && !total.regression);
    assert!(row(&c, RowKind::Targets, "energy").regression);
    // Medians are compared: 10.025 -> 11.025.
    assert!((total.base_energy_j - 10.025).abs() < 1e-9);
    // Process groups are programs, as in a single run's report (the group `app` of command
    // `/opt/app --flag` is the program `app`).
    assert!(
        c.rows
            .iter()
            .any(|r| r.kind == RowKind::ProcessGroup && r.name == "app")
    );
    // Within the threshold, significant or not: no regression.
    assert!(!run(&base, &higher, Some(15.0)).regression);

    // The same level, shuffled: no significant difference, whatever the threshold.
    let same = repeated(&[10.1, 9.9, 10.0, 10.2, 9.85, 10.15, 9.95, 10.05]);
    let c = run(&base, &same, Some(0.0));
    let t = row(&c, RowKind::Total, "energy")
        .significance
        .clone()
        .unwrap();
    assert_eq!(t.verdict, "no significant difference");
    assert!(t.p_value > 0.5, "{}", t.p_value);
    assert!(!c.regression);

    // A noisy rise of 8 % that the test cannot tell from noise is not a regression.
    let noisy_base = repeated(&[8.0, 12.0, 9.0, 11.0, 10.0]);
    let noisy_new = repeated(&[9.5, 12.5, 8.5, 13.0, 10.8]);
    let c = run(&noisy_base, &noisy_new, Some(5.0));
    let total = row(&c, RowKind::Total, "energy");
    assert!(total.change_energy_pct.unwrap() > 5.0);
    let t = total.significance.as_ref().unwrap();
    assert_eq!(t.verdict, "no significant difference");
    // Counted over all 252 splits of the ten runs (U = 16 of 25).
    assert!((t.p_value - 138.0 / 252.0).abs() < 1e-12, "{}", t.p_value);
    assert!(!c.regression);

    // Lower: a significant decrease.
    let lower = repeated(&[9.0, 9.2, 8.9, 9.1, 9.05, 8.95, 9.15, 8.85]);
    let c = run(&base, &lower, Some(0.0));
    assert_eq!(
        row(&c, RowKind::Total, "energy")
            .significance
            .as_ref()
            .unwrap()
            .verdict,
        "significant decrease"
    );
    assert!(!c.regression);
}

#[test]
fn ties_switch_to_the_normal_approximation() {
    let base = repeated(&[10.0, 10.0, 10.0, 11.0, 11.0]);
    let new = repeated(&[12.0, 12.0, 13.0, 13.0, 13.0]);
    let c = run(&base, &new, None);
    let t = row(&c, RowKind::Total, "energy")
        .significance
        .clone()
        .unwrap();
    assert!(t.method.starts_with("normal approximation"), "{}", t.method);
    assert_eq!(t.verdict, "significant increase");
}

#[test]
fn different_sources_and_machines_are_warned_about() {
    let base = single(10.0, &[]);
    let mut new = single(10.0, &[]);
    new["meta"]["sources"] = json!([{"name": "model", "provenance": "estimated"}]);
    new["meta"]["hostname"] = json!("laptop");
    let c = run(&base, &new, None);
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    assert!(c.warnings[0].contains("measured") && c.warnings[0].contains("estimated"));
    assert!(c.warnings[1].contains("different machines"));
    let mut other_source = single(10.0, &[]);
    other_source["meta"]["sources"] = json!([{"name": "powercap", "provenance": "measured"}]);
    let c = run(&base, &other_source, None);
    assert!(
        c.warnings[0].contains("different energy sources"),
        "{:?}",
        c.warnings
    );
    // One side repeated, the other not: said, and not tested.
    let c = run(&repeated(&[10.0, 11.0, 12.0]), &base, None);
    assert!(!c.tested);
    assert!(c.warnings.iter().any(|w| w.contains("only one side")));
}

#[test]
fn markdown_is_a_table_and_defuses_outside_text() {
    let base = single(10.0, &[("/bin/x|<img src=y>@team", 1.0, 0.1)]);
    let new = single(11.0, &[("/bin/x|<img src=y>@team", 2.0, 0.1)]);
    let c = run(&base, &new, Some(5.0));
    let md = render::markdown(&c);
    assert!(md.starts_with("### cg-trace energy diff: **regression**"));
    let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    // Header, separator, targets (total, 2 domains), total, 2 domains, 1 group, 1 function;
    // every row 11 cells wide.
    assert_eq!(table.len(), 10, "{md}");
    for line in &table {
        let unescaped_pipes = line.matches('|').count() - line.matches("\\|").count();
        assert_eq!(unescaped_pipes, 11, "{line}");
    }
    assert!(md.contains("x\\|\\<img src=y\\>\\@team"), "{md}");
    assert!(!md.replace("\\<", "").contains('<'), "{md}");
    assert!(md.contains("+10.0 %"));
}

#[test]
fn json_and_text_carry_every_row_and_the_units() {
    let c = run(
        &repeated(&[10.0, 10.5, 9.5]),
        &repeated(&[11.0, 11.5, 10.5]),
        None,
    );
    let v: Value = serde_json::from_str(&render::json(&c)).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), c.rows.len());
    assert_eq!(v["rows"][0]["kind"], "targets");
    assert!(c.rows.iter().any(|r| r.kind == RowKind::Total && !r.gated));
    assert!(v["rows"][0]["significance"]["p_value"].is_number());
    assert_eq!(v["base"]["runs_count"], 3);
    let text = render::text(&c);
    assert!(text.contains("energy in joules (J)"));
    assert!(text.contains("median of 3 runs, energy measured"));
    assert!(text.contains("BASE J") && text.contains("CPU CHANGE"));
}

#[test]
fn a_repeat_report_and_a_single_run_meet_program_for_program() {
    // The repeat set's group is keyed by its whole command line and place in the tree; the
    // single run's processes by program: both are the program `app` here.
    let base = repeated(&[10.0, 10.2, 9.9]);
    let new = single(11.0, &[("/usr/local/bin/app", 7.0, 1.2)]);
    let mut base = base;
    // A process gone before its command line was read is `[comm]` in a set's groups.
    for r in base["repeat"]["runs"].as_array_mut().unwrap() {
        r["process_groups"].as_array_mut().unwrap().push(
            json!({"group": "[app]#1", "command": "[app]", "energy_j": 1.0, "cpu_time_s": 0.1}),
        );
    }
    let c = run(&base, &new, None);
    let groups: Vec<&Row> = c
        .rows
        .iter()
        .filter(|r| r.kind == RowKind::ProcessGroup)
        .collect();
    assert_eq!(groups.len(), 1, "{groups:#?}");
    let app = row(&c, RowKind::ProcessGroup, "app");
    assert!(
        (app.base_energy_j - 7.0).abs() < 1e-9,
        "median of 7.0, 7.12, 6.94"
    );
    assert!((app.new_energy_j - 7.0).abs() < 1e-9);
}
