//! End-to-end tests that root does not become a way in: outputs never follow links nor land
//! where the user could not write, a setuid install refuses to run, sudo's variables are
//! believed only from a real sudo, the wrapped command gets the user's environment, a JIT
//! map is read only when it is the process's own, and attach errors name the OS error.
//! Root, real binary, real eBPF; the sudo tests run the real `sudo` as `nobody` through a
//! temporary sudoers drop-in that allows only a private copy of cg-trace and is removed
//! again whatever happens. Run serially (`--test-threads=1`).

use std::{
    ffi::CString,
    fs,
    os::unix::{
        ffi::OsStrExt,
        fs::{MetadataExt, PermissionsExt, lchown, symlink},
    },
    path::{Path, PathBuf},
    process::{Command, Output},
};

use cg_tests::{bin, read_report, require_root, target_dir};
use serde_json::Value;

const NOBODY: u32 = 65534;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A root-owned file with a secret in it, and its owner and content to check afterwards.
struct Victim {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Victim {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("root-only");
        fs::write(&path, "ROOT SECRET\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        Victim { _dir: dir, path }
    }

    fn assert_untouched(&self) {
        let meta = fs::metadata(&self.path).unwrap();
        assert_eq!(fs::read_to_string(&self.path).unwrap(), "ROOT SECRET\n");
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "the victim changed owner");
        assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    }
}

/// A directory that `nobody` owns (for outputs under sudo).
fn nobodys_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    dir
}

#[test]
fn planted_links_at_output_names_are_never_followed() {
    require_root();
    // As the issue reproduces it: links in the output directory to root-only files, with
    // sudo's variables set (they must not matter here: no sudo started us).
    let victims = [Victim::new(), Victim::new()];
    let dir = tempfile::tempdir().unwrap();
    symlink(&victims[0].path, dir.path().join(".report.json.partial")).unwrap();
    symlink(&victims[1].path, dir.path().join("e.folded")).unwrap();
    let marker = dir.path().join("ran");
    let run = |folded: bool| {
        let mut cmd = Command::new(bin("cg-trace"));
        cmd.current_dir(dir.path())
            .args(["--source", "model", "-q", "-o", "report.json"]);
        if folded {
            cmd.args(["--folded", "e.folded"]);
        }
        cmd.args(["--", "touch"])
            .arg(&marker)
            .env("SUDO_UID", "65534")
            .env("SUDO_GID", "65534")
            .env("SUDO_USER", "nobody")
            .output()
            .unwrap()
    };
    // A link at the folded stacks' name: refused before anything runs.
    let output = run(true);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("e.folded exists and is a symbolic link"),
        "{}",
        text(&output.stderr)
    );
    assert!(
        !marker.exists(),
        "the command ran though an output was refused"
    );
    // A link at the old fixed temporary name: never opened, the report is a new file.
    let output = run(false);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report = fs::symlink_metadata(dir.path().join("report.json")).unwrap();
    assert!(report.file_type().is_file());
    assert_eq!(
        report.uid(),
        0,
        "no sudo started cg-trace: the report stays root's"
    );
    let _: Value = read_report(&dir.path().join("report.json"));
    for victim in &victims {
        victim.assert_untouched();
    }
    // Nothing is left behind but what the test put there and the report.
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [".report.json.partial", "e.folded", "ran", "report.json"]
    );
}

#[test]
fn sudo_variables_without_a_sudo_parent_are_ignored() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let output = Command::new(bin("cg-trace"))
        .args(["--source", "model", "-q", "-o"])
        .arg(&out)
        .args(["--", "id", "-u"])
        .env("SUDO_UID", "4242")
        .env("SUDO_GID", "4242")
        .env("SUDO_USER", "mallory")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout).trim(),
        "0",
        "the command ran as a forged user"
    );
    assert_eq!(fs::metadata(&out).unwrap().uid(), 0);
}

/// A private copy of cg-trace in a root-owned directory that others may enter (for setuid
/// and sudo tests: the original's mode is never changed).
struct Copy {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Copy {
    fn new() -> Self {
        let dir = tempfile::tempdir_in(target_dir()).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("cg-trace");
        fs::copy(bin("cg-trace"), &path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        // Every directory above must be enterable by others.
        for dir in path.ancestors().skip(1) {
            let mode = fs::metadata(dir).unwrap().permissions().mode();
            assert!(
                mode & 0o001 != 0,
                "{} is not enterable by other users (mode {mode:o}): these tests run cg-trace \
                 as nobody",
                dir.display()
            );
        }
        Copy { _dir: dir, path }
    }
}

/// `setpriv` to nobody with the bounding set left alone (unlike `cg_tests::as_nobody`): a
/// setuid-root program run from here (sudo) must still be able to gain its privileges.
fn as_nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ]);
    cmd
}

#[test]
fn a_setuid_install_refuses_to_run_and_runs_nothing() {
    require_root();
    let copy = Copy::new();
    let c = CString::new(copy.path.as_os_str().as_bytes()).unwrap();
    // SAFETY: statvfs writes into the struct we own.
    let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut vfs) }, 0);
    assert!(
        vfs.f_flag & libc::ST_NOSUID == 0,
        "{} is on a nosuid mount: the setuid test needs one that honours the bit",
        copy.path.display()
    );
    fs::set_permissions(&copy.path, fs::Permissions::from_mode(0o4755)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let marker = dir.path().join("ran");
    let output = as_nobody()
        .arg(&copy.path)
        .args(["--source", "model", "-q", "--", "touch"])
        .arg(&marker)
        .env("SUDO_UID", "4242")
        .env("SUDO_GID", "4242")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("setuid") && stderr.contains("sudo") && stderr.contains("setcap"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the command ran under a setuid install");
}

/// A sudoers drop-in that lets nobody run one binary as root without a password, removed
/// when dropped (also when the test fails). Written under a name sudo ignores (it holds a
/// dot), checked with visudo, then renamed into place; leftovers of killed test processes
/// are removed first. The binary lives in a root-owned directory under `target/`, so a
/// leftover rule names a path no other user can create.
struct SudoRule {
    path: PathBuf,
}

impl SudoRule {
    const PREFIX: &'static str = "cg-trace-test-";

    fn allow_nobody(binary: &Path) -> Self {
        assert!(
            Path::new("/usr/bin/sudo").exists(),
            "these tests need sudo (`cargo xtask setup` installs it)"
        );
        // Leftovers of test processes that were killed (another one may be running).
        if let Ok(entries) = fs::read_dir("/etc/sudoers.d") {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let owner = name
                    .trim_start_matches('.')
                    .strip_prefix(Self::PREFIX)
                    .map(|rest| rest.trim_end_matches(".new"));
                if let Some(pid) = owner
                    && !Path::new("/proc").join(pid).exists()
                {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let name = format!("{}{}", Self::PREFIX, std::process::id());
        let staging = PathBuf::from(format!("/etc/sudoers.d/.{name}.new"));
        let path = PathBuf::from(format!("/etc/sudoers.d/{name}"));
        fs::write(
            &staging,
            format!("nobody ALL=(root) NOPASSWD: {}\n", binary.display()),
        )
        .unwrap();
        fs::set_permissions(&staging, fs::Permissions::from_mode(0o440)).unwrap();
        let check = Command::new("visudo").arg("-cqf").arg(&staging).status();
        if !check.is_ok_and(|s| s.success()) {
            let _ = fs::remove_file(&staging);
            panic!("visudo refused the test's sudoers rule");
        }
        fs::rename(&staging, &path).unwrap();
        SudoRule { path }
    }
}

impl Drop for SudoRule {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Runs the copy through the real sudo as nobody, in `cwd`.
fn sudo_as_nobody(copy: &Copy, cwd: &Path, args: &[&str]) -> Output {
    as_nobody()
        .current_dir(cwd)
        .arg("sudo")
        .arg("-n")
        .arg(&copy.path)
        .args(args)
        .output()
        .unwrap()
}

/// nobody's passwd entry: (home, shell).
fn nobodys_entry() -> (String, String) {
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.split(':').nth(2) == Some("65534"))
        .expect("nobody in /etc/passwd");
    let fields: Vec<&str> = line.split(':').collect();
    (fields[5].to_string(), fields[6].to_string())
}

#[test]
fn under_real_sudo_the_command_runs_as_the_user_with_their_environment() {
    require_root();
    let copy = Copy::new();
    let _rule = SudoRule::allow_nobody(&copy.path);
    let dir = nobodys_dir();
    let out = dir.path().join("r.json");
    let output = sudo_as_nobody(
        &copy,
        dir.path(),
        &[
            "--source",
            "model",
            "-q",
            "-o",
            out.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "id -u; id -g; echo \"$HOME|$USER|$LOGNAME|$SHELL|$MAIL\"",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let (home, shell) = nobodys_entry();
    let stdout = text(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "65534",
            "65534",
            &format!("{home}|nobody|nobody|{shell}|/var/mail/nobody")
        ]
    );
    // The report is nobody's from the start.
    let meta = fs::metadata(&out).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY));
}

#[test]
fn under_real_sudo_outputs_are_created_only_where_the_user_could() {
    require_root();
    let copy = Copy::new();
    let _rule = SudoRule::allow_nobody(&copy.path);
    let victim = Victim::new();
    let dir = nobodys_dir();
    // nobody's own links to a root-only file, at the folded stacks' name and at the old
    // temporary name of the report.
    for name in ["e.folded", ".r.json.partial"] {
        let link = dir.path().join(name);
        symlink(&victim.path, &link).unwrap();
        lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let marker = dir.path().join("ran");
    let base = ["--source", "model", "-q"];
    let command = ["--", "touch", marker.to_str().unwrap()];
    let args = |extra: &[&str]| -> Vec<String> {
        base.iter()
            .chain(extra)
            .chain(&command)
            .map(|s| s.to_string())
            .collect()
    };
    let run = |extra: &[&str]| {
        let args = args(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        sudo_as_nobody(&copy, dir.path(), &args)
    };
    let output = run(&["-o", "r.json", "--folded", "e.folded"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("symbolic link"));
    assert!(!marker.exists());
    // A directory only root may write to: refused as nobody, before the command runs.
    let root_only = tempfile::tempdir().unwrap();
    fs::set_permissions(root_only.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let target = root_only.path().join("r.json");
    let output = run(&["-o", target.to_str().unwrap()]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("as uid 65534 (nobody)") && stderr.contains("os error 13"),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert_eq!(fs::read_dir(root_only.path()).unwrap().count(), 0);
    // A file of root's in nobody's directory is not replaced either.
    let roots = dir.path().join("roots.json");
    fs::write(&roots, "root's\n").unwrap();
    let output = run(&["-o", "roots.json"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("belongs to uid 0"));
    assert_eq!(fs::read_to_string(&roots).unwrap(), "root's\n");
    // And where nobody may write, the report is written and the link left alone.
    let output = run(&["-o", "r.json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        fs::metadata(dir.path().join("r.json")).unwrap().uid(),
        NOBODY
    );
    assert_eq!(fs::metadata(&marker).unwrap().uid(), NOBODY);
    victim.assert_untouched();
}

#[test]
fn attach_errors_name_the_os_error() {
    require_root();
    // Only CAP_BPF and CAP_PERFMON. Through uprobe_multi links (Linux 6.6+) function probes
    // need no more; one perf event per probe (older kernels, forced here) needs
    // CAP_SYS_ADMIN on this kernel, and the refusal must name the OS error.
    let run = |perf_events: bool| {
        let mut command = Command::new("setpriv");
        command
            .args(["--inh-caps=-all", "--bounding-set=-all,+bpf,+perfmon"])
            .arg(bin("cg-trace"))
            .args(["--source", "model", "-q", "--func", "main", "--"])
            .arg(bin("cg-burn"))
            .args(["--self", "50"]);
        if perf_events {
            command.env("CG_TRACE_BENCH_PERF_UPROBES", "1");
        }
        command.output().expect("setpriv (util-linux)")
    };
    let output = run(false);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let output = run(true);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("perf_event_open") && stderr.contains("(os error 13)"),
        "the OS error is missing: {stderr}"
    );
    assert!(stderr.contains("CAP_SYS_ADMIN"), "{stderr}");
}

/// Runs cg-jit under `--profile` with its JIT map made as `mode`; returns the report and the
/// workload's pid, and removes the map.
fn profile_jit(mode: &str) -> (Value, u32) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let output = Command::new(bin("cg-trace"))
        .args(["--source", "model", "-q", "--profile", "-o"])
        .arg(&out)
        .arg("--")
        .arg(bin("cg-jit"))
        .args([mode, "1500"])
        .output()
        .unwrap();
    let pid: u32 = text(&output.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("cg-jit printed no pid: {}", text(&output.stderr)));
    let _ = fs::remove_file(format!("/tmp/perf-{pid}.map"));
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let report = read_report(&out);
    (report, pid)
}

fn jit_symbols(report: &Value) -> Vec<String> {
    report["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter(|f| f["module"] == "[jit]")
        .map(|f| f["symbol"].as_str().unwrap_or("").to_string())
        .collect()
}

fn profiling_notes(report: &Value) -> String {
    report["meta"]["function_profiling"]["notes"].to_string()
}

#[test]
fn a_jit_map_is_read_when_it_is_the_processs_own() {
    require_root();
    let (report, _) = profile_jit("regular");
    assert!(
        jit_symbols(&report).contains(&"cg_jit_loop".to_string()),
        "the JIT's own map names its code: {:#}",
        report["functions"]
    );
}

#[test]
fn a_jit_map_that_is_a_link_is_not_followed() {
    require_root();
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret");
    let (report, pid) = profile_jit(&format!("link:{}", secret.display()));
    let symbols = jit_symbols(&report);
    assert!(
        !symbols.iter().any(|s| s.contains("SECRET")),
        "a linked file's text reached the report: {symbols:?}"
    );
    let notes = profiling_notes(&report);
    assert!(
        notes.contains(&format!("/tmp/perf-{pid}.map")) && notes.contains("symbolic link"),
        "{notes}"
    );
}

#[test]
fn a_jit_map_of_another_user_is_not_read() {
    require_root();
    let (report, pid) = profile_jit("owner:65534");
    assert!(
        jit_symbols(&report).is_empty(),
        "another user's map named the code: {:#}",
        report["functions"]
    );
    let notes = profiling_notes(&report);
    assert!(
        notes.contains(&format!("/tmp/perf-{pid}.map")) && notes.contains("uid 65534"),
        "{notes}"
    );
}

// ---------------------------------------------------------------------------------------
// Hostile text: any user names their processes; every text output shows control
// characters escaped (as bash's `$'...'` writes them), never raw.

/// An OSC 52 clipboard write ended by BEL, hidden text (SGR 8), CR and LF before a forged
/// verdict, a C1 CSI (U+009B), a right-to-left override and an isolate.
const PAYLOAD: &str =
    "\x1b]52;c;QUJD\x07\x1b[8m\r\nresult: OK (no regression)\u{9b}2J\u{202e}\u{2066}";
/// The start of [`PAYLOAD`] as the outputs show it.
const PAYLOAD_SHOWN: &str = "\\x1b]52;c;QUJD\\x07\\x1b[8m";

/// Panics when `bytes` hold a control character other than a line feed (or one that
/// reorders text), or a line that starts with the forged verdict.
fn assert_nothing_raw(what: &str, bytes: &[u8]) {
    let text = String::from_utf8(bytes.to_vec())
        .unwrap_or_else(|_| panic!("{what}: not UTF-8: {}", text(bytes).escape_debug()));
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| {
            c != '\n'
                && (c.is_control()
                    || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
        })
        .collect();
    assert!(
        raw.is_empty(),
        "{what}: raw {raw:?} in:\n{}",
        text.escape_debug()
    );
    assert!(
        !text.lines().any(|l| l.starts_with("result: OK")),
        "{what}: a forged line:\n{text}"
    );
}

#[test]
fn hostile_process_names_reach_the_summary_the_log_and_the_page_escaped() {
    require_root();
    // argv[0] (`exec -a`) and an argument carry the payload (the argument also a very long
    // one); the script is several lines long, as `python3 -c` scripts are; prctl names the
    // thread with the payload.
    let script = "import ctypes, sys, time\n\
                  ctypes.CDLL(None).prctl(15, sys.argv[1].encode()[:15], 0, 0, 0)\n\
                  t = time.time()\n\
                  while time.time() - t < 0.3:\n    pass\n";
    let argument = format!("{PAYLOAD}{}", "x".repeat(5000));
    let run = cg_tests::cg_trace_with_env(
        &[
            "--source",
            "model",
            "--threads",
            "--",
            "bash",
            "-c",
            r#"exec -a "$0" /usr/bin/python3 -c "$1" "$2""#,
            PAYLOAD,
            script,
            &argument,
        ],
        &[("CG_TRACE_LOG", "debug")],
    );
    assert_eq!(run.code(), Some(0), "{}", run.stderr().escape_debug());
    assert_nothing_raw("the summary and the log", &run.output.stderr);
    assert_nothing_raw("stdout", &run.output.stdout);
    let stderr = run.stderr();
    // The process's row is one line, its name escaped, its figures after it.
    let row = stderr
        .lines()
        .find(|l| l.contains(PAYLOAD_SHOWN) && l.ends_with('%'))
        .unwrap_or_else(|| panic!("no row for the process:\n{stderr}"));
    assert!(row.contains("…"), "{row}");
    // The thread's own name (prctl) under it, escaped too.
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("tid ") && l.contains("\\x1b]52;c;Q")),
        "{stderr}"
    );
    // The report keeps the exact text.
    let report = run.report();
    let processes = report["processes"].as_array().unwrap();
    assert!(
        processes.iter().any(|p| p["cmdline"][0] == PAYLOAD),
        "{processes:?}"
    );

    // The page of that report.
    let dir = tempfile::tempdir().unwrap();
    let (json, page) = (dir.path().join("r.json"), dir.path().join("r.html"));
    fs::write(&json, report.to_string()).unwrap();
    let output = Command::new(bin("cg-trace"))
        .arg("report")
        .arg(&json)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let html = fs::read(&page).unwrap();
    assert_nothing_raw("the page", &html);
    assert!(text(&html).contains(PAYLOAD_SHOWN));
}

/// A report `diff` reads, as hand-made as an attacker would make it: `hostname`,
/// `cpu_model`, a process's command line and a function's name carry the payload.
fn hostile_report(hostname: &str, energy_j: f64) -> Value {
    serde_json::json!({
        "meta": {
            "schema_version": "1.3", "tool": "cg-trace", "run_id": "r1",
            "hostname": hostname, "cpu_model": PAYLOAD,
            "sources": [{"name": "perf", "provenance": "measured"}]
        },
        "processes": [{"comm": "app", "cmdline": [PAYLOAD, PAYLOAD],
                       "cpu_time_s": 0.5, "energy_j": energy_j / 2.0}],
        "functions": [],
        "function_totals": [{"symbol": PAYLOAD, "module": PAYLOAD, "cpu_time_s": 0.5,
                             "energy_j": energy_j / 4.0}],
        "totals": {
            "energy_j": energy_j, "attributed_energy_j": energy_j / 2.0, "cpu_time_s": 1.0,
            "domains": {"package-0": {"energy_j": energy_j, "attributed_energy_j": energy_j / 2.0, "top_level": true,
                                      "provenance": "measured"}}
        }
    })
}

#[test]
fn diff_shows_a_hostile_reports_text_escaped_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    // The file names are outside text too.
    let base = dir.path().join("base\x1b[8m.json");
    let new = dir.path().join("new\n\x1b]52;c;QUJD\x07.json");
    fs::write(&base, hostile_report("vm", 10.0).to_string()).unwrap();
    fs::write(&new, hostile_report(PAYLOAD, 20.0).to_string()).unwrap();
    for format in ["text", "markdown", "html", "json"] {
        let output = Command::new(bin("cg-trace"))
            .arg("diff")
            .args([&base, &new])
            .args(["--max-increase", "5", "--format", format])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(3), "{}", text(&output.stderr));
        assert_nothing_raw(&format!("diff --format {format}"), &output.stdout);
        assert_nothing_raw(&format!("diff --format {format} (stderr)"), &output.stderr);
        let stdout = text(&output.stdout);
        match format {
            "text" => {
                // The machines' warning, the group and the function rows, the file names.
                assert!(stdout.matches(PAYLOAD_SHOWN).count() >= 4, "{stdout}");
                assert!(
                    stdout.contains("new\\n\\x1b]52;c;QUJD\\x07.json"),
                    "{stdout}"
                );
                assert!(stdout.ends_with("result: REGRESSION\n"), "{stdout}");
            }
            "markdown" => {
                assert!(stdout.contains("\\\\x1b\\]52;c;QUJD\\\\x07"), "{stdout}");
                for line in stdout.lines().filter(|l| l.starts_with('|')) {
                    let pipes = line.matches('|').count() - line.matches("\\|").count();
                    assert_eq!(pipes, 11, "{line}");
                }
            }
            _ => {}
        }
        assert!(
            text(&output.stderr).contains(PAYLOAD_SHOWN),
            "{}",
            text(&output.stderr)
        );
    }
}

#[test]
fn sources_shows_a_hostile_path_escaped() {
    // A powercap tree under a hostile name, with a zone that lacks its counter: the reason
    // `sources` gives names the path.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(format!("cap{PAYLOAD}"));
    let zone = root.join("intel-rapl:0");
    fs::create_dir_all(&zone).unwrap();
    fs::write(zone.join("name"), "package-0\n").unwrap();
    let output = Command::new(bin("cg-trace"))
        .arg("sources")
        .arg("--powercap-root")
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_nothing_raw("sources", &output.stdout);
    assert_nothing_raw("sources (stderr)", &output.stderr);
    assert!(
        text(&output.stdout).contains(&format!("cap{PAYLOAD_SHOWN}")),
        "{}",
        text(&output.stdout)
    );
}

/// A report that cannot be read is named in the error with its name escaped: a file name is
/// outside text too (a newline in it could forge a line of its own).
#[test]
fn an_unreadable_reports_hostile_name_is_escaped_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("x\nresult: OK (no regression)\x1b[8m.json");
    fs::write(&bad, "{}").unwrap();
    for args in [
        vec!["diff".as_ref(), bad.as_os_str(), bad.as_os_str()],
        vec![
            "report".as_ref(),
            bad.as_os_str(),
            "-o".as_ref(),
            dir.path().join("r.html").as_os_str(),
        ],
    ] {
        let output = Command::new(bin("cg-trace")).args(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        assert_nothing_raw("the error for an unreadable report", &output.stderr);
        let stderr = text(&output.stderr);
        assert!(stderr.contains("x\\nresult: OK"), "{stderr}");
        assert!(
            !stderr.lines().any(|l| l.starts_with("result:")),
            "{stderr}"
        );
    }
}
