//! End-to-end tests of the real `cg-trace` binary: root, real eBPF, real processes. Energy
//! comes from the built-in model or from a generated powercap tree driven by a known linear
//! power function, read by the production powercap code. Run serially
//! (`--test-threads=1`): they measure CPU time on a shared machine.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use cg_tests::{
    Background, FakePowercap, Linear, assert_adds_up, bin, cg_trace, num, process, read_report,
    require_root,
};
use serde_json::Value;

fn burn() -> String {
    bin("cg-burn").display().to_string()
}

fn spin() -> String {
    bin("cg-spin").display().to_string()
}

/// Children of the root process, as (pid, cpu_time_s, energy_j), sorted by CPU time.
fn children_of_root(report: &Value) -> Vec<(u64, f64, f64)> {
    let root = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["root"] == true)
        .expect("a root process");
    let mut kids: Vec<(u64, f64, f64)> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["ppid"] == root["pid"])
        .map(|p| {
            (
                p["pid"].as_u64().unwrap(),
                num(p, "/cpu_time_s"),
                num(p, "/energy_j"),
            )
        })
        .collect();
    kids.sort_by(|a, b| a.1.total_cmp(&b.1));
    kids
}

#[test]
fn wrap_under_linear_powercap_charges_each_child_k_times_its_cpu_time() {
    require_root();
    // package: 6 W + 9 W per busy CPU; core inside it; dram separate.
    let package = Linear {
        idle_w: 6.0,
        k_w_per_cpu: 9.0,
    };
    let core = Linear {
        idle_w: 1.0,
        k_w_per_cpu: 7.0,
    };
    let dram = Linear {
        idle_w: 1.5,
        k_w_per_cpu: 0.5,
    };
    // Counters start 15 J below a 20 kJ range: they wrap during the run. (A range much
    // smaller than what a package can draw in an interval would make every reading
    // ambiguous.) The true idle power is given, so the split is checked whatever else loads
    // the machine (the fit of the idle baseline has its own test).
    let rapl = FakePowercap::start_from(package, core, dram, 20_000_000_000, 19_985_000_000);
    let root = rapl.root().display().to_string();
    let burn = burn();
    let run = cg_trace(&[
        "--powercap-root",
        &root,
        "--idle-watts",
        "package-0=6,core-0=1,dram-0=1.5",
        "--",
        &burn,
        "--children",
        "1200,600",
        "--exit",
        "0",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);

    let meta = &report["meta"];
    assert_eq!(meta["mode"], "wrap");
    assert_eq!(meta["sources"][0]["name"], "powercap");
    assert_eq!(meta["sources"][0]["provenance"], "measured");
    let topology = meta["domain_topology"].as_array().unwrap();
    let domain = |name: &str| topology.iter().find(|d| d["name"] == name).unwrap().clone();
    assert_eq!(domain("core-0")["parent"], "package-0");
    assert_eq!(domain("dram-0")["parent"], Value::Null);
    assert_eq!(domain("package-0")["contains"][0], "core-0");
    // Totals count package and dram, not core (inside package).
    let totals = &report["totals"];
    let expected_total =
        num(totals, "/domains/package-0/energy_j") + num(totals, "/domains/dram-0/energy_j");
    assert!((num(totals, "/energy_j") - expected_total).abs() < 1e-6);

    let idle = meta["idle_baseline"].as_array().unwrap();
    let package_idle = idle.iter().find(|b| b["domain"] == "package-0").unwrap();
    assert_eq!(package_idle["method"], "given", "{package_idle}");
    assert_eq!(num(package_idle, "/power_w"), 6.0);

    // Each child: package energy = 9 W x its CPU time; the split is 2:1.
    let kids = children_of_root(report);
    assert_eq!(kids.len(), 2, "{:#}", report["processes"]);
    let (small, big) = (kids[0], kids[1]);
    assert!(
        (big.1 / small.1 - 2.0).abs() < 0.25,
        "CPU split {} : {}",
        big.1,
        small.1
    );
    assert!(
        (big.1 - 1.2).abs() < 0.15,
        "big child ran {} s, asked 1.2 s",
        big.1
    );
    assert_cpu_matches_the_kernel(report, &burn_children_cpu(&run.stdout()), "cg-burn");
    for (pid, cpu_s, _) in [small, big] {
        let p = process(report, pid as u32);
        let package_j = num(p, "/domains/package-0/energy_j");
        let expected = 9.0 * cpu_s;
        assert!(
            (package_j - expected).abs() < 0.2 * expected,
            "pid {pid}: package {package_j:.3} J, expected 9 W x {cpu_s:.3} s = {expected:.3} J"
        );
    }
    for counter in [
        "on_cpu_map_full_count",
        "events_dropped_count",
        "targets_map_full_count",
    ] {
        assert_eq!(
            num(report, &format!("/totals/lost_events/{counter}")),
            0.0,
            "{counter}"
        );
    }
    assert_eq!(
        meta["measurement_quality"]["grade"], "measured",
        "{:#}",
        meta["measurement_quality"]
    );
}

#[test]
fn idle_fit_over_calibration_and_run_recovers_the_baseline() {
    require_root();
    // No --idle-watts: the baseline is the intercept of interval power against busy CPUs,
    // over the calibration window (command not running) and the run (two CPUs busy, then
    // one). This needs the busy level to vary, i.e. a machine not saturated by others.
    let linear = |idle_w, k_w_per_cpu| Linear {
        idle_w,
        k_w_per_cpu,
    };
    let rapl = FakePowercap::start_from(
        linear(6.0, 9.0),
        linear(1.0, 7.0),
        linear(1.5, 0.5),
        20_000_000_000,
        19_985_000_000,
    );
    let root = rapl.root().display().to_string();
    let burn = burn();
    // How busy the machine is, every 100 ms, by the kernel's own count, while cg-trace runs.
    let busy = cg_tests::BusySampler::start(Duration::from_millis(100));
    let run = cg_trace(&[
        "--powercap-root",
        &root,
        "--calibrate-ms",
        "800",
        "--",
        &burn,
        "--children",
        "1200,600",
    ]);
    let spread_cpus = busy.finish().spread_cpus();
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert!(num(report, "/meta/calibration_s") >= 0.8);
    let idle = report["meta"]["idle_baseline"].as_array().unwrap();
    let package_idle = idle.iter().find(|b| b["domain"] == "package-0").unwrap();
    if package_idle["method"] == "prior" && spread_cpus < 0.3 {
        // Other processes kept the machine's busy level steady (as on a machine shared with
        // builds): no fit is possible, and cg-trace must say so rather than pretend.
        eprintln!("busy level spread {spread_cpus:.2} CPUs: checked the fallback, not the fit");
        let notes = report["meta"]["measurement_quality"]["notes"].to_string();
        assert!(notes.contains("too steady"), "{notes}");
        assert_eq!(report["meta"]["measurement_quality"]["grade"], "degraded");
        return;
    }
    assert_eq!(
        package_idle["method"], "regression",
        "{package_idle} (busy level spread {spread_cpus:.2} CPUs)"
    );
    let idle_w = num(package_idle, "/power_w");
    assert!(
        (idle_w - 6.0).abs() < 1.5,
        "package idle estimated at {idle_w} W, truly 6 W"
    );
    let slope = num(package_idle, "/slope_w_per_cpu");
    assert!(
        (slope - 9.0).abs() < 1.5,
        "slope {slope} W per CPU, truly 9"
    );
}

#[test]
fn model_energy_is_exactly_slope_times_cpu_time() {
    require_root();
    let burn = burn();
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "10:30",
        "--",
        &burn,
        "--children",
        "400,200",
        "--self",
        "100",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(report["meta"]["measurement_quality"]["grade"], "estimated");
    assert_eq!(report["meta"]["sources"][0]["provenance"], "estimated");
    assert!(run.stderr().contains("ESTIMATED"), "{}", run.stderr());
    let cpus = num(report, "/meta/cpu_count");
    let slope = 20.0 / cpus;
    for p in report["processes"].as_array().unwrap() {
        let (cpu, energy) = (num(p, "/cpu_time_s"), num(p, "/energy_j"));
        assert!(
            (energy - slope * cpu).abs() < 1e-6 + 1e-6 * energy,
            "pid {}: {energy} J for {cpu} s of CPU",
            p["pid"]
        );
    }
    assert_eq!(report["meta"]["idle_baseline"][0]["method"], "model");
    assert_eq!(num(report, "/totals/idle_power_w"), 10.0);
}

#[test]
fn wrap_propagates_exit_status_and_signals() {
    require_root();
    let run = cg_trace(&["--source", "model", "-q", "--", "sh", "-c", "exit 7"]);
    assert_eq!(run.code(), Some(7));
    let report = run.report();
    assert_eq!(report["meta"]["command_exit_code"], 7);
    let root = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["root"] == true)
        .unwrap();
    assert_eq!(root["exit_code"], 7);

    let run = cg_trace(&["--source", "model", "-q", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(run.code(), Some(128 + 15));
    assert_eq!(run.report()["meta"]["command_exit_signal"], 15);

    let run = cg_trace(&["--source", "model", "-q", "--", "/nonexistent/program"]);
    assert_eq!(run.code(), Some(127), "{}", run.stderr());
    assert!(
        run.stderr().contains("/nonexistent/program"),
        "{}",
        run.stderr()
    );
}

#[test]
fn short_lived_children_keep_their_time() {
    require_root();
    // 20 children in a row, 30 ms of CPU each, each gone well before the next read.
    let children = vec!["30"; 20].join(",");
    let burn = burn();
    let run = cg_trace(&[
        "--source",
        "model",
        "-q",
        "--",
        &burn,
        "--sequential",
        "--children",
        &children,
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let kids = children_of_root(report);
    assert_eq!(kids.len(), 20, "{:#}", report["processes"]);
    for (pid, cpu, energy) in kids {
        assert!(
            (cpu - 0.030).abs() < 0.012,
            "child {pid} ran {cpu} s, asked 0.030 s"
        );
        assert!(energy > 0.0);
        assert_eq!(process(report, pid as u32)["exit_code"], 0);
    }
    // And to within 0.5 % of the kernel's own figure at exit, which cg-burn prints.
    assert_cpu_matches_the_kernel(report, &burn_children_cpu(&run.stdout()), "cg-burn");
}

/// `(pid, CPU seconds)` of each child from cg-burn's output (`child PID asked MS ms used S s`,
/// its wait4 figure).
fn burn_children_cpu(stdout: &str) -> Vec<(u64, f64)> {
    stdout
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["child", pid, "asked", _, "ms", "used", cpu, "s"] => {
                    Some((pid.parse().ok()?, cpu.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn attach_follows_a_running_process_and_its_new_children() {
    require_root();
    // The target burns 1.5 s of CPU, forks a child that burns 1.0 s, waits for it, burns
    // 0.3 s more and exits; cg-trace attaches about 0.3 s in. CPU-time amounts, so the
    // expectations hold on a loaded machine.
    let burn = burn();
    let target = Background::spawn(
        burn.as_ref(),
        &["--before", "1500", "--children", "1000", "--self", "300"],
    );
    std::thread::sleep(Duration::from_millis(300));
    let before_attach_s = cg_tests::task_cpu_s(target.pid()).unwrap_or(0.0);
    let pid = target.pid().to_string();
    let started = Instant::now();
    let run = cg_trace(&["--source", "model", "-q", "--pid", &pid]);
    let took = started.elapsed();
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(report["meta"]["mode"], "attach");
    assert_eq!(report["meta"]["stop_reason"], "every target exited");
    assert!(
        took < Duration::from_secs(60),
        "did not stop when the target exited"
    );
    let parent = process(report, target.pid());
    let parent_cpu = num(parent, "/cpu_time_s");
    // At most what it burned after we started attaching; at least that minus what it can have
    // burned (one CPU) before the measured run began: cg-trace's start, loading and choosing
    // a source, which take longer on a loaded machine (the rest of cg-trace's time is the
    // measured run, `duration_s`), and the first interval's read.
    let before_run_s = took.as_secs_f64() - num(report, "/meta/duration_s");
    assert!(
        parent_cpu <= 1.8 - before_attach_s + 0.05
            && parent_cpu > 1.8 - before_attach_s - before_run_s - 0.15,
        "parent ran {parent_cpu} s while attached; it had used {before_attach_s} s before, and \
         cg-trace took {before_run_s} s to begin: {parent:#}"
    );
    let child = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ppid"].as_u64() == Some(u64::from(target.pid())))
        .expect("the child forked after attaching");
    assert!(
        (num(child, "/cpu_time_s") - 1.0).abs() < 0.05,
        "the child burned 1.0 s: {child:#}"
    );
}

#[test]
fn attach_sees_a_task_that_never_leaves_its_cpu() {
    require_root();
    // Pinned alone on the last CPU, the spinner may not be switched out for seconds: its time
    // must still show up, interval by interval.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let last = (cpus - 1).to_string();
    let spin = spin();
    let target = Background::spawn("taskset".as_ref(), &["-c", &last, &spin, "0"]);
    std::thread::sleep(Duration::from_millis(500));
    let pid = target.pid().to_string();
    let (kernel_before_s, wall) = (cg_tests::task_cpu_s(target.pid()).unwrap(), Instant::now());
    let run = cg_trace(&[
        "--source",
        "model",
        "-q",
        "--timeseries",
        "--pid",
        &pid,
        "--duration",
        "1.5",
    ]);
    let kernel_s = cg_tests::task_cpu_s(target.pid()).unwrap() - kernel_before_s;
    let wall_s = wall.elapsed().as_secs_f64();
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let p = process(report, target.pid());
    let (cpu_s, duration) = (num(p, "/cpu_time_s"), num(report, "/meta/duration_s"));
    // The kernel's own count over a slightly wider window (cg-trace's start and exit
    // included) bounds ours from above; at the spinner's average rate, ours covers the run.
    assert!(
        cpu_s <= kernel_s + 0.01,
        "{cpu_s} s traced, {kernel_s} s by the kernel"
    );
    let expected = kernel_s * duration / wall_s;
    assert!(
        cpu_s > 0.75 * expected,
        "spinner ran {cpu_s} s of a {duration} s run; the kernel counted {kernel_s} s in {wall_s} s"
    );
    // The intervals saw it busy as it went, not just the last one. (The running slice is read
    // to within a scheduler tick, so the run's last, few-millisecond interval may see nothing
    // new; on a loaded machine a switch on its CPU while the slice is read, or a stalled
    // virtual CPU, may leave one interval without it: its time then lands in the next one,
    // so never two in a row.)
    let series = report["timeseries"].as_array().unwrap();
    let long: Vec<&Value> = series
        .iter()
        .filter(|p| num(p, "/duration_s") >= 0.05)
        .collect();
    assert!(long.len() >= 5, "{} intervals of 50 ms or more", long.len());
    for pair in long.windows(2) {
        assert!(
            pair.iter().any(|p| num(p, "/attributed_energy_j") > 0.0),
            "two intervals in a row without the spinner: {:#} {:#}",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn all_sees_known_processes() {
    require_root();
    let spin = spin();
    let busy = Background::spawn(spin.as_ref(), &["0"]);
    std::thread::sleep(Duration::from_millis(200));
    let (kernel_before_s, wall) = (cg_tests::task_cpu_s(busy.pid()).unwrap(), Instant::now());
    let run = cg_trace(&["--source", "model", "-q", "--all", "--duration", "1.5"]);
    let kernel_s = cg_tests::task_cpu_s(busy.pid()).unwrap() - kernel_before_s;
    let wall_s = wall.elapsed().as_secs_f64();
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(report["meta"]["mode"], "system");
    let p = process(report, busy.pid());
    assert_eq!(p["comm"], "cg-spin");
    let cpu_s = num(p, "/cpu_time_s");
    let expected = kernel_s * num(report, "/meta/duration_s") / wall_s;
    assert!(
        cpu_s <= kernel_s + 0.01 && cpu_s > 0.75 * expected,
        "{cpu_s} s traced; the kernel counted {kernel_s} s in {wall_s} s: {p:#}"
    );
    assert!(report["processes"].as_array().unwrap().len() >= 2);
    assert!((num(report, "/meta/duration_s") - 1.5).abs() < 0.4);
}

#[test]
fn switch_storms_never_produce_more_busy_cpus_than_exist() {
    require_root();
    // A 400k switches/s ping-pong and a fork storm while --all reads every 50 ms: reads of a
    // CPU's state overlap its updates often. Under the model, an interval's power can never
    // exceed the model's maximum: not through a torn read mixing two tasks' counters, nor
    // through a slice read late or charged when it ended.
    let pingpong = Background::spawn(bin("cg-pingpong").as_ref(), &["4"]);
    let forks = Background::spawn("sh".as_ref(), &["-c", "while :; do /bin/true; done"]);
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "10:30",
        "-q",
        "--all",
        "--interval",
        "50",
        "--timeseries",
        "--duration",
        "3",
    ]);
    drop((pingpong, forks));
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let series = report["timeseries"].as_array().unwrap();
    // Enough intervals to judge (60 of 50 ms on a quiet machine; fewer, longer ones when the
    // machine is loaded enough that the reads come late: how many is the machine's, not a
    // figure of cg-trace to hold it to).
    assert!(
        series.len() >= 10,
        "{} intervals in {} s",
        series.len(),
        num(report, "/meta/duration_s")
    );
    // Each CPU's busy time is clamped to its interval (the rest is carried to the next), so
    // no interval, however short, draws more than the model's maximum.
    for point in series {
        let watts = num(point, "/power_w");
        assert!(
            watts <= 30.0 * (1.0 + 1e-9),
            "an interval drew {watts} W from a 30 W model: {point:#}"
        );
    }
}

#[test]
fn sigterm_still_writes_the_report_and_summary() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let child = Command::new(bin("cg-trace"))
        .args(["--source", "model", "--all", "-o"])
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
    let report: Value = read_report(&out);
    assert_adds_up(&report);
    assert!(num(&report, "/totals/intervals_count") >= 5.0);
}

/// The children of a process (over all its threads), from /proc.
fn child_pids(pid: u32) -> Vec<u32> {
    let mut kids = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        kids.extend(
            children
                .split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok()),
        );
    }
    kids
}

#[test]
fn sigint_in_wrap_mode_stops_the_command_and_keeps_what_was_measured() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let spin = spin();
    let child = Command::new(bin("cg-trace"))
        .args(["--source", "model", "-q", "-o"])
        .arg(&out)
        .args(["--", &spin, "30"])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Once the spinner runs (the probes load first, slowly on a loaded machine), let it spin.
    let started = std::time::Instant::now();
    let spinner = loop {
        let spinning = child_pids(child.id()).into_iter().find(|&kid| {
            std::fs::read_to_string(format!("/proc/{kid}/comm"))
                .is_ok_and(|c| c.trim() == "cg-spin")
        });
        if let Some(kid) = spinning {
            break kid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the spinner never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(1000));
    // What the kernel says the spinner has burnt so far: the report must hold at least that
    // (on a loaded machine the spinner gets less than its CPU, so no fixed share is asserted).
    let burnt_before_s = cg_tests::task_cpu_s(spinner).expect("the spinner runs");
    // Not from a terminal: cg-trace forwards it to the command, which dies of it.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(128 + libc::SIGINT));
    let report: Value = read_report(&out);
    assert_adds_up(&report);
    let root = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["root"] == true)
        .unwrap();
    // It spun for the whole run: all it had burnt before the signal is in the report.
    assert_eq!(root["pid"], spinner);
    assert!(burnt_before_s > 0.0);
    // (Seen once in ~13 full runs on a quiet machine: 0.25 s reported of 1.0 s burnt, a slice
    // lost at the end of a wrapped command stopped by SIGINT; what the report says of its own
    // books is printed to find where it went.)
    assert!(
        num(root, "/cpu_time_s") >= burnt_before_s - 0.005,
        "the kernel had {burnt_before_s} s before the signal: {root:#}\ntotals: {:#}\nprofiler: \
         {:#}\nquality: {:#}",
        report["totals"],
        report["meta"]["profiler"],
        report["meta"]["measurement_quality"]
    );
    assert_eq!(root["exit_signal"], libc::SIGINT);
}

#[test]
fn bad_input_gets_clear_errors() {
    require_root();
    // A pid that does not exist.
    let run = cg_trace(&["--pid", "999999999"]);
    assert_eq!(run.code(), Some(2));
    assert!(
        run.stderr().contains("no process with pid 999999999"),
        "{}",
        run.stderr()
    );
    // An unknown source.
    let run = cg_trace(&["--source", "magic", "--all"]);
    assert_eq!(run.code(), Some(2));
    // Nothing to trace.
    let run = cg_trace(&[]);
    assert_eq!(run.code(), Some(2));
    assert!(run.stderr().contains("--pid"), "{}", run.stderr());
    // A malformed powercap tree, explicitly requested.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("intel-rapl:0")).unwrap();
    std::fs::write(dir.path().join("intel-rapl:0/name"), "package-0\n").unwrap();
    std::fs::write(dir.path().join("intel-rapl:0/energy_uj"), "12\n").unwrap();
    let root = dir.path().display().to_string();
    let run = cg_trace(&["--source", "powercap", "--powercap-root", &root, "--all"]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(
        run.stderr().contains("max_energy_range_uj"),
        "{}",
        run.stderr()
    );
    // No RAPL at all, explicitly requested.
    let run = cg_trace(&[
        "--source",
        "powercap",
        "--powercap-root",
        "/nonexistent",
        "--all",
    ]);
    assert_eq!(run.code(), Some(2));
    assert!(run.stderr().contains("no RAPL"), "{}", run.stderr());
    // A report path we cannot honour is refused before anything runs.
    let run = Command::new(bin("cg-trace"))
        .args(["-o", "/nonexistent/dir/r.json", "--all"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
}

#[test]
fn without_privileges_it_says_what_is_needed_and_exits_2() {
    require_root();
    // Drop to nobody with no capabilities, as a user without sudo would run it.
    let output = cg_tests::as_nobody()
        .arg(bin("cg-trace"))
        .args(["--source", "model", "--", "true"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("CAP_BPF") && stderr.contains("sudo"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

#[test]
fn timeseries_adds_up_interval_by_interval() {
    require_root();
    let burn = burn();
    let run = cg_trace(&[
        "--source",
        "model",
        "-q",
        "--timeseries",
        "--interval",
        "50",
        "--",
        &burn,
        "--self",
        "300",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let series = report["timeseries"].as_array().expect("timeseries");
    assert!(series.len() >= 4, "{} points", series.len());
    let mut sum = 0.0;
    for point in series {
        let parts = num(point, "/attributed_energy_j")
            + num(point, "/other_energy_j")
            + num(point, "/idle_energy_j");
        assert!((parts - num(point, "/energy_j")).abs() < 1e-9);
        sum += num(point, "/energy_j");
    }
    assert!((sum - num(report, "/totals/energy_j")).abs() < 1e-6);
}

#[test]
fn a_starved_agent_says_so_and_its_intervals_still_hold_no_more_cpu_than_exists() {
    require_root();
    // cg-trace as SCHED_IDLE while the command keeps every CPU busy (a hog per CPU beside
    // 300 ms of work): cg-trace is scheduled only now and then, so its 20 ms intervals come
    // out hundreds of ms long and every slice it reads is late. The report must say so, and
    // no interval may show more busy CPU than the machine has. (The hogs start once
    // cg-trace is running, so loading the probes is not starved.)
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let script = format!(
        "p=; for i in $(seq {cpus}); do {spin} 0 & p=\"$p $!\"; done; {burn} --self 300; kill $p",
        spin = spin(),
        burn = burn()
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let output = Command::new("chrt")
        .args(["--idle", "0"])
        .arg(bin("cg-trace"))
        .args([
            "--source",
            "model",
            "--model-watts",
            "10:30",
            "-q",
            "--interval",
            "20",
            "--timeseries",
            "-o",
        ])
        .arg(&out)
        // (The command leaves SCHED_IDLE, which it would inherit.)
        .args(["--", "chrt", "--other", "0", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: Value = read_report(&out);
    assert_adds_up(&report);
    for point in report["timeseries"].as_array().unwrap() {
        let watts = num(point, "/power_w");
        assert!(
            watts <= 30.0 * (1.0 + 1e-9),
            "an interval drew {watts} W from a 30 W model: {point:#}"
        );
    }
    let starved = num(&report, "/meta/profiler/starved_intervals_count");
    assert!(starved >= 1.0, "{:#}", report["meta"]["profiler"]);
    let notes = report["meta"]["measurement_quality"]["notes"].to_string();
    assert!(notes.contains("starved of CPU"), "{notes}");
}

/// CPU seconds of `pid` and all its descendants in the report.
fn subtree_cpu_s(report: &Value, pid: u64) -> f64 {
    let processes = report["processes"].as_array().unwrap();
    let mut total = 0.0;
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        for entry in processes {
            if entry["pid"].as_u64() == Some(p) {
                total += num(entry, "/cpu_time_s");
            }
            if entry["ppid"].as_u64() == Some(p) && entry["pid"].as_u64() != Some(p) {
                stack.push(entry["pid"].as_u64().unwrap());
            }
        }
    }
    total
}

/// Checks each `(pid, kernel CPU seconds)` against the report's figure for that process and
/// its descendants, to within 0.5 %.
fn assert_cpu_matches_the_kernel(report: &Value, truth: &[(u64, f64)], what: &str) {
    assert!(
        !truth.is_empty(),
        "{what}: no process reported its CPU time"
    );
    for &(pid, kernel_s) in truth {
        let ours_s = subtree_cpu_s(report, pid);
        // Shown with --nocapture: how close a passing run came to the bound.
        eprintln!(
            "{what}: pid {pid}: kernel {kernel_s:.6} s, cg-trace {ours_s:.6} s ({:+.3} %)",
            (ours_s / kernel_s - 1.0) * 100.0
        );
        assert!(
            (ours_s - kernel_s).abs() <= 0.005 * kernel_s,
            "{what}: pid {pid} used {kernel_s:.6} s of CPU by the kernel's count at exit, \
             cg-trace says {ours_s:.6} s ({:+.2} %); unplaced {} s, lost events {}",
            (ours_s / kernel_s - 1.0) * 100.0,
            report["totals"]["unplaced_cpu_time_s"],
            report["totals"]["lost_events"]
        );
    }
}

/// Both ways of reading CPU time (`--accounting`): each must match the kernel's own figures.
/// Iterator accounting twice: with the open-coded task walk (kernel 6.7+), and with the
/// `iter/task` program that kernels before 6.7 use (forced: [`ITER_TASK`]).
const ACCOUNTINGS: [&str; 3] = ["iterator", ITER_TASK, "switch"];
/// Iterator accounting with the `iter/task` program.
const ITER_TASK: &str = "iterator (iter/task)";

/// The `--accounting` word of one of [`ACCOUNTINGS`].
fn method_of(accounting: &str) -> &str {
    if accounting == ITER_TASK {
        "iterator"
    } else {
        accounting
    }
}

/// The environment cg-trace runs in for one of [`ACCOUNTINGS`].
fn env_of(accounting: &str) -> &'static [(&'static str, &'static str)] {
    if accounting == ITER_TASK {
        &[("CG_TRACE_ITER_TASK", "1")]
    } else {
        &[]
    }
}

/// cg-trace on the model, quiet, in `accounting`, running `command`.
fn traced_in(accounting: &str, command: &[&str]) -> cg_tests::Run {
    let mut args = vec![
        "--source",
        "model",
        "-q",
        "--accounting",
        method_of(accounting),
        "--",
    ];
    args.extend_from_slice(command);
    cg_tests::cg_trace_with_env(&args, env_of(accounting))
}

/// Whether the running kernel is 6.7 or later (it has the open-coded task iterator).
fn kernel_has_task_kfuncs() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 7)
}

/// [`assert_cpu_matches_the_kernel`], but for as many processes as the report counts threads
/// closed without their final runtime (iterator accounting: the development VM's kernel now
/// and then reports no free of a task; docs/attribution.md, *Where it is approximate*): such
/// a process may come out short, never over.
fn assert_cpu_matches_the_kernel_but_for_missing_finals(
    report: &Value,
    truth: &[(u64, f64)],
    what: &str,
) {
    let missing = num(report, "/totals/lost_events/final_runtimes_missing_count");
    if missing == 0.0 {
        return assert_cpu_matches_the_kernel(report, truth, what);
    }
    let mut short = Vec::new();
    for &(pid, kernel_s) in truth {
        let ours_s = subtree_cpu_s(report, pid);
        assert!(
            ours_s <= 1.005 * kernel_s,
            "{what}: pid {pid} used {kernel_s:.6} s of CPU by the kernel's count at exit, \
             cg-trace says {ours_s:.6} s ({:+.2} %)",
            (ours_s / kernel_s - 1.0) * 100.0
        );
        if ours_s < 0.995 * kernel_s {
            short.push((pid, (ours_s / kernel_s - 1.0) * 100.0));
        }
    }
    eprintln!("{what}: {missing} final runtime(s) missing; short by over 0.5 %: {short:?}");
    assert!(
        short.len() as f64 <= missing,
        "{what}: {} process(es) short by over 0.5 % with {missing} final runtime(s) missing: \
         {short:?}",
        short.len()
    );
}

/// Checks that the report says it read CPU time the way asked, and in iterator accounting
/// that it walked the threads the way asked (the open-coded walk wherever the kernel has it).
fn assert_accounting(report: &Value, accounting: &str) {
    let meta = &report["meta"]["accounting"];
    assert_eq!(meta["method"], method_of(accounting), "{meta:#}");
    let walker = match accounting {
        ITER_TASK => Some("iter_task"),
        "iterator" if kernel_has_task_kfuncs() => Some("task_walk"),
        "iterator" => Some("iter_task"),
        _ => None,
    };
    match walker {
        Some(walker) => assert_eq!(meta["walker"], walker, "{meta:#}"),
        None => assert!(meta.get("walker").is_none(), "{meta:#}"),
    }
    // The open-coded walk says how its reads were served, and it read at least once.
    let reads = &meta["reads"];
    if walker == Some("task_walk") {
        let served: f64 = ["walked_count", "reread_count", "amended_count"]
            .iter()
            .map(|name| num(reads, &format!("/{name}")))
            .sum();
        assert!(served >= 1.0, "{meta:#}");
    } else {
        assert!(reads.is_null(), "{meta:#}");
    }
}

#[test]
fn per_process_cpu_time_matches_the_kernels_own_figure_at_exit() {
    require_root();
    for accounting in ACCOUNTINGS {
        cpu_time_matches_the_kernels_own_figure(accounting);
    }
}

fn cpu_time_matches_the_kernels_own_figure(accounting: &str) {
    // A parallel build with real tools (make -j2 running gcc, which runs cc1 and as), each
    // compiler run started through cg-wait4, which logs the kernel's own figure of its CPU
    // time at exit (wait4). Context switches the kernel never reports through sched_switch
    // must not cost any process its slice.
    let dir = tempfile::tempdir().unwrap();
    for i in 0..40 {
        std::fs::write(
            dir.path().join(format!("f{i}.c")),
            format!(
                "static int a[64][64];\n\
                 int f{i}(int n) {{ int s = 0; for (int i = 0; i < n; i++) \
                 for (int j = 0; j < 64; j++) {{ a[i % 64][j] += i * j; s += a[j][i % 64] * (s ^ j); }} \
                 return s; }}\n\
                 #define G(x) int g##x(int k) {{ return f{i}(k + x) * x; }}\n\
                 G(1) G(2) G(3) G(4) G(5) G(6) G(7) G(8) G(9) G(10) G(11) G(12)\n"
            ),
        )
        .unwrap();
    }
    std::fs::write(
        dir.path().join("Makefile"),
        "all: $(patsubst %.c,%.o,$(wildcard *.c))\n%.o: %.c\n\t$(CC) -O2 -c $< -o $@\n",
    )
    .unwrap();
    let log = dir.path().join("cpu.log");
    let cc = format!("CC={} {} gcc", bin("cg-wait4").display(), log.display());
    let dir_arg = dir.path().display().to_string();
    let run = traced_in(accounting, &["make", "-s", "-C", &dir_arg, "-j2", &cc]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_accounting(report, accounting);
    assert_adds_up(report);
    let truth: Vec<(u64, f64)> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|line| {
            let (pid, cpu) = line.split_once(' ').unwrap();
            (pid.parse().unwrap(), cpu.parse().unwrap())
        })
        .collect();
    assert_eq!(truth.len(), 40);
    assert_cpu_matches_the_kernel_but_for_missing_finals(
        report,
        &truth,
        &format!("make -j2, {accounting}"),
    );

    // Multithreaded children passing a token around (a switch every 200 µs of CPU),
    // started by posix_spawn, fork + exec and fork; the parent prints each one's CPU time.
    // The kernel's figure (wait4) is short by each thread's way out: it adds an exiting
    // thread's runtime to its process's sum before the thread's last switch, as the
    // scheduler last updated it (kernel/exit.c, __exit_signal), and on this VM that way out
    // of 3 threads came to 0.2-0.55 ms, over 0.5 % of a 60 ms child now and then (in both
    // accountings, which count it). 200 ms of CPU a child keeps it near 0.3 % at most.
    let run = traced_in(
        accounting,
        &[
            &bin("cg-tree").display().to_string(),
            "--children",
            "12",
            "--ms",
            "200",
            "--threads",
            "3",
            "--jobs",
            "3",
        ],
    );
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let truth: Vec<(u64, f64)> = run
        .stdout()
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("child"), Some(pid), Some("cpu"), Some(cpu)) => {
                    Some((pid.parse().ok()?, cpu.parse().ok()?))
                }
                _ => None,
            }
        })
        .collect();
    assert_eq!(truth.len(), 12, "{}", run.stdout());
    assert_accounting(run.report(), accounting);
    assert_cpu_matches_the_kernel_but_for_missing_finals(
        run.report(),
        &truth,
        &format!("cg-tree, {accounting}"),
    );
}

#[test]
fn a_thread_pools_cpu_time_matches_the_kernels_own_figure_in_both_accountings() {
    require_root();
    // A worker pool (one thread spinning 0.6 s of CPU, 12 waking every 100 ms) started
    // through cg-wait4, which logs the kernel's own figure of its CPU time at exit (wait4:
    // every thread's).
    for accounting in ACCOUNTINGS {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("cpu.log");
        let run = traced_in(
            accounting,
            &[
                &bin("cg-wait4").display().to_string(),
                &log.display().to_string(),
                &bin("cg-pool").display().to_string(),
                "0.6",
                "12",
            ],
        );
        assert_eq!(run.code(), Some(0), "{}", run.stderr());
        let report = run.report();
        assert_accounting(report, accounting);
        assert_adds_up(report);
        let (pid, kernel_s) = std::fs::read_to_string(&log)
            .unwrap()
            .split_once(' ')
            .map(|(p, c)| (p.parse::<u64>().unwrap(), c.trim().parse::<f64>().unwrap()))
            .unwrap();
        assert_cpu_matches_the_kernel_but_for_missing_finals(
            report,
            &[(pid, kernel_s)],
            &format!("thread pool, {accounting}"),
        );
    }
}

/// Makes the kernel hand out `pid` next (through `/proc/sys/kernel/ns_last_pid`), if no other
/// process forks first.
fn next_pid_will_be(pid: u32) {
    std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
        .expect("writing /proc/sys/kernel/ns_last_pid (root)");
}

/// Waits up to 20 s for `path` to hold a pid.
fn pid_in(path: &std::path::Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `cg-trace --source model -q --interval MS -o DIR/r.json -- sh -c SCRIPT`.
fn trace_script(dir: &std::path::Path, interval_ms: &str, script: &str) -> std::process::Child {
    Command::new(bin("cg-trace"))
        .args(["--source", "model", "-q", "--interval", interval_ms, "-o"])
        .arg(dir.join("r.json"))
        .args(["--", "sh", "-c", script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a run [`trace_script`] started; checks that it succeeded; its report.
fn traced_report(tracer: std::process::Child, dir: &std::path::Path) -> Value {
    let output = tracer.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    read_report(&dir.join("r.json"))
}

fn records_of(report: &Value, pid: u32) -> Vec<Value> {
    report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pid"].as_u64() == Some(u64::from(pid)))
        .cloned()
        .collect()
}

#[test]
fn a_non_target_that_reuses_a_targets_pid_is_not_charged_to_it() {
    require_root();
    // The command's child (pid P) burns 0.2 s and exits 3; right away a process that is not
    // a target (this test's own child) gets pid P and burns 1 s while cg-trace still knows P
    // as a target that just exited. It must not be charged to P's record nor overwrite its
    // exit code. (Another process may take the pid first on a busy machine: then try again.)
    for attempt in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let (pidfile, done) = (dir.path().join("pid"), dir.path().join("done"));
        let script = format!(
            "{burn} --self 200 --exit 3 & echo $! > {pid}; wait; echo 1 > {done}; sleep 2",
            burn = burn(),
            pid = pidfile.display(),
            done = done.display()
        );
        let tracer = trace_script(dir.path(), "500", &script);
        let reused = pid_in(&pidfile);
        pid_in(&done);
        next_pid_will_be(reused);
        let intruder = Background::spawn(burn().as_ref(), &["--self", "1000"]);
        let got = intruder.pid();
        let report = traced_report(tracer, dir.path());
        drop(intruder);
        if got != reused {
            eprintln!("attempt {attempt}: pid {reused} went to another process first");
            continue;
        }
        assert_adds_up(&report);
        let records = records_of(&report, reused);
        assert_eq!(records.len(), 1, "{records:#?}");
        let cpu = num(&records[0], "/cpu_time_s");
        assert!(
            (cpu - 0.2).abs() < 0.05,
            "pid {reused}: {cpu} s, its own 0.2 s expected"
        );
        assert_eq!(records[0]["exit_code"], 3, "{:#}", records[0]);
        return;
    }
    panic!("5 attempts: another process always took the pid first");
}

#[test]
fn a_descendant_that_reuses_a_pid_within_an_interval_is_a_process_of_its_own() {
    require_root();
    // Within one 2 s interval: the command's first child (pid P) burns 0.2 s and exits 3,
    // then its second child gets pid P, burns 0.3 s and exits 4. Two processes, each with
    // its own CPU time and exit code.
    for attempt in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let (pidfile, done, go) = (
            dir.path().join("pid"),
            dir.path().join("done"),
            dir.path().join("go"),
        );
        assert!(
            Command::new("mkfifo").arg(&go).status().unwrap().success(),
            "mkfifo"
        );
        let script = format!(
            "{burn} --self 200 --exit 3 & echo $! > {pid}; wait; echo 1 > {done}; \
             read x < {go}; {burn} --self 300 --exit 4; sleep 0.2",
            burn = burn(),
            pid = pidfile.display(),
            done = done.display(),
            go = go.display()
        );
        let tracer = trace_script(dir.path(), "2000", &script);
        let reused = pid_in(&pidfile);
        pid_in(&done);
        next_pid_will_be(reused);
        std::fs::write(&go, "go\n").unwrap();
        let report = traced_report(tracer, dir.path());
        assert_adds_up(&report);
        let records = records_of(&report, reused);
        if records.len() < 2 {
            eprintln!("attempt {attempt}: pid {reused} went to another process first");
            continue;
        }
        assert_eq!(records.len(), 2, "{records:#?}");
        for (cpu_s, code) in [(0.2, 3), (0.3, 4)] {
            let record = records
                .iter()
                .find(|r| r["exit_code"] == code)
                .unwrap_or_else(|| panic!("no pid {reused} exited {code}: {records:#?}"));
            let cpu = num(record, "/cpu_time_s");
            assert!(
                (cpu - cpu_s).abs() < 0.05,
                "pid {reused} exiting {code}: {cpu} s, {cpu_s} s expected: {records:#?}"
            );
        }
        return;
    }
    panic!("5 attempts: another process always took the pid first");
}

#[test]
fn a_fork_storm_between_long_intervals_loses_no_process_and_no_cpu_time() {
    require_root();
    for accounting in ACCOUNTINGS {
        fork_storm_loses_nothing(accounting);
    }
}

fn fork_storm_loses_nothing(accounting: &str) {
    // 2,000 short processes in a row while cg-trace reads only every 2 s: six thousand
    // lifecycle events per interval. Every process must keep its parent and its time: the
    // command's whole tree matches the kernel's own figure (wait4 in cg-wait4).
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cpu.log");
    let log_arg = log.display().to_string();
    let run = cg_tests::cg_trace_with_env(
        &[
            "--source",
            "model",
            "-q",
            "--interval",
            "2000",
            "--accounting",
            method_of(accounting),
            "--",
            &bin("cg-wait4").display().to_string(),
            &log_arg,
            "sh",
            "-c",
            "i=0; while [ $i -lt 2000 ]; do /bin/true; i=$((i + 1)); done",
        ],
        env_of(accounting),
    );
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(
        num(report, "/totals/lost_events/events_dropped_count"),
        0.0,
        "{:#}",
        report["totals"]["lost_events"]
    );
    let processes = report["processes"].as_array().unwrap();
    assert!(processes.len() > 2000, "{} processes", processes.len());
    let root = processes.iter().find(|p| p["root"] == true).unwrap();
    let (shell_pid, kernel_s) = std::fs::read_to_string(&log)
        .unwrap()
        .split_once(' ')
        .map(|(p, c)| (p.parse::<u64>().unwrap(), c.trim().parse::<f64>().unwrap()))
        .unwrap();
    for p in processes {
        if p["pid"] != root["pid"] {
            assert!(
                p["ppid"] == root["pid"] || p["ppid"].as_u64() == Some(shell_pid),
                "a process without its parent: {p:#}"
            );
        }
    }
    assert_accounting(report, accounting);
    let what = format!("fork storm, {accounting}");
    if accounting == "switch" {
        return assert_cpu_matches_the_kernel(report, &[(shell_pid, kernel_s)], &what);
    }
    // Iterator accounting: as the kernel's figure within 0.5 %, but for the processes the
    // report counts closed without their final runtime (this VM's kernel now and then
    // reports no free; docs/attribution.md, *Where it is approximate*), each of which may
    // lose up to its whole runtime: at most twice the largest /bin/true's. Measured since
    // 78d9d17 (final runtimes after the last read get one more read), beside two or three
    // busy loops: 76 runs of both walkers within -0.14 % to +0.22 %, the short ones with 2-4
    // finals missing; before it, one run in five came out 1-2 % short with none counted.
    let missing = num(report, "/totals/lost_events/final_runtimes_missing_count");
    let largest_s = processes
        .iter()
        .filter(|p| p["ppid"].as_u64() == Some(shell_pid))
        .map(|p| num(p, "/cpu_time_s"))
        .fold(0.0, f64::max);
    let floor_s = 0.995 * kernel_s - missing * 2.0 * largest_s;
    let ours_s = subtree_cpu_s(report, shell_pid);
    eprintln!(
        "{what}: kernel {kernel_s:.6} s, cg-trace {ours_s:.6} s ({:+.3} %), {missing} final \
         runtime(s) missing",
        (ours_s / kernel_s - 1.0) * 100.0
    );
    assert!(
        (floor_s..=1.005 * kernel_s).contains(&ours_s),
        "{what}: the kernel counted {kernel_s:.6} s, cg-trace {ours_s:.6} s ({:+.2} %), at \
         least {floor_s:.6} s expected with {missing} final runtime(s) missing (the largest \
         child {largest_s:.6} s); lost events {}",
        (ours_s / kernel_s - 1.0) * 100.0,
        report["totals"]["lost_events"]
    );
}

#[test]
fn what_the_command_leaves_running_is_named_on_stderr_and_in_the_report() {
    require_root();
    // The command starts a daemon (its own session, still running when the command exits):
    // cg-trace ends with the command, and says which process it leaves running.
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("daemon");
    let script = format!(
        "setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $! > {}; sleep 0.3",
        pidfile.display()
    );
    // Not -q: it keeps warnings such as this one off stderr.
    let run = cg_trace(&["--source", "model", "--", "sh", "-c", &script]);
    let daemon = pid_in(&pidfile);
    // SAFETY: ending the daemon the test started.
    let _kill = KillOnDrop(daemon);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let left = report["meta"]["still_running"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        left.iter()
            .any(|p| p["pid"].as_u64() == Some(u64::from(daemon)) && p["command"][0] == "sleep"),
        "{:#}",
        report["meta"]
    );
    assert!(
        run.stderr().contains(&format!("pid {daemon} (sleep 30)")),
        "{}",
        run.stderr()
    );

    // A command that ignores SIGINT outlives the 3 s cg-trace gives it after a Ctrl-C.
    // The Ctrl-C comes once the shell ignores SIGINT (it says so in a file), not after a
    // guessed delay: on a loaded machine it could come first and end the shell.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let ready = dir.path().join("ignoring");
    let child = Command::new(bin("cg-trace"))
        .args(["--source", "model", "-o"])
        .arg(&out)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "trap '' INT; echo $$ > {}; exec sleep 30 </dev/null >/dev/null 2>&1",
            ready.display()
        ))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    pid_in(&ready);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = read_report(&out);
    let left = report["meta"]["still_running"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(left.len(), 1, "{:#}\n{stderr}", report["meta"]);
    let pid = left[0]["pid"].as_u64().unwrap() as u32;
    let _kill = KillOnDrop(pid);
    assert_eq!(left[0]["command"][0], "sleep", "{:#}", left[0]);
    assert!(stderr.contains("still running"), "{stderr}");
}

/// Kills a process when dropped (a test's leftover).
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: a pid this test started.
        unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
    }
}

#[test]
fn the_peak_memory_is_cg_traces_own_when_a_big_python_starts_it() {
    require_root();
    // Python's subprocess starts cg-trace by vfork: the kernel's ru_maxrss then keeps the
    // ~300 MB Python held; meta.profiler.max_rss_bytes must be cg-trace's own peak.
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let script = "import subprocess, sys\n\
                  held = bytearray(b'x') * (300 << 20)\n\
                  sys.exit(subprocess.run(sys.argv[1:]).returncode)\n";
    let output = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(bin("cg-trace"))
        .args(["--source", "model", "-q", "-o"])
        .arg(&report)
        .args(["--", "true"])
        .output()
        .expect("python3");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = cg_tests::read_report(&report);
    let peak = num(&report, "/meta/profiler/max_rss_bytes");
    assert!(
        peak > 1e6 && peak < 200e6,
        "cg-trace's peak memory {:.1} MB (Python held 300 MB)",
        peak / 1e6
    );
}

#[test]
fn a_child_reaped_long_after_its_exit_is_charged_once_in_either_accounting() {
    // cg-burn reaps its children in order: the 600 ms one stays a zombie until the 2,400 ms
    // one is done, well past the wait for its final runtime. In iterator accounting the task
    // iterator used to read the zombie again once its books were closed, as a new thread,
    // and charged its whole runtime twice.
    require_root();
    for accounting in ACCOUNTINGS {
        let run = traced_in(
            accounting,
            &[&burn(), "--children", "2400,600", "--exit", "0"],
        );
        assert_eq!(run.code(), Some(0), "{}", run.stderr());
        let report = run.report();
        assert_accounting(report, accounting);
        assert_adds_up(report);
        let truth = burn_children_cpu(&run.stdout());
        assert_eq!(truth.len(), 2, "{}", run.stdout());
        assert_cpu_matches_the_kernel(report, &truth, &format!("cg-burn, {accounting}"));
    }
}
