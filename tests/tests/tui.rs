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

    /// The visible screen with its colours and attributes (SGR escape sequences).
    fn styled_screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-e", "-p", "-t", "t"]).stdout)
            .into_owned()
    }

    /// Waits until the styled screen satisfies `ok` in two captures in a row that are the
    /// same (so not a frame half drawn); panics with the screen when it never does.
    fn wait_for_styled(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        let mut previous = String::new();
        loop {
            let screen = self.styled_screen();
            if screen == previous && ok(&screen) {
                return screen;
            }
            if start.elapsed() > PATIENCE {
                panic!(
                    "timed out waiting for {what}; the screen:\n{}",
                    plain(&screen)
                );
            }
            previous = screen;
            std::thread::sleep(Duration::from_millis(150));
        }
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
        assert_eq!(
            self.pane("mouse_any_flag"),
            "0",
            "the terminal still reports the mouse"
        );
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

/// `line` without its SGR escape sequences.
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ params m
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether a styled line turns reverse video on (SGR parameter 7): the table's cursor.
fn turns_reverse_on(line: &str) -> bool {
    line.split('\x1b').skip(1).any(|seq| {
        seq.strip_prefix('[')
            .and_then(|s| s.split('m').next())
            .is_some_and(|params| params.split(';').any(|p| p == "7"))
    })
}

/// The table's rows (styled) and the index of the highlighted one.
fn cursor_row(styled: &str) -> (Vec<String>, Option<usize>) {
    let rows: Vec<&str> = styled
        .lines()
        .skip_while(|l| {
            let l = plain(l);
            !(l.contains("PID") && l.contains("COMMAND"))
        })
        .skip(1)
        .take_while(|l| {
            let l = plain(l);
            !l.contains("quit") && !l.contains("filter:") && !l.trim().is_empty()
        })
        .collect();
    let at = rows.iter().position(|l| turns_reverse_on(l));
    (rows.into_iter().map(plain).collect(), at)
}

/// Starts `cg-trace --tui` on a command that runs a spinner for 6 s beside three processes
/// that hardly use the CPU; returns once the spinner is on the table's first row.
fn start_spinner_beside_sleepers(tmux: &Tmux) {
    tmux.line(&format!(
        "{bin} --tui --source model -q --refresh 300 --command-output {output} -- sh -c \
         '{spin} 6 & exec {idle} 2 60'; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        spin = shell_quote(&bin("cg-spin")),
        idle = shell_quote(&bin("cg-idle")),
        output = shell_quote(&tmux.path("command.out")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("the spinner on the first row", |s| {
        let rows = table_rows(s);
        rows.len() >= 4 && rows[0].contains("cg-spin") && !rows[0].contains("[exited]")
    });
}

/// Waits for the spinner to have exited and sunk below the first row; returns the rows and
/// the cursor's.
fn wait_for_the_spinner_to_sink(tmux: &Tmux) -> (Vec<String>, Option<usize>) {
    let styled = tmux.wait_for_styled("the spinner to exit and sink", |s| {
        let (rows, at) = cursor_row(s);
        at.is_some()
            && rows
                .iter()
                .position(|r| r.contains("[exited]") && r.contains("cg-spin"))
                .is_some_and(|i| i > 0)
    });
    cursor_row(&styled)
}

#[test]
fn the_cursor_keeps_its_row_when_the_selected_process_exits_unless_following() {
    require_root();
    // htop's way: the selected process exits and sinks; the cursor stays on the first row.
    let tmux = Tmux::start(100, 30);
    start_spinner_beside_sleepers(&tmux);
    tmux.keys(&["g"]);
    let (rows, at) = wait_for_the_spinner_to_sink(&tmux);
    assert_eq!(
        at,
        Some(0),
        "the cursor left the first row:\n{}",
        rows.join("\n")
    );
    assert!(!rows[0].contains("cg-spin"), "{}", rows.join("\n"));
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "130");
    drop(tmux);

    // With F the cursor follows the spinner down, and the footer says so.
    let tmux = Tmux::start(100, 30);
    start_spinner_beside_sleepers(&tmux);
    tmux.keys(&["g", "F"]);
    tmux.wait_for("the footer to say following", |s| s.contains("F following"));
    let (rows, at) = wait_for_the_spinner_to_sink(&tmux);
    let at = at.expect("a cursor");
    assert!(
        at > 0 && rows[at].contains("[exited]") && rows[at].contains("cg-spin"),
        "the cursor did not follow the spinner:\n{}",
        rows.join("\n")
    );
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "130");
}

#[test]
fn a_folded_tree_row_adds_up_cpu_seconds_too() {
    require_root();
    // Wide enough for the CPU s column.
    let tmux = Tmux::start(130, 30);
    tmux.line(&format!(
        "{bin} --tui --source model -q --refresh 300 --command-output {output} -- sh -c \
         '{spin} 30 & {spin} 30 & wait'; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        spin = shell_quote(&bin("cg-spin")),
        output = shell_quote(&tmux.path("command.out")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("both spinners", |s| {
        let rows = table_rows(s);
        rows.len() == 3 && rows.iter().any(|r| r.contains("sh -c"))
    });
    // The tree, the cursor on the command (sh, the root), folded.
    tmux.keys(&["t", "g", "Enter"]);
    // PID PPID USER CPU% CPU s ...: the CPU seconds of the folded row, once the spinners
    // have run a few seconds.
    let cpu_s = |row: &str| -> f64 {
        row.split_whitespace()
            .nth(4)
            .and_then(|f| f.parse().ok())
            .unwrap_or(-1.0)
    };
    let screen = tmux.wait_for("the folded command after 4 s", |s| {
        let rows = table_rows(s);
        rows.len() == 1 && rows[0].contains("[+2]") && cpu_s(rows[0]) >= 0.0 && {
            let clock = s.lines().next().unwrap_or("");
            !clock.contains("0:00 ")
                && !clock.contains("0:01 ")
                && !clock.contains("0:02 ")
                && !clock.contains("0:03 ")
        }
    });
    let folded = cpu_s(table_rows(&screen)[0]);
    // Unfolded: sh itself hardly ran; the folded row had its children's seconds.
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the unfolded tree", |s| table_rows(s).len() == 3);
    let own = cpu_s(table_rows(&screen)[0]);
    assert!(
        (0.0..0.5).contains(&own) && folded > 1.0,
        "sh's own {own} CPU s, folded {folded} CPU s:\n{screen}"
    );
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "130");
}

/// Rows of kernel threads: a parent of 2 (kthreadd) and the name in brackets, in a table
/// wide enough for PPID (PID PPID USER CPU% CPU s POWER W ENERGY J SHARE COMMAND).
fn kernel_thread_rows(screen: &str) -> Vec<String> {
    table_rows(screen)
        .into_iter()
        .filter(|r| {
            let fields: Vec<&str> = r.split_whitespace().collect();
            fields.get(1) == Some(&"2")
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn top_hides_kernel_threads_until_k_and_names_them_in_brackets() {
    require_root();
    let tmux = Tmux::start(130, 50);
    tmux.line(&format!(
        "{bin} top --source model --refresh 300 -q; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("the view", |s| table_rows(s).len() >= 3);
    // Lowest pids first: kernel threads, when listed, are at the top.
    tmux.keys(&["p", "K"]);
    let screen = tmux.wait_for("kernel threads, once one has run", |s| {
        s.contains("K kthreads shown") && !kernel_thread_rows(s).is_empty()
    });
    for row in kernel_thread_rows(&screen) {
        let command = row.split_whitespace().nth(8).unwrap_or("");
        assert!(
            command.starts_with('[') && row.trim_end().ends_with(']'),
            "a kernel thread's name in brackets: {row}\n{screen}"
        );
    }
    tmux.keys(&["K"]);
    tmux.wait_for("kernel threads hidden again", |s| {
        !s.contains("kthreads shown")
            && kernel_thread_rows(s).is_empty()
            && table_rows(s).len() >= 3
    });
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "0");
}

#[test]
fn k_sends_the_chosen_signal_to_the_selected_process_after_asking() {
    require_root();
    let mut spin = Background::spawn(&bin("cg-spin"), &["120"]);
    let pid = spin.pid().to_string();
    let tmux = Tmux::start(110, 40);
    tmux.line(&format!(
        "{bin} top --source model --refresh 300 -q; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("the spinner", |s| s.contains("cg-spin"));
    // Select it: filtered by its pid, it is the first row.
    tmux.keys(&["/"]);
    tmux.run(&["send-keys", "-t", "t", "-l", &pid]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the spinner alone on the first row", |s| {
        table_rows(s)
            .first()
            .is_some_and(|r| r.split_whitespace().next() == Some(pid.as_str()))
    });
    // k asks (SIGTERM first); Esc sends nothing.
    tmux.keys(&["k"]);
    tmux.wait_for("the signal menu", |s| {
        s.contains(&format!("send a signal to {pid}")) && s.contains("SIGTERM")
    });
    tmux.keys(&["Escape"]);
    tmux.wait_for("the menu to close", |s| s.contains("no signal sent"));
    assert!(spin.0.try_wait().unwrap().is_none(), "signalled on Esc");
    // k, Enter: SIGTERM.
    tmux.keys(&["k"]);
    tmux.wait_for("the signal menu", |s| s.contains("send a signal to"));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the footer to say it was sent", |s| {
        s.contains(&format!("sent SIGTERM to {pid}"))
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = spin.0.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < PATIENCE, "cg-spin still runs");
        std::thread::sleep(Duration::from_millis(100));
    };
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "0");
}

#[test]
fn d_shows_the_selected_processs_power_history_and_domains() {
    require_root();
    let spin = Background::spawn(&bin("cg-spin"), &["120"]);
    let pid = spin.pid().to_string();
    let tmux = Tmux::start(110, 40);
    tmux.line(&format!(
        "{bin} top --source model --refresh 300 -q; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("the spinner", |s| s.contains("cg-spin"));
    tmux.keys(&["/"]);
    tmux.run(&["send-keys", "-t", "t", "-l", &pid]);
    tmux.keys(&["Enter", "d"]);
    // Its pane: a few refreshes of history, and its power in the one domain (the model).
    let refreshes = |s: &str| -> usize {
        s.split("last ")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let screen = tmux.wait_for("the detail pane with some history", |s| {
        s.contains(&format!("{pid} cg-spin · power at each refresh")) && refreshes(s) >= 3
    });
    // (Below the pane's title: the header has a model line too.)
    let model = screen
        .lines()
        .skip_while(|l| !l.contains("power at each refresh"))
        .find(|l| l.contains(" model ") && l.contains("ESTIMATED"))
        .unwrap_or_else(|| panic!("no model line:\n{screen}"));
    assert!(model.contains(" W "), "{model}");
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "0");
}

/// Clicks at 0-based `x`, `y` as a terminal in SGR mouse mode reports it (what the view
/// asks for): press, then release.
fn click(tmux: &Tmux, x: usize, y: usize) {
    let (x, y) = (x + 1, y + 1);
    tmux.run(&["send-keys", "-t", "t", "-l", &format!("\x1b[<0;{x};{y}M")]);
    tmux.run(&["send-keys", "-t", "t", "-l", &format!("\x1b[<0;{x};{y}m")]);
    std::thread::sleep(Duration::from_millis(150));
}

#[test]
fn a_click_sorts_by_a_column_and_selects_a_row() {
    require_root();
    let tmux = Tmux::start(110, 40);
    tmux.line(&format!(
        "stty -g > {before}; {bin} top --source model --refresh 300 -q; echo $? > {code}; stty \
         -g > {after}",
        before = shell_quote(&tmux.path("before")),
        bin = shell_quote(&bin("cg-trace")),
        code = shell_quote(&tmux.path("code")),
        after = shell_quote(&tmux.path("after")),
    ));
    let screen = tmux.wait_for("a few rows", |s| table_rows(s).len() >= 4);
    assert_eq!(
        tmux.pane("mouse_any_flag"),
        "1",
        "the view asks for the mouse"
    );
    let (y, header) = screen
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("PID") && l.contains("COMMAND"))
        .unwrap();
    // The PID title: sorted by pid, smallest first.
    let x = header.find("PID").unwrap();
    click(&tmux, x + 1, y);
    tmux.wait_for("sorted by PID", |s| s.contains("PID▲"));
    // The third row: the cursor goes there.
    click(&tmux, 3, y + 3);
    let styled = tmux.wait_for_styled("the cursor on the third row", |s| {
        cursor_row(s).1 == Some(2)
    });
    assert_eq!(cursor_row(&styled).1, Some(2));
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "0");
    tmux.assert_terminal_restored("before", "after");
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
    // Per-CPU busy bars, htop's: one per online CPU, each with its figure.
    let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let cpus: usize = online
        .trim()
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum();
    let bars: Vec<&str> = screen
        .lines()
        .filter(|l| l.starts_with("0[") || l.trim_start().starts_with("0["))
        .flat_map(|l| l.split("] "))
        .filter(|b| b.contains('[') && b.trim_end().trim_end_matches(']').ends_with('%'))
        .collect();
    assert!(
        cpus > 32 || bars.len() == cpus,
        "{cpus} CPUs, bars {bars:?}:\n{screen}"
    );
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
fn tui_wrap_keeps_the_commands_output_off_the_screen_and_its_final_figures_on_it() {
    require_root();
    let tmux = Tmux::start(100, 30);
    let output = tmux.path("command.out");
    let report = tmux.path("r.json");
    tmux.line(&format!(
        "stty -g > {before}; {bin} --tui --source model -q -o {report} --command-output \
         {output} -- sh -c 'echo hello-from-the-command; echo oops >&2; sleep 4; exit 3'; echo \
         $? > {code}; stty -g > {after}",
        before = shell_quote(&tmux.path("before")),
        bin = shell_quote(&bin("cg-trace")),
        report = shell_quote(&report),
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
    // The command ends: its final figures stay on screen with its status, until q.
    let screen = tmux.wait_for("the final screen", |s| {
        s.contains("the command ended: exit status 3") && s.contains("q quit")
    });
    assert!(
        screen.contains("0:04") || screen.contains("0:05"),
        "the final figures cover the 4 s:\n{screen}"
    );
    assert_eq!(tmux.pane("alternate_on"), "1", "the view closed by itself");
    assert!(!tmux.path("code").exists() && !report.exists());
    // Keys still work on the final figures.
    tmux.keys(&["t"]);
    tmux.wait_for("the tree", |s| s.contains("└─ ") || s.contains("├─ "));
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "3");
    tmux.assert_terminal_restored("before", "after");
    let text = fs::read_to_string(&output).unwrap();
    assert_eq!(text, "hello-from-the-command\noops\n");
    assert!(tmux.history().contains("the command's output is in"));
    let report: Value = cg_tests::read_report(&report);
    assert_adds_up(&report);
    assert_eq!(report["meta"]["stop_reason"], "command exited");
}

/// Symbolic links planted in the temporary directory at the names `cg-trace-PID.out` of the
/// next `count` pids, as another user could: removed when dropped.
struct PlantedLinks(Vec<PathBuf>);

impl PlantedLinks {
    fn plant(count: u32) -> Self {
        let last: u32 = fs::read_to_string("/proc/sys/kernel/ns_last_pid")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut links = Vec::new();
        for pid in last + 1..=last + count {
            let link = std::env::temp_dir().join(format!("cg-trace-{pid}.out"));
            if std::os::unix::fs::symlink("/nonexistent/cg-trace-planted", &link).is_ok() {
                links.push(link);
            }
        }
        PlantedLinks(links)
    }
}

impl Drop for PlantedLinks {
    fn drop(&mut self) {
        for link in &self.0 {
            let _ = fs::remove_file(link);
        }
    }
}

#[test]
fn links_planted_at_every_pids_output_name_do_not_stop_the_live_view() {
    require_root();
    let tmux = Tmux::start(100, 30);
    let planted = PlantedLinks::plant(5_000);
    tmux.line(&format!(
        "{bin} --tui --exit-on-end --source model -q -- sh -c 'echo from-the-command'; echo $? \
         > {code}",
        bin = shell_quote(&bin("cg-trace")),
        code = shell_quote(&tmux.path("code")),
    ));
    assert_eq!(tmux.wait_file("code"), "0", "{}", tmux.history());
    drop(planted);
    let history = tmux.history();
    let said = history
        .lines()
        .find_map(|l| l.split("the command's output is in ").nth(1))
        .unwrap_or_else(|| panic!("no output file named:\n{history}"));
    let output = PathBuf::from(said.trim());
    assert_eq!(output.parent(), Some(std::env::temp_dir().as_path()));
    let text = fs::read_to_string(&output).unwrap();
    let _ = fs::remove_file(&output);
    assert_eq!(text, "from-the-command\n");
}

#[test]
fn tui_exit_on_end_closes_with_the_command_and_a_signal_closes_the_final_screen() {
    require_root();
    // --exit-on-end (scripts): the view closes by itself with the command's status.
    let tmux = Tmux::start(100, 30);
    tmux.line(&format!(
        "stty -g > {before}; {bin} --tui --exit-on-end --source model -q --command-output \
         {output} -- sh -c 'sleep 2; exit 3'; echo $? > {code}; stty -g > {after}",
        before = shell_quote(&tmux.path("before")),
        bin = shell_quote(&bin("cg-trace")),
        output = shell_quote(&tmux.path("command.out")),
        code = shell_quote(&tmux.path("code")),
        after = shell_quote(&tmux.path("after")),
    ));
    tmux.wait_for("the view of the command", |s| {
        s.contains("cg-trace · `sh -c")
    });
    assert_eq!(tmux.wait_file("code"), "3");
    tmux.assert_terminal_restored("before", "after");

    // SIGTERM while the final figures are on screen: the view closes and the report is
    // written (the session's own signal handling has ended by then).
    let report = tmux.path("r.json");
    tmux.line(&format!(
        "stty -g > {before}; sh -c \"echo \\$\\$ > {pid}; exec {bin} --tui --source model -q -o \
         {report} --command-output {output} -- sh -c 'exit 5'\"; echo $? > {code}; stty -g > \
         {after}",
        before = shell_quote(&tmux.path("before2")),
        pid = shell_quote(&tmux.path("pid")),
        bin = shell_quote(&bin("cg-trace")),
        report = shell_quote(&report),
        output = shell_quote(&tmux.path("command2.out")),
        code = shell_quote(&tmux.path("code2")),
        after = shell_quote(&tmux.path("after2")),
    ));
    tmux.wait_for("the final screen", |s| {
        s.contains("the command ended: exit status 5")
    });
    let pid: i32 = tmux.wait_file("pid").parse().unwrap();
    // SAFETY: signalling the cg-trace the test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(tmux.wait_file("code2"), "5", "the command's status");
    tmux.assert_terminal_restored("before2", "after2");
    let report: Value = cg_tests::read_report(&report);
    assert_adds_up(&report);
    assert_eq!(report["meta"]["stop_reason"], "command exited");
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
         {output} -- {funcs} --calls 1000000 --units 40; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        funcs = shell_quote(&bin("cg-funcs")),
        output = shell_quote(&tmux.path("command.out")),
        code = shell_quote(&tmux.path("code")),
    ));
    // The wrapped command is selected first; its probed functions show with their calls.
    // (It runs long enough for q to come first: once it ends, the view would stay up with
    // its final figures, and q would give its own status.)
    let energy_of = |screen: &str, name: &str| -> f64 {
        let Some(line) = screen.lines().find(|l| l.starts_with(name)) else {
            return 0.0;
        };
        // FUNCTION MODULE CALLS CPU s ENERGY J SELF J AVG W
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields[fields.len() - 3].parse().unwrap_or(0.0)
    };
    // Enough energy that two decimals resolve the ratio.
    let screen = tmux.wait_for("the function pane with 0.2 J in cg_work_a", |s| {
        s.contains("functions of") && s.contains("cg_work_b") && energy_of(s, "cg_work_a") >= 0.2
    });
    assert!(
        screen.contains("(uprobe)") && screen.contains("CALLS"),
        "{screen}"
    );
    // cg_work_b does twice cg_work_a's work (loose: a live window of a few intervals).
    let (a, b) = (
        energy_of(&screen, "cg_work_a"),
        energy_of(&screen, "cg_work_b"),
    );
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

/// A user that only NSS knows (a systemd userdb drop-in, read by `nss-systemd`), removed on drop.
struct NssUser {
    files: [PathBuf; 2],
}

impl Drop for NssUser {
    fn drop(&mut self) {
        for file in &self.files {
            let _ = fs::remove_file(file);
        }
    }
}

/// A child killed on drop, also when the test fails.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_user_column_names_users_that_only_nss_knows() {
    require_root();
    let known = |what: &str| {
        Command::new("getent")
            .args(["passwd", what])
            .output()
            .expect("getent")
            .status
            .success()
    };
    let name = "cgnss";
    let uid = (61_000..62_000)
        .find(|uid| !known(&uid.to_string()))
        .expect("a free uid");
    assert!(!known(name), "a user {name} already exists");
    let dir = Path::new("/run/userdb");
    fs::create_dir_all(dir).unwrap();
    let user = NssUser {
        files: [
            dir.join(format!("{name}.user")),
            dir.join(format!("{uid}.user")),
        ],
    };
    fs::write(
        &user.files[0],
        format!(
            r#"{{"userName":"{name}","uid":{uid},"gid":{uid},"disposition":"regular","homeDirectory":"/nonexistent"}}"#
        ),
    )
    .unwrap();
    std::os::unix::fs::symlink(format!("{name}.user"), &user.files[1]).unwrap();
    if !known(name) {
        panic!(
            "nss-systemd does not read /run/userdb here: is `systemd` on the passwd line of /etc/nsswitch.conf?"
        );
    }
    assert!(
        !fs::read_to_string("/etc/passwd").unwrap().contains(name),
        "{name} is in /etc/passwd: the test would not show NSS at work"
    );
    let sleeper = Killed(
        Command::new("setpriv")
            .args([
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
            ])
            // It wakes every 100 ms, so the probes see it run.
            .args(["sh", "-c", "while :; do sleep 0.1; done"])
            .spawn()
            .expect("setpriv"),
    );
    let pid = sleeper.0.id().to_string();
    let tmux = Tmux::start(130, 30);
    tmux.line(&format!(
        "{bin} top --source model --refresh 300 -q; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("the view", |s| table_rows(s).len() >= 3);
    tmux.keys(&["/"]);
    tmux.line(&pid);
    let screen = tmux.wait_for("the sleeper's row", |s| {
        table_rows(s)
            .iter()
            .any(|row| row.split_whitespace().next() == Some(pid.as_str()))
    });
    let row = table_rows(&screen)
        .into_iter()
        .find(|row| row.split_whitespace().next() == Some(pid.as_str()))
        .unwrap();
    assert_eq!(
        row.split_whitespace().nth(2),
        Some(name),
        "the USER column of {row}\n{screen}"
    );
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "0");
}

#[test]
fn the_user_column_names_the_user_of_processes_gone_before_proc_was_read() {
    require_root();
    // A copy of cg-burn under a name of its own, run again and again as nobody: each burns
    // 20 ms of CPU and exits, mostly before the view reads /proc; the uid comes from the
    // kernel's exec event.
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let burner = dir.path().join("cg-shortlived");
    fs::copy(bin("cg-burn"), &burner).unwrap();
    let script = format!(
        "while :; do {} --self 20; sleep 0.05; done",
        shell_quote(&burner)
    );
    let _loop = Killed(
        cg_tests::as_nobody()
            .args(["sh", "-c", &script])
            .spawn()
            .expect("setpriv"),
    );
    let tmux = Tmux::start(130, 40);
    tmux.line(&format!(
        "{bin} top --source model --refresh 300 -q; echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("the view", |s| table_rows(s).len() >= 3);
    tmux.keys(&["/"]);
    tmux.line("cg-shortlived");
    let screen = tmux.wait_for("short-lived processes that exited, filtered", |s| {
        let rows = table_rows(s);
        rows.iter().all(|row| row.contains("cg-shortlived"))
            && rows.iter().filter(|row| row.contains("[exited]")).count() >= 3
    });
    for row in table_rows(&screen) {
        assert_eq!(
            row.split_whitespace().nth(2),
            Some("nobody"),
            "the USER column of {row}\n{screen}"
        );
    }
    tmux.keys(&["q"]);
    assert_eq!(tmux.wait_file("code"), "0");
}

#[test]
fn h_lists_a_worker_pools_threads_under_it_busiest_first_and_hides_them_again() {
    require_root();
    let tmux = Tmux::start(110, 30);
    // One thread busy for up to 60 s of CPU, four sleeping: the only target, so selected.
    tmux.line(&format!(
        "{bin} --tui --source model -q --refresh 300 --command-output {output} -- {pool} 60 4; \
         echo $? > {code}",
        bin = shell_quote(&bin("cg-trace")),
        output = shell_quote(&tmux.path("command.out")),
        pool = shell_quote(&bin("cg-pool")),
        code = shell_quote(&tmux.path("code")),
    ));
    tmux.wait_for("the pool in the table", |s| {
        table_rows(s).iter().any(|r| r.contains("cg-pool"))
    });
    tmux.keys(&["H"]);
    let screen = tmux.wait_for("its threads, the busy one first", |s| {
        let rows = table_rows(s);
        rows.len() >= 7 && rows[1].contains("├─ busy") && rows[6].contains("└─ ")
    });
    let rows = table_rows(&screen);
    assert!(rows[0].contains("cg-pool"), "{screen}");
    let idle = rows[2..7].iter().filter(|r| r.contains("idle-")).count();
    assert_eq!(idle, 4, "{screen}");
    // The busy thread's TID is its own, not the process's pid.
    let pid = rows[0].split_whitespace().next().unwrap();
    let tid = rows[1].split_whitespace().next().unwrap();
    assert_ne!(pid, tid, "{screen}");
    tmux.keys(&["H"]);
    tmux.wait_for("the threads hidden again", |s| {
        let rows = table_rows(s);
        rows.iter().any(|r| r.contains("cg-pool")) && !rows.iter().any(|r| r.contains("─ busy"))
    });
    tmux.keys(&["q"]);
    tmux.wait_file("code");
}
