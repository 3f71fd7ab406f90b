//! Helpers for cg-trace's end-to-end tests: find the binaries, run cg-trace, read its report,
//! check that its figures add up, and drive a generated powercap tree whose counters advance
//! by a known power function of the machine's busy CPU time (the real powercap reader runs
//! against it, exactly as against `/sys/class/powercap`).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;

pub mod pprof;

/// `target/<profile>` of the build that produced this test binary.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// A binary of the workspace, built next to the tests (`cargo xtask test` builds them first).
pub fn bin(name: &str) -> PathBuf {
    if name == "cg-trace"
        && let Ok(path) = std::env::var("CG_TRACE_BIN")
    {
        return PathBuf::from(path);
    }
    let path = target_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (`cargo build`; `cargo xtask test` does it)",
        path.display()
    );
    path
}

/// Panics with a clear message when not root: these tests load eBPF programs for real.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        panic!(
            "the end-to-end tests load eBPF programs and must run as root: `sudo -E cargo xtask test`"
        );
    }
}

/// A finished cg-trace run.
#[derive(Debug)]
pub struct Run {
    pub output: Output,
    pub report: Option<Value>,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// The report; panics with cg-trace's stderr when there is none.
    pub fn report(&self) -> &Value {
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report; cg-trace said:\n{}", self.stderr()))
    }
}

/// Runs cg-trace with `args`, writing its report into a temp dir (`-o` is added).
pub fn cg_trace(args: &[&str]) -> Run {
    cg_trace_with_env(args, &[])
}

/// Runs cg-trace with exactly these arguments (no `-o` added, stdin `/dev/null`), for tests
/// of what it prints and writes itself.
pub fn cg_trace_as_given(args: &[&str]) -> Output {
    Command::new(bin("cg-trace"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running cg-trace")
}

/// [`cg_trace`] with these environment variables set for cg-trace.
pub fn cg_trace_with_env(args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().expect("tempdir");
    let report_path = dir.path().join("report.json");
    let (before, after) = match args.iter().position(|a| *a == "--") {
        Some(i) => (&args[..i], &args[i..]),
        None => (args, &[][..]),
    };
    let output = Command::new(bin("cg-trace"))
        .envs(env.iter().copied())
        .args(before)
        .arg("-o")
        .arg(&report_path)
        .args(after)
        .output()
        .expect("running cg-trace");
    let report = fs::read_to_string(&report_path)
        .ok()
        .map(|text| parse_report(&text));
    Run { output, report }
}

/// `docs/report.schema.json`, the report's contract in machine-readable form.
pub const REPORT_SCHEMA: &str = include_str!("../../docs/report.schema.json");

/// The schema, compiled once per test binary.
fn report_validator() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        let schema: Value =
            serde_json::from_str(REPORT_SCHEMA).expect("docs/report.schema.json is JSON");
        jsonschema::draft202012::new(&schema).expect("docs/report.schema.json is a valid schema")
    })
}

/// Where `report` breaks `docs/report.schema.json`, one line per error (empty: it validates).
pub fn schema_errors(report: &Value) -> Vec<String> {
    report_validator()
        .iter_errors(report)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

/// Panics, naming every error, when `report` does not validate against the schema.
pub fn assert_valid_report(report: &Value) {
    let errors = schema_errors(report);
    assert!(
        errors.is_empty(),
        "the report breaks docs/report.schema.json:\n{}",
        errors.join("\n")
    );
}

/// Parses a cg-trace report and validates it against the schema: every test reads reports
/// through this (or [`read_report`]), so every report the tests produce is checked.
pub fn parse_report(text: &str) -> Value {
    let report: Value = serde_json::from_str(text).expect("the report is valid JSON");
    assert_valid_report(&report);
    report
}

/// [`parse_report`] of the file at `path`.
pub fn read_report(path: &Path) -> Value {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|err| panic!("no report at {}: {err}", path.display()));
    parse_report(&text)
}

/// The pid of the report's root process (the wrapped command or an attached pid).
pub fn root_pid(report: &Value) -> u32 {
    report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["root"] == true)
        .and_then(|p| p["pid"].as_u64())
        .expect("a root process") as u32
}

/// A number from the report, by JSON pointer.
pub fn num(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("report has no number at {pointer}"))
}

/// The process entry with this pid.
pub fn process(report: &Value, pid: u32) -> &Value {
    report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
        .unwrap_or_else(|| panic!("pid {pid} not in the report: {:#}", report["processes"]))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + a.abs().max(b.abs()))
}

/// Checks the report's invariants: per domain and in total, targets + other + idle equal the
/// measured energy; the processes add up to the attributed energy; totals are the sum of the
/// top-level domains; nothing is negative; no figure was found not to be finite (cg-trace
/// names such a figure in its quality notes, and the JSON would hold `null` there).
pub fn assert_adds_up(report: &Value) {
    if let Some(notes) = report["meta"]["measurement_quality"]["notes"].as_array() {
        for note in notes {
            assert!(
                !note
                    .as_str()
                    .unwrap_or("")
                    .starts_with("not a finite figure"),
                "{note}"
            );
        }
    }
    let totals = &report["totals"];
    let domains = totals["domains"].as_object().expect("totals.domains");
    assert!(!domains.is_empty(), "no domains");
    let mut top_sum = 0.0;
    for (name, d) in domains {
        let parts =
            num(d, "/attributed_energy_j") + num(d, "/other_energy_j") + num(d, "/idle_energy_j");
        assert!(
            close(parts, num(d, "/energy_j")),
            "domain {name}: targets + other + idle = {parts} != measured {}",
            num(d, "/energy_j")
        );
        for field in [
            "energy_j",
            "attributed_energy_j",
            "other_energy_j",
            "idle_energy_j",
        ] {
            assert!(
                num(d, &format!("/{field}")) >= -1e-9,
                "domain {name}: negative {field}"
            );
        }
        // Per-process figures of this domain add up to its attributed energy.
        let per_process: f64 = report["processes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["domains"][name.as_str()]["energy_j"].as_f64())
            .sum();
        assert!(
            close(per_process, num(d, "/attributed_energy_j")),
            "domain {name}: processes sum to {per_process}, attributed {}",
            num(d, "/attributed_energy_j")
        );
        if d["top_level"].as_bool() == Some(true) {
            top_sum += num(d, "/energy_j");
        }
    }
    assert!(
        close(top_sum, num(totals, "/energy_j")),
        "totals.energy_j is not the sum of top-level domains"
    );
    let parts = num(totals, "/attributed_energy_j")
        + num(totals, "/other_energy_j")
        + num(totals, "/idle_energy_j");
    assert!(
        close(parts, num(totals, "/energy_j")),
        "totals: {parts} != {}",
        num(totals, "/energy_j")
    );
    for p in report["processes"].as_array().unwrap() {
        assert_threads_add_up(p);
    }
    if let Some(points) = report["timeseries"].as_array() {
        for (i, point) in points.iter().enumerate() {
            // Schema 1.5: each point's processes add up to its attributed energy.
            let Some(processes) = point["processes"].as_array() else {
                continue;
            };
            let sum: f64 = processes.iter().map(|p| num(p, "/energy_j")).sum();
            assert!(
                close(sum, num(point, "/attributed_energy_j")),
                "timeseries[{i}]: processes sum to {sum}, attributed {}",
                num(point, "/attributed_energy_j")
            );
        }
    }
    let processes: f64 = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| num(p, "/energy_j"))
        .sum();
    assert!(
        close(processes, num(totals, "/attributed_energy_j")),
        "processes sum to {processes}, attributed {}",
        num(totals, "/attributed_energy_j")
    );
}

/// A process's `threads` (schema 1.5) add up to it: CPU time, energy, and energy per domain.
pub fn assert_threads_add_up(process: &Value) {
    let Some(threads) = process["threads"].as_array() else {
        return;
    };
    let pid = &process["pid"];
    let sum = |pointer: &str| -> f64 {
        threads
            .iter()
            .filter_map(|t| t.pointer(pointer)?.as_f64())
            .sum()
    };
    for field in ["cpu_time_s", "energy_j"] {
        let pointer = format!("/{field}");
        assert!(
            close(sum(&pointer), num(process, &pointer)),
            "pid {pid}: threads' {field} sum to {}, the process has {}: {threads:#?}",
            sum(&pointer),
            num(process, &pointer)
        );
    }
    for (name, d) in process["domains"].as_object().expect("domains") {
        let pointer = format!("/domains/{name}/energy_j");
        assert!(
            close(sum(&pointer), num(d, "/energy_j")),
            "pid {pid}, domain {name}: threads sum to {}, the process has {}",
            sum(&pointer),
            num(d, "/energy_j")
        );
    }
}

/// Busy CPU seconds of the whole machine so far (all CPUs, from /proc/stat).
pub fn busy_cpu_seconds() -> f64 {
    let stat = fs::read_to_string("/proc/stat").expect("/proc/stat");
    let line = stat.lines().next().expect("cpu line");
    let fields: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7];
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    busy / hz
}

/// Samples the machine's busy CPUs (from `/proc/stat`) at a fixed period in the background
/// until [`BusySampler::finish`].
pub struct BusySampler {
    samples: Arc<std::sync::Mutex<Vec<f64>>>,
    _ticker: Ticker,
}

/// Busy CPUs per sampling period.
pub struct BusyLevels(Vec<f64>);

impl BusySampler {
    pub fn start(period: Duration) -> Self {
        let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = samples.clone();
        let ticker = Ticker::start(period, move |dt_s, busy_s| {
            if dt_s > 0.0 {
                sink.lock().unwrap().push(busy_s / dt_s);
            }
        });
        BusySampler {
            samples,
            _ticker: ticker,
        }
    }

    pub fn finish(self) -> BusyLevels {
        let samples = self.samples.lock().unwrap().clone();
        BusyLevels(samples)
    }
}

impl BusyLevels {
    /// The standard deviation of the busy level, in CPUs (0 with fewer than 2 samples).
    pub fn spread_cpus(&self) -> f64 {
        let n = self.0.len() as f64;
        if n < 2.0 {
            return 0.0;
        }
        let mean = self.0.iter().sum::<f64>() / n;
        (self.0.iter().map(|b| (b - mean).powi(2)).sum::<f64>() / n).sqrt()
    }
}

/// CPU seconds the kernel has accounted to the main thread of `pid` (its `sum_exec_runtime`,
/// from `/proc/PID/schedstat`): the ground truth tests compare cg-trace with.
pub fn task_cpu_s(pid: u32) -> Option<f64> {
    let text = fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let ns: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}

/// How fast a running process is using CPU: CPU seconds per wall second over `window`.
pub fn cpu_rate(pid: u32, window: Duration) -> f64 {
    let (cpu0, t0) = (task_cpu_s(pid).unwrap_or(0.0), Instant::now());
    std::thread::sleep(window);
    let cpu1 = task_cpu_s(pid).unwrap_or(0.0);
    (cpu1 - cpu0) / t0.elapsed().as_secs_f64()
}

/// The power function of a [`FakePowercap`] domain: `idle_w + k_w_per_cpu * busy CPUs`.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub idle_w: f64,
    pub k_w_per_cpu: f64,
}

/// A fault a fake energy counter is told to show mid-run (see [`FakePowercap::fault_command`]):
/// what real counters have been seen to do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// The counter steps back by this many joules, then counts on from there.
    StepBack(f64),
    /// The counter jumps ahead by this many joules.
    Jump(f64),
    /// The counter stops (it neither counts nor moves) for this long.
    Freeze(Duration),
    /// The counter's file is deleted and created anew, with the same count (powercap only).
    Recreate,
    /// The counter's file is deleted for good; the counter behind it stops (powercap only).
    Delete,
    /// Reads fail for this long (the file holds no number); the counter goes on counting.
    Unreadable(Duration),
}

impl Fault {
    /// The line a fault file holds for `counter` (a zone directory or a perf event).
    pub fn line(&self, counter: &str) -> String {
        match self {
            Fault::StepBack(j) => format!("{counter} step-back {j}"),
            Fault::Jump(j) => format!("{counter} jump {j}"),
            Fault::Freeze(d) => format!("{counter} freeze {}", d.as_millis()),
            Fault::Recreate => format!("{counter} recreate"),
            Fault::Delete => format!("{counter} delete"),
            Fault::Unreadable(d) => format!("{counter} unreadable {}", d.as_millis()),
        }
    }

    fn parse(line: &str) -> Option<(String, Fault)> {
        let mut words = line.split_whitespace();
        let counter = words.next()?.to_string();
        let kind = words.next()?;
        let number = words.next().and_then(|w| w.parse::<f64>().ok());
        let ms = || number.map(|n| Duration::from_millis(n as u64));
        let fault = match kind {
            "step-back" => Fault::StepBack(number?),
            "jump" => Fault::Jump(number?),
            "freeze" => Fault::Freeze(ms()?),
            "recreate" => Fault::Recreate,
            "delete" => Fault::Delete,
            "unreadable" => Fault::Unreadable(ms()?),
            _ => return None,
        };
        Some((counter, fault))
    }
}

/// Takes the faults asked for in `path` (one per line), removing the file.
fn take_faults(path: &Path) -> Vec<(String, Fault)> {
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    let _ = fs::remove_file(path);
    text.lines().filter_map(Fault::parse).collect()
}

/// A shell command that asks a fake's counter for `fault`: written aside and renamed into
/// place, so that the fake never reads half a line.
fn fault_shell(fault_file: &Path, counter: &str, fault: Fault) -> String {
    let tmp = fault_file.with_extension("tmp");
    format!(
        "printf '%s\\n' '{}' > '{}' && mv '{}' '{}'",
        fault.line(counter),
        tmp.display(),
        tmp.display(),
        fault_file.display()
    )
}

/// One fake counter's state: its energy, and the fault it is showing.
#[derive(Clone, Copy, Debug, Default)]
struct FakeCounter {
    energy_j: f64,
    frozen_until: Option<Instant>,
    unreadable_until: Option<Instant>,
    /// Its file was deleted for good ([`Fault::Delete`]): nothing is written any more.
    deleted: bool,
}

/// What a fake must do to a counter's file after a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileChange {
    None,
    Recreate,
    Delete,
}

impl FakeCounter {
    /// Applies `fault` now; returns what must happen to the counter's file.
    fn apply(&mut self, fault: Fault) -> FileChange {
        let now = Instant::now();
        match fault {
            Fault::StepBack(j) => self.energy_j = (self.energy_j - j).max(0.0),
            Fault::Jump(j) => self.energy_j += j,
            Fault::Freeze(d) => self.frozen_until = Some(now + d),
            Fault::Recreate => return FileChange::Recreate,
            Fault::Delete => {
                self.deleted = true;
                return FileChange::Delete;
            }
            Fault::Unreadable(d) => self.unreadable_until = Some(now + d),
        }
        FileChange::None
    }

    /// Counts `joules` more unless frozen; whether its file holds a number now.
    fn count(&mut self, joules: f64) -> bool {
        let now = Instant::now();
        if self.frozen_until.is_some_and(|t| now < t) {
            return true;
        }
        self.frozen_until = None;
        self.energy_j += joules;
        self.unreadable_until.is_none_or(|t| now >= t)
    }
}

/// A generated powercap tree (`package-0` with `core` inside, and `dram`) whose energy
/// counters a background thread advances as `Linear` functions of the machine's busy CPUs,
/// wrapping at `max_energy_range_uj`. Values are rewritten in place, zero-padded to a fixed
/// width (cg-trace keeps `energy_uj` open and re-reads it from offset 0, as sysfs allows).
/// A test can make a counter misbehave mid-run with [`FakePowercap::fault_command`].
pub struct FakePowercap {
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakePowercap {
    pub const ZONES: [(&'static str, &'static str); 3] = [
        ("intel-rapl:0", "package-0"),
        ("intel-rapl:0:0", "core"),
        ("intel-rapl:0:1", "dram"),
    ];

    pub fn start(package: Linear, core: Linear, dram: Linear, max_energy_range_uj: u64) -> Self {
        Self::start_from(package, core, dram, max_energy_range_uj, 0)
    }

    /// As [`FakePowercap::start`], with every counter starting at `start_uj` (just below the
    /// range, to see it wrap soon).
    pub fn start_from(
        package: Linear,
        core: Linear,
        dram: Linear,
        max_energy_range_uj: u64,
        start_uj: u64,
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("intel-rapl")).unwrap();
        for (zone, name) in Self::ZONES {
            let d = dir.path().join(zone);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("name"), format!("{name}\n")).unwrap();
            fs::write(
                d.join("max_energy_range_uj"),
                format!("{max_energy_range_uj}\n"),
            )
            .unwrap();
            fs::write(d.join("enabled"), "1\n").unwrap();
        }
        use std::os::unix::fs::FileExt;
        let paths: Vec<PathBuf> = Self::ZONES
            .iter()
            .map(|(zone, _)| dir.path().join(zone).join("energy_uj"))
            .collect();
        let mut files: Vec<fs::File> = paths
            .iter()
            .map(|path| {
                fs::write(path, format!("{start_uj:020}\n")).unwrap();
                fs::OpenOptions::new().write(true).open(path).unwrap()
            })
            .collect();
        let faults = dir.path().join("faults");
        // What `energy_uj` holds: the count in µJ, wrapped, or no number while unreadable.
        let text = move |counter: &FakeCounter, readable: bool| {
            if readable {
                let value = ((counter.energy_j * 1e6) as u64)
                    % max_energy_range_uj.saturating_add(1).max(1);
                format!("{value:020}\n")
            } else {
                format!("{:>20}\n", "not-a-number")
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let functions = [package, core, dram];
            let mut counters = [FakeCounter {
                energy_j: start_uj as f64 / 1e6,
                ..FakeCounter::default()
            }; 3];
            let mut last_busy = busy_cpu_seconds();
            let mut last = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                let busy = busy_cpu_seconds();
                let dt = last.elapsed().as_secs_f64();
                last = Instant::now();
                let busy_s = (busy - last_busy).max(0.0);
                last_busy = busy;
                for (zone, fault) in take_faults(&faults) {
                    let Some(i) = Self::ZONES.iter().position(|(z, _)| *z == zone) else {
                        continue;
                    };
                    match counters[i].apply(fault) {
                        FileChange::None => {}
                        // Gone and back: a new file (a new inode) under the same name, with
                        // the same count (the hardware counter goes on).
                        FileChange::Recreate => {
                            let tmp = paths[i].with_extension("new");
                            fs::write(&tmp, text(&counters[i], true)).unwrap();
                            fs::remove_file(&paths[i]).unwrap();
                            fs::rename(&tmp, &paths[i]).unwrap();
                            files[i] = fs::OpenOptions::new().write(true).open(&paths[i]).unwrap();
                        }
                        FileChange::Delete => fs::remove_file(&paths[i]).unwrap(),
                    }
                }
                for (i, file) in files.iter().enumerate() {
                    if counters[i].deleted {
                        continue;
                    }
                    let f = functions[i];
                    let readable = counters[i].count(f.idle_w * dt + f.k_w_per_cpu * busy_s);
                    file.write_all_at(text(&counters[i], readable).as_bytes(), 0)
                        .unwrap();
                }
            }
        });
        FakePowercap {
            dir,
            stop,
            thread: Some(thread),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// A shell command that makes zone `zone` (`intel-rapl:0`) show `fault` (the fake picks
    /// it up within 5 ms): run it from the traced command, so that it happens mid-run.
    pub fn fault_command(&self, zone: &str, fault: Fault) -> String {
        fault_shell(&self.dir.path().join("faults"), zone, fault)
    }
}

impl Drop for FakePowercap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A background process that the test kills when dropped.
pub struct Background(pub std::process::Child);

impl Background {
    pub fn spawn(program: &Path, args: &[&str]) -> Self {
        Background(
            Command::new(program)
                .args(args)
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawning a workload"),
        )
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Calls `tick(dt_s, busy_cpu_s)` every `period` from a background thread until dropped:
/// `busy_cpu_s` is the machine's busy CPU time during the last `dt_s` seconds.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    fn start(period: Duration, mut tick: impl FnMut(f64, f64) + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut last_busy = busy_cpu_seconds();
            let mut last = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(period);
                let busy = busy_cpu_seconds();
                let dt = last.elapsed().as_secs_f64();
                last = Instant::now();
                let busy_s = (busy - last_busy).max(0.0);
                last_busy = busy;
                tick(dt, busy_s);
            }
        });
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A generated perf event source tree (`power` PMU with energy-pkg, energy-cores and
/// energy-ram on CPU 0, scale 2^-32 J) and the counter files that cg-trace reads through its
/// hidden `--perf-counters-from` option; a background thread advances the counters as
/// `Linear` functions of the machine's busy CPUs, in place (cg-trace keeps them open). A test
/// can make a counter misbehave mid-run with [`FakePerf::fault_command`].
pub struct FakePerf {
    // Declared first so that it stops before the directory goes.
    _ticker: Option<Ticker>,
    dir: tempfile::TempDir,
}

impl FakePerf {
    pub const EVENTS: [(&'static str, u32); 3] =
        [("energy-pkg", 2), ("energy-cores", 1), ("energy-ram", 3)];
    const COUNTS_PER_J: f64 = 4_294_967_296.0;

    pub fn start(package: Linear, cores: Linear, ram: Linear) -> Self {
        Self::start_from(package, cores, ram, 0.0)
    }

    /// As [`FakePerf::start`], with every counter starting at `start_j` joules.
    pub fn start_from(package: Linear, cores: Linear, ram: Linear, start_j: f64) -> Self {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let pmu = dir.path().join("sysfs/power");
        fs::create_dir_all(pmu.join("events")).unwrap();
        fs::create_dir_all(pmu.join("format")).unwrap();
        fs::write(pmu.join("type"), "23\n").unwrap();
        fs::write(pmu.join("cpumask"), "0\n").unwrap();
        fs::write(pmu.join("format/event"), "config:0-7\n").unwrap();
        let mut files = Vec::new();
        for (event, code) in Self::EVENTS {
            let e = pmu.join("events");
            fs::write(e.join(event), format!("event=0x{code:02x}\n")).unwrap();
            fs::write(
                e.join(format!("{event}.scale")),
                "2.3283064365386962890625e-10\n",
            )
            .unwrap();
            fs::write(e.join(format!("{event}.unit")), "Joules\n").unwrap();
            let c = dir.path().join("counters/power").join(event);
            fs::create_dir_all(&c).unwrap();
            let file = fs::File::create(c.join("cpu0")).unwrap();
            let count = (start_j * Self::COUNTS_PER_J) as u64;
            file.write_all_at(&count.to_ne_bytes(), 0).unwrap();
            files.push(file);
        }
        let functions = [package, cores, ram];
        let mut counters = [FakeCounter {
            energy_j: start_j,
            ..FakeCounter::default()
        }; 3];
        let faults = dir.path().join("faults");
        let ticker = Ticker::start(Duration::from_millis(5), move |dt, busy_s| {
            for (event, fault) in take_faults(&faults) {
                if let Some(i) = Self::EVENTS.iter().position(|(e, _)| *e == event) {
                    // Perf counters have no file to replace or delete.
                    let _ = counters[i].apply(fault);
                }
            }
            for (i, file) in files.iter().enumerate() {
                let f = functions[i];
                if counters[i].count(f.idle_w * dt + f.k_w_per_cpu * busy_s) {
                    let count = (counters[i].energy_j * Self::COUNTS_PER_J) as u64;
                    file.write_all_at(&count.to_ne_bytes(), 0).unwrap();
                } else {
                    // Shorter than a count: reading it fails.
                    file.set_len(0).unwrap();
                }
            }
        });
        FakePerf {
            dir,
            _ticker: Some(ticker),
        }
    }

    /// The perf PMU of the H100 cloud VM recorded in `shared/data/h100` (`sources.json`): a
    /// `power` PMU whose one event, `energy-psys`, opens and reads but holds `count` forever.
    pub fn still_psys(count: u64) -> Self {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let pmu = dir.path().join("sysfs/power");
        fs::create_dir_all(pmu.join("events")).unwrap();
        fs::create_dir_all(pmu.join("format")).unwrap();
        fs::write(pmu.join("type"), "23\n").unwrap();
        fs::write(pmu.join("cpumask"), "0\n").unwrap();
        fs::write(pmu.join("format/event"), "config:0-7\n").unwrap();
        let events = pmu.join("events");
        fs::write(events.join("energy-psys"), "event=0x05\n").unwrap();
        fs::write(
            events.join("energy-psys.scale"),
            "2.3283064365386962890625e-10\n",
        )
        .unwrap();
        fs::write(events.join("energy-psys.unit"), "Joules\n").unwrap();
        let c = dir.path().join("counters/power/energy-psys");
        fs::create_dir_all(&c).unwrap();
        let file = fs::File::create(c.join("cpu0")).unwrap();
        file.write_all_at(&count.to_ne_bytes(), 0).unwrap();
        FakePerf { dir, _ticker: None }
    }

    /// `--perf-root`.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("sysfs")
    }

    /// `--perf-counters-from`.
    pub fn counters(&self) -> PathBuf {
        self.dir.path().join("counters")
    }

    /// A shell command that makes event `event` (`energy-pkg`) show `fault` (not
    /// [`Fault::Recreate`] or [`Fault::Delete`]), as [`FakePowercap::fault_command`].
    pub fn fault_command(&self, event: &str, fault: Fault) -> String {
        fault_shell(&self.dir.path().join("faults"), event, fault)
    }
}

/// The forms of power log a [`FakePowerLog`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogForm {
    /// `time,id,pm1,pm2,sum` with local times (`2026-02-04 10:15:23.150`), as a WattsUp logger.
    PmSum,
    /// `time,watts` with seconds since the epoch.
    EpochWatts,
}

/// A power meter's log, written live by a background thread: one sample every `period` of
/// `idle_w + k_w_per_cpu x busy CPUs` over the last period, stamped with the wall-clock time;
/// lines are written in two pieces, as a slow logger does. `pause` stops the logger for a
/// while after a delay, to make a gap.
pub struct FakePowerLog {
    // Declared first so that it stops before the directory goes.
    _ticker: Ticker,
    dir: tempfile::TempDir,
}

impl FakePowerLog {
    pub fn start(
        form: LogForm,
        power: Linear,
        period: Duration,
        pause: Option<(Duration, Duration)>,
    ) -> Self {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("power.csv");
        let mut file = fs::File::create(&path).unwrap();
        let header = match form {
            LogForm::PmSum => "time,id,pm1,pm2,sum\n",
            LogForm::EpochWatts => "time,watts\n",
        };
        file.write_all(header.as_bytes()).unwrap();
        let started = Instant::now();
        let mut id = 0u64;
        let ticker = Ticker::start(period, move |dt, busy_s| {
            if let Some((after, length)) = pause {
                let t = started.elapsed();
                if t > after && t < after + length {
                    return;
                }
            }
            let watts = power.idle_w + power.k_w_per_cpu * busy_s / dt.max(1e-9);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            let line = match form {
                LogForm::PmSum => format!(
                    "{},{id},{:.3},{:.3},{:.3}\n",
                    local_time_ms(now),
                    watts * 0.4,
                    watts * 0.6,
                    watts
                ),
                LogForm::EpochWatts => format!("{:.3},{watts:.3}\n", now.as_secs_f64()),
            };
            id += 1;
            let (a, b) = line.split_at(line.len() / 2);
            file.write_all(a.as_bytes()).unwrap();
            file.flush().unwrap();
            file.write_all(b.as_bytes()).unwrap();
            file.flush().unwrap();
        });
        FakePowerLog {
            dir,
            _ticker: ticker,
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("power.csv")
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm` in local time.
fn local_time_ms(since_epoch: Duration) -> String {
    // SAFETY: localtime_r fills the struct we own.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let t = since_epoch.as_secs() as libc::time_t;
        libc::localtime_r(&t, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        since_epoch.subsec_millis()
    )
}

/// The source of the NVML stand-in library.
pub fn fake_nvml_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fake-nvml/fake_nvml.c")
}

/// CLOCK_MONOTONIC in nanoseconds (what the NVML stand-in's `at_ns` is in).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Builds the NVML stand-in into `dir` (as `libnvidia-ml.so.1`) with the system C compiler.
pub fn build_fake_nvml(dir: &Path) -> PathBuf {
    let lib = dir.join("libnvidia-ml.so.1");
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&lib)
        .arg(fake_nvml_source())
        .output()
        .expect("a C compiler (cc) builds the NVML stand-in: apt-get install gcc");
    assert!(
        output.status.success(),
        "building the NVML stand-in failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    lib
}

/// What a [`FakeNvml`] GPU does.
#[derive(Clone, Debug)]
pub struct GpuScript {
    pub name: &'static str,
    pub uuid: &'static str,
    /// Constant board power; the energy counter advances with it.
    pub power_w: f64,
    pub util_pct: u32,
    /// (pid, SM utilisation %) reported in per-process samples.
    pub processes: Vec<(u32, u32)>,
    /// The GPU falls off the bus after this long.
    pub lost_after: Option<Duration>,
}

/// The NVML stand-in with one scripted GPU whose energy counter, per-process samples (every
/// 20 ms) and state a background thread keeps current.
pub struct FakeNvml {
    // Declared first so that it stops before the directory goes.
    _ticker: Ticker,
    dir: tempfile::TempDir,
    lib: PathBuf,
}

impl FakeNvml {
    pub fn start(gpu: GpuScript) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = build_fake_nvml(dir.path());
        let script = dir.path().join("fake-nvml.script");
        let started_ns = monotonic_ns();
        let power_mw = (gpu.power_w * 1e3) as u64;
        let write = move || {
            // The counter's value now, and when now is: the stand-in advances it from there
            // at the board's power until the next write, so a writer the machine keeps
            // waiting does not freeze it. (In whole millijoules from the same instant, so the
            // stand-in's advance never overshoots the next value written.)
            let at_ns = monotonic_ns();
            let elapsed = Duration::from_nanos(at_ns - started_ns);
            let energy_mj = (u128::from(power_mw) * elapsed.as_nanos() / 1_000_000_000) as u64;
            let mut text = format!(
                "devices 1\nname 0 {}\nuuid 0 {}\nset 0 energy_mj={} at_ns={at_ns} power_mw={power_mw} \
                 temp_c=55 util_gpu={} mem_total=17179869184 mem_used=1073741824 \
                 power_limit_mw=300000\n",
                gpu.name,
                gpu.uuid,
                energy_mj + 1_000_000,
                gpu.util_pct
            );
            // Samples every 20 ms of the last second, timestamps in microseconds.
            let now_us = elapsed.as_micros() as u64 + 1_000_000;
            for k in 0..50u64 {
                let ts = now_us.saturating_sub(k * 20_000);
                for (pid, sm) in &gpu.processes {
                    text.push_str(&format!("sample 0 pid={pid} ts={ts} sm={sm}\n"));
                }
            }
            for (pid, _) in &gpu.processes {
                text.push_str(&format!("running 0 {pid} compute\n"));
            }
            if gpu.lost_after.is_some_and(|after| elapsed >= after) {
                text.push_str("error 0 all GPU_IS_LOST\n");
            }
            let tmp = script.with_extension("tmp");
            fs::write(&tmp, text).unwrap();
            fs::rename(&tmp, &script).unwrap();
        };
        write();
        let ticker = Ticker::start(Duration::from_millis(10), move |_, _| write());
        FakeNvml {
            dir,
            lib,
            _ticker: ticker,
        }
    }

    /// `--nvml-lib`.
    pub fn lib(&self) -> &Path {
        &self.lib
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A recorded GPU for [`NvmlReplay`]: a poll log as `tests/fake-nvml/recordings/` holds.
pub fn nvml_recording(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fake-nvml/recordings")
        .join(name)
}

/// What a [`NvmlReplay`] plays.
#[derive(Clone, Debug)]
pub struct ReplayScript {
    /// The poll log (JSON lines, see `tests/fake-nvml/recordings/README.md`).
    pub recording: PathBuf,
    /// The stretch of it to play, seconds from its first poll; it plays in real time.
    pub from_s: f64,
    pub to_s: f64,
    pub name: &'static str,
    pub uuid: &'static str,
    /// Recorded pid -> the test's pid. Recorded pids not named here become pids no process
    /// can have (above the kernel's largest, 2^22), as processes foreign to the test.
    pub pids: Vec<(u32, u32)>,
    /// NVIDIA's accounting stats recorded after the run (`trace2-accounting.json`; or as they
    /// read while the processes still run, `trace2-accounting-running.json`), served with
    /// accounting mode on; `None`: accounting mode off.
    pub accounting: Option<PathBuf>,
}

/// The NVML stand-in playing a recorded GPU: every poll of the stretch is a frame the
/// stand-in switches to when its time comes, per-process samples appear when their
/// (shifted) timestamps pass, as a real GPU's buffer fills.
pub struct NvmlReplay {
    dir: tempfile::TempDir,
    lib: PathBuf,
}

/// A pid that no process can have: the kernel's pids stay below 2^22.
pub const FOREIGN_PID_BASE: u32 = 1 << 23;

impl NvmlReplay {
    pub fn start(script: &ReplayScript) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = build_fake_nvml(dir.path());
        let text = fs::read_to_string(&script.recording).expect("the recording");
        let polls: Vec<Value> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).expect("a recorded poll"))
            .collect();
        let t0 = polls[0]["t"].as_f64().expect("t");
        let map = |pid: u64| {
            let pid = pid as u32;
            script
                .pids
                .iter()
                .find(|(recorded, _)| *recorded == pid)
                .map_or(FOREIGN_PID_BASE + pid, |&(_, ours)| ours)
        };
        let start_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let origin_us = ((t0 + script.from_s) * 1e6) as i64;
        let mut out = format!(
            "devices 1\nname 0 {}\nuuid 0 {}\nset 0 power_limit_mw=700000 \
             mem_total=85520809984\nreplay_start_us {start_us}\n",
            script.name, script.uuid
        );
        let mut samples = Vec::new();
        for poll in &polls {
            let t = poll["t"].as_f64().unwrap() - t0;
            for s in poll["samples"].as_array().unwrap() {
                let ts = s[1].as_i64().unwrap();
                // Samples from a little before the stretch, as the driver's buffer holds.
                let shifted = start_us as i64 + ts - origin_us;
                if shifted > 0 && t <= script.to_s && t >= script.from_s - 2.0 {
                    samples.push(format!(
                        "sample 0 pid={} ts={shifted} sm={} mem={}\n",
                        map(s[0].as_u64().unwrap()),
                        s[2],
                        s[3]
                    ));
                }
            }
            if t < script.from_s || t > script.to_s {
                continue;
            }
            let running: Vec<String> = poll["running"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| map(p.as_u64().unwrap()).to_string())
                .collect();
            out.push_str(&format!(
                "frame 0 t_us={} energy_mj={} power_mw={} util_gpu={} util_mem={} temp_c={} \
                 mem_used={} running={}\n",
                ((t - script.from_s) * 1e6) as u64,
                poll["energy_mj"],
                poll["power_mw"],
                poll["util_gpu"],
                poll["util_mem"],
                poll["temp_c"],
                poll["mem_used"],
                running.join(",")
            ));
        }
        for sample in samples {
            out.push_str(&sample);
        }
        if let Some(path) = &script.accounting {
            // Not a report: NVIDIA's accounting stats as pynvml recorded them.
            let stats: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64;
            for p in stats["pids"].as_array().unwrap() {
                // A process still running: its start this many seconds before the replay.
                let start_us = p["start_age_s"].as_u64().map_or_else(
                    || p["start_us"].as_u64().unwrap(),
                    |age_s| now_us - age_s * 1_000_000,
                );
                out.push_str(&format!(
                    "accounting 0 pid={} util={} mem={} max_mem={} time_ms={} start_us={} \
                     running={}\n",
                    map(p["pid"].as_u64().unwrap()),
                    p["gpu_util_pct"],
                    p["mem_util_pct"],
                    p["max_mem_bytes"],
                    p["time_ms"],
                    start_us,
                    p["running"]
                ));
            }
        }
        let path = dir.path().join("fake-nvml.script");
        let tmp = path.with_extension("tmp");
        fs::write(&tmp, out).unwrap();
        fs::rename(&tmp, &path).unwrap();
        NvmlReplay { dir, lib }
    }

    /// `--nvml-lib`.
    pub fn lib(&self) -> &Path {
        &self.lib
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// `setpriv` to nobody, as a user without sudo runs a program: no supplementary groups, no
/// capabilities inherited or left in the bounding set. Add the program and its arguments.
pub fn as_nobody() -> std::process::Command {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ]);
    cmd
}
