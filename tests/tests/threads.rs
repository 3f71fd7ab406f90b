//! End-to-end tests of the per-thread figures (`processes[].threads[]`, `--threads`) and of
//! the summary's process table (`--group-by`, the roll-up line, COMMAND): root, real eBPF,
//! real threads. Run serially (`--test-threads=1`).

use cg_tests::{assert_adds_up, assert_valid_report, bin, cg_trace, num, require_root, root_pid};
use serde_json::Value;

fn pool() -> String {
    bin("cg-pool").display().to_string()
}

/// The process's thread entries.
fn threads_of(report: &Value, pid: u32) -> Vec<Value> {
    cg_tests::process(report, pid)["threads"]
        .as_array()
        .unwrap_or_else(|| panic!("pid {pid} has no threads: {report:#}"))
        .clone()
}

#[test]
fn a_worker_pools_busy_thread_holds_most_of_its_energy_and_the_threads_add_up() {
    require_root();
    // Both ways of reading CPU time (`--accounting`) give each thread its own.
    for accounting in ["iterator", "switch"] {
        busy_thread_holds_most_of_its_energy(accounting);
    }
}

fn busy_thread_holds_most_of_its_energy(accounting: &str) {
    let pool = pool();
    // One thread spinning for 0.8 s of CPU, four sleeping ones, and the main thread waiting.
    let run = cg_trace(&[
        "--threads",
        "--accounting",
        accounting,
        "--",
        &pool,
        "0.8",
        "4",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_eq!(report["meta"]["accounting"]["method"], accounting);
    assert_valid_report(report);
    assert_adds_up(report);
    let pid = root_pid(report);
    let process = cg_tests::process(report, pid);
    let threads = threads_of(report, pid);
    // Six threads, all listed (no folded entry: fewer than 10, and no GPU).
    assert!(threads.iter().all(|t| t["tid"].is_u64()), "{threads:#?}");
    let busy: Vec<&Value> = threads.iter().filter(|t| t["comm"] == "busy").collect();
    assert_eq!(busy.len(), 1, "{threads:#?}");
    let busy = busy[0];
    // The busy thread is listed first and holds most of the process's CPU and energy (the
    // sleepers wake 10 times a second for a moment's work).
    assert_eq!(threads[0]["comm"], "busy", "{threads:#?}");
    let energy_share = num(busy, "/energy_j") / num(process, "/energy_j");
    let cpu_share = num(busy, "/cpu_time_s") / num(process, "/cpu_time_s");
    assert!(
        energy_share > 0.9,
        "busy thread has {energy_share:.3} of the energy: {threads:#?}"
    );
    assert!(
        cpu_share > 0.9,
        "busy thread has {cpu_share:.3} of the CPU: {threads:#?}"
    );
    // It ran 0.8 s of CPU (cg-pool counts its own thread's CPU time).
    assert!(num(busy, "/cpu_time_s") > 0.7, "{busy:#}");
    // The sleepers are there by name, each with a sliver.
    let idle: Vec<&Value> = threads
        .iter()
        .filter(|t| t["comm"].as_str().is_some_and(|c| c.starts_with("idle-")))
        .collect();
    assert!(idle.len() >= 3, "{threads:#?}");
    for t in &idle {
        assert!(num(t, "/energy_j") < num(busy, "/energy_j") / 10.0, "{t:#}");
        assert_eq!(t["provenance"], busy["provenance"]);
    }
    // The summary lists them under the process.
    let stderr = run.stderr();
    let busy_row = format!("tid {} busy", busy["tid"]);
    assert!(stderr.contains(&busy_row), "no `{busy_row}` in:\n{stderr}");
}

#[test]
fn threads_past_the_top_ten_fold_into_one_entry_that_keeps_the_sum() {
    require_root();
    let pool = pool();
    // 14 sleepers + busy + main = 16 threads: 10 listed, 6 folded.
    let run = cg_trace(&["--", &pool, "0.3", "14"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_valid_report(report);
    assert_adds_up(report);
    let threads = threads_of(report, root_pid(report));
    assert_eq!(threads.len(), 11, "{threads:#?}");
    assert_eq!(threads[0]["comm"], "busy", "{threads:#?}");
    let folded = &threads[10];
    assert_eq!(folded["tid"], Value::Null, "{folded:#}");
    assert_eq!(folded["folded_threads_count"], 6, "{folded:#}");
    assert!(num(folded, "/cpu_time_s") > 0.0, "{folded:#}");
    // Busiest first.
    for pair in threads[..10].windows(2) {
        assert!(
            num(&pair[0], "/energy_j") >= num(&pair[1], "/energy_j"),
            "{threads:#?}"
        );
    }
    // Not asked for: the summary has no thread rows.
    assert!(!run.stderr().contains("tid "), "{}", run.stderr());
}

/// The process rows of a summary (between the header and the `targets` line).
fn summary_rows(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("PID  COMMAND"))
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with("targets"))
        .map(str::to_string)
        .collect()
}

/// The figure in the CPU and ENERGY columns of a summary row.
fn cpu_and_energy(row: &str) -> (f64, f64) {
    let rest: String = row.chars().skip(36).collect();
    let figures: Vec<f64> = rest
        .split_whitespace()
        .take(2)
        .map(|w| {
            w.parse()
                .unwrap_or_else(|_| panic!("no figures in {row:?}"))
        })
        .collect();
    (figures[0], figures[1])
}

#[test]
fn group_by_comm_folds_a_shells_many_sh_children_into_one_row_that_adds_up() {
    require_root();
    // A shell that runs 24 `sh -c` children (builtins only: nothing else is exec'd).
    let script = "i=0; while [ $i -lt 24 ]; do sh -c 'x=1; x=2'; i=$((i+1)); done";
    let run = cg_trace(&["--group-by", "comm", "--", "sh", "-c", script]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(report["processes"].as_array().unwrap().len(), 25);
    let stderr = run.stderr();
    let rows = summary_rows(&stderr);
    assert_eq!(rows.len(), 1, "{stderr}");
    let words: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(words[..2], ["×25", "sh"], "{stderr}");
    // The row is the targets' line.
    let targets = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("targets"))
        .expect("a targets line");
    let row = cpu_and_energy(&rows[0]);
    let all = cpu_and_energy(&format!("{:<36}{}", "", &targets[36..]));
    assert!((row.0 - all.0).abs() <= 0.0015, "{stderr}");
    assert!((row.1 - all.1).abs() <= 0.0015, "{stderr}");
    assert!((row.1 - num(&report["totals"], "/attributed_energy_j")).abs() <= 0.0015);

    // Ungrouped, the same run is 15 rows and a roll-up of the other 10 processes, which
    // also add up to the targets' line. Run by its path, the shell shows as `sh`.
    let run = cg_trace(&["--", "/bin/sh", "-c", script]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let stderr = run.stderr();
    let rows = summary_rows(&stderr);
    assert_eq!(rows.len(), 16, "{stderr}");
    assert!(rows[15].contains("… 10 more processes"), "{stderr}");
    // COMMAND starts with the program's name (the processes too short-lived for their
    // command line to be read show the file they exec'd, `/bin/sh` or `/usr/bin/sh`).
    for row in rows.iter().take(15) {
        assert!(row[10..].starts_with("sh"), "{stderr}");
        assert!(!row.contains("/bin/sh"), "{stderr}");
    }
    let sum_j: f64 = rows.iter().map(|r| cpu_and_energy(r).1).sum();
    let report = run.report();
    // 16 rows rounded to 3 decimals.
    assert!(
        (sum_j - num(&report["totals"], "/attributed_energy_j")).abs() <= 0.01,
        "{stderr}"
    );
}

#[test]
fn timeseries_points_list_their_busiest_processes_and_fold_the_rest_adding_up() {
    require_root();
    // 14 children burning 80 ms of CPU each at once: more than 10 processes per interval.
    let children = vec!["80"; 14].join(",");
    let burn = bin("cg-burn").display().to_string();
    let run = cg_trace(&["--timeseries", "--", &burn, "--children", &children]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_valid_report(report);
    // Per point: the processes add up to the attributed energy (and the rest of the books).
    assert_adds_up(report);
    let points = report["timeseries"].as_array().expect("timeseries");
    let pids: Vec<u64> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pid"].as_u64().unwrap())
        .collect();
    let mut folded_points = 0;
    let (mut sum_j, mut sum_cpu_s) = (0.0, 0.0);
    for point in points {
        let processes = point["processes"].as_array().expect("processes");
        let listed: Vec<&Value> = processes.iter().filter(|p| p["pid"].is_u64()).collect();
        assert!(listed.len() <= 10, "{point:#}");
        for p in &listed {
            assert!(pids.contains(&p["pid"].as_u64().unwrap()), "{p:#}");
        }
        if let Some(folded) = processes.iter().find(|p| p["pid"].is_null()) {
            assert_eq!(listed.len(), 10, "{point:#}");
            assert!(folded["folded_processes_count"].as_u64().unwrap() >= 1);
            folded_points += 1;
        }
        // Busiest first.
        for pair in listed.windows(2) {
            assert!(
                num(pair[0], "/energy_j") >= num(pair[1], "/energy_j"),
                "{point:#}"
            );
        }
        sum_j += processes.iter().map(|p| num(p, "/energy_j")).sum::<f64>();
        sum_cpu_s += processes.iter().map(|p| num(p, "/cpu_time_s")).sum::<f64>();
    }
    assert!(folded_points >= 1, "no point folded processes: {points:#?}");
    // Over the run, the points' processes are the targets.
    let totals = &report["totals"];
    let attributed = num(totals, "/attributed_energy_j");
    assert!(
        (sum_j - attributed).abs() <= 1e-6 * (1.0 + attributed),
        "{sum_j} vs {attributed}"
    );
    let cpu = num(totals, "/cpu_time_s");
    assert!(
        (sum_cpu_s - cpu).abs() <= 1e-6 * (1.0 + cpu),
        "{sum_cpu_s} vs {cpu}"
    );
}
