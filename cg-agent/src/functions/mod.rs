//! Function-level profiling, the user-space half: which functions `--func` names
//! ([`spec`], [`resolve`], from ELF symbols read by [`elf`]; [`returns`] says which of them
//! may carry a return probe), where CPython keeps its frames
//! ([`python`]), and how addresses become names ([`symbolize`], with [`maps`] of the
//! traced processes and the separate debug files [`debuginfo`] finds). The kernel half is in `probes::uprobes` and `probes::sampler`; the
//! session drives both (`session::functions`) and attribution turns them into energy
//! (`attribution::functions`).

pub mod debuginfo;
pub mod elf;
pub mod lines;
pub mod maps;
pub mod python;
pub mod resolve;
pub mod returns;
pub mod spec;
pub mod symbolize;
pub mod unwind;

use std::path::PathBuf;

/// Errors of function-level profiling.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// Bad input: a SPEC that matches nothing, too many matches, a missing file.
    #[error("{0}")]
    Usage(String),
    #[error("reading {}: {reason}", path.display())]
    Elf { path: PathBuf, reason: String },
}

/// Function-level options of a run.
#[derive(Clone, Debug)]
pub struct FunctionOptions {
    /// `--func` SPECs.
    pub specs: Vec<spec::FuncSpec>,
    /// `--func-limit`: most functions one run may probe.
    pub func_limit: usize,
    /// `--profile` (or implied by `--folded`/`--flamegraph`).
    pub profile: bool,
    /// `--sample-hz`.
    pub sample_hz: u64,
    /// `--stacks`: how user stacks are walked.
    pub stacks: StackWalking,
    /// `--top-functions`: entries of the report's function list.
    pub top: usize,
    /// Benchmarks: probes that return at once.
    pub bench_empty_probes: bool,
    /// `--debug-dir`: where separate debug files are looked up.
    pub debug_dirs: debuginfo::DebugDirs,
    /// Native frames named down to their source lines (`--no-lines` turns it off).
    pub lines: bool,
}

impl Default for FunctionOptions {
    fn default() -> Self {
        FunctionOptions {
            specs: Vec::new(),
            func_limit: DEFAULT_FUNC_LIMIT,
            profile: false,
            sample_hz: DEFAULT_SAMPLE_HZ,
            stacks: StackWalking::default(),
            top: DEFAULT_TOP_FUNCTIONS,
            bench_empty_probes: false,
            debug_dirs: debuginfo::DebugDirs::default(),
            lines: true,
        }
    }
}

/// `--stacks`: how `--profile` walks user stacks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StackWalking {
    /// Copy the top of each sampled stack; unwind it by the call frame information
    /// (`.eh_frame`) of the file the sample hit, by frame pointer where that file has none.
    #[default]
    Auto,
    /// Frame pointers only: the cheapest, and right only for code built with them.
    Fp,
    /// Copy the stack and unwind every sample from it (frame-pointer rules only where a
    /// file has no call frame information).
    Dwarf,
}

impl StackWalking {
    /// Whether the sampler copies user stacks.
    pub fn copies_stacks(self) -> bool {
        self != StackWalking::Fp
    }

    /// The word the CLI and the report use.
    pub fn name(self) -> &'static str {
        match self {
            StackWalking::Auto => "auto",
            StackWalking::Fp => "fp",
            StackWalking::Dwarf => "dwarf",
        }
    }
}

impl FunctionOptions {
    /// Whether anything function-level is asked for.
    pub fn any(&self) -> bool {
        !self.specs.is_empty() || self.profile
    }
}

/// Default `--func-limit`.
pub const DEFAULT_FUNC_LIMIT: usize = 1000;
/// Default `--sample-hz`: off the common 100 Hz timer tick so samples do not lock step with
/// periodic work.
pub const DEFAULT_SAMPLE_HZ: u64 = 99;
/// Default `--top-functions`.
pub const DEFAULT_TOP_FUNCTIONS: usize = 50;
/// Above this many calls per second of one function, its probes distort what they measure.
pub const CALLS_PER_S_WARNING: f64 = 100_000.0;
