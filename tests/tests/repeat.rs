//! End-to-end tests of repeated runs and budgets through the real `cg-trace` binary (root,
//! real eBPF): `--repeat` statistics on workloads whose energy is known (a constant-power
//! model makes energy exactly the run's duration times the power; the model's busy term makes
//! a process's energy proportional to its CPU time), an outlier run injected through a
//! counter file, the noise verdict (on the targets' energy), a set interrupted by SIGINT, per-run energy from a power
//! meter's log, and the exit statuses of `--max-energy`/`--max-power`. Run serially
//! (`--test-threads=1`): they measure time on a shared machine.

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use cg_tests::{FakePowerLog, Linear, LogForm, assert_adds_up, bin, cg_trace, num, require_root};
use serde_json::Value;

/// A constant 10 W whatever runs: a run's energy is 10 W x its duration.
const FLAT_10_W: [&str; 4] = ["--source", "model", "--model-watts", "10:10"];

fn runs(report: &Value) -> &Vec<Value> {
    report["repeat"]["runs"].as_array().expect("repeat.runs")
}

/// A shell script that sleeps `seconds[n - 1]` on its n-th run (a counter file beside it),
/// the last figure for any later run.
fn sleeper(dir: &std::path::Path, seconds: &[f64]) -> Vec<String> {
    let steps: Vec<String> = seconds.iter().map(|s| format!("sleep {s}")).collect();
    per_run(dir, &steps)
}

/// A shell script that runs `steps[n - 1]` on its n-th run (a counter file beside it), the
/// last step for any later run.
fn per_run(dir: &std::path::Path, steps: &[String]) -> Vec<String> {
    let counter = dir.join("count");
    let cases: String = steps
        .iter()
        .enumerate()
        .map(|(i, step)| format!("{}) {step};; ", i + 1))
        .collect();
    let script = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; case $n in {cases}*) \
         {last};; esac",
        c = counter.display(),
        last = steps.last().unwrap()
    );
    vec!["sh".into(), "-c".into(), script]
}

fn with_command<'a>(args: &[&'a str], command: &'a [String]) -> Vec<&'a str> {
    let mut all = args.to_vec();
    all.push("--");
    all.extend(command.iter().map(String::as_str));
    all
}

/// The sample coefficient of variation (n - 1), in percent (0 for a mean of 0).
fn cv_pct(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    if mean.abs() > 0.0 {
        100.0 * var.sqrt() / mean.abs()
    } else {
        0.0
    }
}

#[test]
fn steady_runs_are_kept_and_their_noise_is_their_own() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let command = sleeper(dir.path(), &[1.2]);
    let mut args = FLAT_10_W.to_vec();
    args.extend(["--repeat", "4", "--warmup", "1", "--cooldown", "0.2"]);
    let began = std::time::Instant::now();
    let run = cg_trace(&with_command(&args, &command));
    let wall_s = began.elapsed().as_secs_f64();
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    // The warm-up ran, unmeasured: the counter says five runs.
    let count = std::fs::read_to_string(dir.path().join("count")).unwrap();
    assert_eq!(count.trim(), "5");
    let repeat = &report["repeat"];
    assert_eq!(repeat["runs_requested_count"], 4);
    assert_eq!(repeat["warmup_runs_count"], 1);
    let runs = runs(report);
    assert_eq!(runs.len(), 4, "{repeat:#}");
    let mut previous_end = String::new();
    let mut measured_s = 0.0;
    for (i, r) in runs.iter().enumerate() {
        assert_eq!(r["index"], i + 1);
        // 10 W x the run's duration, which is the sleep's and a little more.
        let (energy, duration) = (num(r, "/energy_j"), num(r, "/duration_s"));
        assert!((energy - 10.0 * duration).abs() < 1e-6, "{r:#}");
        // At least the sleep; and the runs, one after another, fit in the invocation with the
        // warm-up's sleep (no run counts the warm-up, a cool-down or another run).
        assert!(duration >= 1.15, "{r:#}");
        measured_s += duration;
        // (No claim on `outlier`: with runs this alike the IQR is a few ms of jitter wide.)
        assert!(num(r, "/domains/model/energy_j") > 0.0);
        // Each run's own report, complete, adds up.
        assert_adds_up(&r["report"]);
        // RFC 3339 times, in order, the cooldown between runs.
        let (started, ended) = (
            r["started_at"].as_str().unwrap(),
            r["ended_at"].as_str().unwrap(),
        );
        assert!(
            started.ends_with('Z') && started < ended,
            "{started} {ended}"
        );
        assert!(previous_end.as_str() < started, "{previous_end} {started}");
        previous_end = ended.to_string();
        // Matched by command line and place in the tree, not by pid.
        let groups = r["process_groups"].as_array().unwrap();
        assert!(
            groups
                .iter()
                .any(|g| g["group"].as_str().unwrap().ends_with("> sleep 1.2#1")),
            "{groups:#?}"
        );
    }
    assert!(
        measured_s + 1.2 <= wall_s,
        "the runs' {measured_s:.3} s and the warm-up's 1.2 s exceed the invocation's {wall_s:.3} s"
    );
    let pids: std::collections::BTreeSet<u64> = runs
        .iter()
        .map(|r| r["report"]["processes"][0]["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 4, "each run is a new process");
    let stats = &repeat["statistics"];
    let energy = &stats["energy_j"];
    assert_eq!(energy["runs_count"], 4);
    // How noisy the runs are is the machine's (the jitter of starting and ending a process,
    // tens of ms on a quiet machine, more under load): what is checked is that the figures
    // are the runs' own (the sample CV of the four energies) and the verdict follows them.
    let cv = num(energy, "/cv_pct");
    let energies: Vec<f64> = runs.iter().map(|r| num(r, "/energy_j")).collect();
    assert!(
        (cv - cv_pct(&energies)).abs() < 1e-3,
        "{energy:#} against the runs' {energies:?}"
    );
    // The verdict is the targets' (a sleep's sliver of the active energy: none at a flat
    // 10 W): the same bounds.
    assert_eq!(repeat["noise_of"], "attributed_energy_j");
    let targets = &stats["attributed_energy_j"];
    assert_eq!(targets["runs_count"], 4);
    let targets_cv = num(targets, "/cv_pct");
    let attributed: Vec<f64> = runs
        .iter()
        .map(|r| num(r, "/attributed_energy_j"))
        .collect();
    assert!(
        (targets_cv - cv_pct(&attributed)).abs() < 1e-3,
        "{targets:#} against the runs' {attributed:?}"
    );
    let verdict = match targets_cv {
        cv if cv < 2.0 => "excellent",
        cv if cv < 5.0 => "good",
        cv if cv < 10.0 => "moderate",
        _ => "high-noise",
    };
    assert_eq!(repeat["noise_verdict"], verdict, "{targets:#}");
    let flagged: Vec<&Value> = runs.iter().filter(|r| r["outlier"] == true).collect();
    assert_eq!(
        flagged.len(),
        targets["outlier_runs"].as_array().unwrap().len(),
        "{targets:#}"
    );
    assert!(num(energy, "/min") <= num(energy, "/median"));
    assert!(num(energy, "/median") <= num(energy, "/max"));
    assert!(
        stats["quartile_method"]
            .as_str()
            .unwrap()
            .contains("type 7")
    );
    let group = stats["process_groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"].as_str().unwrap().ends_with("> sleep 1.2#1"))
        .unwrap();
    assert_eq!(group["energy_j"]["runs_count"], 4);
    assert_eq!(group["name"], "sleep");
    // The top level is the representative run's report.
    let representative = repeat["representative_run"].as_u64().unwrap() as usize;
    assert_eq!(
        report["meta"]["run_id"],
        runs[representative - 1]["report"]["meta"]["run_id"]
    );
    assert_adds_up(report);
    let stderr = run.stderr();
    assert!(stderr.contains("REPEAT: 4 measured run(s)"), "{stderr}");
    assert!(stderr.contains(&format!("noise: {verdict}")), "{stderr}");
    assert!(!stderr.contains("warning: the runs are noisy"), "{stderr}");
}

#[test]
fn an_outlier_run_is_flagged_and_the_set_is_called_noisy() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // Runs 1-5 burn 0.4, 0.6, 2.5, 0.5, 0.45 s of CPU. The targets' energies are 10 W / CPUs
    // x that (the model's busy term): quartiles at 0.45 and 0.6 of that scale, fences at
    // 0.225 and 0.825; only the third run is beyond.
    let burn = bin("cg-burn").display().to_string();
    let steps: Vec<String> = [400, 600, 2500, 500, 450]
        .iter()
        .map(|ms| format!("{burn} --self {ms}"))
        .collect();
    let command = per_run(dir.path(), &steps);
    let mut args = vec!["--source", "model", "--model-watts", "5:15"];
    args.extend(["--repeat", "5"]);
    let run = cg_trace(&with_command(&args, &command));
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let runs = runs(report);
    assert_eq!(runs.len(), 5);
    let flagged: Vec<u64> = runs
        .iter()
        .filter(|r| r["outlier"] == true)
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(
        flagged,
        [3],
        "{:#}",
        report["repeat"]["statistics"]["attributed_energy_j"]
    );
    let targets = &report["repeat"]["statistics"]["attributed_energy_j"];
    assert_eq!(targets["outlier_runs"], serde_json::json!([3]));
    assert!(num(targets, "/cv_pct") > 10.0, "{targets:#}");
    assert_eq!(report["repeat"]["noise_verdict"], "high-noise");
    // The representative run is not the outlier.
    assert_ne!(report["repeat"]["representative_run"], 3);
    let stderr = run.stderr();
    assert!(stderr.contains("OUTLIER"), "{stderr}");
    assert!(
        stderr.contains("warning: the runs are noisy (high-noise"),
        "{stderr}"
    );
}

#[test]
fn process_energy_statistics_follow_cpu_time() {
    require_root();
    // The model's busy term: 5 W idle, 10 W more per busy CPU; each child's energy is its CPU
    // time times (10 W / CPUs), whatever else the machine does, and cg-burn burns CPU time,
    // not wall time.
    let burn = bin("cg-burn").display().to_string();
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "5:15",
        "--repeat",
        "3",
        "--",
        &burn,
        "--children",
        "300,150",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let groups = report["repeat"]["statistics"]["process_groups"]
        .as_array()
        .unwrap();
    let child = |rank: &str| {
        groups
            .iter()
            .find(|g| {
                let key = g["group"].as_str().unwrap();
                key.contains(" > ") && key.ends_with(rank)
            })
            .unwrap_or_else(|| panic!("no child {rank}: {groups:#?}"))
    };
    let (first, second) = (child("#1"), child("#2"));
    for g in [first, second] {
        assert_eq!(g["energy_j"]["runs_count"], 3, "{g:#}");
        assert!(num(g, "/cpu_time_s/cv_pct") < 10.0, "{g:#}");
    }
    let (cpu1, cpu2) = (
        num(first, "/cpu_time_s/median"),
        num(second, "/cpu_time_s/median"),
    );
    assert!((0.28..0.4).contains(&cpu1), "{first:#}");
    assert!((0.14..0.22).contains(&cpu2), "{second:#}");
    let ratio = num(first, "/energy_j/median") / num(second, "/energy_j/median");
    assert!((1.6..2.4).contains(&ratio), "{ratio}");
    for r in runs(report) {
        assert_adds_up(&r["report"]);
    }
}

#[test]
fn function_statistics_over_profiled_runs() {
    require_root();
    let burn = bin("cg-burn").display().to_string();
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "5:15",
        "--repeat",
        "3",
        "--profile",
        "--",
        &burn,
        "--children",
        "200",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    for r in runs(report) {
        assert!(!r["functions"].as_array().unwrap().is_empty(), "{r:#}");
        // Each run's sampler figures are its own, not the set's so far (~20 samples at
        // 99 Hz over 200 ms of CPU; 3 runs would make 60).
        let samples = num(
            &r["report"]["meta"]["function_profiling"]["sampling"],
            "/samples_count",
        );
        assert!((5.0..45.0).contains(&samples), "{samples}");
    }
    // The program's entry frame is in every sample of every run: its inclusive energy is
    // the cg-burn processes' energy, run by run.
    let functions = report["repeat"]["statistics"]["functions"]
        .as_array()
        .unwrap();
    let entry = functions
        .iter()
        .find(|f| {
            f["function"]
                .as_str()
                .unwrap()
                .ends_with("std::rt::lang_start")
        })
        .unwrap_or_else(|| panic!("{functions:#?}"));
    assert_eq!(entry["energy_j"]["runs_count"], 3);
    let mut process_j: Vec<f64> = runs(report)
        .iter()
        .map(|r| num(&r["report"]["totals"], "/attributed_energy_j"))
        .collect();
    process_j.sort_by(f64::total_cmp);
    let median = num(entry, "/energy_j/median");
    assert!(
        (median - process_j[1]).abs() < 0.25 * process_j[1],
        "{median} vs {process_j:?}"
    );
}

#[test]
fn probed_function_calls_are_counted_run_by_run() {
    require_root();
    let funcs = bin("cg-funcs").display().to_string();
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "10:30",
        "--repeat",
        "3",
        "--func",
        "cg_work_*",
        "--func",
        "libcgfuncs_lib.so:cglib_*",
        "--",
        &funcs,
        "--calls",
        "50",
        "--units",
        "10",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    for r in runs(report) {
        // Exactly the run's own calls (a library probed once it was mapped in the first run
        // stays probed for the next ones).
        let calls: std::collections::BTreeMap<String, u64> = r["report"]["functions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["symbol"].as_str().unwrap().to_string(),
                    f["calls"].as_u64().unwrap(),
                )
            })
            .collect();
        for name in ["cg_work_a", "cg_work_b", "cglib_work"] {
            assert_eq!(calls.get(name), Some(&50), "run {}: {calls:?}", r["index"]);
        }
        assert_adds_up(&r["report"]);
    }
    let functions = report["repeat"]["statistics"]["functions"]
        .as_array()
        .unwrap();
    assert!(
        functions
            .iter()
            .any(|f| f["function"].as_str().unwrap().ends_with(":cglib_work")
                && f["energy_j"]["runs_count"] == 3),
        "{functions:#?}"
    );
}

#[test]
fn a_failing_run_ends_the_set_with_its_status() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("count");
    // Each run burns 0.1 s of CPU: 1 J / CPUs for the command at 10 W per busy CPU.
    let script = format!(
        "n=$(cat {c} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {c}; {burn} --self 100; \
         [ $n -ne 2 ] || exit 5",
        c = counter.display(),
        burn = bin("cg-burn").display()
    );
    let mut args = vec!["--source", "model", "--model-watts", "5:15"];
    args.extend([
        "--repeat",
        "4",
        "--max-energy",
        "0.01",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let run = cg_trace(&args);
    // The command's status, not the budget's 3.
    assert_eq!(run.code(), Some(5), "{}", run.stderr());
    let report = run.report();
    assert_eq!(runs(report).len(), 2);
    assert_eq!(runs(report)[1]["command_exit_code"], 5);
    assert_eq!(
        report["repeat"]["stopped_early"],
        "measured run 2 failed (exit status 5)"
    );
    assert_eq!(report["budgets"][0]["exceeded"], true);
    let count = std::fs::read_to_string(&counter).unwrap();
    assert_eq!(count.trim(), "2", "no run after the failed one");
}

#[test]
fn sigint_keeps_the_runs_completed_so_far() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.json");
    let mut child = Command::new(bin("cg-trace"))
        .args(FLAT_10_W)
        .args(["--repeat", "6", "-o"])
        .arg(&out)
        .args(["--", "sleep", "0.4"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.contains("run 2/6 done") {
            // SAFETY: a signal to the child we started.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        }
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    let report: Value = cg_tests::read_report(&out);
    let repeat = &report["repeat"];
    assert_eq!(runs(&report).len(), 2, "{repeat:#}");
    assert!(
        repeat["stopped_early"].as_str().unwrap().contains("SIGINT"),
        "{repeat:#}"
    );
}

#[test]
fn sigint_during_the_cooldown_ends_the_set_at_once() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report.json");
    let mut child = Command::new(bin("cg-trace"))
        .args(FLAT_10_W)
        .args(["--repeat", "3", "--cooldown", "30", "-o"])
        .arg(&out)
        .args(["--", "sleep", "0.1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut said = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line.contains("run 1/3 done") {
            // SAFETY: a signal to the child we started.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        }
    }
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    // Not after the 30 s pause.
    assert!(started.elapsed() < Duration::from_secs(25), "{said}");
    let report: Value = cg_tests::read_report(&out);
    assert_eq!(runs(&report).len(), 1);
    assert_eq!(
        report["repeat"]["stopped_early"],
        "interrupted by SIGINT between runs"
    );
}

#[test]
fn each_run_gets_its_own_energy_from_the_power_meter() {
    require_root();
    // A meter reading a constant 40 W: each run's meter energy is 40 W x its duration.
    let meter = FakePowerLog::start(
        LogForm::EpochWatts,
        Linear {
            idle_w: 40.0,
            k_w_per_cpu: 0.0,
        },
        Duration::from_millis(50),
        None,
    );
    let log = meter.path().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let command = sleeper(dir.path(), &[0.5, 1.0, 0.5]);
    let mut args = vec![
        "--power-log",
        &log,
        "--no-gpu",
        "--perf-root",
        "/nonexistent",
        "--powercap-root",
        "/nonexistent",
        "--calibrate-ms",
        "200",
        "--repeat",
        "3",
    ];
    args = with_command(&args, &command);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_eq!(report["meta"]["sources"][0]["name"], "meter");
    let runs = runs(report);
    assert_eq!(runs.len(), 3);
    let energies: Vec<f64> = runs
        .iter()
        .map(|r| num(r, "/domains/meter/energy_j"))
        .collect();
    for r in runs {
        let (energy, duration) = (num(r, "/domains/meter/energy_j"), num(r, "/duration_s"));
        assert!(
            (energy - 40.0 * duration).abs() < 0.05 * 40.0 * duration,
            "run {}: {energy} J over {duration} s",
            r["index"]
        );
        assert_eq!(
            r["report"]["totals"]["domains"]["meter"]["provenance"],
            "measured"
        );
        assert_adds_up(&r["report"]);
    }
    // The second run slept twice as long as the others: about twice their energy.
    assert!(
        energies[1] > 1.6 * energies[0] && energies[1] > 1.6 * energies[2],
        "{energies:?}"
    );
}

#[test]
fn budgets_exit_3_when_exceeded_and_keep_a_failing_commands_status() {
    require_root();
    // 5 W idle, 10 W per busy CPU: burning 0.3 s of CPU costs the command 3 J / CPUs (well
    // over 0.01 J); a limit without a name is on the command's (the targets') energy.
    let burn = bin("cg-burn").display().to_string();
    let busy_model = ["--source", "model", "--model-watts", "5:15"];
    let mut args = busy_model.to_vec();
    args.extend(["--max-energy", "0.01"]);
    args.extend(["--", &burn, "--self", "300"]);
    let over = cg_trace(&args);
    assert_eq!(over.code(), Some(3), "{}", over.stderr());
    let report = over.report();
    let budgets = report["budgets"].as_array().unwrap();
    assert_eq!(budgets.len(), 1);
    assert_eq!(budgets[0]["kind"], "energy");
    assert_eq!(budgets[0]["unit"], "J");
    assert_eq!(budgets[0]["limit"], 0.01);
    assert_eq!(budgets[0]["exceeded"], true);
    let targets_j = num(report, "/totals/attributed_energy_j");
    assert!(
        (num(&budgets[0], "/value") - targets_j).abs() < 1e-9,
        "{budgets:#?}"
    );
    let line = over
        .stderr()
        .lines()
        .filter(|l| l.contains("budget exceeded"))
        .map(String::from)
        .collect::<Vec<_>>();
    assert_eq!(line.len(), 1, "{}", over.stderr());
    assert!(line[0].contains("energy of the targets"), "{}", line[0]);
    assert!(line[0].contains("--max-energy 0.01 J by"), "{}", line[0]);
    assert!(line[0].contains("ESTIMATED"), "{}", line[0]);

    // Within budget: 0, the budget recorded as kept.
    let mut args = busy_model.to_vec();
    args.extend(["--max-energy", "100", "--max-power", "20"]);
    args.extend(["--", &burn, "--self", "300"]);
    let within = cg_trace(&args);
    assert_eq!(within.code(), Some(0), "{}", within.stderr());
    let report = within.report();
    let budgets = report["budgets"].as_array().unwrap();
    assert_eq!(budgets.len(), 2);
    assert!(
        budgets.iter().all(|b| b["exceeded"] == false),
        "{budgets:#?}"
    );
    assert_eq!(budgets[1]["kind"], "power");
    let targets_w = num(report, "/totals/attributed_energy_j") / num(report, "/totals/duration_s");
    assert!((num(&budgets[1], "/value") - targets_w).abs() < 1e-6);

    // A failing command keeps its own status, over budget or not; the report is written.
    let mut args = busy_model.to_vec();
    args.extend(["--max-energy", "0.001"]);
    let failing = format!("{burn} --self 100; exit 7");
    args.extend(["--", "sh", "-c", &failing]);
    let failed = cg_trace(&args);
    assert_eq!(failed.code(), Some(7), "{}", failed.stderr());
    assert_eq!(failed.report()["budgets"][0]["exceeded"], true);
}

#[test]
fn per_program_budgets_take_the_median_over_runs() {
    require_root();
    // 5 W idle, 10 W per busy CPU: the cg-burn children's energy is their CPU time (0.2 s
    // each) times 10 W / CPUs, well under 5 J and well over 0.001 J.
    let burn = bin("cg-burn").display().to_string();
    let common = [
        "--source",
        "model",
        "--model-watts",
        "5:15",
        "--repeat",
        "3",
    ];
    let mut args = common.to_vec();
    args.extend(["--max-energy", "cg-burn=0.001", "--max-energy", "50"]);
    args.extend(["--", &burn, "--children", "200"]);
    let over = cg_trace(&args);
    assert_eq!(over.code(), Some(3), "{}", over.stderr());
    let report = over.report();
    let budgets = report["budgets"].as_array().unwrap();
    assert_eq!(budgets[0]["program"], "cg-burn");
    assert_eq!(budgets[0]["statistic"], "median of 3 runs");
    assert_eq!(budgets[0]["exceeded"], true);
    // Two cg-burn processes (parent and child) in each of the three runs.
    assert_eq!(budgets[0]["processes_count"], 6, "{budgets:#?}");
    // The median over the runs of each run's sum.
    let mut sums: Vec<f64> = runs(report)
        .iter()
        .map(|r| {
            r["report"]["processes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| num(p, "/energy_j"))
                .sum::<f64>()
        })
        .collect();
    sums.sort_by(f64::total_cmp);
    assert!(
        (num(&budgets[0], "/value") - sums[1]).abs() < 1e-9,
        "{sums:?}"
    );
    assert_eq!(budgets[1]["exceeded"], false);
    // Without a name: the median of the targets' energy.
    let targets = num(
        &report["repeat"]["statistics"],
        "/attributed_energy_j/median",
    );
    assert!((num(&budgets[1], "/value") - targets).abs() < 1e-9);
    let mut args = common.to_vec();
    args.extend([
        "--max-energy",
        "cg-burn=5",
        "--",
        &burn,
        "--children",
        "200",
    ]);
    let within = cg_trace(&args);
    assert_eq!(within.code(), Some(0), "{}", within.stderr());
}

#[test]
fn repeat_refuses_what_it_cannot_do() {
    require_root();
    for (args, expect) in [
        (vec!["--repeat", "2", "--all"], "--repeat runs a command"),
        (vec!["--repeat", "2", "--tui", "--", "true"], "live view"),
        (vec!["--repeat", "0", "--", "true"], "--repeat"),
        (vec!["--warmup", "2", "--", "true"], "--repeat"),
        (vec!["--max-energy", "x=-1", "--", "true"], "at least 0"),
        (
            vec!["--cooldown=-1", "--repeat", "2", "--", "true"],
            "cooldown",
        ),
    ] {
        let run = cg_trace(&args);
        assert_eq!(run.code(), Some(2), "{args:?}: {}", run.stderr());
        assert!(run.stderr().contains(expect), "{args:?}: {}", run.stderr());
        assert!(run.report.is_none());
    }
}
