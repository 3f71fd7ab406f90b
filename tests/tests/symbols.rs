//! End-to-end tests of how `--profile` names frames: processes that exit right after heavy
//! sampling keep their names, no function claims addresses outside its section (`_fini`),
//! stripped binaries are named from their separate debug files (by build id, under a
//! `--debug-dir` or the default `/usr/lib/debug`; by `.gnu_debuglink`) or MiniDebugInfo, and
//! what no symbol covers says its file and address; frames of files with line tables say
//! their source line, inlined functions included (and `--no-lines` leaves lines out). Root,
//! real eBPF, real processes; energy from the built-in model. Checks are on shares of
//! energy with wide margins, never on speed. Run serially (`--test-threads=1`).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use cg_tests::{assert_adds_up, cg_trace, require_root, root_pid};
use serde_json::Value;

/// Self energy per symbol of one process's sampled functions (without `[unsampled]`).
fn self_energy(report: &Value, pid: u64) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for f in report["functions"].as_array().expect("functions") {
        if f["source"] == "sampling" && f["pid"].as_u64() == Some(pid) {
            let symbol = f["symbol"].as_str().unwrap().to_string();
            if symbol != "[unsampled]" {
                *out.entry(symbol).or_default() += f["self_energy_j"].as_f64().unwrap();
            }
        }
    }
    out
}

/// Whether a frame is one no symbol named: `[unknown]`, or `file+0xADDRESS`.
fn unnamed(symbol: &str) -> bool {
    symbol.starts_with("[unknown]")
        || symbol
            .rsplit_once("+0x")
            .is_some_and(|(_, hex)| u64::from_str_radix(hex, 16).is_ok())
}

fn share(energy: &BTreeMap<String, f64>, keep: impl Fn(&str) -> bool) -> f64 {
    let total: f64 = energy.values().sum();
    let part: f64 = energy.iter().filter(|(s, _)| keep(s)).map(|(_, e)| e).sum();
    if total > 0.0 { part / total } else { 0.0 }
}

fn profile(program: &str, args: &[&str], extra: &[&str], folded: &Path) -> Value {
    let mut all = vec![
        "--source",
        "model",
        "--model-watts",
        "10:30",
        "--sample-hz",
        "999",
        "--top-functions",
        "100000",
        "--folded",
        folded.to_str().unwrap(),
    ];
    all.extend_from_slice(extra);
    all.push("--");
    all.push(program);
    all.extend_from_slice(args);
    let run = cg_trace(&all);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let report = run.report().clone();
    assert_adds_up(&report);
    report
}

#[test]
fn processes_that_exit_right_after_heavy_sampling_keep_their_names_and_fini_claims_no_data() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("exit.folded");
    // 20 children of 250 ms each, two at a time, reaped only at the end: each is an
    // exited, unreaped process (memory map empty) for 0.5 s or more, while new stacks of
    // it (with an anonymous frame) are still being read.
    let report = profile(env!("CG_EXIT"), &["20", "250"], &[], &folded);
    let root = u64::from(root_pid(&report));
    let mut checked = 0;
    for p in report["processes"].as_array().unwrap() {
        let pid = p["pid"].as_u64().unwrap();
        if pid == root {
            continue;
        }
        let energy = self_energy(&report, pid);
        let samples: u64 = report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["source"] == "sampling" && f["pid"].as_u64() == Some(pid))
            .filter_map(|f| f["samples"].as_u64())
            .max()
            .unwrap_or(0);
        if samples < 30 {
            continue; // too few samples to judge shares
        }
        checked += 1;
        let unknown = share(&energy, unnamed);
        let spin = share(&energy, |s| s == "exit_spin");
        assert!(
            unknown < 0.25 && spin > 0.5,
            "child {pid} ({samples} samples): {:.0} % of its self energy in unnamed frames, \
             {:.0} % in exit_spin: {energy:?}",
            unknown * 100.0,
            spin * 100.0
        );
    }
    assert!(
        checked >= 10,
        "only {checked} children had 30 samples or more"
    );
    let text = std::fs::read_to_string(&folded).unwrap();
    // The bogus return address into the program's data was sampled, and named by file and
    // address, never after the program's last function.
    assert!(
        text.lines().any(|l| l.contains(";cg-exit+0x")),
        "no frame in cg-exit's data:\n{}",
        text.lines().take(5).collect::<Vec<_>>().join("\n")
    );
    for line in text.lines() {
        assert!(
            !line
                .split(';')
                .any(|frame| frame == "_fini" || frame.starts_with("_fini ")),
            "_fini named a frame: {line}"
        );
    }
}

/// Where the debug file of `CG_STRIP_BUILDID` goes under a debug directory.
fn build_id_path(debug_dir: &Path) -> PathBuf {
    let id = env!("CG_STRIP_BUILD_ID");
    debug_dir
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]))
}

/// Checks that a profile of a stripped `cg-strip` names its functions: most of its self
/// energy in `strip_heavy` and `strip_light`, in about their 3:1 proportion.
fn assert_named(report: &Value, what: &str) {
    let energy = self_energy(report, u64::from(root_pid(report)));
    let heavy = energy.get("strip_heavy").copied().unwrap_or(0.0);
    let light = energy.get("strip_light").copied().unwrap_or(0.0);
    let named = share(&energy, |s| s == "strip_heavy" || s == "strip_light");
    assert!(
        named > 0.8 && heavy > 1.5 * light && light > 0.0,
        "{what}: {:.0} % of the self energy in strip_heavy/strip_light: {energy:?}",
        named * 100.0
    );
    assert!(
        share(&energy, unnamed) < 0.1,
        "{what}: unnamed frames: {energy:?}"
    );
}

#[test]
fn a_stripped_binary_is_named_from_its_build_id_debug_file_and_without_it_by_address() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("strip.folded");
    let program = env!("CG_STRIP_BUILDID");

    // No debug file anywhere searched: frames say file and address, and the address is
    // the one `nm` gives for the function in the debug file.
    let empty = tempfile::tempdir().unwrap();
    let report = profile(
        program,
        &["800"],
        &["--debug-dir", empty.path().to_str().unwrap()],
        &folded,
    );
    let energy = self_energy(&report, u64::from(root_pid(&report)));
    assert!(
        !energy.contains_key("strip_heavy"),
        "named without its debug file: {energy:?}"
    );
    let (hottest, _) = energy
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .expect("sampled functions");
    let address = hottest
        .strip_prefix("cg-strip-buildid+0x")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or_else(|| panic!("hottest frame {hottest:?} is not cg-strip-buildid+0xADDRESS"));
    let nm = std::process::Command::new("nm")
        .args(["-S", env!("CG_STRIP_BUILDID_DEBUG")])
        .output()
        .expect("nm");
    let symbols = String::from_utf8_lossy(&nm.stdout);
    let resolved = symbols.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        let start = u64::from_str_radix(parts.next()?, 16).ok()?;
        let size = u64::from_str_radix(parts.next()?, 16).ok()?;
        let name = parts.nth(1)?;
        (address >= start && address < start + size).then(|| name.to_string())
    });
    assert!(
        matches!(resolved.as_deref(), Some("strip_heavy" | "strip_light")),
        "{hottest} resolves to {resolved:?} by nm:\n{symbols}"
    );

    // The debug file under a --debug-dir, by build id.
    let debug_dir = tempfile::tempdir().unwrap();
    let target = build_id_path(debug_dir.path());
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(env!("CG_STRIP_BUILDID_DEBUG"), &target).unwrap();
    let report = profile(
        program,
        &["800"],
        &["--debug-dir", debug_dir.path().to_str().unwrap()],
        &folded,
    );
    assert_named(&report, "build id under --debug-dir");
    // Callers named too, with their source lines from the debug file's line tables.
    let text = std::fs::read_to_string(&folded).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains(";strip_driver (cgstrip.c:")
                && l.contains(";strip_heavy (cgstrip.c:")),
        "callers named too:\n{text}"
    );
}

/// A debug file installed under `/usr/lib/debug/.build-id/` for one test: removed, with
/// the folders it created, when dropped (also when the test fails).
struct InstalledDebugFile {
    file: PathBuf,
    created: Vec<PathBuf>,
}

impl InstalledDebugFile {
    fn install(source: &str, target: PathBuf) -> Self {
        let mut created = Vec::new();
        let mut missing = Vec::new();
        let mut folder = target.parent();
        while let Some(f) = folder.filter(|f| !f.exists()) {
            missing.push(f.to_path_buf());
            folder = f.parent();
        }
        for f in missing.into_iter().rev() {
            std::fs::create_dir(&f).unwrap_or_else(|e| panic!("creating {}: {e}", f.display()));
            created.push(f);
        }
        let guard = InstalledDebugFile {
            file: target,
            created,
        };
        // Our own build id: no package's file has it.
        std::fs::copy(source, &guard.file)
            .unwrap_or_else(|e| panic!("installing {}: {e}", guard.file.display()));
        guard
    }
}

impl Drop for InstalledDebugFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        for folder in self.created.iter().rev() {
            let _ = std::fs::remove_dir(folder);
        }
    }
}

#[test]
fn stripped_binaries_are_named_from_the_default_debug_dir_a_debug_link_and_minidebuginfo() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("strip.folded");

    let target = build_id_path(Path::new("/usr/lib/debug"));
    {
        let _installed =
            InstalledDebugFile::install(env!("CG_STRIP_BUILDID_DEBUG"), target.clone());
        let report = profile(env!("CG_STRIP_BUILDID"), &["800"], &[], &folded);
        assert_named(&report, "build id under /usr/lib/debug");
    }
    assert!(!target.exists(), "{} left behind", target.display());

    let report = profile(env!("CG_STRIP_LINK"), &["800"], &[], &folded);
    assert_named(&report, ".gnu_debuglink to .debug/ beside the program");

    let report = profile(env!("CG_STRIP_MINI"), &["800"], &[], &folded);
    assert_named(&report, "MiniDebugInfo");
}

#[test]
fn a_debug_dir_that_is_no_folder_exits_2_before_tracing() {
    require_root();
    for bad in ["/nonexistent/debug", "relative/debug", "/etc/hostname"] {
        let run = cg_trace(&["--profile", "--debug-dir", bad, "--", "true"]);
        assert_eq!(run.code(), Some(2), "{bad}: {}", run.stderr());
        assert!(
            run.stderr().contains("--debug-dir") && run.stderr().contains("debug files"),
            "{bad}: {}",
            run.stderr()
        );
        assert!(run.report.is_none(), "{bad}: a report was written");
    }
}

#[test]
fn an_inlined_function_named_only_in_a_dwz_supplementary_file_keeps_its_name() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("dwz.folded");
    // cg-lines shrunk by dwz: the inlined function's name is in the supplementary file
    // that its .gnu_debugaltlink names (dwz/.dwz/cg-lines.debug, under the debug folder).
    let program = env!("CG_LINES_DWZ");
    let debug_dir = Path::new(program).parent().unwrap().to_str().unwrap();
    let report = profile(program, &["300"], &["--debug-dir", debug_dir], &folded);
    let pid = root_pid(&report) as u64;
    let stacks = folded_of(&folded, "cg-lines-dwz", pid);
    let at =
        |function: &str, marker: &str| format!("{function} (cglines.c:{})", cglines_line(marker));
    let inlined = [
        at("cg_lines_outer", "outer"),
        format!("{} (inlined)", at("cg_lines_inner", "inner")),
    ];
    let share = tail_share(&stacks, "cg_lines_inner", &inlined);
    assert!(
        share > 0.9,
        "{share:.2} of cg_lines_inner's energy at {inlined:?}: {stacks:?}"
    );
}

/// The line of `tests/c/cglines.c` that holds `LINE:marker`.
fn cglines_line(marker: &str) -> usize {
    let tag = format!("LINE:{marker} ");
    include_str!("../c/cglines.c")
        .lines()
        .position(|l| l.contains(&tag))
        .unwrap_or_else(|| panic!("no {tag} in cglines.c"))
        + 1
}

/// Folded lines of process `pid` (named `comm`) as (frames, microjoules).
fn folded_of(path: &Path, comm: &str, pid: u64) -> Vec<(Vec<String>, u64)> {
    let root = format!("{comm} {pid};");
    std::fs::read_to_string(path)
        .expect("folded file")
        .lines()
        .filter_map(|line| line.strip_prefix(&root))
        .map(|line| {
            let (stack, uj) = line.rsplit_once(' ').expect("a folded count");
            (
                stack.split(';').map(str::to_string).collect(),
                uj.parse().expect("an integer count"),
            )
        })
        .collect()
}

/// Of the energy of the stacks whose last frame is `function` (with or without a line),
/// the share of those whose last frames are exactly `tail`.
fn tail_share(stacks: &[(Vec<String>, u64)], function: &str, tail: &[String]) -> f64 {
    let ends_in = |frames: &Vec<String>| {
        frames
            .last()
            .is_some_and(|f| f.starts_with(&format!("{function} ")) || f == function)
    };
    let all: u64 = stacks
        .iter()
        .filter(|(f, _)| ends_in(f))
        .map(|(_, e)| e)
        .sum();
    let with: u64 = stacks
        .iter()
        .filter(|(f, _)| f.ends_with(tail))
        .map(|(_, e)| e)
        .sum();
    assert!(all > 0, "no stack ends in {function}: {stacks:?}");
    with as f64 / all as f64
}

#[test]
fn native_frames_say_their_source_line_and_inlined_functions_are_frames_of_their_own() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("lines.folded");
    let report = profile(env!("CG_LINES"), &["400"], &[], &folded);
    let pid = root_pid(&report) as u64;
    let stacks = folded_of(&folded, "cg-lines", pid);
    let at =
        |function: &str, marker: &str| format!("{function} (cglines.c:{})", cglines_line(marker));
    // The leaf's samples are on its loop's line, called from main's line that calls it.
    let leaf = [at("main", "main-leaf"), at("cg_lines_leaf", "leaf")];
    let share = tail_share(&stacks, "cg_lines_leaf", &leaf);
    assert!(
        share > 0.9,
        "{share:.2} of cg_lines_leaf's energy at {leaf:?}: {stacks:?}"
    );
    // The inlined function is a frame of its own, at its loop's line, inside the line of
    // the function it was inlined into, called from main.
    let inlined = [
        at("main", "main-outer"),
        at("cg_lines_outer", "outer"),
        format!("{} (inlined)", at("cg_lines_inner", "inner")),
    ];
    let share = tail_share(&stacks, "cg_lines_inner", &inlined);
    assert!(
        share > 0.9,
        "{share:.2} of cg_lines_inner's energy at {inlined:?}: {stacks:?}"
    );
    // Function figures stay one entry per function, the inlined one included.
    let self_j = self_energy(&report, pid);
    for function in ["main", "cg_lines_leaf", "cg_lines_outer", "cg_lines_inner"] {
        let entries = report["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["pid"].as_u64() == Some(pid) && f["symbol"] == function)
            .count();
        assert_eq!(entries, 1, "{function}: {:#}", report["functions"]);
    }
    // Both halves do the same work for the same time: the inlined loop holds its half.
    let inner = self_j["cg_lines_inner"] / self_j["cg_lines_leaf"];
    assert!(
        (0.5..2.0).contains(&inner),
        "inner / leaf self energy {inner:.2}"
    );

    // --no-lines: functions only, the inlined loop charged to the function it is in.
    let folded = dir.path().join("no-lines.folded");
    let report = profile(env!("CG_LINES"), &["200"], &["--no-lines"], &folded);
    let pid = root_pid(&report) as u64;
    let stacks = folded_of(&folded, "cg-lines", pid);
    assert!(
        stacks
            .iter()
            .all(|(f, _)| f.iter().all(|f| !f.contains("cglines.c"))),
        "{stacks:?}"
    );
    let share = tail_share(
        &stacks,
        "cg_lines_outer",
        &["main".into(), "cg_lines_outer".into()],
    );
    assert!(share > 0.9, "{share:.2}: {stacks:?}");
    assert!(!self_energy(&report, pid).contains_key("cg_lines_inner"));
}
