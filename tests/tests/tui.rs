//! End-to-end tests of the live view in a real terminal: cg-trace runs inside tmux (installed
//! by `cargo xtask setup`), the tests type keys, read the screen tmux captures, and check that
//! the terminal comes back as it was (main screen, visible cursor, same `stty` settings, a
//! prompt that takes commands) on quit, on SIGTERM and on a panic. Root and real eBPF, like
//! the other end-to-end tests; run serially.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use cg_tests::{Background, assert_adds_up, assert_valid_report, bin, read_report, require_root};
use serde_json::Value;

/// Generous: the machine is shared and loaded.
const PATIENCE: Duration = Duration::from_secs(40);

/// A tmux server of our own (its socket in a temporary directory, so nothing depends on
/// `/tmp/tmux-UID`) with one pane running `sh`.
struct Tmux {
    socket: PathBuf,
    dir: tempfile::TempDir,
}

impl Tmux {
    fn start(width: u16, height: u16) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("tmux.sock");
        let tmux = Tmux { socket, dir };
        let out = tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "env PS1='$ ' sh",
        ]);
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux is missing: `cargo xtask setup` installs it")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Types `text` literally, then Enter.
    fn line(&self, text: &str) {
        self.run(&["send-keys", "-t", "t", "-l", text]);
        self.run(&["send-keys", "-t", "t", "Enter"]);
    }

    /// Sends tmux key names (`q`, `Enter`, `Escape`), one call each, a moment apart, so that
    /// the view never sees two keys as one escape sequence.
    fn keys(&self, keys: &[&str]) {
        for key in keys {
            self.run(&["send-keys", "-t", "t", key]);
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// The visible screen.
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "t"]).stdout).into_owned()
    }

    /// The screen and what scrolled off it.
    fn history(&self) -> String {
        String::from_utf8_lossy(
            &self
                .run(&["capture-pane", "-p", "-S", "-500", "-t", "t"])
                .stdout,
        )
        .into_owned()
    }

    /// A pane variable (`alternate_on`, `cursor_flag`).
    fn pane(&self, variable: &str) -> String {
        let format = format!("#{{{variable}}}");
        String::from_utf8_lossy(&self.run(&["display", "-p", "-t", "t", &format]).stdout)
            .trim()
            .to_string()
    }

    /// Waits until the screen satisfies `ok`; panics with the screen when it never does.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            if start.elapsed() > PATIENCE {
                panic!("timed out waiting for {what}; the screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for a file the pane's shell writes when cg-trace has returned.
    fn wait_file(&self, name: &str) -> String {
        let path = self.path(name);
        let start = Instant::now();
        loop {
            if let Ok(text) = fs::read_to_string(&path)
                && text.ends_with('\n')
            {
                return text.trim().to_string();
            }
            if start.elapsed() > PATIENCE {
                panic!(
                    "cg-trace did not return ({} missing); the screen:\n{}",
                    path.display(),
                    self.history()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Checks that the terminal is back: main screen, visible cursor, the `stty` settings it
    /// had before (`before`/`after` files the pane wrote), and a prompt that runs commands.
    fn assert_terminal_restored(&self, before: &str, after: &str) {
        assert_eq!(
            self.pane("alternate_on"),
            "0",
            "still on the alternate screen"
        );
        assert_eq!(self.pane("cursor_flag"), "1", "cursor still hidden");
        let before = fs::read_to_string(self.path(before)).expect("stty before");
        let after = fs::read_to_string(self.path(after)).expect("stty after");
        assert_eq!(before, after, "terminal settings (stty -g) differ");
        self.line("echo prompt-$((40 + 2))");
        self.wait_for("the shell to take a command", |s| s.contains("prompt-42"));
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// Rows of the process table: the lines between the table's header and the footer.
fn table_rows(screen: &str) -> Vec<&str> {
    screen
        .lines()
        .skip_while(|l| !(l.contains("PID") && l.contains("COMMAND")))
        .skip(1)
        .take_while(|l| !l.contains("quit") && !l.contains("filter:"))
        .filter(|l| !l.trim().is_empty())
        .collect()
}

#[test]
fn top_in_tmux_sorts_filters_quits_and_gives_the_terminal_back() {
    require_root();
    let spin = Background::spawn(&bin("cg-spin"), &["120"]);
    let tmux = Tmux::start(110, 32);
    let report = tmux.path("r.json");
    tmux.line(&format!(
        "stty -g > {before}; {bin} top --source model --refresh 300 -o {report} 2> {err}; \
         echo $? > {code}; stty -g > {after}",
        before = shell_quote(&tmux.path("before")),
        bin = shell_quote(&bin("cg-trace")),
        report = shell_quote(&report),
        err = shell_quote(&tmux.path("stderr")),
        code = shell_quote(&tmux.path("code")),
        after = shell_quote(&tmux.path("after")),
    ));
    let screen = tmux.wait_for("the view with cg-spin in it", |s| {
        s.contains("cg-trace top · the whole machine") && s.contains("cg-spin")
    });
    assert!(screen.contains("ESTIMATED"), "{screen}");
    assert!(screen.contains("power [W]"), "the chart: {screen}");
    assert_eq!(
        tmux.pane("alternate_on"),
        "1",
        "the view uses the alternate screen"
    );

    // Sort by CPU (largest first), then by pid (smallest first): the header says so.
    tmux.keys(&["c"]);
    tmux.wait_for("CPU% sorted", |s| s.contains("CPU%▼"));
    tmux.keys(&["p"]);
    // (A capture can fall between two writes of a frame: wait for a whole, sorted one.)
    tmux.wait_for("the table sorted by PID", |s| {
        let pids: Vec<u32> = table_rows(s)
            .iter()
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect();
        s.contains("PID▲") && pids.len() >= 3 && pids.windows(2).all(|w| w[0] <= w[1])
    });

    // Filter by name: only cg-spin is left.
    tmux.keys(&["/"]);
    tmux.run(&["send-keys", "-t", "t", "-l", "cg-spin"]);
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the filtered table", |s| {
        let rows = table_rows(s);
        !rows.is_empty()
            && rows.iter().all(|r| r.contains("cg-spin"))
            && s.contains("filter: cg-spin")
    });
    assert!(
        table_rows(&screen)
            .iter()
            .any(|r| r.split_whitespace().next() == Some(&spin.pid().to_string())),
        "{screen}"
    );
    // Help opens over the view and any key closes it.
    tmux.keys(&["?"]);
    tmux.wait_for("the help", |s| {
        s.contains("keys") && s.contains("fold or unfold")
    });
    tmux.keys(&["x"]);
    tmux.wait_for("the help to close", |s| !s.contains("fold or unfold"));

    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "0");
    tmux.assert_terminal_restored("before", "after");
    let stderr = fs::read_to_string(tmux.path("stderr")).unwrap();
    assert!(stderr.contains("quit from the live view"), "{stderr}");
    assert!(stderr.contains("report written to"), "{stderr}");
    let report: Value = read_report(&report);
    assert_adds_up(&report);
    assert_eq!(report["meta"]["mode"], "system");
    assert_eq!(report["meta"]["stop_reason"], "quit from the live view");
    assert!(
        report["processes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["pid"].as_u64() == Some(u64::from(spin.pid()))),
        "cg-spin is in the report"
    );
}

#[test]
fn sigterm_and_panics_give_the_terminal_back() {
    require_root();
    let tmux = Tmux::start(100, 30);
    let bin = shell_quote(&bin("cg-trace"));
    // With nothing to trace, on a terminal, cg-trace shows the whole machine (top).
    tmux.line(&format!(
        "stty -g > {before}; sh -c \"echo \\$\\$ > {pid}; exec {bin} --source model -q\"; echo $? \
         > {code}; stty -g > {after}",
        before = shell_quote(&tmux.path("before")),
        pid = shell_quote(&tmux.path("pid")),
        code = shell_quote(&tmux.path("code")),
        after = shell_quote(&tmux.path("after")),
    ));
    tmux.wait_for("the view", |s| {
        s.contains("cg-trace top · the whole machine")
    });
    let pid: i32 = tmux.wait_file("pid").parse().unwrap();
    // SAFETY: signalling the cg-trace the test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(tmux.wait_file("code"), "0");
    tmux.assert_terminal_restored("before", "after");

    // A panic: the terminal is restored first, then the panic is printed on the main screen.
    tmux.line(&format!(
        "stty -g > {before}; CG_TRACE_TEST_PANIC_KEY=P {bin} top --source model -q; echo $? > \
         {code}; stty -g > {after}",
        before = shell_quote(&tmux.path("before2")),
        code = shell_quote(&tmux.path("code2")),
        after = shell_quote(&tmux.path("after2")),
    ));
    tmux.wait_for("the view", |s| {
        s.contains("cg-trace top · the whole machine")
    });
    tmux.keys(&["P"]);
    assert_eq!(tmux.wait_file("code2"), "101", "a panic's exit status");
    let screen = tmux.history();
    assert!(
        screen.contains("panicked") && screen.contains("panicking on request"),
        "the panic is printed where it can be read:\n{screen}"
    );
    tmux.assert_terminal_restored("before2", "after2");
}

#[test]
fn tui_wrap_keeps_the_commands_output_off_the_screen() {
    require_root();
    let tmux = Tmux::start(100, 30);
    let output = tmux.path("command.out");
    tmux.line(&format!(
        "stty -g > {before}; {bin} --tui --source model -q --command-output {output} -- sh -c \
         'echo hello-from-the-command; echo oops >&2; sleep 4; exit 3'; echo $? > {code}; stty \
         -g > {after}",
        before = shell_quote(&tmux.path("before")),
        bin = shell_quote(&bin("cg-trace")),
        output = shell_quote(&output),
        code = shell_quote(&tmux.path("code")),
        after = shell_quote(&tmux.path("after")),
    ));
    let screen = tmux.wait_for("the view of the command", |s| {
        s.contains("cg-trace · `sh -c") && s.contains("command output →")
    });
    // (The command line itself is in the table; its output is not on any line of its own.)
    assert!(
        screen
            .lines()
            .all(|l| !l.trim_start().starts_with("hello-from-the-command") && l.trim() != "oops"),
        "{screen}"
    );
    assert!(screen.contains("targets"), "{screen}");
    // The view closes by itself when the command ends, with the command's status.
    assert_eq!(tmux.wait_file("code"), "3");
    tmux.assert_terminal_restored("before", "after");
    let text = fs::read_to_string(&output).unwrap();
    assert_eq!(text, "hello-from-the-command\noops\n");
    assert!(tmux.history().contains("the command's output is in"));
}

#[test]
fn without_a_terminal_the_view_says_to_use_o_and_exits_2() {
    require_root();
    for args in [&["top"][..], &["--tui", "--all"], &[]] {
        let output = Command::new(bin("cg-trace"))
            .args(args)
            .output()
            .expect("running cg-trace");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("-o FILE"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn tui_shows_the_functions_of_the_selected_process_while_it_runs() {
    require_root();
    let tmux = Tmux::start(120, 40);
    tmux.line(&format!(
        "{bin} --tui --refresh 300 --source model -q --func 'cg_work_*' --command-output \
         {output} -- {funcs} --calls 100000 --units 40; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        funcs = shell_quote(&bin("cg-funcs")),
        output = shell_quote(&tmux.path("command.out")),
        code = shell_quote(&tmux.path("code")),
    ));
    // The wrapped command is selected first; its probed functions show with their calls.
    let screen = tmux.wait_for("the function pane", |s| {
        s.contains("functions of") && s.contains("cg_work_a") && s.contains("cg_work_b")
    });
    assert!(
        screen.contains("(uprobe)") && screen.contains("CALLS"),
        "{screen}"
    );
    let energy_of = |name: &str| -> f64 {
        let line = screen.lines().find(|l| l.starts_with(name)).unwrap();
        // FUNCTION MODULE CALLS CPU s ENERGY J SELF J AVG W
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields[fields.len() - 3].parse().unwrap()
    };
    // cg_work_b does twice cg_work_a's work (loose: a live window of a few intervals).
    let (a, b) = (energy_of("cg_work_a"), energy_of("cg_work_b"));
    assert!(
        a > 0.0 && b > 1.3 * a && b < 3.0 * a,
        "a {a} J, b {b} J\n{screen}"
    );
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "130");
}

#[test]
fn a_terminal_that_hangs_up_stops_the_run_and_the_report_is_still_written() {
    require_root();
    let tmux = Tmux::start(100, 30);
    let report_path = tmux.path("report.json");
    tmux.line(&format!(
        "{bin} --tui --source model -o {report} --command-output {output} -- {funcs} --calls \
         1000000 --units 40",
        bin = shell_quote(&bin("cg-trace")),
        funcs = shell_quote(&bin("cg-funcs")),
        report = shell_quote(&report_path),
        output = shell_quote(&tmux.path("command.out")),
    ));
    tmux.wait_for("the view", |s| {
        s.contains("cg-trace ·") && s.contains("cg-funcs")
    });
    // The window closes: the terminal hangs up under the view (and the command).
    tmux.run(&["kill-server"]);
    let start = Instant::now();
    let report: Value = loop {
        if let Ok(text) = fs::read_to_string(&report_path)
            // Validated below (a half-written file is not a report yet).
            && let Ok(report) = serde_json::from_str(&text)
        {
            break report;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no report after the terminal hung up"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_valid_report(&report);
    assert_adds_up(&report);
    let reason = report["meta"]["stop_reason"].as_str().unwrap();
    assert!(
        reason.contains("SIGHUP")
            || reason.contains("hung up")
            || reason.contains("command exited"),
        "{reason}"
    );
    // And cg-trace is gone, not spinning on the dead terminal.
    let path = report_path.display().to_string();
    while Command::new("pgrep")
        .args(["-f", &path])
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(start.elapsed() < PATIENCE, "cg-trace still runs");
        std::thread::sleep(Duration::from_millis(100));
    }
}
