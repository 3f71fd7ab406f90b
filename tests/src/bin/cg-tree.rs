//! Workload that switches a lot, like a parallel build: forks `--children K` processes, at
//! most `--jobs J` at a time; each runs `--threads T` threads that pass a token around a ring
//! of pipes, burning about `--burst-us` microseconds of CPU per turn, until the process has
//! used `--ms M` milliseconds of CPU. A third of the children are started with
//! `posix_spawn` (vfork and exec, as make and compiler drivers do), a third fork and exec
//! themselves, a third only fork. The parent waits for each child and prints the kernel's
//! own figure of its CPU time at exit (`wait4`'s rusage, which the kernel derives from the
//! scheduler's exact runtime): `child PID cpu SECONDS`.

use std::{
    ffi::CString,
    time::{Duration, Instant},
};

fn cpu_time_of_self() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn spin_for(burst: Duration) {
    let until = Instant::now() + burst;
    let mut x = 1u64;
    while Instant::now() < until {
        for i in 0..200u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
}

/// The child's work: `threads` threads in a ring of pipes until `ms` of process CPU time.
fn child_work(threads: usize, ms: u64, burst: Duration) {
    let budget = Duration::from_millis(ms);
    let pipes: Vec<[i32; 2]> = (0..threads)
        .map(|_| {
            let mut fds = [0; 2];
            // SAFETY: pipe writes two descriptors into the array we own.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            fds
        })
        .collect();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let read_fd = pipes[i][0];
            let write_fd = pipes[(i + 1) % threads][1];
            std::thread::spawn(move || {
                let mut token = [0u8; 1];
                loop {
                    // SAFETY: one-byte reads and writes on pipes this process owns.
                    if unsafe { libc::read(read_fd, token.as_mut_ptr().cast(), 1) } != 1 {
                        return;
                    }
                    let done = token[0] == 1 || cpu_time_of_self() >= budget;
                    if !done {
                        spin_for(burst);
                    }
                    token[0] = u8::from(done);
                    unsafe { libc::write(write_fd, token.as_ptr().cast(), 1) };
                    if done {
                        return;
                    }
                }
            })
        })
        .collect();
    // SAFETY: start the ring with one token.
    unsafe { libc::write(pipes[0][1], [0u8].as_ptr().cast(), 1) };
    for h in handles {
        let _ = h.join();
    }
}

fn environ() -> *const *mut libc::c_char {
    unsafe extern "C" {
        static environ: *const *mut libc::c_char;
    }
    // SAFETY: reading the process's environment pointer.
    unsafe { environ }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str, default: u64| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let threads = value("--threads", 3).max(1) as usize;
    let ms = value("--ms", 100);
    let burst = Duration::from_micros(value("--burst-us", 200));
    if args.iter().any(|a| a == "--child") {
        child_work(threads, ms, burst);
        return;
    }
    let children = value("--children", 8);
    let jobs = value("--jobs", 2).max(1) as usize;
    let exe = CString::new(
        std::env::current_exe()
            .unwrap()
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let child_args: Vec<CString> = [
        "cg-tree",
        "--child",
        "--threads",
        &threads.to_string(),
        "--ms",
        &ms.to_string(),
        "--burst-us",
        &burst.as_micros().to_string(),
    ]
    .iter()
    .map(|a| CString::new(*a).unwrap())
    .collect();
    let mut argv: Vec<*const libc::c_char> = child_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());

    let mut running = 0usize;
    let wait_one = || {
        let mut status = 0;
        // SAFETY: wait4 writes the status and usage we own.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let pid = unsafe { libc::wait4(-1, &mut status, 0, &mut usage) };
        let cpu = usage.ru_utime.tv_sec as f64
            + usage.ru_utime.tv_usec as f64 / 1e6
            + usage.ru_stime.tv_sec as f64
            + usage.ru_stime.tv_usec as f64 / 1e6;
        println!("child {pid} cpu {cpu:.6}");
    };
    for n in 0..children {
        if running == jobs {
            wait_one();
            running -= 1;
        }
        if n % 3 == 0 {
            let mut pid = 0;
            // SAFETY: argv is a null-terminated array of C strings that outlive the call; no
            // file actions or attributes; the environment is ours.
            let ret = unsafe {
                libc::posix_spawn(
                    &mut pid,
                    exe.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    argv.as_ptr().cast_mut().cast(),
                    environ(),
                )
            };
            assert_eq!(ret, 0, "posix_spawn failed");
            running += 1;
            continue;
        }
        // SAFETY: the child only execs or runs its own threads, then exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            if n % 3 == 1 {
                // SAFETY: argv is a null-terminated array of C strings that outlive the call.
                unsafe { libc::execv(exe.as_ptr(), argv.as_ptr()) };
            }
            child_work(threads, ms, burst);
            // SAFETY: leave the forked child without running the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        running += 1;
    }
    while running > 0 {
        wait_one();
        running -= 1;
    }
}
