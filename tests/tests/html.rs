//! The HTML report (`cg-trace report`, `--html`, `diff --format html`) opened in headless
//! Chromium: the charts rendered (uPlot's canvases are in the DOM after the scripts ran), no
//! script error (the page records every error into `#cg-errors`), the flamegraph embedded,
//! and a hostile command shown as text, never run. Root (real eBPF runs).
//!
//! Chromium is the Debian package `chromium` (`cargo xtask setup` installs it). Without it
//! these tests fail, unless `CG_TRACE_TESTS_WITHOUT_CHROMIUM=1` says that this machine may lack
//! it: then they say they were skipped.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use cg_tests::{
    NvmlReplay, ReplayScript, assert_adds_up, cg_trace_as_given as cg, nvml_recording, read_report,
    require_root,
};

/// Tells the tests that Chromium may be absent here (they then skip instead of failing).
const MAY_LACK_CHROMIUM: &str = "CG_TRACE_TESTS_WITHOUT_CHROMIUM";

/// The Chromium binary, or `None` when it is absent and the environment allows that.
fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() && std::env::var_os(MAY_LACK_CHROMIUM).is_some_and(|v| v == "1") {
        eprintln!(
            "skipped: Chromium is not installed and {MAY_LACK_CHROMIUM}=1 allows that (install \
             the apt package chromium, or run `cargo xtask setup`, to test the HTML report)"
        );
        return None;
    }
    Some(found.unwrap_or_else(|| {
        panic!(
            "headless Chromium is needed to test the HTML report: `cargo xtask setup` (apt \
             package chromium); set {MAY_LACK_CHROMIUM}=1 to skip these tests on a machine \
             without it"
        )
    }))
}

/// The page's DOM after its scripts ran, as headless Chromium serializes it.
fn rendered_dom(chromium: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args([
            "--headless",
            // Root in a VM: Chromium's sandbox needs user namespaces it may not get.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .output()
        .expect("running chromium");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed on {} ({}):\n{}",
        page.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// The text of the page's error record, `#cg-errors` (empty when no script failed).
fn recorded_errors(dom: &str) -> String {
    let start = dom
        .find("<pre id=\"cg-errors\"")
        .expect("the page has its error record");
    let text_start = start + dom[start..].find('>').unwrap() + 1;
    let end = text_start + dom[text_start..].find("</pre>").unwrap();
    dom[text_start..end].to_string()
}

/// Checks that the page rendered: no recorded error, and these charts drawn by uPlot (the
/// chart's element marked, its canvas present).
fn assert_rendered(dom: &str, charts: &[&str]) {
    let errors = recorded_errors(dom);
    assert!(
        errors.trim().is_empty(),
        "script errors in the page:\n{errors}"
    );
    assert!(
        dom.contains(&format!("data-charts-rendered=\"{}\"", charts.len())),
        "expected {} charts: {}",
        charts.len(),
        dom.split("<body")
            .nth(1)
            .unwrap_or("")
            .chars()
            .take(300)
            .collect::<String>()
    );
    for id in charts {
        let start = dom
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no element #{id}"));
        let tag_end = start + dom[start..].find('>').unwrap();
        assert!(
            dom[start..tag_end].contains("data-rendered=\"true\""),
            "#{id} not drawn"
        );
        let chart = &dom[tag_end..];
        let canvas = chart.find("<canvas").expect("a canvas after the chart");
        let next_chart = chart.find("class=\"chart\"").unwrap_or(usize::MAX);
        assert!(canvas < next_chart, "#{id} has no canvas");
        assert!(
            chart[..canvas].contains("class=\"uplot"),
            "#{id} is not a uPlot chart"
        );
    }
}

#[test]
fn a_repeated_run_its_report_page_and_its_diff_render_in_chromium() {
    require_root();
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let html = dir.path().join("run.html");
    let out = cg(&[
        "--source",
        "model",
        "--timeseries",
        "--interval",
        "20",
        "--repeat",
        "3",
        "-q",
        "-o",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = read_report(&json);
    assert_adds_up(&report);
    assert_eq!(report["repeat"]["runs"].as_array().unwrap().len(), 3);

    // Written during the run, and from its JSON afterwards: both show the power over time (the
    // machine's and the top processes') and the per-run points.
    let from_json = dir.path().join("report.html");
    let out = cg(&[
        "report",
        json.to_str().unwrap(),
        "-o",
        from_json.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in [&html, &from_json] {
        let dom = rendered_dom(&chromium, page);
        assert_rendered(&dom, &["chart-power", "chart-process-power", "chart-runs"]);
        for section in [
            "Summary",
            "Power over time",
            "Repeated runs",
            "Energy per process group",
            "Processes",
            "Sources and quality",
        ] {
            assert!(dom.contains(&format!("<h2>{section}</h2>")), "no {section}");
        }
        // The noise verdict the report gives, and a row per run.
        let verdict = report["repeat"]["noise_verdict"].as_str().unwrap();
        assert!(
            dom.contains(&format!("class=\"badge {verdict}\"")),
            "{verdict}"
        );
        assert!(dom.contains("uPlot 1.6.32"));
    }

    // A diff of the set with itself: every row tested, nothing significant.
    let out = cg(&[
        "diff",
        json.to_str().unwrap(),
        json.to_str().unwrap(),
        "--format",
        "html",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let diff = dir.path().join("diff.html");
    std::fs::write(&diff, &out.stdout).unwrap();
    let dom = rendered_dom(&chromium, &diff);
    assert_rendered(&dom, &[]);
    assert!(dom.contains("<h2>Per domain (the whole machine) (context, not gated)</h2>"));
    assert!(dom.contains("<h2>Targets (the traced command and its descendants) (gated)</h2>"));
    assert!(dom.contains("no significant difference"));
    assert!(
        !dom.contains("badge bad"),
        "a regression or a warning:\n{dom}"
    );
}

#[test]
fn a_hostile_command_line_is_shown_as_text_and_never_runs_in_the_page() {
    require_root();
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("hostile.html");
    // (No alert(): a dialog would hang headless Chromium rather than fail the test.)
    let hostile = "<script>document.title='pwned'</script>\
                   <img src=x onerror=\"document.title='pwned'\"></textarea>\u{2028}";
    let out = cg(&[
        "--source",
        "model",
        "-q",
        "--html",
        html.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exit 0",
        hostile,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = rendered_dom(&chromium, &html);
    assert_rendered(&dom, &[]);
    assert!(
        !dom.contains("pwned</title>"),
        "the command ran in the page"
    );
    assert!(
        !dom.contains("<img src=\"x\""),
        "the command became an element"
    );
    // The page's own scripts only (the error record, uPlot, the data, the charts).
    assert_eq!(dom.matches("<script").count(), 4);
    assert!(dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"));
}

#[test]
fn a_gpu_runs_page_charts_the_gpus_figures_over_time() {
    require_root();
    let Some(chromium) = chromium() else {
        return;
    };
    // The recorded H100 (tests/fake-nvml/recordings): the end of the heavy phase, the decay,
    // then rest.
    let nvml = NvmlReplay::start(&ReplayScript {
        recording: nvml_recording("trace2-nvml.jsonl"),
        from_s: 16.5,
        to_s: 22.0,
        name: "NVIDIA H100 80GB HBM3",
        uuid: "GPU-2cda00ab-5c9b-4842-993e-8c43914335f5",
        pids: vec![],
        accounting: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let (html, json) = (dir.path().join("gpu.html"), dir.path().join("gpu.json"));
    let lib = nvml.lib().display().to_string();
    let out = cg(&[
        "--source",
        "model",
        "-q",
        "--nvml-lib",
        &lib,
        "--state-dir",
        dir.path().to_str().unwrap(),
        "--perf-root",
        "/nonexistent",
        "--powercap-root",
        "/nonexistent",
        "--all",
        "--duration",
        "3",
        "--timeseries",
        "--html",
        html.to_str().unwrap(),
        "-o",
        json.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_adds_up(&read_report(&json));
    let dom = rendered_dom(&chromium, &html);
    assert_rendered(&dom, &["chart-power", "chart-process-power", "chart-gpu-0"]);
    assert!(dom.contains("<h2>GPUs</h2>"));
    assert!(dom.contains("gpu0 NVIDIA H100 80GB HBM3"));
    // The GPU chart's legend names its four figures.
    let chart = &dom[dom.find("id=\"chart-gpu-0\"").unwrap()..];
    for figure in [
        "utilisation (%)",
        "memory used (%)",
        "temperature (°C)",
        "power (W)",
    ] {
        assert!(chart.contains(figure), "{figure} not in the GPU chart");
    }
}

#[test]
fn a_profiled_run_embeds_its_energy_flamegraph() {
    require_root();
    let Some(chromium) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("profile.html");
    let out = cg(&[
        "--source",
        "model",
        "--profile",
        "-q",
        // The page as the report itself (`-o FILE.html`).
        "-o",
        html.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = rendered_dom(&chromium, &html);
    assert_rendered(&dom, &[]);
    assert!(dom.contains("<h2>Energy per function</h2>"));
    // The SVG, base64 in a sandboxed frame: "<?xml " is "PD94bWwg".
    let frame = dom
        .find("<iframe")
        .map(|i| &dom[i..i + dom[i..].find('>').unwrap()])
        .expect("the flamegraph's frame");
    assert!(frame.contains("sandbox=\"allow-scripts\""), "{frame}");
    assert!(
        frame.contains("src=\"data:image/svg+xml;base64,PD94bWwg"),
        "{}",
        &frame[..frame.len().min(200)]
    );
}

#[test]
fn report_refuses_what_is_not_a_report_and_says_which_file() {
    let dir = tempfile::tempdir().unwrap();
    let not_json = dir.path().join("notes.json");
    std::fs::write(&not_json, "hello").unwrap();
    let out_path = dir.path().join("out.html");
    for (input, says) in [
        (dir.path().join("missing.json"), "cannot read it"),
        (not_json, "not JSON"),
    ] {
        let out = cg(&[
            "report",
            input.to_str().unwrap(),
            "-o",
            out_path.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(input.to_str().unwrap()), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(!out_path.exists());
    }
}

#[test]
fn the_page_goes_through_the_safe_output_path() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    let link = dir.path().join("r.html");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let marker = dir.path().join("ran");
    // On a run: refused before anything runs.
    let out = cg(&[
        "--source",
        "model",
        "-q",
        "--html",
        link.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--html") && stderr.contains("symbolic link"),
        "{stderr}"
    );
    assert!(
        !marker.exists(),
        "the command ran though its page was refused"
    );
    // From a report.
    let json = dir.path().join("run.json");
    let out = cg(&[
        "--source",
        "model",
        "-q",
        "-o",
        json.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let out = cg(&[
        "report",
        json.to_str().unwrap(),
        "-o",
        link.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
}

#[test]
fn a_report_of_many_processes_reads_with_the_same_totals() {
    require_root();
    // A real run's report with its process list replaced by 200,000 processes of 5 programs
    // (the list `report` and `diff` read entry by entry): the page's tables and the diff still
    // add up to what the list holds.
    let run = cg_tests::cg_trace(&["--source", "model", "-q", "--", "true"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let mut report = run.report().clone();
    const N: usize = 200_000;
    let processes: Vec<serde_json::Value> = (0..N)
        .map(|i| {
            serde_json::json!({
                "pid": 10_000 + i, "ppid": 1, "comm": format!("prog{}", i % 5),
                "cmdline": [format!("/usr/bin/prog{}", i % 5), "--job", i.to_string()],
                "root": false, "cpu_time_s": 0.5, "energy_j": 0.25, "avg_power_w": 0.5,
                "share_pct": 0.0, "domains": {"model": {"energy_j": 0.25}}, "started_s": 0.0,
                "alive_s": 1.0, "threads": []
            })
        })
        .collect();
    report["processes"] = serde_json::Value::Array(processes);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("many.json");
    std::fs::write(&input, serde_json::to_vec(&report).unwrap()).unwrap();
    let input = input.to_str().unwrap();

    let page = dir.path().join("many.html");
    let out = cg(&["report", input, "-o", page.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&page).unwrap();
    // The process table: 50 rows, then the rest (199,950 processes, 0.25 J and 0.5 s each).
    let rest = format!(
        "{} more processes</td><td class=\"n\">{:.0} s</td><td class=\"n\">{:.0} J</td>",
        N - 50,
        (N - 50) as f64 * 0.5,
        (N - 50) as f64 * 0.25
    );
    assert!(page.contains(&rest), "no {rest:?} in the page");
    // The process groups: 5 programs of 40,000 processes, 10,000 J each.
    for p in 0..5 {
        let row = format!(
            "<tr><td class=\"cmd\">prog{p}</td><td class=\"n\">40000</td><td class=\"n\">20000 s</td>\
             <td class=\"n\">10000 J</td>"
        );
        assert!(page.contains(&row), "no {row:?} in the page");
    }

    let out = cg(&["diff", input, input, "--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Not a report: `diff --format json` writes a comparison.
    let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = diff["rows"].as_array().expect("rows");
    for p in 0..5 {
        let name = format!("prog{p}");
        let row = rows
            .iter()
            .find(|r| r["kind"] == "process_group" && r["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no row for {name}: {diff:#}"));
        assert_eq!(row["base_energy_j"], 10_000.0, "{row:#}");
        assert_eq!(row["new_energy_j"], 10_000.0, "{row:#}");
    }
}
