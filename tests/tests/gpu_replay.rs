//! End-to-end tests of the GPU figures on a recorded NVIDIA H100 (tests/fake-nvml/recordings),
//! played in real time through the NVML stand-in and read by the real `cg-trace` binary (root,
//! real eBPF): the idle baseline is the GPU's rest power (~72 W, measured there) in wrap,
//! attach and `--all`, for a steady and a phased load. Run serially (`--test-threads=1`).

use std::path::Path;

use cg_tests::{
    Background, NvmlReplay, ReplayScript, assert_adds_up, bin, cg_trace, num, nvml_recording,
    require_root,
};
use serde_json::Value;

/// The recorded GPU's rest power: nvidia-smi 72.85 W, the trace's rest polls 71-72 W.
const REST_W: f64 = 72.0;
const H100: &str = "NVIDIA H100 80GB HBM3";
const UUID: &str = "GPU-2cda00ab-5c9b-4842-993e-8c43914335f5";

/// Neither perf nor powercap (this machine has no RAPL; the CPU side is the model's).
const NO_RAPL: [&str; 4] = [
    "--perf-root",
    "/nonexistent",
    "--powercap-root",
    "/nonexistent",
];

/// trace2's stretches: heavy.py alone at ~700 W (steady); the end of the heavy phase, the
/// ~125 W tail and decay with nothing on the GPU, then ~5 s at rest (phased).
const STEADY: (f64, f64) = (10.0, 17.0);
const PHASED: (f64, f64) = (16.5, 28.5);

fn replay(stretch: (f64, f64), name: &'static str, pids: Vec<(u32, u32)>) -> NvmlReplay {
    replay_with(stretch, name, pids, None)
}

fn replay_with(
    stretch: (f64, f64),
    name: &'static str,
    pids: Vec<(u32, u32)>,
    accounting: Option<std::path::PathBuf>,
) -> NvmlReplay {
    NvmlReplay::start(&ReplayScript {
        recording: nvml_recording("trace2-nvml.jsonl"),
        from_s: stretch.0,
        to_s: stretch.1,
        name,
        uuid: UUID,
        pids,
        accounting,
    })
}

/// Runs cg-trace on the replayed GPU with `mode`'s arguments; returns the report.
fn run(nvml: &NvmlReplay, state: &Path, mode: &[&str]) -> Value {
    let (lib, state) = (
        nvml.lib().display().to_string(),
        state.display().to_string(),
    );
    let mut args = vec![
        "--source",
        "model",
        "-q",
        "--nvml-lib",
        &lib,
        "--state-dir",
        &state,
    ];
    args.extend(NO_RAPL);
    args.extend(mode);
    let run = cg_trace(&args);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report().clone();
    assert_adds_up(&report);
    report
}

/// gpu0's idle baseline entry.
fn gpu_baseline(report: &Value) -> &Value {
    report["meta"]["idle_baseline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["domain"] == "gpu0")
        .unwrap_or_else(|| panic!("no gpu0 baseline: {:#}", report["meta"]))
}

/// The baseline is the rest power, from `source`, within 15 % of the measured one.
fn assert_rest(report: &Value, source: &str) {
    let b = gpu_baseline(report);
    assert_eq!(b["method"], "rest", "{b:#}");
    assert_eq!(b["rest_source"], source, "{b:#}");
    let w = num(b, "/power_w");
    assert!(
        (w - REST_W).abs() <= 0.15 * REST_W,
        "baseline {w} W against the measured rest power {REST_W} W: {b:#}"
    );
    assert_eq!(num(report, "/totals/domains/gpu0/idle_power_w"), w);
}

#[test]
fn steady_load_attach_takes_the_models_rest_power_and_says_it_is_estimated() {
    require_root();
    let state = tempfile::tempdir().unwrap();
    let target = Background::spawn(&bin("cg-spin"), &["8"]);
    let nvml = replay(STEADY, H100, vec![(494, target.pid())]);
    let pid = target.pid().to_string();
    let report = run(&nvml, state.path(), &["--pid", &pid, "--duration", "4"]);
    assert_rest(&report, "model_table");
    let notes = report["meta"]["measurement_quality"]["notes"].to_string();
    assert!(notes.contains("typical rest power of its model"), "{notes}");
    // Nothing was seen at rest: nothing is kept.
    assert!(!state.path().join("gpu-rest.json").exists());
    // The GPU ran heavy.py (mapped onto the target) the whole time: its energy less the rest
    // power is the target's (and no one else's).
    let gpu_j = num(&report, "/totals/domains/gpu0/energy_j");
    let idle_j = num(&report, "/totals/domains/gpu0/idle_energy_j");
    let target_j = num(
        cg_tests::process(&report, target.pid()),
        "/domains/gpu0/energy_j",
    );
    assert!(
        (target_j - (gpu_j - idle_j)).abs() < 0.05 * gpu_j,
        "target {target_j} J of {gpu_j} J, idle {idle_j} J"
    );
}

#[test]
fn phased_load_wrap_sees_the_rest_and_later_runs_on_the_gpu_keep_it() {
    require_root();
    let state = tempfile::tempdir().unwrap();
    // A model the table does not know: the rest power can only come from what the run saw.
    let nvml = replay(PHASED, "NVIDIA Unknown Model", vec![]);
    let report = run(&nvml, state.path(), &["--", "sleep", "11"]);
    assert_rest(&report, "rest_seen_this_run");
    let kept = std::fs::read_to_string(state.path().join("gpu-rest.json")).unwrap();
    assert!(kept.contains(UUID), "{kept}");

    // A steady load in system mode on the same GPU: the kept rest power, with its age.
    let nvml = replay(STEADY, "NVIDIA Unknown Model", vec![]);
    let report = run(&nvml, state.path(), &["--all", "--duration", "3"]);
    assert_rest(&report, "rest_from_state_file");
    let age_s = num(gpu_baseline(&report), "/rest_age_s");
    assert!((0.0..600.0).contains(&age_s), "{age_s}");

    // A phased load in attach mode with nothing kept (another state folder).
    let fresh = tempfile::tempdir().unwrap();
    let target = Background::spawn(&bin("cg-spin"), &["14"]);
    let nvml = replay(PHASED, "NVIDIA Unknown Model", vec![(494, target.pid())]);
    let pid = target.pid().to_string();
    let report = run(&nvml, fresh.path(), &["--pid", &pid, "--duration", "11"]);
    assert_rest(&report, "rest_seen_this_run");
}

/// The two other combinations of mode and load: a wrapped command under a steady load (the
/// recorded failure: the baseline came out 0 W, every watt of rest charged to the processes;
/// here the idle calibration sees the GPU busy too) and `--all` under a phased one.
#[test]
fn steady_load_wrap_and_phased_load_all_take_the_rest_power() {
    require_root();
    let state = tempfile::tempdir().unwrap();
    let nvml = replay(STEADY, H100, vec![]);
    let report = run(&nvml, state.path(), &["--", "sleep", "4"]);
    assert_rest(&report, "model_table");

    let fresh = tempfile::tempdir().unwrap();
    let nvml = replay(PHASED, "NVIDIA Unknown Model", vec![]);
    let report = run(&nvml, fresh.path(), &["--all", "--duration", "11"]);
    assert_rest(&report, "rest_seen_this_run");
}

#[test]
fn a_gpu_never_at_rest_and_of_no_known_model_says_its_baseline_is_not_its_rest_power() {
    require_root();
    let state = tempfile::tempdir().unwrap();
    let nvml = replay(STEADY, "NVIDIA Unknown Model", vec![]);
    let report = run(&nvml, state.path(), &["--all", "--duration", "2"]);
    assert_ne!(gpu_baseline(&report)["method"], "rest");
    let quality = &report["meta"]["measurement_quality"];
    assert!(
        quality["notes"]
            .to_string()
            .contains("is not its rest power, which is not known"),
        "{quality:#}"
    );
}

/// trace2's heavy phase with both processes on the GPU, through the stray sample at 18.5 s
/// that names the light process at 98 % and the heavy one not at all.
const HEAVY_AND_LIGHT: (f64, f64) = (8.5, 19.6);

/// cg-trace attached for 10 s (with `extra`) to two processes standing for trace2's heavy and
/// light ones, on the replayed GPU with the accounting stats `accounting`; the report and
/// the two (heavy, light).
fn attach_heavy_and_light(accounting: &str, extra: &[&str]) -> (Value, Background, Background) {
    let state = tempfile::tempdir().unwrap();
    let sleep = Path::new("/bin/sleep");
    let heavy = Background::spawn(sleep, &["30"]);
    let light = Background::spawn(sleep, &["30"]);
    let nvml = replay_with(
        HEAVY_AND_LIGHT,
        H100,
        vec![(494, heavy.pid()), (495, light.pid())],
        Some(nvml_recording(accounting)),
    );
    let pids = format!("{},{}", heavy.pid(), light.pid());
    let mut args = vec!["--pid", &pids, "--duration", "10"];
    args.extend_from_slice(extra);
    let report = run(&nvml, state.path(), &args);
    (report, heavy, light)
}

/// The report's quality note comparing its GPU split with NVIDIA's accounting stats.
fn accounting_note(report: &Value) -> &str {
    let notes = report["meta"]["measurement_quality"]["notes"]
        .as_array()
        .unwrap();
    notes
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.contains("NVIDIA's accounting stats"))
        .unwrap_or_else(|| panic!("{notes:#?}"))
}

#[test]
fn no_interval_gives_the_light_process_the_gpu_and_the_split_follows_nvidias_accounting() {
    require_root();
    let (report, heavy, light) =
        attach_heavy_and_light("trace2-accounting.json", &["--timeseries"]);
    // Per interval: the light process never gets more than a window's share of the GPU (one
    // 98 % sample in five periods, ~20 %), nor the heavy one nothing while the GPU is busy.
    let mut heavy_intervals = 0;
    for point in report["timeseries"].as_array().unwrap() {
        let gpu_j = num(point, "/domains/gpu0/energy_j");
        let of = |pid: u32| {
            point["processes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["pid"] == pid)
                .map_or(0.0, |p| num(p, "/energy_j"))
        };
        let (heavy_j, light_j) = (of(heavy.pid()), of(light.pid()));
        assert!(
            light_j <= 0.3 * gpu_j + 0.1,
            "light {light_j} J of the GPU's {gpu_j} J: {point:#}"
        );
        if gpu_j > 50.0 {
            heavy_intervals += 1;
            assert!(heavy_j > light_j, "{point:#}");
        }
    }
    assert!(heavy_intervals > 10, "{heavy_intervals}");
    // Over the run, the split of the active energy follows NVIDIA's accounting stats
    // (trace2-accounting.json: heavy 86 %, light 1 %) within 5 points.
    let heavy_j = num(
        cg_tests::process(&report, heavy.pid()),
        "/domains/gpu0/energy_j",
    );
    let light_j = num(
        cg_tests::process(&report, light.pid()),
        "/domains/gpu0/energy_j",
    );
    let heavy_share = heavy_j / (heavy_j + light_j);
    assert!(
        (heavy_share - 86.0 / 87.0).abs() <= 0.05,
        "heavy {heavy_j} J, light {light_j} J: {heavy_share}"
    );
    // The report reads the accounting stats at the end and says how far its split is from
    // theirs.
    let accounted = report["meta"]["gpus"][0]["accounting"].as_array().unwrap();
    assert_eq!(accounted.len(), 4, "{accounted:#?}");
    let note = accounting_note(&report);
    let worst: f64 = note
        .rsplit("largest difference ")
        .next()
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    assert!(worst <= 5.0, "{note}");
    assert!(note.contains(&format!("pid {} ", light.pid())), "{note}");
}

#[test]
fn processes_still_running_are_checked_against_their_accounting_over_their_life_so_far() {
    // A real H100 reports a running process's accounting `time` as 0 until it ends (seen
    // attaching with `--all`): the check must use its life so far, not find no process.
    require_root();
    let (report, heavy, light) = attach_heavy_and_light("trace2-accounting-running.json", &[]);
    let accounted = report["meta"]["gpus"][0]["accounting"].as_array().unwrap();
    assert_eq!(accounted.len(), 2, "{accounted:#?}");
    for entry in accounted {
        assert_eq!(entry["running"], true, "{entry:#}");
        // Started 12 s before the replay; read at the end of a 10 s run.
        let life_s = num(entry, "/time_s");
        assert!((12.0..120.0).contains(&life_s), "{entry:#}");
    }
    let note = accounting_note(&report);
    assert!(
        note.contains("still running: over its life so far"),
        "{note}"
    );
    for pid in [heavy.pid(), light.pid()] {
        assert!(note.contains(&format!("pid {pid} ")), "{note}");
    }
}

/// The recorded polls of `stretch` (seconds from the recording's first poll): the range of
/// `key` over them.
fn recorded_range(stretch: (f64, f64), key: &str) -> (f64, f64) {
    let text = std::fs::read_to_string(nvml_recording("trace2-nvml.jsonl")).unwrap();
    let polls: Vec<Value> = text
        .lines()
        // Not a report: the recorded NVML polls.
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let t0 = num(&polls[0], "/t");
    polls
        .iter()
        .filter(|p| (stretch.0..=stretch.1).contains(&(num(p, "/t") - t0)))
        .map(|p| num(p, &format!("/{key}")))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

#[test]
fn the_time_series_carries_what_the_gpu_served_per_interval() {
    require_root();
    let state = tempfile::tempdir().unwrap();
    let nvml = replay(STEADY, H100, vec![]);
    let report = run(
        &nvml,
        state.path(),
        &["--all", "--duration", "3", "--timeseries"],
    );
    let points = report["timeseries"].as_array().unwrap();
    let (temp_lo, temp_hi) = recorded_range(STEADY, "temp_c");
    let (power_lo, power_hi) = recorded_range(STEADY, "power_mw");
    let (mem_lo, mem_hi) = recorded_range(STEADY, "mem_used");
    let mut busy = 0;
    for point in points {
        let gpus = point["gpus"]
            .as_array()
            .unwrap_or_else(|| panic!("{point:#}"));
        assert_eq!(gpus.len(), 1, "{point:#}");
        let g = &gpus[0];
        assert_eq!(
            (g["domain"].as_str(), g["provenance"].as_str()),
            (Some("gpu0"), Some("measured"))
        );
        let util = num(g, "/utilization_pct");
        assert!((0.0..=100.0).contains(&util), "{g:#}");
        if util >= 95.0 {
            busy += 1;
        }
        let temp = num(g, "/temperature_c");
        assert!(
            (temp_lo..=temp_hi).contains(&temp),
            "{temp} °C outside {temp_lo}-{temp_hi}: {g:#}"
        );
        let power_w = num(g, "/power_w");
        assert!(
            (power_lo / 1e3..=power_hi / 1e3).contains(&power_w),
            "{power_w} W outside the recording's: {g:#}"
        );
        let mem = num(g, "/memory_used_bytes");
        assert!((mem_lo..=mem_hi).contains(&mem), "{mem} B: {g:#}");
    }
    // heavy.py kept the GPU at 96-99 % over the whole stretch.
    assert!(
        busy >= points.len() - 1,
        "{busy} of {} intervals busy",
        points.len()
    );
    assert!(points.len() >= 10, "{}", points.len());
}

#[test]
fn a_run_without_a_gpu_has_no_gpu_figures_in_its_time_series() {
    require_root();
    let run = cg_trace(&[
        "--source",
        "model",
        "-q",
        "--no-gpu",
        "--timeseries",
        "--",
        "sleep",
        "0.5",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let points = run.report()["timeseries"].as_array().unwrap().clone();
    assert!(!points.is_empty());
    assert!(
        points.iter().all(|p| p.get("gpus").is_none()),
        "{points:#?}"
    );
}
