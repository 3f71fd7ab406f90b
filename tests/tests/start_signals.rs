//! End-to-end tests that signals during start-up never leave cg-trace hanging or anything
//! attached: a storm of SIGSTOP/SIGCONT (Ctrl-Z and `fg`, a debugger) every 1-3 ms across
//! the whole start-up of a `--func` run must let it finish normally, on uprobe_multi links;
//! SIGTERM every 1-3 ms from a moment anywhere in the start-up must end it with 128 + 15 and
//! leave no probe behind. The kernel's verifier answers a signal in the middle of
//! `BPF_PROG_LOAD` with EAGAIN, which cg-trace once took for a missing kernel feature (and
//! aya, which asks the features once per process, still does: cg-trace then starts again).
//! Root, real eBPF. Run serially (`--test-threads=1`).

use std::{
    io::Read,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use cg_tests::{bin, read_report, require_root};

/// How long a run may take to end once signals started: far beyond the ~1 s it takes on a
/// loaded machine, so only a hang fails it.
const HANG_BOUND: Duration = Duration::from_secs(10);

/// A copy of `cg-many` (1,000 tiny functions) under a name of this test's own, so that the
/// kernel's uprobe links on it are this test's and no one else's.
fn private_many(dir: &Path) -> PathBuf {
    let copy = dir.join("cg-many-signals");
    std::fs::copy(env!("CG_MANY"), &copy).expect("copying cg-many");
    copy
}

/// A small xorshift generator: the storms' intervals, the same in every run of the test.
struct Draws(u64);

impl Draws {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// 1 to 3 ms.
    fn gap(&mut self) -> Duration {
        Duration::from_micros(1_000 + self.next() % 2_001)
    }
}

/// The ids of the kernel's BPF links that probe `file` (uprobe_multi links, and uprobes made
/// through perf events), read with `BPF_LINK_GET_NEXT_ID` and each link's info.
fn uprobe_links_on(file: &Path) -> Vec<u32> {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    const BPF_LINK_GET_FD_BY_ID: libc::c_long = 30;
    const BPF_LINK_GET_NEXT_ID: libc::c_long = 31;
    const BPF_LINK_TYPE_PERF_EVENT: u32 = 7;
    const BPF_LINK_TYPE_UPROBE_MULTI: u32 = 12;
    const BPF_PERF_EVENT_UPROBE: u32 = 1;
    const BPF_PERF_EVENT_URETPROBE: u32 = 2;
    fn bpf(cmd: libc::c_long, attr: &mut [u64; 2]) -> i64 {
        // SAFETY: `attr` is a 16-byte head of `union bpf_attr` for these commands; the
        // pointers in it point at buffers that outlive the call.
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 16) }
    }
    let wanted = std::fs::canonicalize(file).expect("the probed file");
    let mut found = Vec::new();
    let mut id = 0u32;
    loop {
        // { start_id, next_id }
        let mut attr = [u64::from(id), 0];
        if bpf(BPF_LINK_GET_NEXT_ID, &mut attr) < 0 {
            break;
        }
        id = (attr[0] >> 32) as u32;
        // { link_id, next_id, open_flags }
        let mut attr = [u64::from(id), 0];
        let fd = bpf(BPF_LINK_GET_FD_BY_ID, &mut attr);
        if fd < 0 {
            continue; // gone meanwhile
        }
        // struct bpf_link_info: type, id, prog_id, then the union at byte 16.
        let mut info = [0u64; 12];
        let mut path = vec![0u8; 4096];
        let kind = {
            let mut head = [0u64; 12];
            let mut attr = [fd as u64 | (96u64 << 32), head.as_mut_ptr() as u64];
            bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr);
            head[0] as u32
        };
        match kind {
            BPF_LINK_TYPE_UPROBE_MULTI => {
                // uprobe_multi: path, offsets, ref_ctr_offsets, cookies, path_size, count.
                info[2] = path.as_mut_ptr() as u64;
                info[6] = path.len() as u64;
            }
            BPF_LINK_TYPE_PERF_EVENT => {
                // perf_event: type, pad, then uprobe: file_name, name_len.
                info[3] = path.as_mut_ptr() as u64;
                info[4] = path.len() as u64;
            }
            _ => {
                // SAFETY: closing the descriptor this loop opened.
                unsafe { libc::close(fd as i32) };
                continue;
            }
        }
        let mut attr = [fd as u64 | (96u64 << 32), info.as_mut_ptr() as u64];
        let ok = bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr) == 0;
        // SAFETY: as above.
        unsafe { libc::close(fd as i32) };
        let is_uprobe = kind == BPF_LINK_TYPE_UPROBE_MULTI
            || matches!(
                info[2] as u32,
                BPF_PERF_EVENT_UPROBE | BPF_PERF_EVENT_URETPROBE
            );
        let end = path.iter().position(|&b| b == 0).unwrap_or(0);
        if ok && is_uprobe && Path::new(std::str::from_utf8(&path[..end]).unwrap_or("")) == wanted {
            found.push(id);
        }
    }
    found
}

/// A `sleep` argument of `whole` seconds and a bit that no other command of these tests has
/// (this test process's pid and a count of the calls): the tests run side by side under a
/// plain `cargo test`, and each must find its own command, not the other's.
fn unique_seconds(whole: u32) -> String {
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    format!("{whole}.{}{call:04}", std::process::id())
}

/// Whether a process whose command line holds `marker` is running.
fn running_with(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
}

/// A cg-trace run that the test signals; its output is read as it comes (a full pipe would
/// stall it).
struct Traced {
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

fn read_all(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<String>> {
    let mut pipe = pipe?;
    Some(std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    }))
}

impl Traced {
    /// Starts `cg-trace -q --source model --func MANY:cg_many_* -o REPORT -- COMMAND`.
    fn start(many: &Path, report: &Path, command: &[&str]) -> Self {
        let mut child = Command::new(bin("cg-trace"))
            .args(["-q", "--source", "model", "--func"])
            .arg(format!("{}:cg_many_*", many.display()))
            .arg("-o")
            .arg(report)
            .arg("--")
            .args(command)
            // What it did, for the message of a run that fails.
            .env("CG_TRACE_LOG", "cg_agent=info,cg_agent::probes=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting cg-trace");
        let stdout = read_all(child.stdout.take());
        let stderr = read_all(child.stderr.take());
        Traced {
            child,
            stdout,
            stderr,
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: a signal to the child this test started, not reaped yet (so the pid is
        // still its own, even once it has exited).
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("waiting for cg-trace")
    }

    /// Its stdout and stderr, once it has exited.
    fn output(&mut self) -> (String, String) {
        let join = |t: Option<JoinHandle<String>>| t.map(|t| t.join().unwrap_or_default());
        (
            join(self.stdout.take()).unwrap_or_default(),
            join(self.stderr.take()).unwrap_or_default(),
        )
    }

    /// Kills a run that hangs; says what each of its threads was doing in the kernel.
    fn kill_stuck(&mut self) -> String {
        let tasks = format!("/proc/{}/task", self.child.id());
        let mut text = String::from("its threads (state, kernel stack):\n");
        for task in std::fs::read_dir(&tasks).into_iter().flatten().flatten() {
            let read = |name: &str| std::fs::read_to_string(task.path().join(name));
            let stat = read("stat").unwrap_or_default();
            let state = stat
                .rsplit(") ")
                .next()
                .and_then(|rest| rest.split(' ').next());
            text.push_str(&format!(
                "{:?} {}\n{}\n",
                task.file_name(),
                state.unwrap_or("?"),
                read("stack").unwrap_or_default()
            ));
        }
        self.signal(libc::SIGCONT);
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        format!("{text}it said:\n{}", self.output().1)
    }
}

/// Sends `signals` in turn to `traced`, 1-3 ms apart, from `after` on, for `lasting` (or
/// until it exits), then a SIGCONT. Its exit status and how long it took from the first
/// signal; or, when it is still running [`HANG_BOUND`] after the first signal (a storm until
/// exit) or after the storm, what it was doing (and it is killed).
fn storm(
    traced: &mut Traced,
    after: Duration,
    lasting: Option<Duration>,
    signals: &[i32],
    draws: &mut Draws,
) -> Result<(ExitStatus, Duration), String> {
    let started = Instant::now();
    while started.elapsed() < after {
        if let Some(status) = traced.exited() {
            return Ok((status, Duration::ZERO));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let first = Instant::now();
    for n in 0.. {
        if let Some(status) = traced.exited() {
            return Ok((status, first.elapsed()));
        }
        if lasting.is_some_and(|l| first.elapsed() >= l) {
            break;
        }
        if first.elapsed() > HANG_BOUND {
            return Err(traced.kill_stuck());
        }
        traced.signal(signals[n % signals.len()]);
        std::thread::sleep(draws.gap());
    }
    traced.signal(libc::SIGCONT);
    let calm = Instant::now();
    while calm.elapsed() < HANG_BOUND {
        if let Some(status) = traced.exited() {
            return Ok((status, first.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Err(traced.kill_stuck())
}

/// How long a plain start-up takes here (spawn until the probes are on `many`), checking on
/// the way that [`uprobe_links_on`] sees probes that are there and none once cg-trace ended.
fn start_up_time(many: &Path, dir: &Path) -> Duration {
    let marker = unique_seconds(31);
    let started = Instant::now();
    let mut traced = Traced::start(many, &dir.join("plain.json"), &["sleep", &marker]);
    let mut attached = None;
    while started.elapsed() < HANG_BOUND && traced.exited().is_none() {
        if !uprobe_links_on(many).is_empty() {
            attached = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let ended = storm(
        &mut traced,
        Duration::ZERO,
        None,
        &[libc::SIGTERM],
        &mut Draws(7),
    );
    let (status, _) = ended.unwrap_or_else(|stuck| panic!("a plain run hung: {stuck}"));
    let said = traced.output().1;
    let attached = attached.unwrap_or_else(|| {
        panic!(
            "no uprobe link on {} seen while cg-trace ran: {said}",
            many.display()
        )
    });
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{said}");
    assert_eq!(
        uprobe_links_on(many),
        Vec::<u32>::new(),
        "probes left behind"
    );
    assert!(!running_with(&marker), "the command outlived cg-trace");
    attached
}

/// Median and longest.
fn spread(mut took: Vec<Duration>) -> (Duration, Duration) {
    took.sort();
    (took[took.len() / 2], took[took.len() - 1])
}

/// SIGSTOP and SIGCONT in turn, every 1-3 ms from the moment cg-trace is started until twice
/// a plain start-up has passed: each run goes through, exit 0, with its report, on
/// uprobe_multi links, each function's one call counted, and nothing left attached.
#[test]
fn a_storm_of_stops_and_continues_across_start_up_lets_every_run_finish() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let many = private_many(dir.path());
    let lasting = start_up_time(&many, dir.path()) * 2;
    let mut draws = Draws(0x5eed_0001);
    let mut took = Vec::new();
    for run in 0..16 {
        let report = dir.path().join(format!("stop-{run}.json"));
        let mut traced = Traced::start(&many, &report, &[many.to_str().unwrap()]);
        let stops = [libc::SIGSTOP, libc::SIGCONT];
        let ended = storm(
            &mut traced,
            Duration::ZERO,
            Some(lasting),
            &stops,
            &mut draws,
        );
        let (status, time) = ended.unwrap_or_else(|stuck| {
            panic!("run {run}: still running {HANG_BOUND:?} after the storm: {stuck}")
        });
        let (stdout, said) = traced.output();
        assert_eq!(status.code(), Some(0), "run {run}: {status:?}\n{said}");
        assert!(
            stdout.starts_with("sum="),
            "run {run}: the command's output: {stdout:?}"
        );
        let report = read_report(&report);
        let uprobes = &report["meta"]["function_profiling"]["uprobes"];
        assert_eq!(
            uprobes["attach_method"], "uprobe_multi",
            "run {run}: {said}"
        );
        assert_eq!(
            uprobes["target_calls_count"], 1000,
            "run {run}: every function is called once"
        );
        assert_eq!(
            uprobe_links_on(&many),
            Vec::<u32>::new(),
            "run {run}: left attached"
        );
        took.push(time);
    }
    let (median, longest) = spread(took);
    eprintln!("storms of {lasting:?}; runs took {median:?} (median) to {longest:?}");
}

/// SIGTERM every 1-3 ms from a moment spread over the whole start-up (spawn to well after
/// the probes are attached; the command sleeps): each run ends with 128 + 15 (or, when the
/// first signal came before cg-trace could handle any, killed by it), promptly, with no
/// probe left on the file and the command gone.
#[test]
fn a_storm_of_sigterm_anywhere_in_start_up_ends_every_run_with_its_status() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let many = private_many(dir.path());
    let plain = start_up_time(&many, dir.path());
    let runs = 20u32;
    let span = plain.mul_f64(1.5);
    let mut draws = Draws(0x5eed_0015);
    let (mut handled, mut before_handlers) = (0, 0);
    let mut took = Vec::new();
    for run in 0..runs {
        let report = dir.path().join(format!("term-{run}.json"));
        let marker = unique_seconds(27);
        let after = span.mul_f64(f64::from(run) / f64::from(runs - 1));
        let mut traced = Traced::start(&many, &report, &["sleep", &marker]);
        let ended = storm(&mut traced, after, None, &[libc::SIGTERM], &mut draws);
        let (status, time) = ended.unwrap_or_else(|stuck| {
            panic!("run {run}: still running {HANG_BOUND:?} after SIGTERM: {stuck}")
        });
        let said = traced.output().1;
        match (status.code(), status.signal()) {
            (Some(143), _) => handled += 1,
            (None, Some(libc::SIGTERM)) => before_handlers += 1,
            _ => panic!("run {run} ({after:?} in): {status:?}, not 128 + SIGTERM\n{said}"),
        }
        assert_eq!(
            uprobe_links_on(&many),
            Vec::<u32>::new(),
            "run {run}: left attached"
        );
        assert!(
            !running_with(&marker),
            "run {run}: the command outlived cg-trace"
        );
        took.push(time);
    }
    let (median, longest) = spread(took);
    eprintln!(
        "start-up {plain:?}; {handled} runs exited 143, {before_handlers} were killed before \
         handling signals; stopped {median:?} (median) to {longest:?} after the first SIGTERM"
    );
    // The spread reaches past the start-up: most runs see the signal once cg-trace handles it.
    assert!(handled > runs / 2, "{handled} of {runs} exited 143");
}

/// A continue waiting when the kernel's features are asked (as after a stop in the middle of
/// aya's probes) starts cg-trace again from its own image, once: same arguments, same
/// environment for the command, the restart counter not passed on, the run and its report
/// as usual. The continue is made to wait before cg-trace starts: held back and raised in the
/// child before `exec` (a held signal waits across `exec`).
#[test]
fn a_continue_while_the_features_are_asked_starts_cg_trace_again_once() {
    use std::os::unix::process::CommandExt as _;
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("restarted.json");
    let mut command = Command::new(bin("cg-trace"));
    command
        .args(["--source", "model", "-o"])
        .arg(&report)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"seen=$CG_PROBE_VAR:${CG_TRACE_FEATURE_RESTARTS:-none}\"",
        ])
        .env("CG_PROBE_VAR", "kept")
        .env("CG_TRACE_LOG", "cg_agent::probes::features=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let mut continue_only: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut continue_only);
            libc::sigaddset(&mut continue_only, libc::SIGCONT);
            libc::pthread_sigmask(libc::SIG_BLOCK, &continue_only, std::ptr::null_mut());
            libc::raise(libc::SIGCONT);
            Ok(())
        });
    }
    let output = command.output().expect("starting cg-trace");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.lines().any(|line| line == "seen=kept:none"),
        "the command's environment: {stdout:?}\n{said}"
    );
    let asked: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("features asked"))
        .collect();
    assert_eq!(
        asked.len(),
        2,
        "asked once, and once more after the restart: {said}"
    );
    assert!(asked[0].contains("continued=true restarts=0"), "{said}");
    assert!(asked[1].contains("continued=false restarts=1"), "{said}");
    let report = read_report(&report);
    assert_eq!(report["meta"]["command_exit_code"], 0, "{report}");
}
