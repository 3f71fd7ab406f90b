//! End-to-end tests that function probes never harm the traced program, and that attaching
//! many of them stops at a signal: every function of a real Rust binary and of a C binary
//! probed (`--func '*'`), the entry point, setjmp and longjmp; the program's output and
//! exit status must be those it has without cg-trace. Root, real eBPF. Run serially
//! (`--test-threads=1`).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

use cg_tests::{assert_adds_up, bin, cg_trace, read_report, require_root};
use serde_json::Value;

/// The program's stdout and exit code, run on its own.
fn alone(program: &str, args: &[&str]) -> (String, Option<i32>) {
    let output = Command::new(program)
        .args(args)
        .output()
        .expect("running the workload");
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        output.status.code(),
    )
}

/// Runs `program args` under `cg-trace -q --source model FLAGS` and checks that its stdout
/// and exit code are what they are without cg-trace; returns the report.
fn unchanged_under(flags: &[&str], program: &str, args: &[&str]) -> Value {
    let (stdout, code) = alone(program, args);
    let mut all = vec!["-q", "--source", "model"];
    all.extend_from_slice(flags);
    all.push("--");
    all.push(program);
    all.extend_from_slice(args);
    let run = cg_trace(&all);
    assert_eq!(
        (run.stdout(), run.code()),
        (stdout, code),
        "the program's output or status changed under cg-trace {flags:?}; cg-trace said:\n{}",
        run.stderr()
    );
    let report = run.report().clone();
    assert_adds_up(&report);
    report
}

/// Whether the running kernel is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (major, minor)
}

/// The report's probed functions (`meta.function_profiling.uprobes.functions`).
fn probed(report: &Value) -> Vec<Value> {
    report
        .pointer("/meta/function_profiling/uprobes/functions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_else(|| panic!("no probed functions in {:#}", report["meta"]))
}

/// The report's `functions` entry of `symbol` (the first process that has one).
fn function_entry<'a>(report: &'a Value, symbol: &str) -> &'a Value {
    report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["symbol"] == symbol)
        .unwrap_or_else(|| {
            panic!(
                "{symbol} not in the functions list: {:#}",
                report["functions"]
            )
        })
}

fn probed_named<'a>(list: &'a [Value], symbol: &str) -> &'a Value {
    list.iter()
        .find(|f| f["symbol"] == symbol)
        .unwrap_or_else(|| panic!("{symbol} was not probed: {list:#?}"))
}

#[test]
fn a_return_probe_never_overwrites_argc_at_the_entry_point() {
    require_root();
    let program = env!("CG_PRINTS_ARGC");
    let report = unchanged_under(&["--func", "_start"], program, &["a", "b"]);
    let list = probed(&report);
    let start = probed_named(&list, "_start");
    assert_eq!(start["return_probe"], false, "{start:#}");
    assert_eq!(start["entry_only_reason"], "entry_point", "{start:#}");
    let notes = report["meta"]["function_profiling"]["notes"].to_string();
    assert!(notes.contains("entry only"), "{notes}");
}

#[test]
fn probing_every_function_of_a_c_binary_leaves_it_unchanged() {
    require_root();
    let program = env!("CG_PRINTS_ARGC");
    let report = unchanged_under(&["--func", "*"], program, &["x", "y", "z"]);
    let list = probed(&report);
    // main returns normally: it keeps its return probe and its time.
    assert_eq!(probed_named(&list, "main")["return_probe"], true);
    assert_eq!(probed_named(&list, "_start")["return_probe"], false);
}

#[test]
fn probing_every_function_of_a_rust_binary_leaves_it_unchanged() {
    require_root();
    let funcs = bin("cg-funcs").display().to_string();
    // Every function listed: the standard library's (the threads' hand-over) outnumber
    // the default list.
    let report = unchanged_under(
        &[
            "--func",
            "*",
            "--func-limit",
            "20000",
            "--top-functions",
            "100000",
        ],
        &funcs,
        &["--calls", "20", "--units", "2"],
    );
    let list = probed(&report);
    assert!(list.len() > 300, "only {} functions probed", list.len());
    // On Linux 6.6 and later the probes go on in uprobe_multi links: taking a thousand
    // functions' probes down one perf event at a time would take minutes.
    if kernel_at_least(6, 6) {
        assert_eq!(
            report["meta"]["function_profiling"]["uprobes"]["attach_method"],
            "uprobe_multi"
        );
    }
    // Panics never return: entry only; a function that returns keeps both probes.
    assert_eq!(
        probed_named(&list, "core::panicking::panic_fmt")["entry_only_reason"],
        "no_return"
    );
    assert_eq!(
        probed_named(&list, "cg_funcs::rust_work")["return_probe"],
        true
    );
    let rust_work = function_entry(&report, "cg_funcs::rust_work");
    assert_eq!(rust_work["calls"], 20, "{rust_work:#}");
}

#[test]
fn setjmp_and_longjmp_under_probes_still_jump_back() {
    require_root();
    let program = env!("CG_SETJMP");
    let report = unchanged_under(&["--func", "*setjmp*", "--func", "*longjmp*"], program, &[]);
    let list = probed(&report);
    assert_eq!(
        probed_named(&list, "_setjmp")["entry_only_reason"],
        "uses_return_address"
    );
    // It returns (four times for main's one call; glibc's start calls it too): counted at
    // entry, with no time.
    let setjmp = function_entry(&report, "_setjmp");
    assert!(setjmp["calls"].as_u64() >= Some(1), "{setjmp:#}");
    assert_eq!(setjmp["cpu_time_s"], 0.0, "{setjmp:#}");
    assert_eq!(setjmp["partial"], false, "{setjmp:#}");
}

/// Ctrl-C while a thousand probes are being attached (on the slow one-perf-event-per-probe
/// path, so that attaching lasts long enough to be interrupted) stops attaching: cg-trace
/// exits 128 + SIGINT, says nothing was traced, writes no report, and never starts the
/// command.
#[test]
fn sigint_while_attaching_stops_before_anything_is_traced() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mut child = Command::new(bin("cg-trace"))
        .args(["--source", "model", "--func", "cg_many_*", "-o"])
        .arg(&report)
        .arg("--")
        .arg(env!("CG_MANY"))
        .env("CG_TRACE_LOG", "cg_agent=info")
        .env("CG_TRACE_BENCH_PERF_UPROBES", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting cg-trace");
    let pid = child.id() as i32;
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let mut signalled = false;
    for line in stderr.lines() {
        let line = line.unwrap_or_default();
        if !signalled && line.contains("attaching probes to 1000 functions") {
            // SAFETY: a signal to the child we started.
            unsafe { libc::kill(pid, libc::SIGINT) };
            signalled = true;
        }
        said.push_str(&line);
        said.push('\n');
    }
    let status = child.wait().expect("waiting for cg-trace");
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(signalled, "cg-trace never said it was attaching:\n{said}");
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{said}");
    assert!(
        said.contains("interrupted by SIGINT while attaching the function probes"),
        "{said}"
    );
    assert!(said.contains("nothing was traced"), "{said}");
    assert!(!report.exists(), "a report was written");
    assert_eq!(stdout, "", "the command ran");
}

/// The path older kernels take (one perf event per probe, no uprobe_multi) probes the same
/// way: entry only where needed, exact counts, the program unchanged.
#[test]
fn the_one_perf_event_per_probe_path_is_just_as_safe() {
    require_root();
    let program = env!("CG_PRINTS_ARGC");
    let (stdout, code) = alone(program, &["a", "b"]);
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let output = Command::new(bin("cg-trace"))
        .args(["-q", "--source", "model", "--func", "*", "-o"])
        .arg(&report_path)
        .args(["--", program, "a", "b"])
        .env("CG_TRACE_BENCH_PERF_UPROBES", "1")
        .env("CG_TRACE_LOG", "cg_agent=info")
        .output()
        .expect("running cg-trace");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            output.status.code()
        ),
        (stdout, code),
        "{said}"
    );
    assert!(
        said.contains("(PerfEvent)"),
        "not the perf-event path:\n{said}"
    );
    let report: Value = read_report(&report_path);
    assert_eq!(
        report["meta"]["function_profiling"]["uprobes"]["attach_method"],
        "perf_event"
    );
    assert_adds_up(&report);
    let list = probed(&report);
    assert_eq!(probed_named(&list, "_start")["return_probe"], false);
    assert_eq!(function_entry(&report, "main")["calls"], 1);
}
