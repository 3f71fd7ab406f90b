//! End-to-end tests of the command line's conventions, as htop, perf and py-spy users expect
//! them: `-q` prints errors only, log colour only on a terminal and never with `NO_COLOR`, a
//! command given without `--` gets a hint, `-F`/`--freq`, `--version` with the build's facts.
//! Root, real binary, real eBPF. Run serially (`--test-threads=1`).

use std::process::{Command, Output, Stdio};

use cg_tests::{bin, cg_trace, cg_trace_with_env, require_root};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn cg(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin("cg-trace"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .expect("running cg-trace")
}

#[test]
fn quiet_prints_only_errors_and_the_source_choice_stays_in_the_report() {
    require_root();
    let run = cg_trace(&["-q", "--", "true"]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert_eq!(run.stderr(), "", "-q printed more than errors");
    let report = run.report();
    let selection = report["meta"]["source_selection"].as_str().unwrap_or("");
    assert!(
        !selection.is_empty(),
        "the report must say which source and why"
    );
    // A failing command keeps its status, and says nothing more.
    let run = cg_trace(&["-q", "--", "false"]);
    assert_eq!(run.code(), Some(1));
    assert_eq!(run.stderr(), "");
    // Errors still show.
    let out = cg(&["-q", "--pid", "999999999"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("999999999"),
        "{}",
        text(&out.stderr)
    );
    // Without -q the source line is there (what -q removes).
    let run = cg_trace(&["--", "true"]);
    assert!(run.stderr().contains("energy source:"), "{}", run.stderr());
}

#[test]
fn log_lines_carry_no_colour_when_stderr_is_not_a_terminal() {
    require_root();
    let run = cg_trace_with_env(&["-q", "--", "true"], &[("CG_TRACE_LOG", "debug")]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let stderr = run.stderr();
    // The log was asked for, so it shows, even with -q; but plain.
    assert!(stderr.contains("energy source"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "escape codes in {stderr:?}");
}

/// Runs `command` (a shell line) with a terminal on its stdin, stdout and stderr (util-linux
/// `script`), returning what the terminal showed.
fn on_a_terminal(command: &str) -> String {
    let out = Command::new("script")
        .args(["-q", "-e", "-c", command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("running script (util-linux)");
    assert!(out.status.success(), "{command}: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn log_lines_are_coloured_on_a_terminal_unless_no_color_is_set() {
    require_root();
    let cg = bin("cg-trace");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    let line = |env: &str| {
        format!(
            "env -u NO_COLOR {env} CG_TRACE_LOG=info {} -q -o {} -- true",
            cg.display(),
            report.display()
        )
    };
    let shown = on_a_terminal(&line(""));
    assert!(shown.contains("energy source"), "{shown}");
    assert!(
        shown.contains("\x1b["),
        "no colour on a terminal: {shown:?}"
    );
    for no_color in ["NO_COLOR=1", "NO_COLOR=yes"] {
        let shown = on_a_terminal(&line(no_color));
        assert!(shown.contains("energy source"), "{shown}");
        assert!(!shown.contains('\x1b'), "{no_color}: colour in {shown:?}");
    }
}

#[test]
fn a_command_without_double_dash_is_told_to_put_it_before_the_command() {
    let out = cg(&["ls", "-la"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("put `--` before it: `cg-trace -- ls -la`"),
        "{stderr}"
    );
    let out = cg(&["-o", "r.json", "ls"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("`cg-trace -o r.json -- ls`"),
        "{}",
        text(&out.stderr)
    );
    // A misspelt subcommand is offered both readings.
    let out = cg(&["sourcs"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("did you mean the subcommand `sources`"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn freq_is_the_short_and_long_alias_of_sample_hz() {
    let help = text(&cg(&["--help"], &[]).stdout);
    assert!(help.contains("-F, --sample-hz <HZ>"), "{help}");
    assert!(help.contains("--freq"), "{help}");
    // Out of range through either name is the same error.
    for flag in ["-F", "--freq", "--sample-hz"] {
        let out = cg(&[flag, "0", "--all"], &[]);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        assert!(
            text(&out.stderr).contains("0 is not in 1..=10000"),
            "{flag}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn version_names_the_commit_and_the_ebpf_object() {
    let out = cg(&["--version"], &[]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some(concat!("cg-trace ", env!("CARGO_PKG_VERSION")))
    );
    let commit = lines
        .next()
        .and_then(|l| l.strip_prefix("commit: "))
        .unwrap_or_else(|| panic!("no commit line in {stdout}"));
    // Built from a git checkout: one of its commits (HEAD's, or an older one when the binary
    // predates a new commit); built from sources without .git: "unknown".
    let in_git = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .is_ok_and(|o| o.status.success());
    if in_git {
        assert!(
            commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{commit}"
        );
        let known = Command::new("git")
            .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("git");
        assert!(
            known.success(),
            "{commit} is not a commit of this repository"
        );
    } else {
        assert_eq!(commit, "unknown");
    }
    let ebpf = lines
        .next()
        .and_then(|l| l.strip_prefix("eBPF object: "))
        .unwrap_or_else(|| panic!("no eBPF line in {stdout}"));
    let (size, rest) = ebpf.split_once(" bytes, sha256 ").expect(ebpf);
    assert!(size.parse::<u64>().is_ok_and(|n| n > 1000), "{ebpf}");
    let (sha, built_by) = rest.split_once(", built by ").expect(ebpf);
    assert!(
        sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()),
        "{ebpf}"
    );
    assert!(
        built_by.contains("bpf-linker") && built_by.contains("rustc"),
        "{ebpf}"
    );
    // -V stays one line, as clap gives it.
    let short = text(&cg(&["-V"], &[]).stdout);
    assert_eq!(
        short.trim(),
        concat!("cg-trace ", env!("CARGO_PKG_VERSION"))
    );
}

/// The completions of `words` (the last one being completed) from a bash completion script,
/// run in a real bash.
fn bash_complete(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let line = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _cg__trace cg-trace {} {}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words.len() - 1,
        quoted[words.len() - 1],
        quoted[words.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &line])
        .output()
        .expect("bash");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // An empty COMPREPLY prints one empty line.
    text(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn completions_for_bash_zsh_and_fish_come_from_the_options() {
    let dir = tempfile::tempdir().unwrap();
    let bash = dir.path().join("cg-trace.bash");
    let out = cg(&["completions", "bash"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(&bash, &out.stdout).unwrap();
    let syntax = Command::new("bash").arg("-n").arg(&bash).output().unwrap();
    assert!(syntax.status.success(), "bash -n: {}", text(&syntax.stderr));
    assert_eq!(
        bash_complete(&bash, &["cg-trace", "--sam"]),
        ["--sample-hz"]
    );
    assert_eq!(
        bash_complete(&bash, &["cg-trace", "--source", ""]),
        ["auto", "perf", "powercap", "model"]
    );
    let zsh = text(&cg(&["completions", "zsh"], &[]).stdout);
    assert!(zsh.starts_with("#compdef cg-trace"), "{zsh}");
    assert!(zsh.contains("--sample-hz") && zsh.contains("--freq"));
    let fish = text(&cg(&["completions", "fish"], &[]).stdout);
    assert!(fish.contains("complete -c cg-trace"), "{fish}");
    assert!(fish.contains("sample-hz"));
    // The hidden options (benchmarks, tests) and the hidden man-page are not offered.
    let bash_text = std::fs::read_to_string(&bash).unwrap();
    for (shell, script) in [("bash", &bash_text), ("zsh", &zsh), ("fish", &fish)] {
        for hidden in ["--bench-", "bench-noop", "perf-counters-from", "man-page"] {
            assert!(
                !script.contains(hidden),
                "{shell} completion offers {hidden}"
            );
        }
    }
    assert!(bash_complete(&bash, &["cg-trace", "--bench"]).is_empty());
    assert_eq!(
        bash_complete(&bash, &["cg-trace", "--perf"]),
        ["--perf-root"]
    );
    // A shell we do not know is bad usage.
    assert_eq!(cg(&["completions", "tcsh"], &[]).status.code(), Some(2));
}

/// `page` as `man -l` shows it (groff's warnings on stderr fail the test), without the
/// overstrikes of bold and underline.
fn rendered(page: &std::path::Path) -> String {
    let rendered = Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("MAN_KEEP_FORMATTING", "0")
        .output()
        .expect("man (apt package man-db)");
    assert!(rendered.status.success(), "{}", text(&rendered.stderr));
    assert_eq!(text(&rendered.stderr), "", "man -l warned");
    // Bold and underline come as overstrikes (`N\bN`, `_\bx`): keep the last character.
    let mut shown = String::new();
    for c in text(&rendered.stdout).chars() {
        if c == '\x08' {
            shown.pop();
        } else {
            shown.push(c);
        }
    }
    shown
}

#[test]
fn the_man_page_renders_and_documents_the_main_options() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("cg-trace.1");
    let out = cg(&["man-page"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(&page, &out.stdout).unwrap();
    let shown = rendered(&page);
    for needle in [
        "NAME",
        "SYNOPSIS",
        "--pid",
        "--all",
        "--output",
        "--source",
        "--sample-hz",
        "--func",
        "--profile",
        "--quiet",
        "sources",
        "top",
        "EXAMPLES",
        "cg-trace -- ./build.sh",
        "EXIT STATUS",
        "CG_TRACE_LOG",
        "NO_COLOR",
        "setcap",
    ] {
        assert!(
            shown.contains(needle),
            "the rendered page lacks {needle:?}:\n{shown}"
        );
    }
}

#[test]
fn quiet_is_quiet_with_repeat_and_a_csv_report() {
    require_root();
    // Three runs burning 20 ms, 150 ms and 400 ms of CPU: the targets' energy (what the noise
    // verdict judges) is noisy by any measure, so without -q the noise warning shows.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("r.csv");
    let counter = dir.path().join("runs");
    let script = format!(
        r#"c=$(cat "$0" 2>/dev/null); c=${{c:-1}}; echo $((c + 1)) > "$0"
           case $c in 1) ms=20;; 2) ms=150;; *) ms=400;; esac; exec {} --self $ms"#,
        bin("cg-burn").display()
    );
    let run = |quiet: bool| {
        let _ = std::fs::remove_file(&counter);
        let mut args = vec!["--source", "model", "--repeat", "3", "--csv"];
        args.push(csv.to_str().unwrap());
        if quiet {
            args.push("-q");
        }
        args.extend(["--", "sh", "-c", &script, counter.to_str().unwrap()]);
        cg_trace(&args)
    };
    let loud = run(false);
    assert_eq!(loud.code(), Some(0), "{}", loud.stderr());
    assert!(
        loud.stderr().contains("the runs are noisy"),
        "{}",
        loud.stderr()
    );
    assert!(
        loud.stderr().contains("CSV report written"),
        "{}",
        loud.stderr()
    );
    let quiet = run(true);
    assert_eq!(quiet.code(), Some(0), "{}", quiet.stderr());
    assert_eq!(quiet.stderr(), "", "-q printed more than errors");
    assert!(std::fs::metadata(&csv).unwrap().len() > 0);
}

/// The `cg-trace…(N)` pages a rendered man page names.
fn pages_named(shown: &str) -> Vec<String> {
    let mut named = Vec::new();
    for (at, _) in shown.match_indices("cg-trace") {
        let tail = &shown[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(tail.len());
        if let Some(section) = tail[end..]
            .strip_prefix('(')
            .and_then(|rest| rest.split(')').next())
        {
            named.push(format!("{}.{section}", &tail[..end]));
        }
    }
    named
}

#[test]
fn every_man_page_a_page_refers_to_is_generated_and_renders() {
    let out = cg(&["man-page", "--list"], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pages: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    for expected in [
        "cg-trace.1",
        "cg-trace-diff.1",
        "cg-trace-report.1",
        "cg-trace-top.1",
    ] {
        assert!(
            pages.iter().any(|p| p == expected),
            "{expected} not in {pages:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut references = 0;
    for name in &pages {
        let subcommand = name
            .strip_prefix("cg-trace-")
            .and_then(|n| n.strip_suffix(".1"));
        let args: Vec<&str> = std::iter::once("man-page").chain(subcommand).collect();
        let out = cg(&args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let page = dir.path().join(name);
        std::fs::write(&page, &out.stdout).unwrap();
        let shown = rendered(&page);
        for named in pages_named(&shown) {
            assert!(
                pages.contains(&named),
                "{name} refers to {named}, which is not generated"
            );
            references += 1;
        }
    }
    // The main page names each subcommand's page; each of those names cg-trace(1).
    assert!(
        references >= 2 * (pages.len() - 1),
        "{references} references"
    );
    // A page that does not exist is bad usage, said with the ones that do.
    let out = cg(&["man-page", "nosuch"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("give one of sources"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn diff_and_report_show_and_take_only_their_own_options() {
    let source_options = [
        "--source",
        "--powercap-root",
        "--power-log",
        "--model-watts",
        "--no-gpu",
    ];
    for subcommand in ["diff", "report"] {
        let out = cg(&[subcommand, "--help"], &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let help = text(&out.stdout);
        for option in source_options {
            assert!(
                !help.contains(option),
                "`{subcommand} --help` lists {option}:\n{help}"
            );
        }
    }
    for subcommand in ["sources", "top", "serve"] {
        let help = text(&cg(&[subcommand, "--help"], &[]).stdout);
        for option in source_options {
            assert!(
                help.contains(option),
                "`{subcommand} --help` lacks {option}:\n{help}"
            );
        }
    }
    // Given anyway, after or before the subcommand: bad usage, said.
    let out = cg(&["diff", "a.json", "b.json", "--source", "model"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = cg(
        &["--power-log", "p.csv", "report", "r.json", "-o", "r.html"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--power-log is a run option, not one of `report`"),
        "{}",
        text(&out.stderr)
    );
    // What docs/modes-and-options.md documents still works: the source options before
    // `sources` (and `top`).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("powercap");
    std::fs::create_dir_all(root.join("intel-rapl:0")).unwrap();
    std::fs::write(root.join("intel-rapl:0/name"), "package-0\n").unwrap();
    for args in [
        [
            "--powercap-root",
            root.to_str().unwrap(),
            "sources",
            "--json",
        ],
        [
            "sources",
            "--json",
            "--powercap-root",
            root.to_str().unwrap(),
        ],
    ] {
        let out = cg(&args, &[]);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(root.to_str().unwrap()),
            "{args:?}: {}",
            text(&out.stdout)
        );
    }
    let out = cg(&["--source", "model", "sources", "--source", "perf"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("given both before and after"),
        "{}",
        text(&out.stderr)
    );
}
