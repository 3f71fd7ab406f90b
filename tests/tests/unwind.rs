//! End-to-end tests of unwinding without frame pointers (issue 22): `--profile` on programs
//! built without them (C `-O2 -fomit-frame-pointer`, also without unwind tables, a Rust
//! release binary) and on one built with frame pointers but frameless leaf functions, main -> a -> b -> leaf with a known
//! split of the work (a 10 %, b 30 %, leaf 60 % of their own; `tests/c/cgunwind.c`). Root,
//! real eBPF, real processes; energy from the built-in model. Run serially
//! (`--test-threads=1`).
//!
//! Shares are compared with the known split at about five standard deviations of the
//! sampling error (a share p of n samples strays sqrt(p(1-p)/n)): ~1,500 samples give
//! 1.2 points for the leaf's 60 %, so the bounds below hold without being loose.
//!
//! The builds without frame pointers are also compared with the same programs built with
//! frame pointers in every function and walked by frame pointer (`--stacks fp`): inclusive
//! shares within 2 points. Two separate runs differ by the sampling error of both: for the
//! leaf's 60 %, sqrt(2 x 0.24 / n), so these runs are ~12x longer (~16,000 samples each:
//! 0.55 points, 2 points is 3.6 of it).

use std::collections::BTreeMap;

use cg_tests::{assert_adds_up, cg_trace, num, require_root};
use serde_json::Value;

/// Rounds of the programs: about 2 s of CPU here, ~1,500+ samples at 999 Hz.
const ROUNDS: &str = "6000";

/// Rounds of the runs compared with the frame-pointer builds: about 16 s of CPU here, ~16,000
/// samples at 999 Hz.
const COMPARED_ROUNDS: &str = "70000";

/// Fewest samples a compared run may have: below it, 2 points is under 3 standard errors
/// of the difference of two runs.
const COMPARED_MIN_SAMPLES: f64 = 12_000.0;

struct Profile {
    report: Value,
    /// Folded stacks (frames outermost first, kernel frames dropped) and their µJ.
    folded: Vec<(Vec<String>, u64)>,
}

fn profile(program: &str, stacks: &str, rounds: &str) -> Profile {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let folded = dir.path().join("energy.folded");
    let run = cg_trace(&[
        "--source",
        "model",
        "--profile",
        "--sample-hz",
        "999",
        "--stacks",
        stacks,
        "--top-functions",
        "1000",
        "--folded",
        folded.to_str().unwrap(),
        "--",
        program,
        rounds,
    ]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    // The summary says how the stacks were walked.
    assert!(
        run.stderr()
            .contains(&format!("user stacks (--stacks {stacks}, measured): ")),
        "{}",
        run.stderr()
    );
    let report = run.report().clone();
    assert_adds_up(&report);
    let text = std::fs::read_to_string(&folded).expect("folded file");
    let folded = text
        .lines()
        .map(|line| {
            let (stack, uj) = line.rsplit_once(' ').expect("folded line with a count");
            let frames = stack
                .split(';')
                .skip(1) // "comm pid"
                .filter(|f| !f.ends_with(" [k]"))
                // A frame with a line table reads `function (file.c:LINE)`: the function.
                .map(|f| f.split(" (").next().unwrap_or(f).to_string())
                .collect();
            (frames, uj.parse().expect("integer µJ"))
        })
        .collect();
    Profile { report, folded }
}

impl Profile {
    fn sampling(&self) -> &Value {
        &self.report["meta"]["function_profiling"]["sampling"]
    }

    /// Sampled functions by symbol: (inclusive, self) energy as shares of the sampled
    /// energy.
    fn shares(&self) -> BTreeMap<String, (f64, f64)> {
        let sampled = num(self.sampling(), "/sampled_energy_j");
        assert!(sampled > 0.0, "{:#}", self.sampling());
        let mut out = BTreeMap::new();
        for f in self.report["functions"].as_array().expect("functions") {
            if f["source"] == "sampling" {
                out.insert(
                    f["symbol"].as_str().unwrap().to_string(),
                    (
                        num(f, "/energy_j") / sampled,
                        num(f, "/self_energy_j") / sampled,
                    ),
                );
            }
        }
        out
    }

    /// Share of the sampled energy in the folded file (the `[unsampled]` rest, energy no
    /// sample stands for, left out) whose stack passes through `symbol`.
    fn through(&self, symbol: &str) -> f64 {
        let sampled = || {
            self.folded
                .iter()
                .filter(|(frames, _)| frames.first().map(String::as_str) != Some("[unsampled]"))
        };
        let total: u64 = sampled().map(|(_, uj)| uj).sum();
        let through: u64 = sampled()
            .filter(|(frames, _)| frames.iter().any(|f| f == symbol))
            .map(|(_, uj)| uj)
            .sum();
        through as f64 / total.max(1) as f64
    }

    /// Share of the energy of stacks ending in `leaf` whose frame before it is `caller`.
    fn caller_named(&self, leaf: &str, caller: &str) -> f64 {
        let (mut all, mut named) = (0u64, 0u64);
        for (frames, uj) in &self.folded {
            if frames.last().map(String::as_str) == Some(leaf) {
                all += uj;
                if frames.len() >= 2 && frames[frames.len() - 2] == caller {
                    named += uj;
                }
            }
        }
        assert!(all > 0, "no stack ends in {leaf}: {:?}", self.folded);
        named as f64 / all as f64
    }
}

/// `value` within `tolerance` of `expected`; on failure the shares and the sampling
/// figures are printed, so that a failure says what the run saw.
fn near(p: &Profile, what: &str, value: f64, expected: f64, tolerance: f64) {
    assert!(
        (value - expected).abs() <= tolerance,
        "{what}: {value:.4}, expected {expected} ± {tolerance}\nshares (inclusive, self): \
         {:?}\nsampling: {:#}",
        p.shares(),
        p.sampling()
    );
}

/// The checks every build must pass when unwound from its stack copy (`--stacks` `mode`):
/// `prefix` is how the program's function names start (`cgunwind::` for Rust).
fn assert_reaches_main_with_the_known_split(p: &Profile, mode: &str, prefix: &str) {
    let sampling = p.sampling();
    let samples = num(sampling, "/samples_count");
    assert!(samples > 800.0, "too few samples to judge: {sampling:#}");
    let walk = &sampling["stack_walk"];
    assert_eq!(walk["mode"], mode, "{sampling:#}");
    // The program's own code has .eh_frame: its samples are unwound from the copy.
    assert!(
        num(walk, "/dwarf_samples_count") >= 0.98 * samples,
        "{sampling:#}"
    );
    assert!(
        num(sampling, "/incomplete_stacks_pct") <= 1.0,
        "{sampling:#}"
    );
    // Stacks reach main, and main's inclusive share is all but the start-up's.
    assert!(
        p.through("main") >= 0.99,
        "main in {:.4} of the sampled energy: {:?}\nsampling: {sampling:#}",
        p.through("main"),
        p.folded
    );
    let shares = p.shares();
    let share = |name: &str| {
        *shares
            .get(&format!("{prefix}{name}"))
            .unwrap_or_else(|| panic!("{prefix}{name} not sampled: {shares:?}"))
    };
    near(p, "main inclusive", shares["main"].0, 1.0, 0.02);
    // Inclusive: a 100 %, b 90 %, leaf 60 %; self: a 10 %, b 30 %, leaf 60 %.
    near(p, "a inclusive", share("cg_unwind_a").0, 1.0, 0.02);
    near(p, "b inclusive", share("cg_unwind_b").0, 0.9, 0.05);
    near(p, "leaf inclusive", share("cg_unwind_leaf").0, 0.6, 0.07);
    near(p, "a self", share("cg_unwind_a").1, 0.1, 0.05);
    near(p, "b self", share("cg_unwind_b").1, 0.3, 0.06);
    near(p, "leaf self", share("cg_unwind_leaf").1, 0.6, 0.07);
}

/// `p` was walked by frame pointer alone (`--stacks fp`), and its stacks reached main: the
/// reference the unwound runs are compared with.
fn assert_walked_by_frame_pointer_to_main(p: &Profile) {
    let sampling = p.sampling();
    let samples = num(sampling, "/samples_count");
    let walk = &sampling["stack_walk"];
    assert_eq!(walk["mode"], "fp", "{sampling:#}");
    assert_eq!(walk["dwarf_samples_count"], 0, "{sampling:#}");
    assert!(
        num(walk, "/frame_pointer_samples_count") >= 0.98 * samples,
        "{sampling:#}"
    );
    assert!(
        p.through("main") >= 0.99,
        "by frame pointer, main in {:.4} of the sampled energy: {:?}\nsampling: {sampling:#}",
        p.through("main"),
        p.folded
    );
}

/// The inclusive shares of main, a, b and leaf in `unwound` within 2 points of those in
/// `fp`, two runs of `COMPARED_ROUNDS` each. Both sets are printed (`--nocapture`), and on
/// failure every function's shares.
fn assert_inclusive_shares_agree(unwound: &Profile, fp: &Profile, prefix: &str) {
    let samples = |p: &Profile| num(p.sampling(), "/samples_count");
    for p in [unwound, fp] {
        assert!(
            samples(p) >= COMPARED_MIN_SAMPLES,
            "too few samples to compare: {:#}",
            p.sampling()
        );
    }
    let (shares, fp_shares) = (unwound.shares(), fp.shares());
    let inclusive = |shares: &BTreeMap<String, (f64, f64)>, symbol: &str| {
        shares
            .get(symbol)
            .map(|s| s.0)
            .unwrap_or_else(|| panic!("{symbol} not sampled: {shares:?}"))
    };
    let compared: Vec<(String, f64, f64)> =
        ["main", "cg_unwind_a", "cg_unwind_b", "cg_unwind_leaf"]
            .iter()
            .map(|name| {
                let symbol = if *name == "main" {
                    name.to_string()
                } else {
                    format!("{prefix}{name}")
                };
                let (value, reference) =
                    (inclusive(&shares, &symbol), inclusive(&fp_shares, &symbol));
                (symbol, value, reference)
            })
            .collect();
    eprintln!(
        "inclusive shares (unwound {} samples, by frame pointer {}): {compared:.4?}",
        samples(unwound),
        samples(fp)
    );
    for (symbol, value, reference) in &compared {
        assert!(
            (value - reference).abs() <= 0.02,
            "{symbol} inclusive: {value:.4} unwound, {reference:.4} by frame pointer \
             (2 points allowed)\nunwound (inclusive, self): {shares:?}\nby frame pointer: \
             {fp_shares:?}\nsampling, unwound: {:#}\nby frame pointer: {:#}",
            unwound.sampling(),
            fp.sampling()
        );
    }
}

#[test]
fn c_built_without_frame_pointers_unwinds_to_main_as_the_frame_pointer_build_does() {
    let p = profile(env!("CG_UNWIND_NOFP"), "auto", COMPARED_ROUNDS);
    assert_reaches_main_with_the_known_split(&p, "auto", "");
    assert!(p.caller_named("cg_unwind_leaf", "cg_unwind_b") >= 0.99);
    let fp = profile(env!("CG_UNWIND_FP"), "fp", COMPARED_ROUNDS);
    assert_walked_by_frame_pointer_to_main(&fp);
    assert!(fp.caller_named("cg_unwind_leaf", "cg_unwind_b") >= 0.99);
    assert_inclusive_shares_agree(&p, &fp, "");
}

#[test]
fn code_built_without_unwind_tables_unwinds_from_its_debug_frame() {
    // -fno-asynchronous-unwind-tables -g: the program's functions are described in
    // .debug_frame only; its .eh_frame holds the start-up code's few entries.
    let p = profile(env!("CG_UNWIND_DEBUG_FRAME"), "auto", ROUNDS);
    assert_reaches_main_with_the_known_split(&p, "auto", "");
    assert!(p.caller_named("cg_unwind_leaf", "cg_unwind_b") >= 0.99);
}

#[test]
fn a_stripped_file_unwinds_from_the_debug_frame_of_its_separate_debug_file() {
    // The program above, stripped: its .debug_frame (and its symbols) are in the debug
    // file its .gnu_debuglink names, in .debug/ beside it, compressed (zlib, as Debian's
    // -dbgsym packages are).
    let p = profile(env!("CG_UNWIND_SEPARATE"), "auto", ROUNDS);
    assert_reaches_main_with_the_known_split(&p, "auto", "");
    assert!(p.caller_named("cg_unwind_leaf", "cg_unwind_b") >= 0.99);
}

#[test]
fn rust_release_binary_without_frame_pointers_unwinds_to_main_as_the_frame_pointer_build_does() {
    // --stacks dwarf: every sample unwound from its copy (auto does the same here: the
    // program's code has .eh_frame).
    let p = profile(env!("CG_UNWIND_RS"), "dwarf", COMPARED_ROUNDS);
    assert_reaches_main_with_the_known_split(&p, "dwarf", "cgunwind::");
    assert!(p.caller_named("cgunwind::cg_unwind_leaf", "cgunwind::cg_unwind_b") >= 0.99);
    let fp = profile(env!("CG_UNWIND_RS_FP"), "fp", COMPARED_ROUNDS);
    assert_walked_by_frame_pointer_to_main(&fp);
    assert!(fp.caller_named("cgunwind::cg_unwind_leaf", "cgunwind::cg_unwind_b") >= 0.99);
    assert_inclusive_shares_agree(&p, &fp, "cgunwind::");
}

#[test]
fn frameless_leaves_keep_their_caller_when_unwound_and_lose_it_by_frame_pointer() {
    let p = profile(env!("CG_UNWIND_LEAF"), "auto", ROUNDS);
    assert_reaches_main_with_the_known_split(&p, "auto", "");
    let named = p.caller_named("cg_unwind_leaf", "cg_unwind_b");
    assert!(named >= 0.99, "the leaf's caller named in {named:.4}");

    // The same program walked by frame pointer: the leaf has no frame, so the walk goes
    // from it straight to a, skipping b (what issue 22 found with GCC 12) and the report
    // says how the stacks were walked.
    let fp = profile(env!("CG_UNWIND_LEAF"), "fp", ROUNDS);
    let walk = &fp.sampling()["stack_walk"];
    assert_eq!(walk["mode"], "fp");
    assert_eq!(walk["dwarf_samples_count"], 0);
    assert!(
        num(walk, "/frame_pointer_samples_count") > 800.0,
        "{walk:#}"
    );
    let named = fp.caller_named("cg_unwind_leaf", "cg_unwind_b");
    assert!(
        named <= 0.5,
        "by frame pointer the leaf's caller named in {named:.4}"
    );
}
