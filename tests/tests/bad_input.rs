//! End-to-end tests of bad input: a clear error and exit 2 before anything is traced (outputs
//! that cannot be written, durations, pids that are not processes, report formats), and
//! inputs that are fine but were mishandled (`-o -` with a wrapped command, a thread id, a
//! signal during the idle calibration). Root, real binary, real eBPF. Run serially
//! (`--test-threads=1`).

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use cg_tests::{
    Background, FakePowercap, Linear, assert_valid_report, bin, cg_trace_as_given as cg, process,
    read_report, require_root,
};
use serde_json::Value;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A read-only file system (tmpfs mounted `ro`), unmounted when dropped.
struct ReadOnlyMount {
    dir: tempfile::TempDir,
}

impl ReadOnlyMount {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=64k", "cg-trace-test-ro"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(status.success(), "mounting a read-only tmpfs");
        ReadOnlyMount { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn outputs_that_cannot_be_written_are_refused_before_tracing() {
    require_root();
    let ro = ReadOnlyMount::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("taken.json")).unwrap();
    let marker = dir.path().join("ran");
    let path = |p: PathBuf| p.display().to_string();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "-o",
            path(ro.path().join("r.json")),
            "Read-only file system",
        ),
        ("-o", path(dir.path().join("taken.json")), "a directory"),
        ("-o", "/proc/r.json".into(), "/proc"),
        ("--folded", "/proc/e.folded".into(), "/proc"),
        ("--folded", path(ro.path().join("e.folded")), "Read-only"),
        ("--flamegraph", path(ro.path().join("e.svg")), "Read-only"),
        ("--flamegraph", "/proc/e.svg".into(), "/proc"),
    ];
    for (option, target, why) in &cases {
        let output = cg(&[
            "--source",
            "model",
            "-q",
            option,
            target,
            "--",
            "touch",
            marker.to_str().unwrap(),
        ]);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option} {target}: {stderr}");
        assert!(
            stderr.contains(&format!("{option}: {target}")) && stderr.contains(why),
            "{option} {target}: {stderr}"
        );
        assert!(!marker.exists(), "{option} {target}: the command ran");
    }
    // Nothing was left behind.
    assert_eq!(names_in(dir.path()), ["taken.json"]);
    assert!(names_in(ro.path()).is_empty());
    // The live view's command output too (the check comes before the view takes the
    // terminal; `script` gives it one).
    let line = format!(
        "{} --source model --tui --command-output /proc/cmd.out -- touch {}",
        bin("cg-trace").display(),
        marker.display()
    );
    let output = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux)");
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.contains("--command-output: /proc/cmd.out"),
        "{stdout}"
    );
    assert!(!marker.exists());
}

#[test]
fn report_on_stdout_keeps_the_commands_stdout_off_it() {
    require_root();
    let output = cg(&["--source", "model", "-q", "-o", "-", "--", "echo", "hello"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    // Validated below (parsed here to say what stdout held instead).
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is not the JSON report ({err}): {}",
            text(&output.stdout)
        )
    });
    assert_valid_report(&report);
    assert_eq!(report["meta"]["command"][0], "echo");
    assert!(text(&output.stderr).contains("hello\n"));
}

#[test]
fn durations_take_spans_and_absurd_ones_are_refused() {
    require_root();
    let output = cg(&["--source", "model", "-q", "--all", "--duration", "1e20"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("at most a year"), "{stderr}");
    // A span: never reached by `true`, but accepted.
    let output = cg(&["--source", "model", "-q", "--duration", "1m", "--", "true"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    // And it bounds the run like seconds do.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let output = cg(&[
        "--source",
        "model",
        "-q",
        "--all",
        "--duration",
        "700ms",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = read_report(&out);
    assert_eq!(report["meta"]["stop_reason"], "--duration reached");
}

#[test]
fn a_thread_id_is_traced_as_its_process_and_says_so() {
    require_root();
    // A process whose second thread spins while the main thread waits.
    let workload = Background::spawn(
        Path::new("python3"),
        &[
            "-c",
            "import threading\n\
             def spin():\n    x = 0\n    while True:\n        x += 1\n\
             t = threading.Thread(target=spin, daemon=True)\nt.start()\nt.join()\n",
        ],
    );
    let pid = workload.pid();
    let started = Instant::now();
    let tid = loop {
        let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(&tid) = tids.iter().find(|&&t| t != pid) {
            break tid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the workload never started its thread"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let thread_cpu_s = || {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(0.0, |ns| ns / 1e9)
    };
    let before_s = thread_cpu_s();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    // Without -q, which keeps warnings such as this one off stderr.
    let output = cg(&[
        "--source",
        "model",
        "--pid",
        &tid.to_string(),
        "--duration",
        "1.5",
        "-o",
        out.to_str().unwrap(),
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("pid {tid} is a thread of process {pid}")),
        "{stderr}"
    );
    let report: Value = read_report(&out);
    // The spinning thread's time is there: not nothing, and no more than the kernel says it
    // ran while cg-trace was up (which includes cg-trace's start, before it traced).
    let kernel_s = thread_cpu_s() - before_s;
    let cpu_s = process(&report, pid)["cpu_time_s"].as_f64().unwrap();
    assert!(
        cpu_s > 0.02 && cpu_s <= kernel_s * 1.05 + 0.01,
        "process {pid}: {cpu_s} s of CPU traced, the kernel counted {kernel_s} s for thread {tid}"
    );
}

#[test]
fn kernel_threads_are_refused_and_init_is_traced_with_a_warning() {
    require_root();
    let kthreadd = std::fs::read_to_string("/proc/2/comm").unwrap_or_default();
    assert_eq!(kthreadd.trim(), "kthreadd", "pid 2 is kthreadd on Linux");
    let output = cg(&["--source", "model", "-q", "--pid", "2", "--duration", "1"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("kernel thread") && stderr.contains("--all"),
        "{stderr}"
    );
    // Without -q, which keeps warnings off stderr.
    let output = cg(&["--source", "model", "--pid", "1", "--duration", "0.5"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("pid 1 is init"), "{stderr}");
}

#[test]
fn absurd_model_watts_and_endless_calibrations_are_refused_before_tracing() {
    // Finite numbers whose products with seconds overflow: the report had 6 nulls.
    let output = cg(&[
        "--source",
        "model",
        "--model-watts",
        "1e308:1.7e308",
        "--",
        "true",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("at most 1000000 W"), "{stderr}");
    let output = cg(&["--idle-watts", "inf", "--", "true"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    // u64::MAX ms: once calibrated for ever.
    let output = cg(&["--calibrate-ms", "18446744073709551615", "--", "true"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("at most a year"), "{stderr}");
}

#[test]
fn sigterm_during_the_calibration_exits_as_interrupted_and_says_the_command_never_ran() {
    require_root();
    // A measured source, so that the idle calibration runs before the command.
    let rapl = FakePowercap::start(
        Linear {
            idle_w: 5.0,
            k_w_per_cpu: 5.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 3.0,
        },
        Linear {
            idle_w: 1.0,
            k_w_per_cpu: 0.5,
        },
        u64::MAX / 2,
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let marker = dir.path().join("ran");
    let mut child = Command::new(bin("cg-trace"))
        .args(["--source", "powercap", "--powercap-root"])
        .arg(rapl.root())
        .args(["--calibrate-ms", "60000", "-o"])
        .arg(&out)
        .arg("--")
        .arg("touch")
        .arg(&marker)
        // The log says when the calibration has begun (a signal before it, while the probes
        // load, ends the run with no report: tests/tests/start_signals.rs).
        .env("CG_TRACE_LOG", "cg_agent=info")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("idle calibration for up to 60000 ms") {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            panic!("cg-trace ended early: {seen}");
        }
        seen.push_str(&line);
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{seen}{rest}");
    assert!(
        rest.contains("the command was never started"),
        "{seen}{rest}"
    );
    assert!(!marker.exists());
    let report: Value = read_report(&out);
    let reason = report["meta"]["stop_reason"].as_str().unwrap();
    assert!(reason.contains("never started"), "{reason}");
}

#[test]
fn the_report_format_follows_the_extension_or_format() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("run.out");
    let output = cg(&[
        "--source",
        "model",
        "-q",
        "-o",
        plain.to_str().unwrap(),
        "--",
        "true",
    ]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--format json"), "{stderr}");
    assert!(!plain.exists());
    let output = cg(&[
        "--source",
        "model",
        "-q",
        "-o",
        plain.to_str().unwrap(),
        "--format",
        "json",
        "--",
        "true",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report: Value = read_report(&plain);
    assert_eq!(report["meta"]["command"][0], "true");
    // The name given is the name written: no extension is added.
    assert_eq!(names_in(dir.path()), ["run.out"]);
}
