//! Workload for function-level tests and benchmarks: calls functions of known relative cost
//! a known number of times, so tests can check calls exactly, and times against the
//! threads' own CPU clocks.
//!
//! - C kernels (tests/c/cgfuncs.c, frame pointers): `cg_work_a` (1 unit of work per call),
//!   `cg_work_b` (2 units), `cg_recurse` (recursive, 1 unit per level), `cg_thread_work`
//!   (1 unit, in a second thread), all through `cg_burn`;
//! - `cglib_work` (1 unit) in the shared library libcgfuncs_lib.so;
//! - `cg_funcs::rust_work` (1 unit), a Rust function with a mangled name.
//!
//! Usage: `cg-funcs [--calls N] [--units U] [--depth D] [--partial] [--clock]`: the main
//! thread runs N rounds of work_a, work_b, rust_work and cglib_work, plus N / D calls of
//! cg_recurse with depth D; a second thread runs N calls of cg_thread_work, one before each
//! round (the two take turns, never working at once). With `--partial` a third thread
//! enters `cg_forever` and the process exits while it is inside. Prints what it did, and
//! with `--clock` per function the CPU time its calls took by their thread's own clock
//! (`cpu_ns NAME NS`; for cg_recurse the outermost calls).
//!
//! `cg-funcs --tiny N [--endbr]`: N calls of a function that does almost nothing (probe
//! cost benchmarks); prints `calls_per_s`.

use std::time::Instant;

#[link(name = "cgfuncs_lib")]
unsafe extern "C" {
    fn cglib_work(units: u64) -> u64;
}

#[link(name = "cgfuncs", kind = "static")]
unsafe extern "C" {
    fn cg_burn(units: u64) -> u64;
    fn cg_work_a(units: u64) -> u64;
    fn cg_work_b(units: u64) -> u64;
    fn cg_recurse(depth: u32, units: u64) -> u64;
    fn cg_thread_work(units: u64) -> u64;
    fn cg_forever(units: u64) -> u64;
    fn cg_tiny(x: u64) -> u64;
}

#[link(name = "cgfuncs_cet", kind = "static")]
unsafe extern "C" {
    fn cg_tiny_endbr(x: u64) -> u64;
}

/// A Rust function with a mangled name (`--func 'cg_funcs::rust_work'`).
#[inline(never)]
pub fn rust_work(units: u64) -> u64 {
    // SAFETY: a plain C function without preconditions.
    unsafe { cg_burn(units) }
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--tiny") {
        let calls: u64 = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let endbr = args.iter().any(|a| a == "--endbr");
        let started = Instant::now();
        let mut x = 0u64;
        for i in 0..calls {
            // SAFETY: plain C functions without preconditions.
            x = x.wrapping_add(unsafe { if endbr { cg_tiny_endbr(i) } else { cg_tiny(i) } });
        }
        std::hint::black_box(x);
        println!(
            "calls_per_s {:.1}",
            calls as f64 / started.elapsed().as_secs_f64()
        );
        return;
    }
    let calls: u64 = arg(&args, "--calls", 200);
    let units: u64 = arg(&args, "--units", 20);
    let depth: u32 = arg(&args, "--depth", 4);
    let partial = args.iter().any(|a| a == "--partial");
    let clock = args.iter().any(|a| a == "--clock");

    // The two threads take turns, a call of cg_thread_work then a round of the main
    // thread's, so that their work never runs at the same time: two threads busy at once
    // may share a physical core (a VM's two vCPUs can be one core's two hyperthreads).
    // Even so the same work does not always cost the same CPU time (on a loaded machine
    // one function's calls took 1.4x another's), so each call is also timed by its
    // thread's own CPU clock, and tests compare cg-trace with that, not with fixed ratios.
    let (go, turn) = std::sync::mpsc::channel::<()>();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let (mut x, mut spent_ns) = (0u64, 0u64);
        while turn.recv().is_ok() {
            // SAFETY: plain C function.
            x = x.wrapping_add(timed(&mut spent_ns, || unsafe { cg_thread_work(units) }));
            if done.send(()).is_err() {
                break;
            }
        }
        (x, spent_ns)
    });
    let mut x = 0u64;
    let mut spent = [0u64; 5];
    let [a_ns, b_ns, lib_ns, rust_ns, recurse_ns] = &mut spent;
    for round in 0..calls {
        if go.send(()).is_ok() {
            let _ = finished.recv();
        }
        // SAFETY: plain C functions without preconditions.
        unsafe {
            x = x.wrapping_add(timed(a_ns, || cg_work_a(units)));
            x = x.wrapping_add(timed(b_ns, || cg_work_b(units)));
            x = x.wrapping_add(timed(lib_ns, || cglib_work(units)));
        }
        x = x.wrapping_add(timed(rust_ns, || rust_work(units)));
        if round % u64::from(depth.max(1)) == 0 {
            // SAFETY: as above.
            x = x.wrapping_add(timed(recurse_ns, || unsafe { cg_recurse(depth, units) }));
        }
    }
    drop(go);
    let (worker_x, thread_work_ns) = worker.join().unwrap_or((0, 0));
    std::hint::black_box(x.wrapping_add(worker_x));
    println!(
        "calls {calls} units {units} depth {depth} recurse_calls {}",
        calls.div_ceil(u64::from(depth.max(1)))
    );
    if clock {
        let names = [
            "cg_work_a",
            "cg_work_b",
            "cglib_work",
            "cg_funcs::rust_work",
            "cg_recurse",
        ];
        for (name, ns) in names.iter().zip(spent) {
            println!("cpu_ns {name} {ns}");
        }
        println!("cpu_ns cg_thread_work {thread_work_ns}");
    }
    if partial {
        // SAFETY: as above; the thread never returns.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tx.send(unsafe { libc::gettid() });
            unsafe { cg_forever(units) }
        });
        // Exit once the thread has had 300 ms of CPU inside (however loaded the machine is;
        // at most 30 s of waiting), so the partial call has time to show: it counts up to
        // the last read, which can come a whole interval (100 ms) before the exit.
        let tid = rx.recv().unwrap_or(0);
        let waited = std::time::Instant::now();
        while thread_cpu_ns(tid) < 300_000_000 && waited.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        std::process::exit(0);
    }
}

/// Calls `work`, adding the CPU time its thread spent in it (its own CPU clock, which
/// counts no time off the CPU) to `spent_ns`.
fn timed(spent_ns: &mut u64, work: impl FnOnce() -> u64) -> u64 {
    let before = own_cpu_ns();
    let x = std::hint::black_box(work());
    *spent_ns += own_cpu_ns().saturating_sub(before);
    x
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), in nanoseconds.
fn own_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// CPU time the kernel has given thread `tid` of this process (its `sum_exec_runtime`).
fn thread_cpu_ns(tid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
