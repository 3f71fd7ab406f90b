//! End-to-end tests of what issue 10 asks of function profiles beyond naming: no sample loses
//! its stack (and what is lost is counted, kernel and user apart). Root, real eBPF, real processes; energy
//! from the built-in model. Run serially (`--test-threads=1`).

use std::path::Path;

use cg_tests::{assert_adds_up, cg_trace, num, require_root};
use serde_json::Value;

fn functions(report: &Value) -> &Vec<Value> {
    report["functions"].as_array().expect("functions")
}

/// Samples of the per-process entries whose frame is `[no stack]` (a sample left without
/// any frame).
fn no_stack_samples(report: &Value) -> u64 {
    functions(report)
        .iter()
        .filter(|f| f["module"] == "[no stack]" || f["symbol"] == "[no stack]")
        .map(|f| f["samples"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn samples_at_999_hz_keep_their_stacks_and_any_loss_is_counted() {
    require_root();
    // JSON, regular expressions and directory walks: a new stack at nearly every sample, and
    // some kernel stacks. The kernel's stack-trace map used to refuse 2-4 % of these stacks.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("py/stacks.py");
    let run = cg_trace(&[
        "--source",
        "model",
        "--profile",
        "--sample-hz",
        "999",
        "--top-functions",
        "100000",
        "--",
        "/usr/bin/python3.11",
        script.to_str().unwrap(),
        "60",
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report();
    assert_adds_up(report);
    let sampling = &report["meta"]["function_profiling"]["sampling"];
    let samples = num(sampling, "/samples_count");
    assert!(samples > 1000.0, "too few samples to judge: {sampling:#}");
    let bound = samples * 0.001;
    // Samples left without a single frame, and user stacks lost, as the report has always
    // counted them.
    let no_stack = no_stack_samples(report) as f64;
    assert!(
        no_stack <= bound,
        "{no_stack} of {samples} samples have no stack: {sampling:#}"
    );
    let lost_user = num(sampling, "/lost_user_stacks_count");
    assert!(
        lost_user <= bound,
        "{lost_user} user stacks lost: {sampling:#}"
    );
    // Kernel stacks are counted too, and the share of all losses is reported.
    let lost_kernel = num(sampling, "/lost_kernel_stacks_count");
    assert!(
        lost_kernel <= bound,
        "{lost_kernel} kernel stacks lost: {sampling:#}"
    );
    let lost_samples = num(sampling, "/lost_samples_count");
    let pct = num(sampling, "/lost_stacks_pct");
    assert!(
        (pct - 100.0 * (lost_kernel + lost_user + lost_samples) / samples).abs() < 1e-9,
        "{sampling:#}"
    );
    if lost_samples > bound {
        // Whole samples are lost only when the agent reads the ring late: a starved machine,
        // which the report shows.
        let longest_s = num(report, "/meta/profiler/longest_interval_s");
        assert!(
            longest_s > 0.5,
            "{lost_samples} samples lost with no starved interval (longest {longest_s} s): \
             {sampling:#}"
        );
    }
    // Kernel frames come with the samples that have them.
    assert!(
        functions(report)
            .iter()
            .any(|f| f["module"] == "[kernel]" && f["samples"].as_u64().unwrap_or(0) > 0),
        "no kernel frames"
    );
    let stderr = run.stderr();
    assert!(
        stderr.contains("lost (measured):") && stderr.contains("kernel stacks"),
        "{stderr}"
    );
}
