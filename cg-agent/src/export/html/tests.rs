//! Unit tests of the HTML report: escaping of hostile strings, the chart data block, and the
//! sections that appear for what a report holds.

use serde_json::json;

use super::*;

/// The page of a report given as JSON, read as `cg-trace report` reads a file.
fn render(report: &Value, flamegraph: Option<&str>) -> String {
    super::render(&view(report).unwrap(), flamegraph)
}

/// A report given as JSON, read through the checks and the model every reader shares.
fn view(report: &Value) -> Result<PageReport, read::LoadError> {
    read::parse_as("r.json", report.to_string().as_bytes())
}

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
                   "domains": {"package-0": {"energy_j": 3.0, "attributed_energy_j": 2.0,
                                             "top_level": true, "provenance": "measured"}}}
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
        "runs": [{"index": 1, "energy_j": 3.0, "outlier": false, "report": minimal("./app")},
                 {"index": 2, "energy_j": 9.0, "outlier": true, "report": minimal("./app")}],
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
fn a_series_naming_processes_by_name_draws_as_one_naming_them_by_pid() {
    // Early reports' points held `processes` as a map from name to figures.
    let mut report = minimal("./app");
    report["a_section_from_the_future"] = json!([1, 2, 3]);
    let point = |i: usize, processes: Value| {
        json!({"t_s": i as f64 * 0.1, "duration_s": 0.1, "energy_j": 0.3,
               "energy_known": true, "domains": {"package-0": {"energy_j": 0.3,
               "energy_known": true, "glitches": []}}, "processes": processes})
    };
    for processes in [
        json!([{"pid": 7, "comm": "app", "energy_j": 0.2, "threads": []}]),
        json!({"app (7)": {"energy_j": 0.2}}),
        json!({"app (7)": 0.2}),
    ] {
        report["timeseries"] = (0..30).map(|i| point(i, processes.clone())).collect();
        let data = data_block(&render(&report, None));
        assert_eq!(data["process_power"]["series"][0]["name"], "app (7)");
        assert_eq!(data["process_power"]["series"][0]["values"][29], json!(2.0));
    }
}

#[test]
fn a_report_of_another_shape_is_refused_naming_the_field_and_a_missing_figure_is_a_dash() {
    for (odd, field) in [
        (json!({"meta": 5}), "meta.tool"),
        (json!({"processes": "x"}), "`processes`"),
        (json!({"totals": []}), "`totals`"),
        (json!({"timeseries": [1]}), "`timeseries[0]`"),
        (
            json!({"timeseries": [{"t_s": "now"}]}),
            "`timeseries[0].t_s`",
        ),
        (
            json!({"repeat": {"runs": [{"energy_j": "many"}]}}),
            "`repeat.runs[0].energy_j`",
        ),
        (json!({"budgets": {}}), "`budgets`"),
        (
            json!({"function_totals": [{"energy_j": null}]}),
            "`function_totals[0]",
        ),
        (json!({"meta": {"command": [1, null]}}), "`meta.command[0]`"),
    ] {
        let mut report = minimal("./app");
        for (key, value) in odd.as_object().unwrap() {
            match (report.get_mut(key), value) {
                (Some(Value::Object(section)), Value::Object(fields)) => {
                    section.extend(fields.clone())
                }
                _ => report[key] = value.clone(),
            }
        }
        let err = view(&report).map(|_| ()).unwrap_err();
        assert!(
            matches!(
                err,
                read::LoadError::Shape { .. } | read::LoadError::NotCgTrace { .. }
            ),
            "{odd}: {err}"
        );
        assert!(err.to_string().contains(field), "{odd}: {err}");
    }
    // A figure an earlier report did not have shows as a dash.
    let mut report = minimal("./app");
    report["totals"]
        .as_object_mut()
        .unwrap()
        .remove("other_energy_j");
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

/// A report whose series has `domains` (all measured) and, when `gpu`, gpu0's figures.
fn with_domains(domains: &[String], gpu: bool) -> Value {
    let mut report = minimal("./train");
    report["meta"]["gpus"] = json!([{"index": 0, "domain": "gpu0",
                                     "name": "NVIDIA H100 80GB HBM3",
                                     "memory_total_bytes": 80.0 * 1e9}]);
    report["timeseries"] = (0..4)
        .map(|i| {
            let mut point = json!({"t_s": f64::from(i) * 0.5, "duration_s": 0.5,
                                   "energy_j": 100.0, "attributed_energy_j": 50.0,
                                   "other_energy_j": 10.0, "idle_energy_j": 40.0,
                                   "energy_known": true, "domains": {}});
            for d in domains {
                point["domains"][d] = json!({"energy_j": 100.0, "energy_known": true});
            }
            if gpu {
                point["gpus"] = json!([{"domain": "gpu0", "provenance": "measured",
                                        "utilization_pct": if i < 2 { 98.0 } else { 0.0 },
                                        "memory_used_bytes": 20.0 * 1e9,
                                        "temperature_c": 50.0 + f64::from(i),
                                        "power_w": 700.0}]);
            }
            point
        })
        .collect();
    report
}

#[test]
fn no_domain_and_no_gpu_series_wears_idles_colour_whatever_the_domains() {
    let idle = gpus::part_colour("idle").unwrap();
    for n in 0..20 {
        // gpu0 first, as the chart sorts it, then as many other domains as it takes to go
        // round the domain palette twice.
        let mut domains = vec!["gpu0".to_string()];
        domains.extend((0..n).map(|i| format!("package-{i:02}")));
        let data = data_block(&render(&with_domains(&domains, true), None));
        let mut coloured = 0;
        for block in std::iter::once(&data["power"]).chain(data["gpus"].as_array().unwrap()) {
            for s in block["series"].as_array().unwrap() {
                let colour = s["colour"].as_str().unwrap();
                coloured += 1;
                if s["name"] != "idle" {
                    assert_ne!(colour, idle, "{n} domains: {s}");
                }
            }
        }
        assert_eq!(coloured, (1 + domains.len() + 3) + 4, "{data}");
        let gpu0 = data["power"]["series"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "gpu0")
            .unwrap();
        // The GPU's power has its domain's colour in the GPU chart too.
        assert_eq!(data["gpus"][0]["series"][3]["colour"], gpu0["colour"]);
    }
}

#[test]
fn a_gpu_section_charts_each_gpus_figures_when_the_series_has_them() {
    let domains = ["gpu0".to_string(), "package-0".to_string()];
    let plain = render(&with_domains(&domains, false), None);
    assert!(!plain.contains("<h2>GPUs</h2>"));
    assert!(data_block(&plain).get("gpus").is_none());

    let page = render(&with_domains(&domains, true), None);
    assert!(page.contains("<h2>GPUs</h2>"));
    assert!(
        page.contains("<h3>gpu0 NVIDIA H100 80GB HBM3</h3>"),
        "{page}"
    );
    assert!(page.contains("id=\"chart-gpu-0\""));
    let chart = &data_block(&page)["gpus"][0];
    assert_eq!(chart["id"], "chart-gpu-0");
    let values = |i: usize| chart["series"][i]["values"].clone();
    assert_eq!(values(0), json!([98.0, 98.0, 0.0, 0.0]));
    // 20 GB of 80 GB.
    assert_eq!(values(1), json!([25.0, 25.0, 25.0, 25.0]));
    assert_eq!(values(2), json!([50.0, 51.0, 52.0, 53.0]));
    assert_eq!(values(3), json!([700.0, 700.0, 700.0, 700.0]));
    assert_eq!(chart["series"][3]["axis"], "W");
}

#[test]
fn a_gpus_hostile_name_is_escaped_and_bad_figures_are_gaps() {
    let mut report = with_domains(&["gpu0".to_string()], true);
    report["meta"]["gpus"][0]["name"] = json!("<script>x</script>\u{1b}[2J");
    report["meta"]["gpus"][0]["memory_total_bytes"] = json!(0);
    report["timeseries"][1]["gpus"][0]["temperature_c"] = Value::Null;
    let page = render(&report, None);
    assert!(!page.contains("<script>x"));
    assert!(
        page.contains("&lt;script&gt;x&lt;/script&gt;\\x1b[2J"),
        "{page}"
    );
    let chart = &data_block(&page)["gpus"][0];
    // Memory has no total to be a percent of; the unreadable temperature is a gap.
    assert_eq!(
        chart["series"][1]["values"],
        json!([null, null, null, null])
    );
    assert_eq!(
        chart["series"][2]["values"],
        json!([50.0, null, 52.0, 53.0])
    );
}

#[test]
fn a_report_of_many_processes_adds_up_in_its_tables() {
    // The table's rest line adds up over thousands of processes.
    let mut report = minimal("./app");
    let processes: Vec<Value> = (0..3_000)
        .map(|i| {
            json!({"pid": 100 + i, "comm": "w", "cmdline": [format!("/bin/w{}", i % 7)],
                   "cpu_time_s": 0.5, "energy_j": 1.0 + (i % 5) as f64, "threads": []})
        })
        .collect();
    report["processes"] = Value::Array(processes);
    let page = render(&report, None);
    assert!(page.contains("2950 more processes"), "the rest line");
    report["processes"] = json!([]);
    assert!(render(&report, None).contains("No process ran on a CPU."));
}

#[test]
fn an_estimated_run_names_the_domains_a_counter_did_measure() {
    // A cloud GPU machine without RAPL: the CPUs modelled, the GPU measured (a real H100's
    // page once said "no hardware counter measured this run").
    let mut report = minimal("./train");
    report["meta"]["measurement_quality"]["grade"] = json!("estimated");
    report["totals"]["domains"] = json!({
        "model": {"energy_j": 1.0, "attributed_energy_j": 0.5, "top_level": true,
                  "provenance": "estimated"},
        "gpu0": {"energy_j": 2.0, "attributed_energy_j": 1.5, "top_level": true,
                 "provenance": "measured"}
    });
    let page = render(&report, None);
    assert!(
        page.contains("gpu0 measured by hardware counters"),
        "{page}"
    );
    assert!(!page.contains("no hardware counter measured"));

    report["totals"]["domains"] = json!({
        "model": {"energy_j": 1.0, "attributed_energy_j": 0.5, "top_level": true,
                  "provenance": "estimated"}
    });
    let page = render(&report, None);
    assert!(page.contains("no hardware counter measured this run"));
}
