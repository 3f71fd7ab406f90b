//! What polling the energy sources costs: the production reading code of each source (perf
//! counters, powercap, a growing power log, NVML through nvml-wrapper) on generated trees and
//! files, read at 1 kHz and at the default 100 ms interval, measured in this thread's CPU time.
//! Prints figures; asserts nothing. Run by `cargo xtask bench --sources`, which builds the NVML
//! stand-in and passes it as `--nvml-lib LIB`. `--only TEXT` keeps the rows whose name holds
//! TEXT (`--only "power log"`: the power-log reader alone).
//!
//! What it leaves out: the kernel's (or the driver's) cost of producing a real value, such as
//! the MSR read behind a real `energy_uj` or a real NVML query; a file read here stands in
//! for it. The NVML stand-in re-reads its script file on every call, so its figure is an upper
//! bound of nvml-wrapper's own cost plus that file read.

use std::{
    fs,
    io::Write,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use cg_agent::{
    host::HostInfo,
    sources::{
        EnergySource, ReadContext,
        meter::MeterSource,
        nvml,
        perf::{FileOpener, PerfSource},
        powercap::PowercapSource,
    },
};

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A perf event-source tree like Intel's (pkg, cores, ram, psys) and its counter files.
fn perf_fixture(dir: &Path, host: &HostInfo) -> (PathBuf, PathBuf) {
    let pmu = dir.join("sysfs/power");
    fs::create_dir_all(pmu.join("events")).unwrap();
    fs::write(pmu.join("type"), "23\n").unwrap();
    let mut packages: Vec<u32> = host.cpu_packages.clone();
    packages.sort_unstable();
    packages.dedup();
    let mask: Vec<String> = packages
        .iter()
        .filter_map(|p| host.cpus_of_package(*p).first().map(u32::to_string))
        .collect();
    fs::write(pmu.join("cpumask"), format!("{}\n", mask.join(","))).unwrap();
    for (i, event) in ["energy-cores", "energy-pkg", "energy-ram", "energy-psys"]
        .iter()
        .enumerate()
    {
        let e = pmu.join("events");
        fs::write(e.join(event), format!("event=0x{:02x}\n", i + 1)).unwrap();
        fs::write(
            e.join(format!("{event}.scale")),
            "2.3283064365386962890625e-10\n",
        )
        .unwrap();
        fs::write(e.join(format!("{event}.unit")), "Joules\n").unwrap();
        for cpu in &mask {
            let c = dir.join("counters/power").join(event);
            fs::create_dir_all(&c).unwrap();
            let f = fs::File::create(c.join(format!("cpu{cpu}"))).unwrap();
            f.write_all_at(&12345u64.to_ne_bytes(), 0).unwrap();
        }
    }
    (dir.join("sysfs"), dir.join("counters"))
}

/// A powercap tree with package, core, uncore, dram and psys zones.
fn powercap_fixture(dir: &Path) -> PathBuf {
    let root = dir.join("powercap");
    for (zone, name) in [
        ("intel-rapl:0", "package-0"),
        ("intel-rapl:0:0", "core"),
        ("intel-rapl:0:1", "uncore"),
        ("intel-rapl:0:2", "dram"),
        ("intel-rapl:1", "psys"),
    ] {
        let d = root.join(zone);
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("name"), format!("{name}\n")).unwrap();
        fs::write(d.join("energy_uj"), "123456789\n").unwrap();
        fs::write(d.join("max_energy_range_uj"), "262143328850\n").unwrap();
    }
    root
}

/// A power log that a thread appends to every 100 ms (a 10 Hz meter) until `stop`.
fn meter_fixture(dir: &Path, stop: Arc<AtomicBool>) -> PathBuf {
    let path = dir.join("power.csv");
    let mut file = fs::File::create(&path).unwrap();
    writeln!(file, "time,watts").unwrap();
    let now = wall_ns() as f64 / 1e9;
    for k in 0..100 {
        writeln!(file, "{:.3},{}", now - 10.0 + k as f64 * 0.1, 100 + k % 7).unwrap();
    }
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            let _ = writeln!(file, "{:.3},123.4", wall_ns() as f64 / 1e9);
        }
    });
    path
}

/// The NVML stand-in's script: one GPU with two processes.
fn nvml_fixture(lib: &Path) {
    let mut script = String::from(
        "devices 1\nname 0 Bench GPU\nuuid 0 GPU-bench\nset 0 energy_mj=1000000 \
         power_mw=150000 temp_c=50 util_gpu=80 mem_total=17179869184 mem_used=1073741824 \
         power_limit_mw=300000\nrunning 0 100 compute\nrunning 0 200 compute\n",
    );
    for k in 0..12 {
        script.push_str(&format!("sample 0 pid=100 ts={} sm=50\n", 1000 + k));
        script.push_str(&format!("sample 0 pid=200 ts={} sm=30\n", 1000 + k));
    }
    let dir = lib.parent().expect("the library's directory");
    fs::write(dir.join("fake-nvml.script"), script).unwrap();
}

/// Reads `sources` at `hz` for `seconds`; returns (reads, CPU ns this thread spent in them).
/// The loop's own sleeping and waking is left out: a run wakes every interval anyway.
fn poll(sources: &mut [Box<dyn EnergySource>], hz: f64, seconds: f64) -> (u64, u64) {
    let period = Duration::from_secs_f64(1.0 / hz);
    let interval_ns = period.as_nanos() as u64;
    let busy = vec![interval_ns / 2; 2];
    let started = Instant::now();
    let mut cpu_ns = 0u64;
    let mut reads = 0u64;
    let mut next = started + period;
    while started.elapsed().as_secs_f64() < seconds {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next += period;
        let cpu_before = thread_cpu_ns();
        let end = wall_ns();
        let ctx = ReadContext {
            duration_ns: interval_ns,
            busy_ns_per_cpu: &busy,
            wall_start_ns: end.saturating_sub(interval_ns),
            wall_end_ns: end,
        };
        for source in sources.iter_mut() {
            std::hint::black_box(source.read(&ctx).ok());
            std::hint::black_box(source.gpu_activity());
        }
        cpu_ns += thread_cpu_ns() - cpu_before;
        reads += 1;
    }
    (reads, cpu_ns)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let seconds: f64 = value("--seconds")
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let nvml_lib = value("--nvml-lib").map(PathBuf::from);
    let only = value("--only");
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));

    let dir = tempfile::tempdir().expect("tempdir");
    let host = HostInfo::read();
    let (perf_root, counters) = perf_fixture(dir.path(), &host);
    let powercap_root = powercap_fixture(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let log = meter_fixture(dir.path(), stop.clone());
    if let Some(lib) = &nvml_lib {
        nvml_fixture(lib);
    }

    type Opener<'a> = Box<dyn Fn() -> Vec<Box<dyn EnergySource>> + 'a>;
    let perf = || -> Box<dyn EnergySource> {
        Box::new(
            PerfSource::open(
                &perf_root,
                &host,
                &FileOpener {
                    dir: counters.clone(),
                },
            )
            .expect("perf fixture"),
        )
    };
    let powercap = || -> Box<dyn EnergySource> {
        Box::new(PowercapSource::open(&powercap_root, &host).expect("powercap fixture"))
    };
    let meter = || -> Box<dyn EnergySource> {
        Box::new(MeterSource::open(&log, Duration::ZERO).expect("meter fixture"))
    };
    let gpu = || -> Option<Box<dyn EnergySource>> {
        nvml_lib.as_ref().map(|lib| {
            Box::new(nvml::open_source(lib, None).expect("NVML stand-in")) as Box<dyn EnergySource>
        })
    };
    let mut cases: Vec<(&str, Opener)> = vec![
        ("nothing (the clock reads alone)", Box::new(Vec::new)),
        ("perf (file-backed counters)", Box::new(|| vec![perf()])),
        ("powercap (5 zones)", Box::new(|| vec![powercap()])),
        ("power log (10 Hz meter)", Box::new(|| vec![meter()])),
    ];
    if nvml_lib.is_some() {
        cases.push((
            "NVML stand-in (1 GPU)",
            Box::new(|| gpu().into_iter().collect()),
        ));
    }
    // What a run reads together: one RAPL interface (auto takes perf when it opens, else
    // powercap), the GPUs, and a power log when one is given.
    cases.push((
        "perf + power log + NVML",
        Box::new(|| {
            let mut all = vec![perf(), meter()];
            all.extend(gpu());
            all
        }),
    ));
    cases.push((
        "powercap + power log + NVML",
        Box::new(|| {
            let mut all = vec![powercap(), meter()];
            all.extend(gpu());
            all
        }),
    ));

    println!(
        "energy sources: cost of polling (this thread's CPU time; {} CPUs, {seconds} s per row)",
        host.cpu_count()
    );
    println!(
        "{:<30} {:>8} {:>8} {:>12} {:>16}  target",
        "sources", "rate", "reads", "CPU/read", "% of one core"
    );
    for (name, open) in cases.iter().filter(|(name, _)| wanted(name)) {
        for (hz, target) in [(1000.0, "<= 2 %"), (10.0, "<= 0.2 %")] {
            let mut sources = open();
            let (reads, cpu_ns) = poll(&mut sources, hz, seconds);
            println!(
                "{:<30} {:>5} Hz {:>8} {:>9.1} µs {:>14.3} %  {}",
                name,
                hz as u64,
                reads,
                cpu_ns as f64 / reads.max(1) as f64 / 1e3,
                100.0 * cpu_ns as f64 / (seconds * 1e9),
                if name.contains(" + ") { target } else { "" }
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    if wanted("power log parse") {
        parse_throughput(dir.path(), seconds);
    }
}

/// The power-log reader's throughput on a whole log read at once (a long log given after the
/// fact): both forms (epoch seconds; local times as a WattsUp logger writes them), the best of as many opens as fit in `seconds`.
fn parse_throughput(dir: &Path, seconds: f64) {
    const ROWS: usize = 100_000;
    let plain = dir.join("parse-plain.csv");
    let mut text = String::from("time,watts\n");
    for k in 0..ROWS {
        text.push_str(&format!(
            "{:.3},{}.{}\n",
            1_770_200_123.0 + k as f64 * 0.1,
            100 + k % 7,
            k % 10
        ));
    }
    fs::write(&plain, text).unwrap();
    let pm = dir.join("parse-pm-sum.csv");
    let mut text = String::from("time,id,pm1,pm2,sum\n");
    for k in 0..ROWS {
        text.push_str(&format!(
            "2026-02-04 {:02}:{:02}:{:02}.{},{k},125.3,118.7,244.{}\n",
            (k / 36_000) % 24,
            (k / 600) % 60,
            (k / 10) % 60,
            k % 10,
            k % 10
        ));
    }
    fs::write(&pm, text).unwrap();
    for (name, path) in [
        ("power log parse, time,watts", &plain),
        ("power log parse, local-time pm-sum", &pm),
    ] {
        let started = Instant::now();
        let mut best_ns = u64::MAX;
        let mut opens = 0;
        while opens < 3 || started.elapsed().as_secs_f64() < seconds {
            let cpu_before = thread_cpu_ns();
            let source = MeterSource::open(path, Duration::ZERO).expect("parse fixture");
            best_ns = best_ns.min(thread_cpu_ns() - cpu_before);
            assert_eq!(source.samples().len(), ROWS);
            opens += 1;
        }
        println!(
            "{:<34} {:>8} rows {:>9.1} ns/row (best of {opens} opens)",
            name,
            ROWS,
            best_ns as f64 / ROWS as f64
        );
    }
}
