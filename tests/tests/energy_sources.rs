//! End-to-end tests of the energy sources through the real `cg-trace` binary (root, real
//! eBPF): a power meter's log written live, RAPL perf counters on a generated event-source
//! tree, NVIDIA GPUs through a stand-in NVML library, and `cg-trace sources` without root;
//! counters that misbehave mid-run (step back, jump, freeze, a replaced file, failed reads)
//! and power logs that are no readings. Run serially (`--test-threads=1`): they measure CPU
//! time on a shared machine.

use std::{fs, os::unix::fs::PermissionsExt, path::Path, time::Duration};

use cg_tests::{
    Background, FakeNvml, FakePerf, FakePowerLog, FakePowercap, Fault, GpuScript, Linear, LogForm,
    Run, assert_adds_up, bin, cg_trace, num, process, require_root,
};
use serde_json::Value;

fn burn() -> String {
    bin("cg-burn").display().to_string()
}

/// The two children of the root process, as (pid, cpu_time_s), smaller first.
fn two_children(report: &Value) -> [(u32, f64); 2] {
    let root = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["root"] == true)
        .expect("a root process");
    let mut kids: Vec<(u32, f64)> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["ppid"] == root["pid"])
        .map(|p| (p["pid"].as_u64().unwrap() as u32, num(p, "/cpu_time_s")))
        .collect();
    kids.sort_by(|a, b| a.1.total_cmp(&b.1));
    assert_eq!(kids.len(), 2, "{:#}", report["processes"]);
    [kids[0], kids[1]]
}

fn topology<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["meta"]["domain_topology"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .unwrap_or_else(|| panic!("no domain {name}: {:#}", report["meta"]["domain_topology"]))
}

fn notes(report: &Value) -> Vec<String> {
    report["meta"]["measurement_quality"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

const NO_RAPL: [&str; 4] = [
    "--perf-root",
    "/nonexistent",
    "--powercap-root",
    "/nonexistent",
];

#[test]
fn power_log_is_the_machine_energy_with_rapl_nested_inside() {
    require_root();
    // The wall: 30 W + 9 W per busy CPU, one sample every 50 ms, local times as a WattsUp
    // logger writes them. RAPL (perf): package 6 W + 7 W per CPU, cores inside it, DRAM.
    let meter = FakePowerLog::start(
        LogForm::PmSum,
        Linear {
            idle_w: 30.0,
            k_w_per_cpu: 9.0,
        },
        Duration::from_millis(50),
        None,
    );
    let perf = FakePerf::start(
        Linear {
            idle_w: 6.0,
            k_w_per_cpu: 7.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 5.0,
        },
        Linear {
            idle_w: 1.5,
            k_w_per_cpu: 0.5,
        },
    );
    let (log, perf_root, counters) = (
        meter.path().display().to_string(),
        perf.root().display().to_string(),
        perf.counters().display().to_string(),
    );
    let burn = burn();
    let run = cg_trace(&[
        "--power-log",
        &log,
        "--perf-root",
        &perf_root,
        "--perf-counters-from",
        &counters,
        "--no-gpu",
        // The true baselines: an idle fit needs a quiet machine, and this one is shared.
        "--idle-watts",
        "meter=30,package-0=6,core-0=1,dram-0=1.5",
        "--",
        &burn,
        "--children",
        "1200,600",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let meta = &report["meta"];
    assert_eq!(meta["sources"][0]["name"], "meter");
    assert_eq!(meta["sources"][1]["name"], "perf");
    assert_eq!(topology(report, "meter")["top_level"], true);
    assert_eq!(topology(report, "meter")["kind"], "meter");
    assert_eq!(topology(report, "package-0")["parent"], "meter");
    assert_eq!(topology(report, "dram-0")["parent"], "meter");
    assert_eq!(topology(report, "core-0")["parent"], "package-0");
    // Totals are the meter's energy alone: RAPL is inside it, not beside it.
    let totals = &report["totals"];
    assert_eq!(
        num(totals, "/energy_j"),
        num(totals, "/domains/meter/energy_j")
    );
    let power_meter = &meta["power_meter"];
    assert_eq!(power_meter["format"], "time,id,pm1,pm2,sum");
    assert!(
        num(power_meter, "/run_samples_count") >= 10.0,
        "{power_meter:#}"
    );
    // No gap is invented: the logger is a thread of this test, and on a loaded machine it can
    // really stall; each gap reported is one the log has (none when it has none).
    let longest_s = longest_pause_s(&fs::read_to_string(meter.path()).unwrap());
    let gaps = power_meter["gaps"].as_array().unwrap();
    if longest_s < 0.15 {
        assert_eq!(gaps.len(), 0, "{power_meter:#}");
    }
    for gap in gaps {
        assert!(
            num(gap, "/duration_s") <= longest_s + 0.01,
            "{gap:#} ({longest_s} s)"
        );
    }
    assert_eq!(
        meta["measurement_quality"]["grade"], "measured",
        "{:#}",
        meta["measurement_quality"]
    );
    // Each child gets 9 W x its CPU time of the meter's energy (7 W x of the package's), the
    // split 2:1.
    let [small, big] = two_children(report);
    assert!((big.1 / small.1 - 2.0).abs() < 0.25, "{small:?} {big:?}");
    for (pid, cpu_s) in [small, big] {
        let p = process(report, pid);
        for (domain, k) in [("meter", 9.0), ("package-0", 7.0)] {
            let got = num(p, &format!("/domains/{domain}/energy_j"));
            let expected = k * cpu_s;
            assert!(
                (got - expected).abs() < 0.2 * expected,
                "pid {pid}: {domain} {got:.3} J, expected {k} W x {cpu_s:.3} s = {expected:.3} J \
                 ({:#})",
                meta["measurement_quality"]["notes"]
            );
        }
        // A process's energy is its share of the top-level domain, the meter.
        assert_eq!(num(p, "/energy_j"), num(p, "/domains/meter/energy_j"));
    }
}

#[test]
fn gaps_in_a_power_log_are_reported_not_hidden() {
    require_root();
    // time,watts with epoch seconds; the logger stops for 0.8 s in the middle of the run.
    let meter = FakePowerLog::start(
        LogForm::EpochWatts,
        Linear {
            idle_w: 20.0,
            k_w_per_cpu: 10.0,
        },
        Duration::from_millis(50),
        Some((Duration::from_millis(900), Duration::from_millis(800))),
    );
    let log = meter.path().display().to_string();
    let burn = burn();
    let mut args = vec!["--power-log", &log, "--no-gpu", "--calibrate-ms", "0"];
    args.extend(NO_RAPL);
    args.extend(["--", &burn, "--children", "1500"]);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let meta = &report["meta"];
    assert_eq!(meta["power_meter"]["format"], "time,watts");
    assert_eq!(
        meta["sources"].as_array().unwrap().len(),
        1,
        "the meter alone, no model beside it: {:#}",
        meta["sources"]
    );
    let gaps = meta["power_meter"]["gaps"].as_array().unwrap();
    assert_eq!(gaps.len(), 1, "{:#}", meta["power_meter"]);
    assert!(num(&gaps[0], "/duration_s") > 0.6, "{gaps:#?}");
    assert_eq!(meta["measurement_quality"]["grade"], "degraded");
    assert!(
        notes(report).iter().any(|n| n.contains("gap(s)")),
        "{:#?}",
        notes(report)
    );
}

#[test]
fn bad_power_logs_get_clear_errors() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("power.csv");
    fs::write(&log, "time,watts\n1770200123,100\n1770200124,a lot\n").unwrap();
    let log = log.display().to_string();
    let run = cg_trace(&["--power-log", &log, "--no-gpu", "--", "true"]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(
        run.stderr().contains("power.csv:3") && run.stderr().contains("a lot"),
        "{}",
        run.stderr()
    );
    let run = cg_trace(&["--power-log", "/nonexistent/p.csv", "--", "true"]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(
        run.stderr().contains("/nonexistent/p.csv"),
        "{}",
        run.stderr()
    );
    fs::write(dir.path().join("ok.csv"), "time,watts\n").unwrap();
    let ok = dir.path().join("ok.csv").display().to_string();
    let run = cg_trace(&["--power-log", &ok, "--source", "model", "--", "true"]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(run.stderr().contains("--source model"), "{}", run.stderr());
}

#[test]
fn perf_counters_are_preferred_and_split_like_powercap() {
    require_root();
    let perf = FakePerf::start(
        Linear {
            idle_w: 6.0,
            k_w_per_cpu: 9.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 7.0,
        },
        Linear {
            idle_w: 1.5,
            k_w_per_cpu: 0.5,
        },
    );
    // Powercap offers the same domains: no warning.
    let rapl = FakePowercap::start(
        Linear {
            idle_w: 6.0,
            k_w_per_cpu: 9.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 7.0,
        },
        Linear {
            idle_w: 1.5,
            k_w_per_cpu: 0.5,
        },
        u64::MAX / 2,
    );
    let (perf_root, counters, powercap_root) = (
        perf.root().display().to_string(),
        perf.counters().display().to_string(),
        rapl.root().display().to_string(),
    );
    let burn = burn();
    let run = cg_trace(&[
        "--perf-root",
        &perf_root,
        "--perf-counters-from",
        &counters,
        "--powercap-root",
        &powercap_root,
        "--no-gpu",
        // The true baselines: an idle fit needs a quiet machine, and this one is shared.
        "--idle-watts",
        "package-0=6,core-0=1,dram-0=1.5",
        "--",
        &burn,
        "--children",
        "1200,600",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(!run.stderr().contains("disagree"), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let meta = &report["meta"];
    assert_eq!(meta["sources"][0]["name"], "perf");
    assert_eq!(meta["sources"].as_array().unwrap().len(), 1);
    assert!(
        meta["source_selection"].as_str().unwrap().contains("perf"),
        "{}",
        meta["source_selection"]
    );
    assert_eq!(topology(report, "core-0")["parent"], "package-0");
    assert_eq!(topology(report, "package-0")["source"], "perf");
    let probed: Vec<&str> = meta["sources_probed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(probed, ["perf", "powercap"]);
    assert_eq!(
        meta["measurement_quality"]["grade"], "measured",
        "{:#}",
        meta["measurement_quality"]
    );
    let [small, big] = two_children(report);
    for (pid, cpu_s) in [small, big] {
        let got = num(process(report, pid), "/domains/package-0/energy_j");
        let expected = 9.0 * cpu_s;
        assert!(
            (got - expected).abs() < 0.2 * expected,
            "pid {pid}: package {got:.3} J, expected 9 W x {cpu_s:.3} s = {expected:.3} J"
        );
    }
}

#[test]
fn perf_and_powercap_disagreeing_is_warned_about() {
    require_root();
    let perf = FakePerf::start(
        Linear {
            idle_w: 6.0,
            k_w_per_cpu: 9.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 7.0,
        },
        Linear {
            idle_w: 1.5,
            k_w_per_cpu: 0.5,
        },
    );
    // Powercap also has psys, which the perf PMU lacks.
    let dir = tempfile::tempdir().unwrap();
    for (zone, name) in [("intel-rapl:0", "package-0"), ("intel-rapl:1", "psys")] {
        let d = dir.path().join(zone);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("name"), format!("{name}\n")).unwrap();
        fs::write(d.join("energy_uj"), "0\n").unwrap();
        fs::write(d.join("max_energy_range_uj"), "1000000000\n").unwrap();
    }
    let (perf_root, counters, powercap_root) = (
        perf.root().display().to_string(),
        perf.counters().display().to_string(),
        dir.path().display().to_string(),
    );
    let run = cg_trace(&[
        "--perf-root",
        &perf_root,
        "--perf-counters-from",
        &counters,
        "--powercap-root",
        &powercap_root,
        "--no-gpu",
        // Not -q: it keeps warnings off stderr.
        "--",
        "true",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(
        run.stderr().contains("warning: perf and powercap disagree"),
        "{}",
        run.stderr()
    );
    let report = run.report();
    assert!(
        notes(report)
            .iter()
            .any(|n| n.contains("only powercap: psys")),
        "{:#?}",
        notes(report)
    );
    assert_eq!(report["meta"]["sources"][0]["name"], "perf");
}

fn gpu(processes: Vec<(u32, u32)>, lost_after: Option<Duration>) -> FakeNvml {
    FakeNvml::start(GpuScript {
        name: "NVIDIA Stand-In 40GB",
        uuid: "GPU-12345678-abcd",
        power_w: 100.0,
        util_pct: 90,
        processes,
        lost_after,
    })
}

#[test]
fn gpu_energy_is_split_by_utilisation_and_unexplained_time_is_reported() {
    require_root();
    let spin = bin("cg-spin");
    let target = Background::spawn(&spin, &["4"]);
    // The target uses 60 % of the GPU, a process that is not a target (this test) 20 %;
    // the GPU is busy 90 %: 10 % is explained by no process.
    let nvml = gpu(vec![(target.pid(), 60), (std::process::id(), 20)], None);
    std::thread::sleep(Duration::from_millis(300));
    let (pid, lib) = (target.pid().to_string(), nvml.lib().display().to_string());
    let mut args = vec![
        "--source",
        "model",
        "-q",
        "--pid",
        &pid,
        "--duration",
        "2",
        "--nvml-lib",
        &lib,
        "--idle-watts",
        "gpu0=20",
    ];
    args.extend(NO_RAPL);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let meta = &report["meta"];
    let g = &meta["gpus"][0];
    assert_eq!(g["name"], "NVIDIA Stand-In 40GB");
    assert_eq!(g["uuid"], "GPU-12345678-abcd");
    assert_eq!(g["domain"], "gpu0");
    assert_eq!(g["energy_method"], "energy counter");
    assert_eq!(g["status"], "ok");
    assert_eq!(num(g, "/max_temperature_c"), 55.0);
    assert!(
        (num(g, "/avg_utilization_pct") - 90.0).abs() < 1e-6,
        "{g:#}"
    );
    assert!(
        g["measured"]
            .as_array()
            .unwrap()
            .contains(&"energy_j".into())
    );
    let domain = topology(report, "gpu0");
    assert_eq!(domain["kind"], "gpu");
    assert_eq!(domain["top_level"], true);
    assert_eq!(domain["gpu"], 0);
    // ~100 W for the run; the split of active energy is 60 : 20 + 10 unexplained.
    let d = &report["totals"]["domains"]["gpu0"];
    let duration = num(report, "/meta/duration_s");
    let energy = num(d, "/energy_j");
    assert!(
        (energy - 100.0 * duration).abs() < 0.15 * 100.0 * duration,
        "GPU energy {energy} J over {duration} s, expected ~100 W"
    );
    let active = energy - num(d, "/idle_energy_j");
    let target_j = num(process(report, target.pid()), "/domains/gpu0/energy_j");
    let close = |got: f64, share: f64| (got - active * share).abs() < 0.03 * active;
    assert!(close(target_j, 6.0 / 9.0), "target {target_j} of {active}");
    assert!(close(num(d, "/other_energy_j"), 3.0 / 9.0), "{d:#}");
    assert!(close(num(d, "/unexplained_energy_j"), 1.0 / 9.0), "{d:#}");
    // The GPU adds to the totals beside the model (its energy is not in the CPU's).
    let totals = &report["totals"];
    assert!(
        (num(totals, "/energy_j")
            - num(totals, "/domains/model/energy_j")
            - num(totals, "/domains/gpu0/energy_j"))
        .abs()
            < 1e-6
    );
}

#[test]
fn a_gpu_lost_mid_run_degrades_the_figures_and_the_run_goes_on() {
    require_root();
    let spin = bin("cg-spin");
    let target = Background::spawn(&spin, &["6"]);
    let nvml = gpu(vec![(target.pid(), 50)], Some(Duration::from_millis(2500)));
    let (pid, lib) = (target.pid().to_string(), nvml.lib().display().to_string());
    let mut args = vec![
        "--source",
        "model",
        "-q",
        "--pid",
        &pid,
        "--duration",
        "4",
        "--nvml-lib",
        &lib,
    ];
    args.extend(NO_RAPL);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(report["meta"]["gpus"][0]["status"], "lost");
    assert!(
        notes(report)
            .iter()
            .any(|n| n.contains("stopped answering")),
        "{:#?}",
        notes(report)
    );
    // What was measured before the loss is kept.
    assert!(num(report, "/totals/domains/gpu0/energy_j") > 0.0);
}

#[test]
fn no_nvml_library_leaves_the_gpu_out_and_says_why() {
    require_root();
    // Without an NVIDIA driver (as here) the default library is absent: the run goes on
    // without a GPU source, and the report says why.
    let mut args = vec!["--source", "model", "-q"];
    args.extend(NO_RAPL);
    args.extend(["--", "true"]);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let nvml = report["meta"]["sources_probed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "nvml")
        .expect("nvml probed");
    if nvml["usable"] == false {
        assert!(
            nvml["reason"]
                .as_str()
                .unwrap()
                .contains("libnvidia-ml.so.1"),
            "{nvml:#}"
        );
        assert!(report["meta"].get("gpus").is_none());
    }
    // A library named with --nvml-lib must work: bad input, exit 2.
    let mut args = vec![
        "--source",
        "model",
        "-q",
        "--nvml-lib",
        "/nonexistent/libnvml.so",
    ];
    args.extend(NO_RAPL);
    args.extend(["--", "true"]);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(
        run.stderr().contains("/nonexistent/libnvml.so"),
        "{}",
        run.stderr()
    );
}

/// Makes `path` and everything under it readable and searchable by everyone. (The fake
/// trees' helpers replace counter files as they go: one that vanished meanwhile is skipped.)
fn open_up(path: &Path) {
    match fs::set_permissions(path, fs::Permissions::from_mode(0o755)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        result => result.unwrap(),
    }
    if path.is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            open_up(&entry.unwrap().path());
        }
    }
}

/// Lets everyone list and enter the directory `dir` itself (nothing under it changes).
fn let_others_in(dir: &Path) {
    assert!(
        dir.starts_with(std::env::temp_dir()) && dir != std::env::temp_dir(),
        "{} is not a test's own temporary directory",
        dir.display()
    );
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn sources_needs_no_root_and_says_what_root_would_change() {
    require_root();
    // RAPL that only root may read: perf counter files and powercap's energy_uj, mode 0400.
    let perf = FakePerf::start(
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 1.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 1.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 1.0,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let zone = dir.path().join("powercap/intel-rapl:0");
    fs::create_dir_all(&zone).unwrap();
    fs::write(zone.join("name"), "package-0\n").unwrap();
    fs::write(zone.join("energy_uj"), "0\n").unwrap();
    fs::write(zone.join("max_energy_range_uj"), "1000\n").unwrap();
    let nvml = gpu(vec![], None);
    // The trees, and the fake perf's own temporary directory above its two (never the
    // parent of a temporary directory: that is /tmp, which is not ours to change).
    for p in [perf.root(), perf.counters()] {
        open_up(&p);
        let_others_in(p.parent().unwrap());
    }
    open_up(dir.path());
    open_up(nvml.dir());
    for event in ["energy-pkg", "energy-cores", "energy-ram"] {
        let file = perf.counters().join("power").join(event).join("cpu0");
        fs::set_permissions(file, fs::Permissions::from_mode(0o400)).unwrap();
    }
    fs::set_permissions(zone.join("energy_uj"), fs::Permissions::from_mode(0o400)).unwrap();

    let run_as_nobody = |json: bool| {
        let mut cmd = cg_tests::as_nobody();
        cmd.arg(bin("cg-trace"))
            .arg("sources")
            .arg("--perf-root")
            .arg(perf.root())
            .arg("--perf-counters-from")
            .arg(perf.counters())
            .arg("--powercap-root")
            .arg(dir.path().join("powercap"))
            .arg("--nvml-lib")
            .arg(nvml.lib());
        if json {
            cmd.arg("--json");
        }
        cmd.output().expect("setpriv (util-linux)")
    };
    let output = run_as_nobody(true);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Not a report: `cg-trace sources --json`.
    let inventory: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let source = |name: &str| {
        inventory["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {inventory:#}"))
            .clone()
    };
    assert_eq!(inventory["root"], false);
    for name in ["perf", "powercap"] {
        let s = source(name);
        assert_eq!(s["usable"], false, "{s:#}");
        assert_eq!(s["needs_privileges"], true, "{s:#}");
        assert_eq!(s["domains"][0]["name"], "package-0", "{s:#}");
    }
    assert_eq!(source("nvml")["usable"], true);
    assert_eq!(source("nvml")["domains"][0]["name"], "gpu0");
    assert_eq!(source("model")["usable"], true);
    assert_eq!(
        inventory["auto"]["sources"],
        serde_json::json!(["model", "nvml"])
    );
    assert_eq!(
        inventory["auto_as_root"],
        serde_json::json!(["perf", "nvml"])
    );
    assert_eq!(inventory["tracing"]["allowed"], false);

    let output = run_as_nobody(false);
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("needs privileges"), "{text}");
    assert!(
        text.contains("as root:  auto would use perf + nvml"),
        "{text}"
    );
    assert!(text.contains("CAP_PERFMON"), "{text}");
}

// Counters that misbehave mid-run. Each run burns CPU, then has the fake counter show a
// fault from inside the traced command (so it happens during the run), then burns on.

/// package-0: 6 W + 9 W per busy CPU; core-0 inside it; dram-0 beside it.
fn rapl_power() -> (Linear, Linear, Linear) {
    let linear = |idle_w, k_w_per_cpu| Linear {
        idle_w,
        k_w_per_cpu,
    };
    (linear(6.0, 9.0), linear(1.0, 7.0), linear(1.5, 0.5))
}

/// A powercap tree with a real package counter's range (262,143 J), its counters at 1 kJ.
fn fake_powercap() -> FakePowercap {
    let (package, core, dram) = rapl_power();
    FakePowercap::start_from(package, core, dram, 262_143_328_850, 1_000_000_000)
}

/// A perf tree, its counters at 1 kJ.
fn fake_perf() -> FakePerf {
    let (package, cores, ram) = rapl_power();
    FakePerf::start_from(package, cores, ram, 1000.0)
}

/// `sh -c` script: burn `before_ms` of CPU, run each fault command with `between_ms` of
/// burning after it, then burn `after_ms`.
fn faulty_workload(before_ms: u64, faults: &[String], after_ms: u64) -> String {
    let burn = burn();
    let mut script = format!("{burn} --self {before_ms}");
    for fault in faults {
        script.push_str(&format!(" && {fault} && {burn} --self 300"));
    }
    script.push_str(&format!(" && {burn} --self {after_ms}"));
    script
}

/// cg-trace over the source `source` with `args`, with a per-interval series, on
/// `sh -c script`.
fn run_faulty(source: &[String], args: &[&str], script: &str) -> Run {
    let mut all = vec!["--no-gpu", "--timeseries", "-q"];
    all.extend(source.iter().map(String::as_str));
    all.extend(args);
    all.extend(["--", "sh", "-c", script]);
    let run = cg_trace(&all);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    run
}

fn powercap_args(rapl: &FakePowercap) -> Vec<String> {
    vec![
        "--source".into(),
        "powercap".into(),
        "--powercap-root".into(),
        rapl.root().display().to_string(),
        "--perf-root".into(),
        "/nonexistent".into(),
    ]
}

fn perf_args(perf: &FakePerf) -> Vec<String> {
    vec![
        "--source".into(),
        "perf".into(),
        "--perf-root".into(),
        perf.root().display().to_string(),
        "--perf-counters-from".into(),
        perf.counters().display().to_string(),
        "--powercap-root".into(),
        "/nonexistent".into(),
    ]
}

/// Intervals whose energy for `domain` is unknown, and the time they cover.
fn unknown(report: &Value, domain: &str) -> (f64, f64) {
    let d = &report["totals"]["domains"][domain];
    (
        num(d, "/unknown_energy_intervals_count"),
        num(d, "/unknown_energy_duration_s"),
    )
}

/// `domain`'s entry in each interval of the series, with the interval's start and length.
fn series<'a>(report: &'a Value, domain: &str) -> Vec<(f64, f64, &'a Value)> {
    report["timeseries"]
        .as_array()
        .expect("timeseries")
        .iter()
        .map(|p| (num(p, "/t_s"), num(p, "/duration_s"), &p["domains"][domain]))
        .collect()
}

/// Whether `point`'s glitches name `glitch`.
fn has_glitch(point: &Value, glitch: &str) -> bool {
    point["glitches"]
        .as_array()
        .is_some_and(|g| g.iter().any(|x| x == glitch))
}

/// No interval of any domain claims a power no RAPL domain draws (1 kW).
fn assert_no_impossible_power(report: &Value) {
    for point in report["timeseries"].as_array().expect("timeseries") {
        for (name, d) in point["domains"].as_object().unwrap() {
            let power_w = num(d, "/power_w");
            assert!(
                power_w < 1_000.0,
                "{name} at {} s: {power_w} W measured",
                num(point, "/t_s")
            );
        }
    }
}

/// Every interval of `domain` (of at least 50 ms) whose energy counts as known has some:
/// a package drawing 6 W or more never reads a clean 0 J.
fn assert_no_clean_zero(report: &Value, domain: &str) {
    for (t_s, dt_s, p) in series(report, domain) {
        if p["energy_known"] != false && dt_s >= 0.05 {
            assert!(
                num(p, "/energy_j") > 0.0,
                "{domain} at {t_s} s: 0 J measured over {dt_s} s"
            );
        }
    }
}

fn assert_noted(report: &Value, needles: &[&str]) {
    let notes = notes(report);
    assert!(
        notes.iter().any(|n| needles.iter().all(|x| n.contains(x))),
        "no note with {needles:?}: {notes:#?}"
    );
    assert_eq!(report["meta"]["measurement_quality"]["grade"], "degraded");
}

/// The true idle power of each RAPL domain: the split is then checked whatever else loads
/// the machine.
const TRUE_IDLE: &str = "package-0=6,core-0=1,dram-0=1.5";

#[test]
fn a_powercap_counter_stepping_back_is_unknown_energy_not_a_wraparound() {
    require_root();
    let rapl = fake_powercap();
    // 50 J back: far more than the package gains in an interval, so that a read sees it.
    let script = faulty_workload(
        300,
        &[rapl.fault_command("intel-rapl:0", Fault::StepBack(50.0))],
        300,
    );
    let run = run_faulty(&powercap_args(&rapl), &["--idle-watts", TRUE_IDLE], &script);
    let report = run.report();
    assert_adds_up(report);
    // Taken as a wraparound, 50 J back would be 262,093 J in one interval (2.6 MW).
    assert_no_impossible_power(report);
    assert!(num(report, "/totals/domains/package-0/energy_j") < 500.0);
    let (count, duration_s) = unknown(report, "package-0");
    assert!((1.0..=2.0).contains(&count), "{count} unknown intervals");
    assert!(
        duration_s > 0.0 && duration_s < 1.0,
        "{duration_s} s unknown"
    );
    assert!(
        series(report, "package-0")
            .iter()
            .any(|(_, _, p)| p["energy_known"] == false && has_glitch(p, "step_back"))
    );
    // The other counters did nothing wrong; the package's goes on after the glitch.
    assert_eq!(unknown(report, "core-0").0, 0.0);
    assert_eq!(unknown(report, "dram-0").0, 0.0);
    assert_noted(report, &["package-0: energy unknown", "stepped back"]);
}

#[test]
fn a_powercap_counter_jumping_1000_j_is_unknown_energy() {
    require_root();
    let rapl = fake_powercap();
    let script = faulty_workload(
        300,
        &[rapl.fault_command("intel-rapl:0", Fault::Jump(1000.0))],
        300,
    );
    let run = run_faulty(&powercap_args(&rapl), &["--idle-watts", TRUE_IDLE], &script);
    let report = run.report();
    assert_adds_up(report);
    assert_no_impossible_power(report);
    assert!(num(report, "/totals/domains/package-0/energy_j") < 500.0);
    let (count, _) = unknown(report, "package-0");
    assert!((1.0..=2.0).contains(&count), "{count} unknown intervals");
    assert!(
        series(report, "package-0")
            .iter()
            .any(|(_, _, p)| has_glitch(p, "jump"))
    );
    assert_eq!(unknown(report, "core-0").0, 0.0);
    assert_noted(report, &["package-0: energy unknown", "jumped ahead"]);
}

#[test]
fn a_powercap_counter_frozen_while_its_cpus_burn_is_unknown_energy() {
    require_root();
    let rapl = fake_powercap();
    // The package counter stops for 1.2 s while a CPU burns.
    let script = faulty_workload(
        300,
        &[rapl.fault_command("intel-rapl:0", Fault::Freeze(Duration::from_millis(1200)))],
        1500,
    );
    let run = run_faulty(&powercap_args(&rapl), &["--idle-watts", TRUE_IDLE], &script);
    let report = run.report();
    assert_adds_up(report);
    // No interval of the busy package reads a clean 0 J: either it moved or it is unknown.
    assert_no_clean_zero(report, "package-0");
    let (count, duration_s) = unknown(report, "package-0");
    assert!(count >= 5.0, "{count} unknown intervals");
    assert!(
        (0.6..=2.0).contains(&duration_s),
        "{duration_s} s unknown, frozen 1.2 s"
    );
    let frozen = series(report, "package-0")
        .iter()
        .filter(|(_, _, p)| has_glitch(p, "frozen"))
        .count();
    assert!(frozen as f64 >= count - 1.0, "{frozen} frozen of {count}");
    assert_eq!(unknown(report, "core-0").0, 0.0);
    assert_noted(report, &["package-0: energy unknown", "did not move"]);
}

#[test]
fn a_deleted_and_recreated_energy_uj_is_reopened_not_read_stale() {
    require_root();
    let rapl = fake_powercap();
    let script = faulty_workload(
        300,
        &[rapl.fault_command("intel-rapl:0", Fault::Recreate)],
        800,
    );
    let run = run_faulty(&powercap_args(&rapl), &["--idle-watts", TRUE_IDLE], &script);
    let report = run.report();
    assert_adds_up(report);
    // Read from the stale file, every interval after the replacement would be 0 J.
    assert_no_clean_zero(report, "package-0");
    let package = series(report, "package-0");
    let replaced: Vec<f64> = package
        .iter()
        .filter(|(_, _, p)| has_glitch(p, "replaced"))
        .map(|(t, _, _)| *t)
        .collect();
    assert!(
        (1..=2).contains(&replaced.len()),
        "replaced in {replaced:?}"
    );
    // Measured again after it.
    let after = package
        .iter()
        .filter(|(t, dt, p)| *t > replaced[0] && *dt >= 0.05 && p["energy_known"] == true)
        .count();
    assert!(
        after >= 4,
        "{after} intervals measured after the replacement"
    );
    assert_noted(report, &["intel-rapl:0/energy_uj", "replaced"]);
}

#[test]
fn a_deleted_energy_uj_is_said_deleted_not_recreated() {
    require_root();
    let rapl = fake_powercap();
    let script = faulty_workload(
        300,
        &[rapl.fault_command("intel-rapl:0", Fault::Delete)],
        300,
    );
    let run = run_faulty(&powercap_args(&rapl), &["--idle-watts", TRUE_IDLE], &script);
    let report = run.report();
    assert_adds_up(report);
    let package = series(report, "package-0");
    let glitched = |name| {
        package
            .iter()
            .filter(|(_, _, p)| has_glitch(p, name))
            .count()
    };
    assert!(glitched("deleted") >= 1, "{:#}", report["timeseries"]);
    assert_eq!(glitched("replaced"), 0);
    assert_noted(
        report,
        &[
            "package-0: energy unknown",
            "was deleted (and not recreated",
        ],
    );
    assert!(
        !notes(report)
            .iter()
            .any(|n| n.contains("recreated (cg-trace")),
        "{:#?}",
        notes(report)
    );
}

#[test]
fn failed_powercap_reads_are_spread_back_and_leave_idle_and_the_fit_right() {
    require_root();
    let rapl = fake_powercap();
    // The package's energy_uj holds no number for 0.8 s: every read of the source fails
    // (the run goes on well past it, so the reading after them comes).
    let script = faulty_workload(
        300,
        &[rapl.fault_command(
            "intel-rapl:0",
            Fault::Unreadable(Duration::from_millis(800)),
        )],
        1200,
    );
    // The package's baseline is fitted; core's and DRAM's are given, to check the split.
    let run = run_faulty(
        &powercap_args(&rapl),
        &["--idle-watts", "core-0=1,dram-0=1.5"],
        &script,
    );
    let report = run.report();
    assert_adds_up(report);
    assert_no_impossible_power(report);
    assert!(num(report, "/totals/lost_events/read_errors_count") >= 3.0);
    // The energy the counters gained while unreadable is spread over that time, so idle
    // gets its baseline all along (in one lump, most of it would go to whoever ran then).
    let duration_s = num(report, "/totals/duration_s");
    for (domain, idle_w) in [("core-0", 1.0), ("dram-0", 1.5)] {
        let idle_j = num(report, &format!("/totals/domains/{domain}/idle_energy_j"));
        assert!(
            (idle_j / duration_s - idle_w).abs() < 0.08 * idle_w,
            "{domain}: idle {idle_j} J over {duration_s} s, baseline {idle_w} W"
        );
    }
    let spread = series(report, "package-0")
        .iter()
        .filter(|(_, _, p)| p["energy_spread"] == true)
        .count();
    assert!(spread >= 5, "{spread} intervals spread");
    assert_eq!(unknown(report, "package-0").0, 0.0);
    // The spread intervals stay out of the package's idle fit.
    let baseline = report["meta"]["idle_baseline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["domain"] == "package-0")
        .unwrap();
    let measured = series(report, "package-0")
        .iter()
        .filter(|(_, dt, p)| *dt >= 0.05 && p["energy_spread"] != true)
        .count() as f64;
    let calibration = (num(report, "/meta/calibration_s") / 0.1).ceil() + 1.0;
    assert!(
        num(baseline, "/fit_points_count") <= measured + calibration,
        "{baseline:#} with {measured} measured intervals"
    );
    assert_noted(report, &["package-0: reads failed", "spread"]);
}

#[test]
fn perf_counter_glitches_are_unknown_energy_and_the_run_goes_on() {
    require_root();
    let perf = fake_perf();
    let script = faulty_workload(
        300,
        &[
            perf.fault_command("energy-pkg", Fault::StepBack(50.0)),
            perf.fault_command("energy-pkg", Fault::Jump(1000.0)),
            perf.fault_command("energy-pkg", Fault::Freeze(Duration::from_millis(1200))),
        ],
        1500,
    );
    let run = run_faulty(&perf_args(&perf), &["--idle-watts", TRUE_IDLE], &script);
    let report = run.report();
    assert_adds_up(report);
    assert_no_impossible_power(report);
    let package = series(report, "package-0");
    for glitch in ["step_back", "jump", "frozen"] {
        assert!(
            package.iter().any(|(_, _, p)| has_glitch(p, glitch)),
            "no {glitch} in the series"
        );
    }
    let (count, duration_s) = unknown(report, "package-0");
    assert!(count >= 7.0, "{count} unknown intervals");
    assert!(duration_s < 2.5, "{duration_s} s unknown");
    assert_eq!(unknown(report, "core-0").0, 0.0);
    assert_eq!(unknown(report, "dram-0").0, 0.0);
    assert_noted(report, &["package-0: energy unknown", "stepped back"]);
    assert_noted(report, &["package-0: energy unknown", "jumped ahead"]);
    assert_noted(report, &["package-0: energy unknown", "did not move"]);
}

#[test]
fn failed_perf_reads_are_spread_back_and_leave_idle_right() {
    require_root();
    let perf = fake_perf();
    let script = faulty_workload(
        300,
        &[perf.fault_command("energy-pkg", Fault::Unreadable(Duration::from_millis(800)))],
        1200,
    );
    let run = run_faulty(&perf_args(&perf), &["--idle-watts", TRUE_IDLE], &script);
    let report = run.report();
    assert_adds_up(report);
    assert_no_impossible_power(report);
    assert!(num(report, "/totals/lost_events/read_errors_count") >= 3.0);
    let duration_s = num(report, "/totals/duration_s");
    for (domain, idle_w) in [("package-0", 6.0), ("core-0", 1.0), ("dram-0", 1.5)] {
        let idle_j = num(report, &format!("/totals/domains/{domain}/idle_energy_j"));
        assert!(
            (idle_j / duration_s - idle_w).abs() < 0.08 * idle_w,
            "{domain}: idle {idle_j} J over {duration_s} s, baseline {idle_w} W"
        );
        assert_eq!(unknown(report, domain).0, 0.0, "{domain}");
    }
    assert_noted(report, &["package-0: reads failed", "spread"]);
}

// Power logs whose values are no readings.

#[test]
fn power_log_values_that_are_no_readings_are_refused_with_their_line() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    for (value, needle) in [("1e300", "above"), ("1.7e308", "above"), ("-3", ">= 0")] {
        let log = dir.path().join("power.csv");
        fs::write(
            &log,
            format!("time,watts\n1770200123,100\n1770200124,{value}\n"),
        )
        .unwrap();
        let log = log.display().to_string();
        let run = cg_trace(&["--power-log", &log, "--no-gpu", "--", "true"]);
        assert_eq!(run.code(), Some(2), "{value}: {}", run.stderr());
        assert!(
            run.stderr().contains("power.csv:3") && run.stderr().contains(needle),
            "{value}: {}",
            run.stderr()
        );
        assert!(run.report.is_none(), "{value}: nothing is traced");
    }
}

#[test]
fn a_power_log_without_a_sample_in_the_run_is_an_error_not_measured_energy() {
    require_root();
    // Samples from long before the run (the logger stopped, or writes elsewhere).
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("power.csv");
    let mut text = String::from("time,watts\n");
    for t in 0..20 {
        text.push_str(&format!("{},250\n", 1_770_200_123 + t));
    }
    fs::write(&log, text).unwrap();
    let log = log.display().to_string();
    let mut args = vec!["--power-log", &log, "--no-gpu", "--calibrate-ms", "0", "-q"];
    args.extend(NO_RAPL);
    args.extend(["--", "sleep", "0.3"]);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(
        run.stderr().contains("power.csv") && run.stderr().contains("no sample within the run"),
        "{}",
        run.stderr()
    );
    // The report is written and says the meter measured nothing: no energy is made up.
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(num(report, "/totals/domains/meter/energy_j"), 0.0);
    let (count, duration_s) = unknown(report, "meter");
    assert!(count >= 1.0 && duration_s > 0.2, "{count} {duration_s}");
    assert_eq!(report["meta"]["measurement_quality"]["grade"], "degraded");
}

#[test]
fn a_power_log_with_a_byte_order_mark_and_crlf_is_read() {
    require_root();
    // A logger on Windows: UTF-8 with a byte-order mark, CRLF line ends; written live.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("power.csv");
    fs::write(&path, "\u{feff}time,watts\r\n").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut file = fs::OpenOptions::new().append(true).open(path).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64();
                write!(file, "{now:.3},120.0\r\n").unwrap();
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let log = path.display().to_string();
    let mut args = vec![
        "--power-log",
        &log,
        "--no-gpu",
        "--idle-watts",
        "meter=100",
        "-q",
    ];
    args.extend(NO_RAPL);
    args.extend(["--", "sleep", "0.5"]);
    let run = cg_trace(&args);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    assert_eq!(report["meta"]["power_meter"]["format"], "time,watts");
    // 120 W over the run.
    let duration_s = num(report, "/totals/duration_s");
    let energy_j = num(report, "/totals/domains/meter/energy_j");
    assert!(
        (energy_j / duration_s - 120.0).abs() < 1.0,
        "{energy_j} J over {duration_s} s"
    );
    assert_eq!(unknown(report, "meter").0, 0.0);
}

// Counters that exist but never move: the H100 cloud VM's perf `psys` event (recorded in
// shared/data/h100/sources.json) opens and reads the same count forever.

/// The options that point cg-trace at a still `psys` perf PMU, the powercap tree
/// `powercap_root` and no GPU.
fn still_psys_args(perf: &FakePerf, powercap_root: &Path) -> Vec<String> {
    vec![
        "--perf-root".into(),
        perf.root().display().to_string(),
        "--perf-counters-from".into(),
        perf.counters().display().to_string(),
        "--powercap-root".into(),
        powercap_root.display().to_string(),
        "--no-gpu".into(),
    ]
}

/// The lines of `text` that contain `needle`.
fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

#[test]
fn sources_says_a_still_psys_counter_is_present_not_advancing() {
    require_root();
    let perf = FakePerf::still_psys(0x1234_5678_9abc);
    // A powercap tree whose counters never move either: every zone at 0 W.
    let zero = Linear {
        idle_w: 0.0,
        k_w_per_cpu: 0.0,
    };
    let rapl = FakePowercap::start(zero, zero, zero, u64::MAX / 2);
    let mut args = vec!["sources".to_string()];
    args.extend(still_psys_args(&perf, rapl.root()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sources = |json: bool| {
        let mut args = args.clone();
        if json {
            args.push("--json");
        }
        let output = cg_tests::cg_trace_as_given(&args);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        stdout
    };
    let text = sources(false);
    let perf_line = lines_with(&text, "perf ")[0];
    assert!(
        perf_line.contains("present, not advancing") && perf_line.contains("psys"),
        "{text}"
    );
    let powercap_line = lines_with(&text, "powercap ")[0];
    assert!(powercap_line.contains("present, not advancing"), "{text}");
    assert!(text.contains("psys did not move in "), "{text}");
    assert!(text.contains("auto:     uses model"), "{text}");

    // Not a report: `cg-trace sources --json`.
    let inventory: Value = serde_json::from_str(&sources(true)).expect("JSON");
    let sources = inventory["sources"].as_array().unwrap();
    for (i, name) in ["perf", "powercap"].iter().enumerate() {
        assert_eq!(sources[i]["name"], *name);
        assert_eq!(sources[i]["status"], "not_advancing", "{:#}", sources[i]);
        assert_eq!(sources[i]["usable"], false);
    }
    assert_eq!(sources[0]["domains"][0]["name"], "psys");
    assert_eq!(inventory["auto"]["sources"], serde_json::json!(["model"]));
}

#[test]
fn auto_on_a_still_psys_falls_back_to_the_model_and_every_target_gets_cpu_energy() {
    require_root();
    let perf = FakePerf::still_psys(0x1234_5678_9abc);
    // Powercap is there too, and as still: every zone at 0 W.
    let zero = Linear {
        idle_w: 0.0,
        k_w_per_cpu: 0.0,
    };
    let rapl = FakePowercap::start(zero, zero, zero, u64::MAX / 2);
    let mut args = still_psys_args(&perf, rapl.root());
    let burn = burn();
    args.extend(["--", &burn, "--children", "600,300"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let meta = &report["meta"];
    assert_eq!(meta["sources"][0]["name"], "model", "{:#}", meta["sources"]);
    assert_eq!(meta["sources"].as_array().unwrap().len(), 1);
    assert_eq!(meta["measurement_quality"]["grade"], "estimated");
    assert_eq!(meta["sources_probed"][0]["status"], "not_advancing");
    // Every process that ran has its CPU energy, estimated.
    for p in report["processes"].as_array().unwrap() {
        if num(p, "/cpu_time_s") > 0.01 {
            assert!(num(p, "/energy_j") > 0.0, "{p:#}");
        }
    }
    let [small, big] = two_children(report);
    assert!(num(process(report, big.0), "/domains/model/energy_j") > 0.0);
    assert!(num(process(report, small.0), "/domains/model/energy_j") > 0.0);
    // Why, said once on the terminal.
    let stderr = run.stderr();
    let why = lines_with(&stderr, "not advancing");
    assert_eq!(why.len(), 1, "{stderr}");
    assert!(
        why[0].contains("psys did not move")
            && why[0].contains("powercap counters present, not advancing")
            && why[0].contains("ESTIMATED"),
        "{stderr}"
    );
    assert_eq!(meta["sources_probed"][1]["status"], "not_advancing");
}

#[test]
fn source_perf_on_a_still_psys_keeps_it_and_its_energy_is_unknown() {
    require_root();
    let perf = FakePerf::still_psys(0x1234_5678_9abc);
    let mut args = vec!["--source".to_string(), "perf".into(), "--timeseries".into()];
    args.extend(still_psys_args(&perf, Path::new("/nonexistent")));
    args.extend(["--", &burn(), "--self", "800"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let meta = &report["meta"];
    assert_eq!(meta["sources"][0]["name"], "perf");
    assert_eq!(meta["sources_probed"][0]["status"], "not_advancing");
    let (count, duration_s) = unknown(report, "psys");
    assert!(count >= 1.0 && duration_s > 0.0, "{count} {duration_s}");
    assert_noted(report, &["psys: energy unknown"]);
    let stderr = run.stderr();
    assert!(
        stderr.contains("used all the same because --source perf asks for it"),
        "{stderr}"
    );
}

/// The longest time between two samples of a `time,id,pm1,pm2,sum` log (local times
/// `YYYY-MM-DD HH:MM:SS.mmm`), in seconds.
fn longest_pause_s(log: &str) -> f64 {
    let seconds_of_day = |line: &str| -> Option<f64> {
        let time = line.split(',').next()?.split(' ').nth(1)?;
        let mut parts = time.split(':');
        let h: f64 = parts.next()?.parse().ok()?;
        let m: f64 = parts.next()?.parse().ok()?;
        let s: f64 = parts.next()?.parse().ok()?;
        Some(h * 3600.0 + m * 60.0 + s)
    };
    let times: Vec<f64> = log.lines().skip(1).filter_map(seconds_of_day).collect();
    times
        .windows(2)
        .map(|w| (w[1] - w[0]).rem_euclid(86_400.0))
        .fold(0.0, f64::max)
}
