//! Helpers for cg-trace's end-to-end tests: find the binaries, run cg-trace, read its report,
//! check that its figures add up, and drive a generated powercap tree whose counters advance
//! by a known power function of the machine's busy CPU time (the real powercap reader runs
//! against it, exactly as against `/sys/class/powercap`).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde_json::Value;

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
    let dir = tempfile::tempdir().expect("tempdir");
    let report_path = dir.path().join("report.json");
    let (before, after) = match args.iter().position(|a| *a == "--") {
        Some(i) => (&args[..i], &args[i..]),
        None => (args, &[][..]),
    };
    let output = Command::new(bin("cg-trace"))
        .args(before)
        .arg("-o")
        .arg(&report_path)
        .args(after)
        .output()
        .expect("running cg-trace");
    let report = fs::read_to_string(&report_path)
        .ok()
        .map(|text| serde_json::from_str(&text).expect("the report is valid JSON"));
    Run { output, report }
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
/// top-level domains; nothing is negative.
pub fn assert_adds_up(report: &Value) {
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

/// The power function of a [`FakePowercap`] domain: `idle_w + k_w_per_cpu * busy CPUs`.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    pub idle_w: f64,
    pub k_w_per_cpu: f64,
}

/// A generated powercap tree (`package-0` with `core` inside, and `dram`) whose energy
/// counters a background thread advances as `Linear` functions of the machine's busy CPUs,
/// wrapping at `max_energy_range_uj`.
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
            fs::write(d.join("energy_uj"), "0\n").unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let root = dir.path().to_path_buf();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let functions = [package, core, dram];
            let mut energy_uj = [0f64; 3];
            let mut last_busy = busy_cpu_seconds();
            let mut last = Instant::now();
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                let busy = busy_cpu_seconds();
                let dt = last.elapsed().as_secs_f64();
                last = Instant::now();
                let busy_s = (busy - last_busy).max(0.0);
                last_busy = busy;
                for (i, (zone, _)) in Self::ZONES.iter().enumerate() {
                    let f = functions[i];
                    energy_uj[i] += (f.idle_w * dt + f.k_w_per_cpu * busy_s) * 1e6;
                    let value = (energy_uj[i] as u64) % (max_energy_range_uj + 1);
                    let tmp = root.join(zone).join(".energy_uj.tmp");
                    fs::write(&tmp, format!("{value}\n")).unwrap();
                    fs::rename(&tmp, root.join(zone).join("energy_uj")).unwrap();
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
