//! Unit tests of the HTML report: escaping of hostile strings, the chart data block, and the
//! sections that appear for what a report holds.

use serde_json::json;

use super::*;

#[test]
fn inlined_scripts_cannot_end_their_element() {
    for (name, script) in [
        ("uPlot", UPLOT_JS),
        ("errors.js", ERRORS_JS),
        ("charts.js", CHARTS_JS),
    ] {
        assert!(
            !script.contains("</"),
            "{name} holds `</`: it would end its <script>"
        );
        assert!(!script.contains("<!--"), "{name} holds `<!--`");
    }
    assert!(
        UPLOT_JS.contains(UPLOT_VERSION),
        "vendored uPlot is not {UPLOT_VERSION}"
    );
}

#[test]
fn text_is_escaped() {
    assert_eq!(
        esc("<script>alert(1)</script> & \"'"),
        "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;&#39;"
    );
    // Control characters and bidi overrides are shown escaped, as the terminal outputs show
    // them.
    assert_eq!(esc("a\x1b[2Jb\nc\u{202e}d"), "a\\x1b[2Jb\\nc\\u202ed");
}

#[test]
fn script_json_cannot_end_the_script_and_stays_json() {
    let value = json!({"name": "</script><script>alert(1)</script> <!-- \u{2028}\u{2029} &"});
    let text = script_json(&value);
    for bad in ["<", ">", "&", "\u{2028}", "\u{2029}"] {
        assert!(!text.contains(bad), "{bad:?} in {text}");
    }
    let back: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back, value);
}

fn minimal(command: &str) -> Value {
    json!({
        "meta": {"schema_version": "1.6", "tool": "cg-trace", "run_id": "r1",
                 "mode": "wrap", "command": [command, "--flag"],
                 "measurement_quality": {"grade": "measured", "notes": ["a <b>note</b>"]},
                 "sources": [{"name": "perf", "provenance": "measured",
                              "description": "RAPL", "domains": ["package-0"]}],
                 "a_field_from_the_future": {"x": 1}},
        "processes": [{"pid": 7, "comm": "evil", "cmdline": [command],
                       "cpu_time_s": 1.0, "energy_j": 2.0, "avg_power_w": 2.0,
                       "share_pct": 100.0, "alive_s": 1.0, "threads": [{"tid": 7}]}],
        "functions": [],
        "function_totals": [{"symbol": "<img src=x onerror=alert(1)>", "module": "m",
                             "cpu_time_s": 0.5, "energy_j": 1.0, "self_energy_j": 1.0}],
        "totals": {"energy_j": 3.0, "attributed_energy_j": 2.0, "other_energy_j": 0.5,
                   "idle_energy_j": 0.5, "avg_power_w": 3.0, "cpu_time_s": 1.0,
                   "domains": {"package-0": {"energy_j": 3.0, "top_level": true,
                                             "provenance": "measured"}}}
    })
}

#[test]
fn a_hostile_command_and_function_are_escaped_everywhere() {
    let page = render(&minimal("<script>alert(1)</script>"), None);
    // The only script elements are the page's own three (and the data block).
    assert_eq!(page.matches("<script").count(), 4, "{page}");
    assert!(!page.contains("<script>alert(1)"));
    assert!(!page.contains("<img src=x"));
    assert!(!page.contains("<b>note</b>"));
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
}

#[test]
fn sections_follow_what_the_report_holds() {
    let plain = render(&minimal("./app"), None);
    assert!(plain.contains("No time series in this report"));
    assert!(!plain.contains("id=\"chart-power\""));
    assert!(!plain.contains("Repeated runs"));
    assert!(plain.contains("Energy per function"));

    let mut report = minimal("./app");
    report["timeseries"] = (0..10)
        .map(|i| {
            json!({"t_s": i as f64 * 0.1, "duration_s": 0.1, "energy_j": 0.3, "power_w": 3.0,
                   "energy_known": true, "attributed_energy_j": 0.2,
                   "domains": {"package-0": {"energy_j": 0.3, "power_w": 3.0,
                                             "energy_known": i != 4}},
                   "processes": [{"pid": 7, "comm": "app", "energy_j": 0.2}]})
        })
        .collect();
    report["repeat"] = json!({
        "noise_verdict": "high-noise", "representative_run": 1, "runs_requested_count": 2,
        "runs": [{"index": 1, "energy_j": 3.0, "outlier": false},
                 {"index": 2, "energy_j": 9.0, "outlier": true}],
        "statistics": {"energy_j": {"median": 6.0, "cv_pct": 70.0, "outlier_runs": [2]}}
    });
    let page = render(&report, None);
    assert!(page.contains("id=\"chart-power\""));
    assert!(page.contains("id=\"chart-process-power\""));
    assert!(page.contains("id=\"chart-runs\""));
    assert!(page.contains("the runs are noisy"));
    let data = data_block(&page);
    // The unknown interval is a gap in its domain's series, not a zero.
    let domain = &data["power"]["series"][1];
    assert_eq!(domain["name"], "package-0");
    assert_eq!(domain["values"][4], Value::Null);
    assert_eq!(domain["values"][3], json!(3.0));
    assert_eq!(data["process_power"]["series"][0]["values"][0], json!(2.0));
    assert_eq!(data["runs"]["outlier_energy_j"], json!([null, 9.0]));
}

fn data_block(page: &str) -> Value {
    let start = page.find("id=\"cg-data\">").unwrap() + "id=\"cg-data\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).unwrap()
}

#[test]
fn a_long_series_is_averaged_into_buckets_keeping_the_mean_power() {
    let n = 36_000;
    let mut report = minimal("./app");
    report["timeseries"] = (0..n)
        .map(|i| {
            // 10 W and 30 W alternating: every bucket's mean is 20 W.
            let j = if i % 2 == 0 { 1.0 } else { 3.0 };
            json!({"t_s": i as f64 * 0.1, "duration_s": 0.1, "energy_j": j,
                   "energy_known": true, "domains": {}})
        })
        .collect();
    let page = render(&report, None);
    let data = data_block(&page);
    let values = data["power"]["series"][0]["values"].as_array().unwrap();
    assert!(values.len() <= MAX_CHART_POINTS, "{}", values.len());
    assert!(values.len() >= MAX_CHART_POINTS / 2, "{}", values.len());
    for v in values {
        assert!((v.as_f64().unwrap() - 20.0).abs() < 1e-9, "{v}");
    }
    assert!(page.contains("each the mean power of 18 consecutive intervals"));
}

#[test]
fn base64_matches_the_standard_alphabet() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"<svg>\xff"), "PHN2Zz7/");
}

#[test]
fn a_report_file_renders_as_its_json_does_whatever_the_shape_of_its_series() {
    let mut report = minimal("./app");
    report["a_section_from_the_future"] = json!([1, 2, 3]);
    let point = |i: usize, processes: Value| {
        json!({"t_s": i as f64 * 0.1, "duration_s": 0.1, "energy_j": 0.3,
               "energy_known": true, "domains": {"package-0": {"energy_j": 0.3,
               "energy_known": true, "glitches": []}}, "processes": processes})
    };
    // As a list (the typed path), and as a map from name to figures (read point by point).
    for processes in [
        json!([{"pid": 7, "comm": "app", "energy_j": 0.2, "threads": []}]),
        json!({"app (7)": {"energy_j": 0.2}}),
    ] {
        report["timeseries"] = (0..30).map(|i| point(i, processes.clone())).collect();
        let bytes = serde_json::to_vec(&report).unwrap();
        let (value, points) = parse(&bytes).unwrap();
        assert_eq!(points.len(), 30);
        let page = render_parts(&value, &points, None);
        assert_eq!(page, render(&report, None));
        let data = data_block(&page);
        assert_eq!(data["process_power"]["series"][0]["name"], "app (7)");
        assert_eq!(data["process_power"]["series"][0]["values"][29], json!(2.0));
    }
}

#[test]
fn any_json_renders_without_panicking_and_figures_that_are_not_numbers_show_as_dashes() {
    let odd = [
        json!(null),
        json!([]),
        json!({"meta": 5, "processes": "x", "totals": [], "timeseries": [1, null, {"domains": 3}]}),
        json!({"meta": {"command": [1, null], "sources": [7]}, "processes": [null, 3, {"pid": -1}],
               "repeat": {"runs": [1, {"energy_j": "many"}], "statistics": []},
               "budgets": {}, "function_totals": [{"energy_j": null}],
               "timeseries": [{"t_s": "now", "processes": [1, {"energy_j": "x"}]}]}),
    ];
    for report in odd {
        let page = render(&report, None);
        assert!(page.ends_with("</html>\n"));
        data_block(&page);
    }
    let mut report = minimal("./app");
    report["totals"]["energy_j"] = Value::Null;
    let page = render(&report, None);
    assert!(page.contains("<td class=\"n\">—</td>"));
}

#[test]
fn per_process_series_are_named_by_the_program_of_their_pid() {
    // The report's time series names processes by pid only (and folds the rest): the chart
    // takes the program's name from the process list.
    let mut report = minimal("/usr/bin/python3");
    report["timeseries"] = json!([
        {"t_s": 0.0, "duration_s": 1.0, "energy_j": 3.0, "energy_known": true, "domains": {},
         "processes": [{"pid": 7, "energy_j": 2.0, "cpu_time_s": 1.0},
                       {"pid": null, "folded_processes_count": 3, "energy_j": 0.5,
                        "cpu_time_s": 0.1}]}
    ]);
    let data = data_block(&render(&report, None));
    let names: Vec<&str> = data["process_power"]["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["python3 (7)", "other targets (folded)"]);
}
