//! End-to-end tests of the CI energy gate through the real `cg-trace` binary (root, real
//! eBPF): `diff` gates by default on the targets' energy (the wrapped command and its
//! descendants), so a noisy neighbour that moves the whole machine neither hides nor fakes a
//! regression of the command; and `cg-trace compare` runs two commands interleaved and
//! orders them. Energy here is the power model's estimate, with a busy term, so a target's
//! energy follows its own CPU time (the attribution is real); cg-burn burns CPU time, not
//! wall time, so the work holds on a loaded machine. Run serially (`--test-threads=1`).

use std::path::Path;

use cg_tests::{Background, bin, cg_trace, cg_trace_as_given, num, read_report, require_root};
use serde_json::Value;

/// 5 W idle, 15 W with every CPU busy: a target's energy is its CPU time times
/// (10 W / CPUs), whatever else runs.
const MODEL: [&str; 4] = ["--source", "model", "--model-watts", "5:15"];

/// Runs per set: enough that a rise of 10 % stands far out of the run-to-run noise.
const RUNS: &str = "8";

/// Measures `--repeat 8` runs of cg-burn burning `ms` of its own CPU time; writes the report
/// to `dir/name`.
fn measure(dir: &Path, name: &str, ms: u32) -> std::path::PathBuf {
    let burn = bin("cg-burn").display().to_string();
    let ms = ms.to_string();
    let mut args = MODEL.to_vec();
    args.extend(["--repeat", RUNS, "-q", "--", &burn, "--self", &ms]);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let path = dir.join(name);
    std::fs::write(&path, run.report().to_string()).unwrap();
    path
}

/// `cg-trace diff BASE NEW --max-increase 5 --format json [EXTRA...]`: its status and its
/// comparison.
fn diff(base: &Path, new: &Path, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args = vec![
        "diff",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "--max-increase",
        "5",
        "--format",
        "json",
    ];
    args.extend(extra);
    let out = cg_trace_as_given(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Not a report: diff's comparison.
    let comparison = serde_json::from_str(&stdout)
        .unwrap_or_else(|err| panic!("{err}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), comparison)
}

fn row<'a>(c: &'a Value, kind: &str, name: &str) -> &'a Value {
    c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == kind && r["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {c:#}"))
}

fn change_pct(c: &Value, kind: &str) -> f64 {
    num(row(c, kind, "energy"), "/change_energy_pct")
}

#[test]
fn the_default_gate_judges_the_command_not_a_noisy_neighbour() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // Three sets of the same command: quiet, beside a neighbour that keeps both CPUs busy,
    // and quiet again with 10 % more work (a known extra loop: 440 ms of CPU instead of 400).
    let quiet = measure(dir.path(), "quiet.json", 400);
    let busy = {
        let spin = bin("cg-spin");
        let _neighbours = [
            Background::spawn(&spin, &["0"]),
            Background::spawn(&spin, &["0"]),
        ];
        measure(dir.path(), "busy.json", 400)
    };
    let slower = measure(dir.path(), "slower.json", 440);

    // Unchanged command, the machine's energy up far more than 10 %: no regression.
    let (code, c) = diff(&quiet, &busy, &[]);
    assert!(change_pct(&c, "total") > 10.0, "{c:#}");
    assert!(change_pct(&c, "targets").abs() < 5.0, "{c:#}");
    assert_eq!(c["gates"], serde_json::json!(["targets"]));
    assert_eq!(row(&c, "total", "energy")["gated"], false);
    assert_eq!(code, Some(0), "{c:#}");
    // (Gating on the whole machine, as diff did before, calls it a regression.)
    assert_eq!(diff(&quiet, &busy, &["--gate", "total"]).0, Some(3));

    // 10 % more work while the machine's energy falls by more than 10 %: a regression.
    let (code, c) = diff(&busy, &slower, &[]);
    assert!(change_pct(&c, "total") < -10.0, "{c:#}");
    let targets = row(&c, "targets", "energy");
    let rise = num(targets, "/change_energy_pct");
    assert!((6.0..15.0).contains(&rise), "{c:#}");
    assert!(num(targets, "/significance/p_value") < 0.05, "{c:#}");
    assert_eq!(targets["regression"], true);
    assert_eq!(
        row(&c, "process_group", "cg-burn")["regression"],
        false,
        "not gated"
    );
    assert_eq!(code, Some(3), "{c:#}");
    assert_eq!(diff(&busy, &slower, &["--gate", "total"]).0, Some(0));
    assert_eq!(
        diff(&busy, &slower, &["--gate", "group:cg-burn"]).0,
        Some(3)
    );

    // The text says what was gated; the noise verdict is the targets'.
    let out = cg_trace_as_given(&[
        "diff",
        busy.to_str().unwrap(),
        slower.to_str().unwrap(),
        "--max-increase",
        "5",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("of the targets' energy"), "{text}");
    assert!(text.contains("context, not gated"), "{text}");
    let report = read_report(&busy);
    assert_eq!(report["repeat"]["noise_of"], "attributed_energy_j");
    let targets_cv = num(
        &report["repeat"]["statistics"],
        "/attributed_energy_j/cv_pct",
    );
    assert!(targets_cv < 5.0, "{:#}", report["repeat"]["statistics"]);
}

#[test]
fn an_unnamed_budget_limits_the_targets() {
    require_root();
    let burn = bin("cg-burn").display().to_string();
    // 0.2 s of CPU at 10 W / CPUs (at most 2 J), then a second asleep: the machine draws at
    // least 5 W (idle) over 1.2 s or more (6 J and more), the command well under 3 J.
    let command = format!("{burn} --self 200; sleep 1");
    let mut args = MODEL.to_vec();
    args.extend(["--max-energy", "3", "-q", "--", "sh", "-c", &command]);
    let run = cg_trace(&args);
    let report = run.report();
    let budget = &report["budgets"][0];
    let targets = num(report, "/totals/attributed_energy_j");
    assert!((num(budget, "/value") - targets).abs() < 1e-9, "{budget:#}");
    assert!(targets < 3.0, "{:#}", report["totals"]);
    assert!(
        num(report, "/totals/energy_j") > 3.0,
        "{:#}",
        report["totals"]
    );
    assert_eq!(budget["exceeded"], false, "{budget:#}");
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
}

#[test]
fn compare_runs_two_commands_interleaved_and_orders_them() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("order.log");
    let out = dir.path().join("compare.json");
    let burn = bin("cg-burn").display().to_string();
    let step = |tag: &str, ms: u32| format!("echo {tag} >> {}; {burn} --self {ms}", log.display());
    let (a, b) = (step("A", 150), step("B", 300));
    let prepare = format!("echo P >> {}", log.display());
    let mut args = MODEL.to_vec();
    args.extend([
        "compare",
        "-n",
        "8",
        "--prepare",
        &prepare,
        "--max-increase",
        "50",
        "--format",
        "json",
        "-o",
        out.to_str().unwrap(),
        &a,
        &b,
    ]);
    let run = cg_trace_as_given(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    // B does twice A's work: beyond +50 %, significantly.
    assert_eq!(run.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("energy regression"), "{stderr}");
    // Not a report: compare's comparison.
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(c["base"]["runs_count"], 8);
    assert_eq!(c["new"]["runs_count"], 8);
    assert!(c["base"]["path"].as_str().unwrap().starts_with("A: echo A"));
    let targets = row(&c, "targets", "energy");
    let significance = &targets["significance"];
    assert_eq!(significance["verdict"], "significant increase", "{c:#}");
    assert!(num(significance, "/p_value") < 0.05, "{c:#}");
    let ratio = num(targets, "/new_energy_j") / num(targets, "/base_energy_j");
    assert!((1.6..2.5).contains(&ratio), "{c:#}");
    // Each run after its prepare step, A and B in turn.
    let order = std::fs::read_to_string(&log).unwrap().replace('\n', "");
    assert_eq!(order, "PAPB".repeat(8));

    // The same command on both sides: no regression.
    let same = step("A", 150);
    let mut args = MODEL.to_vec();
    args.extend(["compare", "-n", "5", "--max-increase", "20", &same, &same]);
    let run = cg_trace_as_given(&args);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("result: no regression"), "{stdout}");
}

#[test]
fn compare_refuses_what_it_cannot_do() {
    require_root();
    let run = cg_trace_as_given(&["compare", "-n", "2", "--max-increase", "-1", "true", "true"]);
    assert_eq!(run.status.code(), Some(2));
    let run = cg_trace_as_given(&["compare", "true", " "]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("command B is empty"));
    // A failing command ends the set with its status, and no comparison.
    let run = cg_trace_as_given(&["--source", "model", "compare", "-n", "2", "true", "exit 7"]);
    assert_eq!(run.status.code(), Some(7));
    assert!(String::from_utf8_lossy(&run.stderr).contains("no comparison"));
    let run = cg_trace_as_given(&["--interval", "50", "compare", "true", "true"]);
    assert_eq!(run.status.code(), Some(2));
}

/// The cg-trace commands of each YAML example of `docs/ci.md` (a line's text from
/// `cg-trace ` on, `sudo` dropped): a block's measuring command, then its diff.
fn ci_examples() -> Vec<Vec<String>> {
    let doc = include_str!("../../docs/ci.md");
    doc.split("```yaml\n")
        .skip(1)
        .map(|block| {
            let block = &block[..block.find("```").expect("the YAML block ends")];
            block
                .lines()
                .filter_map(|line| {
                    let at = line.find("cg-trace ")?;
                    let command = &line[at..];
                    let word = command["cg-trace ".len()..].split(' ').next()?;
                    (word.starts_with('-') || word == "diff").then(|| command.to_string())
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_ci_examples_commands_run_end_to_end() {
    require_root();
    let examples = ci_examples();
    assert_eq!(examples.len(), 2, "GitHub Actions and GitLab CI");
    let cg_trace_dir = bin("cg-trace").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        cg_trace_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let burn = bin("cg-burn").display().to_string();
    for commands in examples {
        let [measure, diff] = commands.as_slice() else {
            panic!("a measuring command and a diff: {commands:?}");
        };
        assert!(measure.contains("--repeat") && diff.starts_with("cg-trace diff "));
        let dir = tempfile::tempdir().unwrap();
        let sh = |command: &str| {
            std::process::Command::new("sh")
                .args(["-c", command])
                .current_dir(dir.path())
                .env("PATH", &path)
                .output()
                .expect("running sh")
        };
        let bench = |ms: u32| {
            let script = dir.path().join("bench.sh");
            std::fs::write(&script, format!("#!/bin/sh\nexec {burn} --self {ms}\n")).unwrap();
            sh(&format!("chmod +x {}", script.display()));
            let out = sh(measure);
            assert!(out.status.success(), "{measure}: {out:?}");
        };
        // The base branch: its report goes where the diff reads the base.
        bench(200);
        let base = diff.split(' ').nth(2).unwrap();
        let base = dir.path().join(base);
        std::fs::create_dir_all(base.parent().unwrap()).unwrap();
        std::fs::rename(dir.path().join("energy.json"), &base).unwrap();
        // A change that does half as much again: the job fails, and says why.
        bench(300);
        let out = sh(diff);
        let table = std::fs::read_to_string(dir.path().join("diff.md")).unwrap();
        assert_eq!(out.status.code(), Some(3), "{diff}: {out:?}\n{table}");
        assert!(
            table.starts_with("### cg-trace energy diff: **regression**"),
            "{table}"
        );
        assert!(table.contains("the targets' energy"), "{table}");
        // A change that does less: it passes.
        bench(100);
        let out = sh(diff);
        assert_eq!(out.status.code(), Some(0), "{diff}: {out:?}");
    }
}
