//! End-to-end tests of function-level energy: uprobes on chosen functions (`--func`), stack
//! sampling (`--profile`) with folded stacks and flamegraphs, and Python functions. Root,
//! real eBPF, real processes; energy from the built-in model (`--model-watts 10:30`), so a
//! process's energy is exactly a constant times its CPU time and so is each function's.
//! Checks are on exact call counts, on times against the threads' own CPU clocks, and on
//! energy *ratios* with tolerances: never on wall-clock speed. Run serially
//! (`--test-threads=1`).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use cg_tests::{assert_adds_up, bin, cg_trace, num, process, require_root, root_pid};
use serde_json::Value;

fn funcs() -> String {
    bin("cg-funcs").display().to_string()
}

/// The function entries of one source, by symbol (summed over processes).
fn functions(report: &Value, source: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for f in report["functions"].as_array().expect("functions") {
        if f["source"] == source {
            out.insert(f["symbol"].as_str().unwrap().to_string(), f.clone());
        }
    }
    out
}

/// The CPU time each function's calls took by their thread's own clock, in seconds, as
/// cg-funcs prints it (`cpu_ns NAME NS`).
fn clock_times(stdout: &str) -> BTreeMap<String, f64> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some("cpu_ns"), Some(name), Some(ns)) => {
                    Some((name.to_string(), ns.parse::<f64>().ok()? / 1e9))
                }
                _ => None,
            }
        })
        .collect()
}

fn ratio_near(what: &str, value: f64, expected: f64, tolerance: f64) {
    assert!(
        (value / expected - 1.0).abs() <= tolerance,
        "{what}: ratio {value:.3}, expected {expected} ± {:.0}%",
        tolerance * 100.0
    );
}

#[test]
fn probed_functions_count_calls_exactly_and_time_them_as_their_threads_own_clocks_do() {
    require_root();
    let funcs = funcs();
    let (calls, depth) = (200u64, 4u64);
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "10:30",
        "--func",
        "cg_work_*",
        "--func",
        "cg_recurse",
        "--func",
        "cg_thread_work",
        "--func",
        "libcgfuncs_lib.so:cglib_*",
        "--func",
        "cg_funcs::rust_work",
        "--func",
        "cg_forever",
        "--",
        &funcs,
        "--calls",
        &calls.to_string(),
        "--units",
        "40",
        "--depth",
        &depth.to_string(),
        "--partial",
        "--clock",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let f = functions(report, "uprobe");
    let calls_of = |name: &str| {
        f.get(name)
            .unwrap_or_else(|| panic!("{name} not in the report: {:#}", report["functions"]))["calls"]
            .as_u64()
            .unwrap()
    };
    // Exact counts: main thread, second thread, shared library, Rust name, recursion.
    for name in [
        "cg_work_a",
        "cg_work_b",
        "cg_thread_work",
        "cglib_work",
        "cg_funcs::rust_work",
    ] {
        assert_eq!(calls_of(name), calls, "{name}");
    }
    assert_eq!(calls_of("cg_recurse"), calls.div_ceil(depth) * depth);
    let pid = root_pid(report);
    for entry in f.values() {
        assert_eq!(entry["pid"], pid);
        assert_eq!(entry["provenance"], "estimated");
        assert_eq!(
            entry["module"] == "libcgfuncs_lib.so",
            entry["symbol"] == "cglib_work"
        );
    }

    // On-CPU time: each function's, as its thread's own CPU clock timed the calls (the
    // workload prints it; for cg_recurse the outermost calls, since a recursive call's time
    // counts once). The clock around a call also holds most of what its two probes cost,
    // which cg-trace's figure leaves out: under 1 % here. Equal work does not always take
    // equal CPU time (on a loaded VM one function's calls took 1.4x another's), so no fixed
    // ratio between functions is checked, only b's doing more than a.
    let truth = clock_times(&run.stdout());
    for (name, clock_s) in &truth {
        let ours_s = num(&f[name.as_str()], "/cpu_time_s");
        assert!(*clock_s > 0.02, "{name} ran {clock_s} s");
        eprintln!("{name}: cg-trace {ours_s:.6} s, thread clock {clock_s:.6} s");
        ratio_near(
            &format!("{name}: cg-trace / thread clock"),
            ours_s / clock_s,
            1.0,
            0.03,
        );
    }
    assert_eq!(truth.len(), 6, "{}", run.stdout());
    assert!(truth["cg_work_b"] > truth["cg_work_a"] * 1.3, "{truth:?}");
    // Nothing probed below these functions: self time is all of it.
    for (name, entry) in &f {
        let (incl, own) = (num(entry, "/cpu_time_s"), num(entry, "/self_cpu_time_s"));
        assert!(
            own <= incl * 1.0001 && own >= incl * 0.9,
            "{name}: self {own} s, inclusive {incl} s"
        );
    }
    // Energy: the same rate as the process, so energy / time is the process's.
    let p = process(report, pid);
    let rate = num(p, "/energy_j") / num(p, "/cpu_time_s");
    let mut self_sum = 0.0;
    for (name, entry) in &f {
        let (t, e) = (num(entry, "/cpu_time_s"), num(entry, "/energy_j"));
        if t > 0.01 {
            ratio_near(
                &format!("{name} energy / time vs process"),
                e / t / rate,
                1.0,
                0.02,
            );
        }
        self_sum += num(entry, "/self_energy_j");
    }
    assert!(
        self_sum <= num(p, "/energy_j") * 1.000001,
        "functions' self energy {self_sum} J exceeds the process's {} J",
        num(p, "/energy_j")
    );

    // The function still running at the exit is partial; the others are not.
    assert_eq!(f["cg_forever"]["partial"], true, "{:#}", f["cg_forever"]);
    assert_eq!(f["cg_forever"]["calls"], 0);
    assert!(num(&f["cg_forever"], "/cpu_time_s") > 0.05);
    assert_eq!(f["cg_work_a"]["partial"], false);

    // What the probes cost, measured.
    let uprobes = &report["meta"]["function_profiling"]["uprobes"];
    let total_calls: u64 = f.values().map(|e| e["calls"].as_u64().unwrap()).sum();
    // Every call, plus the entry of cg_forever that never returned.
    assert!(num(uprobes, "/probe_hits_count") as u64 > total_calls);
    assert_eq!(num(uprobes, "/target_calls_count") as u64, total_calls);
    assert_eq!(num(uprobes, "/depth_overflow_count"), 0.0);
    assert_eq!(num(uprobes, "/unmatched_returns_count"), 0.0);
    let probed = uprobes["functions"].as_array().unwrap();
    let work_a = probed.iter().find(|p| p["symbol"] == "cg_work_a").unwrap();
    assert_eq!(work_a["first_instruction"], "emulated");
    assert!(run.stderr().contains("FUNCTIONS"), "{}", run.stderr());
    assert!(
        run.stderr().contains("entry hits (measured"),
        "{}",
        run.stderr()
    );
}

#[test]
fn probed_binary_run_by_children_counts_per_process() {
    require_root();
    // The wrapped command is a shell; the probed binary is named by path and runs twice,
    // as two processes started after the probes were attached.
    let funcs = funcs();
    let spec = format!("{funcs}:cg_work_b");
    let script = format!("{funcs} --calls 30 --units 5 && {funcs} --calls 20 --units 5");
    let run = cg_trace(&[
        "--source", "model", "-q", "--func", &spec, "--", "sh", "-c", &script,
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let mut calls: Vec<u64> = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["symbol"] == "cg_work_b")
        .map(|f| f["calls"].as_u64().unwrap())
        .collect();
    calls.sort();
    assert_eq!(calls, [20, 30], "{:#}", report["functions"]);
    let pids: std::collections::BTreeSet<u64> = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
}

#[test]
fn func_takes_a_comma_separated_list_as_perf_does() {
    require_root();
    let funcs = funcs();
    let run = cg_trace(&[
        "--source",
        "model",
        "-q",
        "--func",
        "cg_work_a,cg_work_b",
        "--",
        &funcs,
        "--calls",
        "30",
        "--units",
        "5",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let f = functions(run.report(), "uprobe");
    for name in ["cg_work_a", "cg_work_b"] {
        let calls = f
            .get(name)
            .unwrap_or_else(|| panic!("{name} not in the report: {f:#?}"))["calls"]
            .as_u64()
            .unwrap();
        assert!(calls > 0, "{name}: {calls} calls");
    }
}

#[test]
fn recursion_deeper_than_the_entry_stack_is_counted_not_timed() {
    require_root();
    // One outer call of cg_recurse 40 deep: the kernel keeps 32 frames per thread, so 32
    // calls are timed and 8 are reported as overflow; the returns still match up.
    let funcs = funcs();
    let run = cg_trace(&[
        "--source",
        "model",
        "-q",
        "--func",
        "cg_recurse",
        "--",
        &funcs,
        "--calls",
        "40",
        "--units",
        "1",
        "--depth",
        "40",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let f = functions(report, "uprobe");
    assert_eq!(f["cg_recurse"]["calls"], 32, "{:#}", f["cg_recurse"]);
    assert_eq!(f["cg_recurse"]["partial"], false);
    let uprobes = &report["meta"]["function_profiling"]["uprobes"];
    assert_eq!(num(uprobes, "/depth_overflow_count"), 8.0, "{uprobes:#}");
    assert_eq!(num(uprobes, "/unmatched_returns_count"), 0.0, "{uprobes:#}");
}

#[test]
fn func_specs_that_match_nothing_or_too_much_exit_2_with_help() {
    require_root();
    let funcs = funcs();
    let run = cg_trace(&["--source", "model", "--func", "cg_wrok_a", "--", &funcs]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    let err = run.stderr();
    assert!(err.contains("no function matches"), "{err}");
    assert!(
        err.contains("closest symbols") && err.contains("cg_work_a"),
        "{err}"
    );
    assert!(run.report.is_none());

    let run = cg_trace(&[
        "--source",
        "model",
        "--func",
        "*",
        "--func-limit",
        "10",
        "--",
        &funcs,
    ]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
    assert!(run.stderr().contains("--func-limit"), "{}", run.stderr());

    // (A library found nowhere is no error in wrap mode: the command may load it later;
    // tests/tests/stacks.rs checks both sides.)

    let run = cg_trace(&["--source", "model", "--flamegraph", "x.png", "--", &funcs]);
    assert_eq!(run.code(), Some(2), "{}", run.stderr());
}

/// Parses folded stacks: (stack, microjoules) per line.
fn parse_folded(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|line| {
            let (stack, count) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("folded line without a count: {line:?}"));
            let count: u64 = count
                .parse()
                .unwrap_or_else(|_| panic!("folded count is not an integer: {line:?}"));
            (stack.to_string(), count)
        })
        .collect()
}

#[test]
fn sampled_energy_follows_the_work_and_adds_up_with_folded_stacks_and_a_flamegraph() {
    require_root();
    let funcs = funcs();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("energy.folded");
    let svg = dir.path().join("energy.svg");
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "10:30",
        // About 650 samples of cg_work_a (130 at 997 Hz): a ratio of two sample counts then
        // strays ~6 % (1 sigma), so the 30 % bounds below hold at 5 sigma, not 2.5.
        "--sample-hz",
        "4999",
        "--top-functions",
        "1000",
        "--folded",
        folded.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
        "--",
        &funcs,
        "--calls",
        "300",
        "--units",
        "40",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let pid = root_pid(report);
    let f = functions(report, "sampling");
    let energy = |name: &str| {
        num(
            f.get(name)
                .unwrap_or_else(|| panic!("{name} not sampled: {:#}", report["functions"])),
            "/energy_j",
        )
    };
    // Inclusive energy in the proportions of the work (frame pointers in the C kernels).
    let a = energy("cg_work_a");
    ratio_near("cg_work_b / cg_work_a", energy("cg_work_b") / a, 2.0, 0.3);
    for name in ["cg_recurse", "cglib_work", "cg_thread_work"] {
        ratio_near(&format!("{name} / cg_work_a"), energy(name) / a, 1.0, 0.3);
    }
    // cg_burn does the work of everything but cglib_work: its self energy is most of it.
    let burn_self = num(&f["cg_burn"], "/self_energy_j");
    ratio_near("cg_burn self / cg_work_a", burn_self / a, 6.0, 0.3);
    // Per process, self energies (with [unsampled]) add up to the process's energy.
    let p = process(report, pid);
    let self_sum: f64 = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pid"] == pid && e["source"] == "sampling")
        .map(|e| num(e, "/self_energy_j"))
        .sum();
    ratio_near(
        "self energies / process energy",
        self_sum / num(p, "/energy_j"),
        1.0,
        1e-6,
    );
    let sampling = &report["meta"]["function_profiling"]["sampling"];
    assert!(num(sampling, "/samples_count") > 100.0, "{sampling:#}");
    assert_eq!(sampling["sample_hz"], 4999);

    // Folded stacks: integers in microjoules adding up to the process's energy.
    let lines = parse_folded(&std::fs::read_to_string(&folded).expect("folded file"));
    let total_uj: u64 = lines
        .iter()
        .filter(|(s, _)| s.starts_with(&format!("cg-funcs {pid};")))
        .map(|(_, n)| n)
        .sum();
    ratio_near(
        "folded µJ / process energy",
        total_uj as f64 / 1e6 / num(p, "/energy_j"),
        1.0,
        0.01,
    );
    assert!(
        lines
            .iter()
            .any(|(s, _)| s.contains(";cg_work_b;") || s.contains(";cg_work_b (cgfuncs.c:")),
        "{lines:?}"
    );
    // The flamegraph is well-formed SVG naming the functions.
    let text = std::fs::read_to_string(&svg).expect("svg file");
    let options = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = roxmltree::Document::parse_with_options(&text, options)
        .expect("the flamegraph parses as XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(text.contains("cg_work_b"));
    assert!(text.contains("µJ"));
}

/// CPython interpreters to check, those present on this machine.
fn pythons() -> Vec<PathBuf> {
    [
        "/usr/bin/python3.11",
        "/root/.pyenv/versions/3.11.7/bin/python3.11",
        "/root/.pyenv/versions/3.12.1/bin/python3.12",
        "/root/.pyenv/versions/3.13.0/bin/python3.13",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect()
}

#[test]
fn python_functions_get_energy_in_the_proportions_of_their_work() {
    require_root();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("py/workload.py");
    let interpreters = pythons();
    assert!(
        interpreters
            .iter()
            .any(|p| p.to_string_lossy().contains("3.11")),
        "no CPython 3.11 on this machine: {interpreters:?}"
    );
    for python in interpreters {
        let run = cg_trace(&[
            "--source",
            "model",
            "--model-watts",
            "10:30",
            "--profile",
            "--sample-hz",
            "997",
            "-q",
            "--",
            python.to_str().unwrap(),
            script.to_str().unwrap(),
            "200",
        ]);
        assert_eq!(
            run.code(),
            Some(0),
            "{}: {}",
            python.display(),
            run.stderr()
        );
        let report = run.report();
        assert_adds_up(report);
        let f = functions(report, "sampling");
        let entry = |name: &str| {
            f.get(name).unwrap_or_else(|| {
                panic!(
                    "{}: Python function {name} not found: {:#}",
                    python.display(),
                    report["functions"]
                )
            })
        };
        // Qualified names, file and first line.
        let method = entry("Worker.method");
        assert!(
            method["module"].as_str().unwrap().ends_with("workload.py"),
            "{method:#}"
        );
        assert_eq!(method["line"], 25, "{method:#}");
        assert_eq!(entry("work_a")["line"], 16);
        let a = num(entry("work_a"), "/energy_j");
        let what = |name: &str| format!("{}: {name} / work_a", python.display());
        ratio_near(
            &what("work_b"),
            num(entry("work_b"), "/energy_j") / a,
            2.0,
            0.3,
        );
        ratio_near(
            &what("Worker.method"),
            num(method, "/energy_j") / a,
            1.0,
            0.3,
        );
        let seen = &report["meta"]["function_profiling"]["sampling"]["python"];
        assert_eq!(seen[0]["python_frames"], true, "{seen:#}");
    }
}

/// Folded lines as a map from stack to microjoules.
fn folded_map(path: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(path).expect("folded file");
    let mut map = BTreeMap::new();
    for (stack, uj) in parse_folded(&text) {
        *map.entry(stack).or_insert(0) += uj;
    }
    map
}

/// The speedscope file's stacks (frame names joined by `;`, as folded) with their energy
/// in joules, after checking its shape against speedscope's file format.
fn speedscope_stacks(file: &Value) -> (BTreeMap<String, f64>, f64) {
    assert_eq!(
        file["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames: Vec<&str> = file["shared"]["frames"]
        .as_array()
        .expect("shared.frames")
        .iter()
        .map(|f| f["name"].as_str().expect("a frame's name"))
        .collect();
    let profiles = file["profiles"].as_array().expect("profiles");
    assert_eq!(profiles.len(), 2, "energy and CPU time");
    let (energy, cpu) = (&profiles[0], &profiles[1]);
    for p in profiles {
        assert_eq!(p["type"], "sampled");
        let samples = p["samples"].as_array().unwrap();
        assert_eq!(samples.len(), p["weights"].as_array().unwrap().len());
        let weights: f64 = p["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_f64().unwrap())
            .sum();
        ratio_near(
            "endValue / weights",
            num(p, "/endValue") / weights,
            1.0,
            1e-9,
        );
    }
    assert_eq!(cpu["unit"], "nanoseconds");
    let name = energy["name"].as_str().unwrap();
    assert!(
        name.contains("joules") && name.contains("ESTIMATED"),
        "{name}"
    );
    let mut stacks = BTreeMap::new();
    for (sample, weight) in energy["samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip(energy["weights"].as_array().unwrap())
    {
        let names: Vec<&str> = sample
            .as_array()
            .unwrap()
            .iter()
            .map(|i| frames[i.as_u64().unwrap() as usize])
            .collect();
        *stacks.entry(names.join(";")).or_insert(0.0) += weight.as_f64().unwrap();
    }
    let cpu_ns: f64 = cpu["weights"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_f64().unwrap())
        .sum();
    (stacks, cpu_ns)
}

#[test]
fn speedscope_and_pprof_profiles_hold_the_folded_stacks_energy_and_cpu_time() {
    require_root();
    let funcs = funcs();
    let dir = tempfile::tempdir().unwrap();
    let (folded, speedscope, pprof) = (
        dir.path().join("energy.folded"),
        dir.path().join("energy.speedscope.json"),
        dir.path().join("energy.pb.gz"),
    );
    let run = cg_trace(&[
        "--source",
        "model",
        "--model-watts",
        "10:30",
        "--sample-hz",
        "999",
        "--folded",
        folded.to_str().unwrap(),
        "--speedscope",
        speedscope.to_str().unwrap(),
        "--pprof",
        pprof.to_str().unwrap(),
        "--",
        &funcs,
        "--calls",
        "100",
        "--units",
        "40",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    let pid = root_pid(report);
    let folded = folded_map(&folded);
    let folded_uj: u64 = folded.values().sum();
    assert!(
        folded
            .keys()
            .any(|s| s.starts_with(&format!("cg-funcs {pid};")) && s.contains(";cg_work_b (")),
        "{folded:?}"
    );

    // speedscope: every folded stack with the same energy (µJ there, J here).
    // Not a report: speedscope's own format.
    let file: Value = serde_json::from_slice(&std::fs::read(&speedscope).expect("speedscope"))
        .expect("the speedscope file is JSON");
    let (stacks, cpu_ns) = speedscope_stacks(&file);
    for (stack, &uj) in &folded {
        let j = stacks
            .get(stack)
            .unwrap_or_else(|| panic!("{stack} not in the speedscope profile"));
        assert_eq!((j * 1e6).round() as u64, uj, "{stack}");
    }
    // Stacks under 1 µJ are left out of folded files only.
    let speedscope_uj = stacks.values().sum::<f64>() * 1e6;
    assert!(
        (speedscope_uj - folded_uj as f64).abs() <= stacks.len() as f64,
        "speedscope {speedscope_uj} µJ, folded {folded_uj} µJ"
    );
    // The CPU profile adds up to the targets' on-CPU time (sampled and [unsampled]).
    let targets_cpu_s: f64 = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| num(p, "/cpu_time_s"))
        .sum();
    ratio_near(
        "speedscope CPU / targets' CPU",
        cpu_ns / 1e9 / targets_cpu_s,
        1.0,
        0.02,
    );

    // pprof: decoded apart from cg-trace's writer, energy in whole µJ per stack as folded.
    let profile = cg_tests::pprof::decode_gz(&std::fs::read(&pprof).expect("pprof file"))
        .unwrap_or_else(|e| panic!("the pprof file does not decode: {e}"));
    assert_eq!(
        profile.sample_types,
        [
            ("energy".to_string(), "microjoules".to_string()),
            ("cpu".to_string(), "nanoseconds".to_string())
        ]
    );
    assert_eq!(profile.default_sample_type, "energy");
    assert!(
        profile.comments.iter().any(|c| c.contains("ESTIMATED")),
        "{:?}",
        profile.comments
    );
    let mut pprof_uj: BTreeMap<String, u64> = BTreeMap::new();
    let mut pprof_cpu_ns = 0;
    for sample in &profile.samples {
        assert_eq!(sample.values.len(), 2);
        let stack = profile.stack(sample).unwrap().join(";");
        let pid_label = sample.num_labels.iter().find(|(k, _)| k == "pid");
        assert!(
            pid_label.is_some_and(|(_, v)| stack.contains(&format!(" {v}"))),
            "{stack}: {:?}",
            sample.num_labels
        );
        *pprof_uj.entry(stack).or_insert(0) += sample.values[0] as u64;
        pprof_cpu_ns += sample.values[1];
    }
    pprof_uj.retain(|_, uj| *uj > 0);
    assert_eq!(pprof_uj, folded);
    ratio_near(
        "pprof CPU / speedscope CPU",
        pprof_cpu_ns as f64 / cpu_ns,
        1.0,
        1e-3,
    );

    // `go tool pprof` reads it too, where Go is installed.
    let go = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=energy"])
        .arg(&pprof)
        .env("HOME", dir.path())
        .output();
    if let Ok(out) = go {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("cg_burn") && text.contains("microjoules"),
            "{text}"
        );
    }
}
