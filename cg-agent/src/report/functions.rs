//! The function part of the report: runs function-level attribution
//! ([`crate::attribution::functions`]) over the recording's function data with each
//! process's energy per interval, and builds the `functions` list (per process), the
//! `function_totals` list (per function, over all processes, summed before the
//! `--top-functions` cut), `meta.function_profiling` and the energy per stack that folded
//! stacks and flamegraphs are drawn from.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    attribution::{
        ProcId,
        functions::{
            FrameId, FunctionTotals, IntervalSpend, ProcessSpend, SampledEnergy, StackId,
            attribute_calls, attribute_samples,
        },
    },
    functions::{
        StackWalking,
        elf::FirstInstruction,
        returns::EntryOnly,
        symbolize::{Frame, UNSAMPLED, file_name, function_stacks},
    },
    probes::uprobes::AttachPath,
    session::{
        Recording,
        functions::{FunctionRecording, ProbedFunction, SamplerSummary},
        processes::ProcessRecord,
    },
    sources::Provenance,
};

/// `meta.function_profiling`.
#[derive(Clone, Debug, Serialize)]
pub struct FunctionProfiling {
    /// Function entries before the `--top-functions` cut.
    pub functions_count: usize,
    /// Entries in the report's `functions` list.
    pub functions_listed_count: usize,
    /// Functions over all processes, before and after the `--top-functions` cut.
    pub function_totals_count: usize,
    pub function_totals_listed_count: usize,
    /// `measured` or `estimated`: function energy is a share of the source's energy.
    pub provenance: Provenance,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uprobes: Option<UprobeStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingStats>,
    /// How the function figures are computed.
    pub method: Vec<String>,
    /// Where this run's function figures are approximate or incomplete.
    pub notes: Vec<String>,
}

/// What the function probes cost and saw.
#[derive(Clone, Debug, Serialize)]
pub struct UprobeStats {
    pub functions: Vec<ProbedEntry>,
    /// `uprobe_multi` (many functions per link: attaching and detaching 1,000 functions
    /// takes milliseconds) or `perf_event` (one perf event per probe: each takes about a
    /// tenth of a second to detach).
    pub attach_method: &'static str,
    /// Entry probe hits of every process on the machine (measured): what the probes cost
    /// (non-target processes calling a probed function pay the trap too).
    pub probe_hits_count: u64,
    /// Calls of targets that completed (measured).
    pub target_calls_count: u64,
    /// `target_calls_count` x each function's estimated pair cost.
    pub estimated_probe_cost_s: f64,
    /// Calls deeper than the per-thread entry stack (counted, not timed).
    pub depth_overflow_count: u64,
    /// Returns with no entry (the run attached mid-call, or a longjmp skipped it).
    pub unmatched_returns_count: u64,
    /// Entries a return skipped (longjmp, exceptions).
    pub abandoned_frames_count: u64,
    /// Threads or totals the kernel maps had no room for.
    pub map_full_count: u64,
    /// Clock reads that fell back to the tick-granular runtime.
    pub clock_fallbacks_count: u64,
}

/// One probed function.
#[derive(Clone, Debug, Serialize)]
pub struct ProbedEntry {
    pub symbol: String,
    pub module: String,
    pub file_offset: u64,
    /// `emulated` or `single_stepped`: how the kernel runs the displaced instruction.
    pub first_instruction: FirstInstruction,
    /// Whether it had a return probe too (false: calls counted at entry, no time).
    pub return_probe: bool,
    /// Why not: `entry_point`, `no_return`, `uses_return_address`, `unwinder`,
    /// `no_return_address`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_only_reason: Option<EntryOnly>,
    /// Estimated cost of one call's entry + return probes (development VM figures).
    pub estimated_probe_pair_cost_us: f64,
    /// Highest rate seen in one interval (measured).
    pub max_calls_per_s: f64,
}

/// What the sampler did.
#[derive(Clone, Debug, Serialize)]
pub struct SamplingStats {
    pub sample_hz: u64,
    /// Samples of targets (measured).
    pub samples_count: u64,
    /// Samples lost whole: the ring buffer that carries them was full (the agent read it
    /// late) (measured).
    pub lost_samples_count: u64,
    /// Samples whose kernel stack the kernel could not walk (measured): they keep their
    /// user frames.
    pub lost_kernel_stacks_count: u64,
    /// Samples whose user stack the kernel could not walk (measured): they keep their
    /// kernel frames, or show as `[no stack]`.
    pub lost_user_stacks_count: u64,
    /// Stacks lost per 100 samples: kernel and user stacks lost, and samples lost whole
    /// (a sample that lost both its stacks counts twice).
    pub lost_stacks_pct: f64,
    /// Always 0 since schema 1.3: Python frames travel in their sample's record.
    pub lost_python_count: u64,
    /// The sampling program's mean kernel run time per run (every sample, of targets or
    /// not), measured by the kernel's BPF statistics; only when they were on
    /// (`kernel.bpf_stats_enabled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bpf_ns_per_run: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bpf_runs_count: Option<u64>,
    /// Energy of targets carried by samples.
    pub sampled_energy_j: f64,
    /// Energy of targets that ran but were never sampled (the `[unsampled]` entries).
    pub unsampled_energy_j: f64,
    pub stacks_count: usize,
    pub symbolize_ms: f64,
    /// Native-only samples whose stack did not reach the program's entry point.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete_stacks_pct: Option<f64>,
    pub stack_walk: StackWalkStats,
    pub python: Vec<PythonEntry>,
}

/// How the user stacks of native-only samples were walked (`--stacks`), and how many did
/// not reach the program's entry point (truncated). Counts of samples, measured.
#[derive(Clone, Debug, Serialize)]
pub struct StackWalkStats {
    /// `auto`, `fp` or `dwarf`.
    pub mode: &'static str,
    pub frame_pointer_samples_count: u64,
    pub frame_pointer_truncated_count: u64,
    pub dwarf_samples_count: u64,
    pub dwarf_truncated_count: u64,
}

/// Share of truncated stacks past which the report says so.
const TRUNCATED_NOTE_PCT: f64 = 10.0;

/// A note when many native stacks did not reach the program's entry point, saying how
/// they were walked and what to do.
fn truncated_stacks_note(summary: &SamplerSummary) -> Option<String> {
    let pct = summary
        .walks
        .truncated_pct()
        .filter(|&p| p > TRUNCATED_NOTE_PCT)?;
    let w = &summary.walks;
    let head = format!(
        "{pct:.0}% of native stacks did not unwind to the program's entry point ({} of {} \
         walked by .eh_frame, {} of {} by frame pointer): self figures stay right, callers' \
         inclusive figures are undercounted",
        w.dwarf_truncated, w.dwarf, w.frame_pointer_truncated, w.frame_pointer
    );
    Some(match summary.stacks {
        StackWalking::Fp => format!(
            "{head}; code built without frame pointers gives truncated stacks: profile with \
             --stacks auto (the default), which unwinds by the binaries' .eh_frame"
        ),
        StackWalking::Auto | StackWalking::Dwarf => format!(
            "{head}; the causes: stacks deeper than the {} KiB copied per sample, files with \
             neither .eh_frame nor frame pointers, JIT code",
            cg_common::profiling::STACK_COPY_BYTES >> 10
        ),
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct PythonEntry {
    pub pid: u32,
    pub version: String,
    /// Whether its Python frames were walked (CPython 3.11 to 3.13).
    pub python_frames: bool,
}

/// Energy and on-CPU time of one sampled stack of one process (folded stacks, flamegraphs,
/// speedscope and pprof profiles).
#[derive(Clone, Debug, PartialEq)]
pub struct StackEnergy {
    pub pid: u32,
    pub comm: String,
    /// The frames, outermost first.
    pub frames: Vec<Frame>,
    pub energy_j: f64,
    /// On-CPU time its samples stand for (measured: each thread's on-CPU time in an
    /// interval divided equally over its samples there).
    pub cpu_ns: f64,
    pub samples: u64,
}

/// Energy and on-CPU time of one function, either in one process ([`FunctionEntry`], the
/// report's `functions[]`) or summed over every process that ran it ([`FunctionTotal`],
/// `function_totals[]`): `who` says which, and is written in line with the other fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionFigures<Who> {
    pub symbol: String,
    pub module: String,
    #[serde(flatten)]
    pub who: Who,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    pub cpu_time_s: f64,
    pub energy_j: f64,
    pub self_cpu_time_s: f64,
    pub self_energy_j: f64,
    /// `uprobe` or `sampling`.
    pub source: &'static str,
    /// A Python function's first line (`module` is then its source file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Probed functions: whether a call was still running at the end (its time counts up
    /// to the last read); in a total, whether one was in some process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
    /// Probed functions with an entry probe only (a return probe would harm them): `calls`
    /// counts entries, and there is no time or energy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_only: Option<bool>,
    /// The energy source's: function energy is a share of it.
    pub provenance: Provenance,
}

/// The process of a [`FunctionEntry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct InProcess {
    pub pid: u32,
}

/// The processes a [`FunctionTotal`] sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct OverProcesses {
    /// Processes with an entry for it.
    pub processes_count: usize,
}

/// Energy of one function in one process (filled by function-level attribution).
pub type FunctionEntry = FunctionFigures<InProcess>;

/// One function over all the processes that ran it: the sum of its per-process entries.
pub type FunctionTotal = FunctionFigures<OverProcesses>;

impl FunctionEntry {
    /// The figures attribution gave one function in the process `pid`: its calls where it
    /// was probed (`uprobe`), its samples where it was sampled (`sampling`).
    pub fn attributed(
        (symbol, module, line): (String, String, Option<u32>),
        pid: u32,
        totals: &FunctionTotals,
        probed: bool,
        provenance: Provenance,
    ) -> Self {
        FunctionEntry {
            symbol,
            module,
            who: InProcess { pid },
            calls: probed.then_some(totals.calls),
            samples: (!probed).then_some(totals.samples),
            cpu_time_s: totals.cpu_ns / 1e9,
            energy_j: totals.energy_j,
            self_cpu_time_s: totals.self_cpu_ns / 1e9,
            self_energy_j: totals.self_energy_j,
            source: if probed { "uprobe" } else { "sampling" },
            line,
            partial: None,
            entry_only: None,
            provenance,
        }
    }
}

impl<Who> FunctionFigures<Who> {
    /// The same function with another `who`, nothing counted yet.
    fn empty_like<Other>(&self, who: Other) -> FunctionFigures<Other> {
        FunctionFigures {
            symbol: self.symbol.clone(),
            module: self.module.clone(),
            who,
            calls: None,
            samples: None,
            cpu_time_s: 0.0,
            energy_j: 0.0,
            self_cpu_time_s: 0.0,
            self_energy_j: 0.0,
            source: self.source,
            line: self.line,
            partial: None,
            entry_only: None,
            provenance: self.provenance,
        }
    }

    /// Adds the counts, times and energies of `other` (the same function elsewhere); a
    /// count or flag stays absent only where both lack it.
    fn add<Other>(&mut self, other: &FunctionFigures<Other>) {
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        let or = |a: Option<bool>, b: Option<bool>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
        };
        self.calls = add(self.calls, other.calls);
        self.samples = add(self.samples, other.samples);
        self.cpu_time_s += other.cpu_time_s;
        self.energy_j += other.energy_j;
        self.self_cpu_time_s += other.self_cpu_time_s;
        self.self_energy_j += other.self_energy_j;
        self.partial = or(self.partial, other.partial);
        self.entry_only = or(self.entry_only, other.entry_only);
    }
}

/// Sums per-process entries into per-function totals, most energy first; `key` tells
/// which entries are the same function (a probed function's id, a frame's id).
pub fn function_totals<'a, K: Ord>(
    entries: impl IntoIterator<Item = (K, &'a FunctionEntry)>,
) -> Vec<FunctionTotal> {
    let mut totals: BTreeMap<K, FunctionTotal> = BTreeMap::new();
    for (key, e) in entries {
        let total = totals
            .entry(key)
            .or_insert_with(|| e.empty_like(OverProcesses { processes_count: 0 }));
        total.who.processes_count += 1;
        total.add(e);
    }
    let mut out: Vec<FunctionTotal> = totals.into_values().collect();
    out.sort_by(|a, b| {
        b.energy_j
            .total_cmp(&a.energy_j)
            .then_with(|| a.symbol.cmp(&b.symbol))
            .then_with(|| a.module.cmp(&b.module))
    });
    out
}

/// Which function an entry of the report is, for [`function_totals`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum TotalKey {
    Probed(u32),
    Sampled(u32),
    Unsampled,
}

/// The function figures of a run.
#[derive(Default)]
pub struct Built {
    pub functions: Vec<FunctionEntry>,
    /// Per function over all processes, cut at `--top-functions` like `functions`.
    pub totals: Vec<FunctionTotal>,
    pub profiling: Option<FunctionProfiling>,
    pub stacks: Vec<StackEnergy>,
}

/// What the function steps find, in the order the report lists it before sorting.
#[derive(Default)]
struct Found {
    /// Each entry with the function it is.
    entries: Vec<(TotalKey, FunctionEntry)>,
    stacks: Vec<StackEnergy>,
    method: Vec<String>,
    notes: Vec<String>,
}

/// Builds the function figures. `process_energy[id]` is each process's energy over the
/// top-level domains, `process_cpu_ns[id]` its on-CPU time.
pub fn build(
    rec: &Recording,
    spend: &[IntervalSpend],
    process_energy: &BTreeMap<ProcId, f64>,
    process_cpu_ns: &BTreeMap<ProcId, u64>,
) -> Built {
    let Some(data) = rec.functions.as_ref() else {
        return Built::default();
    };
    let names = Names {
        processes: &rec.processes,
        provenance: rec.header.provenance(),
    };
    let mut found = Found::default();
    let uprobes = (!data.probed.is_empty()).then(|| {
        let calls = attribute_calls(spend, &data.intervals);
        found.entries.extend(probed_entries(data, &calls, &names));
        found.method.push(PROBED_METHOD.to_string());
        found.notes.extend(uprobe_notes(data));
        uprobe_stats(data, &calls)
    });
    let sampling = data.sampler.as_ref().map(|summary| {
        let spent = ProcessesSpent {
            energy_j: process_energy,
            cpu_ns: process_cpu_ns,
        };
        found.sampled(data, summary, &attribute(spend, data), &spent, &names)
    });
    found.notes.extend(recording_notes(data));
    found.finish(data.top, names.provenance, uprobes, sampling)
}

/// Samples per function and per stack: function figures are over functions, the stacks keep
/// their lines.
fn attribute(spend: &[IntervalSpend], data: &FunctionRecording) -> SampledEnergy {
    let by_function = function_stacks(&data.frames, &data.stacks);
    attribute_samples(spend, &data.intervals, &by_function)
}

/// Each process's energy and on-CPU time over the run, by its id in the recording.
struct ProcessesSpent<'a> {
    energy_j: &'a BTreeMap<ProcId, f64>,
    cpu_ns: &'a BTreeMap<ProcId, u64>,
}

/// What the report calls a process of the recording, and the provenance of every figure.
struct Names<'a> {
    processes: &'a [ProcessRecord],
    provenance: Provenance,
}

impl Names<'_> {
    /// Its pid (0 for an id the recording does not hold).
    fn pid(&self, id: ProcId) -> u32 {
        self.processes.get(id as usize).map_or(0, |p| p.pid)
    }

    /// Its kernel name (empty for an id the recording does not hold).
    fn comm(&self, id: ProcId) -> String {
        self.processes
            .get(id as usize)
            .map_or_else(String::new, |p| p.comm.clone())
    }
}

impl Found {
    /// The sampled figures: entries per frame, each process's `[unsampled]` remainder, the
    /// energy per stack, and what the sampler did.
    fn sampled(
        &mut self,
        data: &FunctionRecording,
        summary: &SamplerSummary,
        sampled: &SampledEnergy,
        spent: &ProcessesSpent,
        names: &Names,
    ) -> SamplingStats {
        self.entries
            .extend(sampled_entries(data, &sampled.frames, names));
        let split = unsampled(spent, &sampled.sampled);
        for rest in &split.rests {
            let pid = names.pid(rest.process);
            self.entries.push((
                TotalKey::Unsampled,
                unsampled_entry(pid, rest, names.provenance),
            ));
            self.stacks.push(StackEnergy {
                pid,
                comm: names.comm(rest.process),
                frames: vec![Frame::unsampled()],
                energy_j: rest.energy_j,
                cpu_ns: rest.cpu_ns as f64,
                samples: 0,
            });
        }
        self.stacks
            .extend(sampled_stacks(data, &sampled.stacks, names));
        self.method.push(sampling_method(summary.sample_hz));
        self.notes.extend(sampling_notes(summary));
        sampling_stats(summary, &split)
    }

    /// Totals per function, both lists sorted and cut at `top`, and the profiling summary.
    fn finish(
        self,
        top: usize,
        provenance: Provenance,
        uprobes: Option<UprobeStats>,
        sampling: Option<SamplingStats>,
    ) -> Built {
        let totals = function_totals(self.entries.iter().map(|(key, e)| (*key, e)));
        let totals_count = totals.len();
        let listed_totals = cut(totals, top);
        let mut entries: Vec<FunctionEntry> = self.entries.into_iter().map(|(_, e)| e).collect();
        let entries_count = entries.len();
        entries.sort_by(|a, b| {
            b.energy_j
                .total_cmp(&a.energy_j)
                .then_with(|| a.who.pid.cmp(&b.who.pid))
                .then_with(|| a.symbol.cmp(&b.symbol))
        });
        let listed = cut(entries, top);
        let mut stacks = self.stacks;
        stacks.sort_by(|a, b| {
            a.pid
                .cmp(&b.pid)
                .then_with(|| b.energy_j.total_cmp(&a.energy_j))
        });
        Built {
            profiling: Some(FunctionProfiling {
                functions_count: entries_count,
                functions_listed_count: listed.len(),
                function_totals_count: totals_count,
                function_totals_listed_count: listed_totals.len(),
                provenance,
                uprobes,
                sampling,
                method: self.method,
                notes: self.notes,
            }),
            functions: listed,
            totals: listed_totals,
            stacks,
        }
    }
}

/// The first `top` functions of a sorted list, and the `[unsampled]` remainders past them:
/// they always stay listed, since they make the list add up.
fn cut<Who>(sorted: Vec<FunctionFigures<Who>>, top: usize) -> Vec<FunctionFigures<Who>> {
    sorted
        .into_iter()
        .enumerate()
        .filter(|(i, f)| *i < top || f.symbol == UNSAMPLED)
        .map(|(_, f)| f)
        .collect()
}

/// How probed functions' figures are computed (`meta.function_profiling.method`).
const PROBED_METHOD: &str = "probed functions: on-CPU time between entry and return (time \
     off-CPU inside the function does not count), times the process's energy per on-CPU \
     second in each interval; inclusive time counts the outermost of recursive calls only; \
     times include part of the probes' own cost (the trap after entry and before return)";

/// One entry per process and probed function that ran (ids the recording does not name are
/// left out).
fn probed_entries(
    data: &FunctionRecording,
    calls: &BTreeMap<(ProcId, u32), FunctionTotals>,
    names: &Names,
) -> Vec<(TotalKey, FunctionEntry)> {
    calls
        .iter()
        .filter_map(|(&(process, func), totals)| {
            let probed = data.probed.get(func as usize)?;
            let name = (probed.name.clone(), file_name(&probed.module), None);
            let pid = names.pid(process);
            let entry = FunctionEntry {
                partial: Some(data.partial.contains(&(process, func))),
                entry_only: Some(probed.entry_only.is_some()),
                ..FunctionEntry::attributed(name, pid, totals, true, names.provenance)
            };
            Some((TotalKey::Probed(func), entry))
        })
        .collect()
}

/// Where the probed figures are partial or missing: calls still running at the end,
/// functions probed at entry only (grouped by why), probes attached one perf event each.
fn uprobe_notes(data: &FunctionRecording) -> Vec<String> {
    let mut notes = Vec::new();
    if !data.partial.is_empty() {
        notes.push(format!(
            "{} function(s) were still running when the run ended: their figures (partial: \
             true) cover the time up to the last read",
            data.partial.len()
        ));
    }
    let mut entry_only: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for p in &data.probed {
        if let Some(why) = p.entry_only {
            entry_only
                .entry(why.describe())
                .or_default()
                .push(p.name.clone());
        }
    }
    if !entry_only.is_empty() {
        let groups: Vec<String> = entry_only
            .iter()
            .map(|(why, names)| format!("{why}: {}", shorten_list(names, 5)))
            .collect();
        notes.push(format!(
            "{} function(s) probed at entry only (entry_only: true), because a return probe \
             (which replaces the return address on the stack) would harm the program: one \
             that never returns is timed from its entry while it runs (its calls never \
             complete: partial), the others count their calls at entry, with no time or \
             energy. {}",
            entry_only.values().map(Vec::len).sum::<usize>(),
            groups.join("; ")
        ));
    }
    if data.attach_path == Some(AttachPath::PerfEvent) {
        notes.push(
            "function probes were attached one perf event per probe (this kernel offered no \
             uprobe_multi links, Linux 6.6 and later): taking them down costs the kernel \
             about a tenth of a second each"
                .to_string(),
        );
    }
    notes
}

/// What the probes cost and saw: the targets' completed calls and their estimated cost
/// come from `calls`, the rest from the kernel's counters.
fn uprobe_stats(
    data: &FunctionRecording,
    calls: &BTreeMap<(ProcId, u32), FunctionTotals>,
) -> UprobeStats {
    let (mut target_calls, mut estimated_cost_s) = (0u64, 0.0);
    for (&(_, func), totals) in calls {
        if let Some(probed) = data.probed.get(func as usize) {
            target_calls += totals.calls;
            estimated_cost_s +=
                totals.calls as f64 * probed.first_instruction.estimated_pair_cost_us() / 1e6;
        }
    }
    let counters = data.uprobe_counters.unwrap_or_default();
    UprobeStats {
        attach_method: match data.attach_path {
            Some(AttachPath::PerfEvent) => "perf_event",
            _ => "uprobe_multi",
        },
        functions: data.probed.iter().map(probed_entry).collect(),
        probe_hits_count: counters.entries,
        target_calls_count: target_calls,
        estimated_probe_cost_s: estimated_cost_s,
        depth_overflow_count: counters.overflows,
        unmatched_returns_count: counters.unmatched_returns,
        abandoned_frames_count: counters.abandoned_frames,
        map_full_count: counters.map_full,
        clock_fallbacks_count: counters.clock_fallbacks,
    }
}

/// `meta.function_profiling.uprobes.functions[]`: one probed function.
fn probed_entry(p: &ProbedFunction) -> ProbedEntry {
    ProbedEntry {
        symbol: p.name.clone(),
        module: p.module.display().to_string(),
        file_offset: p.offset,
        first_instruction: p.first_instruction,
        return_probe: p.entry_only.is_none(),
        entry_only_reason: p.entry_only,
        estimated_probe_pair_cost_us: p.first_instruction.estimated_pair_cost_us(),
        max_calls_per_s: p.max_calls_per_s,
    }
}

/// One entry per process and sampled frame (ids the recording does not name are left
/// out).
fn sampled_entries(
    data: &FunctionRecording,
    frames: &BTreeMap<(ProcId, FrameId), FunctionTotals>,
    names: &Names,
) -> Vec<(TotalKey, FunctionEntry)> {
    frames
        .iter()
        .filter_map(|(&(process, frame), totals)| {
            let f = data.frames.get(frame as usize)?;
            let name = (f.symbol.clone(), f.module.clone(), f.line);
            let entry = FunctionEntry::attributed(
                name,
                names.pid(process),
                totals,
                false,
                names.provenance,
            );
            Some((TotalKey::Sampled(frame), entry))
        })
        .collect()
}

/// A process's energy and on-CPU time that no sample carried.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Rest {
    process: ProcId,
    energy_j: f64,
    cpu_ns: u64,
}

/// How the targets' energy splits between their samples and the `[unsampled]` rests.
#[derive(Clone, Debug, Default, PartialEq)]
struct SampledSplit {
    sampled_j: f64,
    unsampled_j: f64,
    /// The rests worth an entry (over a nanojoule).
    rests: Vec<Rest>,
}

/// Each process's energy minus what its samples carried (never below 0).
fn unsampled(spent: &ProcessesSpent, carried: &BTreeMap<ProcId, ProcessSpend>) -> SampledSplit {
    let mut split = SampledSplit::default();
    for (&process, &energy_j) in spent.energy_j {
        let carried = carried.get(&process).copied().unwrap_or_default();
        let rest_j = (energy_j - carried.energy_j).max(0.0);
        let cpu_ns = spent.cpu_ns.get(&process).copied().unwrap_or(0);
        split.sampled_j += carried.energy_j;
        split.unsampled_j += rest_j;
        if rest_j > 1e-9 {
            split.rests.push(Rest {
                process,
                energy_j: rest_j,
                cpu_ns: cpu_ns.saturating_sub(carried.cpu_ns),
            });
        }
    }
    split
}

/// The `[unsampled]` entry of one process: no sample, and all of it is its own (self).
fn unsampled_entry(pid: u32, rest: &Rest, provenance: Provenance) -> FunctionEntry {
    let totals = FunctionTotals {
        cpu_ns: rest.cpu_ns as f64,
        self_cpu_ns: rest.cpu_ns as f64,
        energy_j: rest.energy_j,
        self_energy_j: rest.energy_j,
        ..FunctionTotals::default()
    };
    let name = (UNSAMPLED.to_string(), String::new(), None);
    FunctionEntry::attributed(name, pid, &totals, false, provenance)
}

/// Energy per process and sampled stack, with the stack's frames named.
fn sampled_stacks(
    data: &FunctionRecording,
    stacks: &BTreeMap<(ProcId, StackId), FunctionTotals>,
    names: &Names,
) -> Vec<StackEnergy> {
    stacks
        .iter()
        .map(|(&(process, stack), totals)| StackEnergy {
            pid: names.pid(process),
            comm: names.comm(process),
            frames: data
                .stacks
                .get(stack as usize)
                .map(|ids| {
                    ids.iter()
                        .filter_map(|&id| data.frames.get(id as usize))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default(),
            energy_j: totals.energy_j,
            cpu_ns: totals.cpu_ns,
            samples: totals.samples,
        })
        .collect()
}

/// How sampled functions' figures are computed (`meta.function_profiling.method`).
fn sampling_method(sample_hz: u64) -> String {
    format!(
        "sampled functions: CPU-clock samples at {sample_hz} Hz per CPU; within each interval \
         a thread's energy is divided equally over its samples; a function's energy is the \
         sum over samples whose stack contains it (inclusive) or ends in it (self); per \
         process, self energies plus [unsampled] add up to the process's energy; figures of \
         functions with few samples are noisy (relative error about 1/sqrt(samples))"
    )
}

/// Where the sampled figures are approximate: truncated stacks, lost stacks, the naming's
/// remarks, Python versions the frame walker does not know.
fn sampling_notes(summary: &SamplerSummary) -> Vec<String> {
    let mut notes: Vec<String> = truncated_stacks_note(summary).into_iter().collect();
    let lost_pct = lost_stacks_pct(summary);
    if lost_pct > 0.0 {
        notes.push(format!(
            "{lost_pct:.2} stacks lost per 100 samples (measured: {} kernel and {} user stacks \
             the kernel could not walk, {} samples lost whole because the agent read the \
             sample ring late, e.g. on a starved machine); a sample that lost a stack keeps \
             its energy with its process (under [no stack] when no frame is left)",
            summary.lost_kernel_stacks, summary.lost_user_stacks, summary.lost_samples
        ));
    }
    notes.extend(summary.notes.iter().cloned());
    for p in summary.python.iter().filter(|p| !p.frames) {
        notes.push(format!(
            "pid {}: CPython {} is not supported by the frame walker (3.11 to 3.13 are): \
             native frames only",
            p.pid, p.version
        ));
    }
    notes
}

/// `meta.function_profiling.sampling`.
fn sampling_stats(summary: &SamplerSummary, split: &SampledSplit) -> SamplingStats {
    SamplingStats {
        sample_hz: summary.sample_hz,
        samples_count: summary.samples,
        lost_samples_count: summary.lost_samples,
        lost_kernel_stacks_count: summary.lost_kernel_stacks,
        lost_user_stacks_count: summary.lost_user_stacks,
        lost_stacks_pct: lost_stacks_pct(summary),
        lost_python_count: 0,
        bpf_ns_per_run: summary.run_ns_per_run.filter(|v| v.is_finite()),
        bpf_runs_count: summary.runs,
        sampled_energy_j: split.sampled_j,
        unsampled_energy_j: split.unsampled_j,
        stacks_count: summary.stacks_count,
        symbolize_ms: summary.symbolize_ms,
        incomplete_stacks_pct: summary.incomplete_stacks_pct,
        stack_walk: StackWalkStats {
            mode: summary.stacks.name(),
            frame_pointer_samples_count: summary.walks.frame_pointer,
            frame_pointer_truncated_count: summary.walks.frame_pointer_truncated,
            dwarf_samples_count: summary.walks.dwarf,
            dwarf_truncated_count: summary.walks.dwarf_truncated,
        },
        python: summary
            .python
            .iter()
            .map(|p| PythonEntry {
                pid: p.pid,
                version: p.version.clone(),
                python_frames: p.frames,
            })
            .collect(),
    }
}

/// The recording's own notes (libraries probed late, SPECs that waited in vain), and how
/// often a long run merged its function data.
fn recording_notes(data: &FunctionRecording) -> Vec<String> {
    let mut notes = data.notes.clone();
    if data.merges > 0 {
        notes.push(format!(
            "long run: function data was merged {} time(s) to bound memory",
            data.merges
        ));
    }
    notes
}

/// Stacks lost (kernel, user, and samples lost whole) per 100 samples (0 without samples).
fn lost_stacks_pct(summary: &crate::session::functions::SamplerSummary) -> f64 {
    let lost = summary.lost_kernel_stacks + summary.lost_user_stacks + summary.lost_samples;
    if summary.samples == 0 {
        0.0
    } else {
        (100.0 * lost as f64 / summary.samples as f64).min(100.0)
    }
}

/// The first `n` items joined, and how many more.
fn shorten_list(items: &[String], n: usize) -> String {
    let mut text = items.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > n {
        text.push_str(&format!(" and {} more", items.len() - n));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functions::symbolize::FrameKind;

    #[test]
    fn many_truncated_stacks_get_a_note_that_says_how_they_were_walked() {
        use crate::session::functions::WalkCounts;
        let summary = |stacks, walks| SamplerSummary {
            stacks,
            walks,
            ..SamplerSummary::default()
        };
        // 5 of 100 truncated: under the threshold, no note.
        let few = WalkCounts {
            dwarf: 100,
            dwarf_truncated: 5,
            ..WalkCounts::default()
        };
        assert_eq!(
            truncated_stacks_note(&summary(StackWalking::Auto, few)),
            None
        );
        // Frame pointers alone, 60 of 100 truncated: the note points at --stacks auto.
        let fp = WalkCounts {
            frame_pointer: 100,
            frame_pointer_truncated: 60,
            ..WalkCounts::default()
        };
        let note = truncated_stacks_note(&summary(StackWalking::Fp, fp)).expect("a note");
        assert!(note.starts_with("60% of native stacks"), "{note}");
        assert!(note.contains("0 of 0 walked by .eh_frame, 60 of 100 by frame pointer"));
        assert!(note.contains("--stacks auto"), "{note}");
        // Unwound, 30 of 150 truncated: the note names the causes, not a flag.
        let mixed = WalkCounts {
            frame_pointer: 50,
            frame_pointer_truncated: 20,
            dwarf: 100,
            dwarf_truncated: 10,
        };
        let note = truncated_stacks_note(&summary(StackWalking::Auto, mixed)).expect("a note");
        assert!(note.starts_with("20% of native stacks"), "{note}");
        assert!(note.contains("10 of 100 walked by .eh_frame, 20 of 50 by frame pointer"));
        assert!(note.contains("16 KiB"), "{note}");
        assert!(!note.contains("--stacks"), "{note}");
        // No samples: no share, no note.
        let none = WalkCounts::default();
        assert_eq!(none.truncated_pct(), None);
        assert_eq!(
            truncated_stacks_note(&summary(StackWalking::Dwarf, none)),
            None
        );
    }

    fn entry(pid: u32, symbol: &str, calls: Option<u64>, energy_j: f64) -> FunctionEntry {
        FunctionEntry {
            symbol: symbol.into(),
            module: "app".into(),
            who: InProcess { pid },
            calls,
            samples: calls.is_none().then_some(3),
            cpu_time_s: energy_j / 10.0,
            energy_j,
            self_cpu_time_s: energy_j / 20.0,
            self_energy_j: energy_j / 2.0,
            source: if calls.is_some() {
                "uprobe"
            } else {
                "sampling"
            },
            line: None,
            partial: calls.map(|_| pid == 2),
            entry_only: calls.map(|_| false),
            provenance: Provenance::Estimated,
        }
    }

    #[test]
    fn totals_sum_each_function_over_its_processes_most_energy_first() {
        let entries = [
            (0, entry(1, "f", Some(7), 1.0)),
            (0, entry(2, "f", Some(7), 2.0)),
            (0, entry(3, "f", Some(7), 4.0)),
            // Same name, another function (another key): its own total.
            (1, entry(1, "f", None, 8.0)),
            (2, entry(1, "g", None, 0.5)),
        ];
        let totals = function_totals(entries.iter().map(|(k, e)| (*k, e)));
        assert_eq!(totals.len(), 3);
        let sampled = &totals[0];
        assert_eq!(
            (sampled.symbol.as_str(), sampled.samples, sampled.calls),
            ("f", Some(3), None)
        );
        let probed = &totals[1];
        assert_eq!(probed.calls, Some(21));
        assert_eq!(probed.who.processes_count, 3);
        assert_eq!(probed.energy_j, 7.0);
        assert_eq!(probed.self_energy_j, 3.5);
        assert!((probed.cpu_time_s - 0.7).abs() < 1e-12);
        assert_eq!(
            probed.partial,
            Some(true),
            "one process's call was still running"
        );
        assert_eq!(probed.entry_only, Some(false));
        assert_eq!(totals[2].symbol, "g");
        assert!(function_totals::<u32>(std::iter::empty()).is_empty());
    }

    #[test]
    fn entries_and_totals_write_their_process_fields_in_line_with_the_rest() {
        let e = entry(7, "f", Some(2), 1.5);
        let json = serde_json::to_string(&e).expect("an entry serializes");
        assert!(
            json.starts_with(r#"{"symbol":"f","module":"app","pid":7,"calls":2,"cpu_time_s":"#),
            "{json}"
        );
        assert!(!json.contains("who"), "{json}");
        let total = &function_totals([(0, &e), (0, &entry(8, "f", Some(3), 0.5))])[0];
        let json = serde_json::to_value(total).expect("a total serializes");
        assert_eq!(json["processes_count"], 2);
        assert_eq!(json["calls"], 5);
        assert!(
            json.get("pid").is_none() && json.get("who").is_none(),
            "{json}"
        );
        // The report's last check reaches the figures of both.
        let mut bad = e.clone();
        bad.self_energy_j = f64::NAN;
        let found = crate::report::finite::non_finite(&bad);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "self_energy_j");
    }

    fn process(pid: u32, comm: &str) -> ProcessRecord {
        ProcessRecord {
            pid,
            ppid: Some(1),
            comm: comm.into(),
            cmdline: vec![comm.into()],
            uid: Some(1000),
            first_seen_ns: 0,
            start_ns: None,
            ended_ns: None,
            ending: None,
            root: false,
            thread_names: Default::default(),
            cgroup: None,
        }
    }

    const PROCESSES: [(u32, &str); 2] = [(100, "app"), (200, "worker")];

    fn names(processes: &[ProcessRecord]) -> Names<'_> {
        Names {
            processes,
            provenance: Provenance::Measured,
        }
    }

    fn probed(
        name: &str,
        first: FirstInstruction,
        entry_only: Option<EntryOnly>,
    ) -> ProbedFunction {
        ProbedFunction {
            name: name.into(),
            module: "/usr/bin/app".into(),
            offset: 0x1000,
            first_instruction: first,
            entry_only,
            spec: name.into(),
            max_calls_per_s: 10.0,
        }
    }

    fn calls(n: u64, cpu_ms: f64, energy_j: f64) -> FunctionTotals {
        FunctionTotals {
            calls: n,
            cpu_ns: cpu_ms * 1e6,
            self_cpu_ns: cpu_ms * 0.5e6,
            energy_j,
            self_energy_j: energy_j / 2.0,
            ..FunctionTotals::default()
        }
    }

    #[test]
    fn probed_entries_name_each_process_and_function_and_skip_unknown_ids() {
        let processes = PROCESSES.map(|(pid, comm)| process(pid, comm));
        let data = FunctionRecording {
            probed: vec![
                probed("parse", FirstInstruction::Emulated, None),
                probed(
                    "main",
                    FirstInstruction::SingleStepped,
                    Some(EntryOnly::EntryPoint),
                ),
            ],
            partial: [(1, 0)].into(),
            ..FunctionRecording::default()
        };
        // (process, function): function 9 and process 5 are not in the recording.
        let calls = BTreeMap::from([
            ((0, 0), calls(1_000, 200.0, 2.0)),
            ((1, 0), calls(10, 20.0, 0.2)),
            ((0, 1), calls(1, 0.0, 0.0)),
            ((0, 9), calls(5, 1.0, 0.1)),
            ((5, 0), calls(3, 1.0, 0.1)),
        ]);
        let entries = probed_entries(&data, &calls, &names(&processes));
        let seen: Vec<String> = entries
            .iter()
            .map(|(k, e)| {
                let (pid, symbol) = (e.who.pid, &e.symbol);
                let (calls, partial, entry_only) = (e.calls, e.partial, e.entry_only);
                format!("{k:?} pid {pid} {symbol}: {calls:?} {partial:?} {entry_only:?}")
            })
            .collect();
        assert_eq!(
            seen,
            [
                "Probed(0) pid 100 parse: Some(1000) Some(false) Some(false)",
                "Probed(1) pid 100 main: Some(1) Some(false) Some(true)",
                "Probed(0) pid 200 parse: Some(10) Some(true) Some(false)",
                // A process the recording does not hold keeps its figures under pid 0.
                "Probed(0) pid 0 parse: Some(3) Some(false) Some(false)",
            ]
        );
        let parse = &entries[0].1;
        assert_eq!(parse.module, "app");
        assert!((parse.cpu_time_s - 0.2).abs() < 1e-12);
        assert!((parse.self_cpu_time_s - 0.1).abs() < 1e-12);
        assert_eq!((parse.energy_j, parse.self_energy_j), (2.0, 1.0));
        assert_eq!((parse.source, parse.samples), ("uprobe", None));

        // 1,014 calls of known functions: 1,000 + 10 + 3 emulated at 2 µs, 1 single-stepped
        // at 13 µs; function 9's 5 calls are not counted.
        let stats = uprobe_stats(&data, &calls);
        assert_eq!(stats.target_calls_count, 1_014);
        assert!((stats.estimated_probe_cost_s - (1_013.0 * 2e-6 + 13e-6)).abs() < 1e-12);
        assert_eq!(stats.attach_method, "uprobe_multi");
        assert_eq!(stats.functions.len(), 2);
        assert!(!stats.functions[1].return_probe);
    }

    #[test]
    fn probe_notes_say_what_is_partial_entry_only_or_slow_to_detach() {
        let mut data = FunctionRecording {
            probed: vec![probed("parse", FirstInstruction::Emulated, None)],
            ..FunctionRecording::default()
        };
        assert!(uprobe_notes(&data).is_empty());
        data.partial = [(0, 0)].into();
        data.attach_path = Some(AttachPath::PerfEvent);
        data.probed.extend((0..7).map(|i| {
            probed(
                &format!("f{i}"),
                FirstInstruction::Emulated,
                Some(EntryOnly::EntryPoint),
            )
        }));
        let notes = uprobe_notes(&data);
        assert_eq!(notes.len(), 3, "{notes:#?}");
        assert!(notes[0].starts_with("1 function(s) were still running"));
        assert!(notes[1].starts_with("7 function(s) probed at entry only"));
        assert!(
            notes[1].ends_with("f0, f1, f2, f3, f4 and 2 more"),
            "{}",
            notes[1]
        );
        assert!(notes[2].contains("one perf event per probe"));
        assert_eq!(
            uprobe_stats(&data, &BTreeMap::new()).attach_method,
            "perf_event"
        );
    }

    #[test]
    fn unsampled_is_what_each_process_spent_beyond_its_samples() {
        // Over the run (what the samples carried in brackets):
        //   process 0 |==========| 10 J, 1.0 s   [======    ] 6 J, 0.6 s -> 4 J, 0.4 s left
        //   process 1 |==|          2 J, 0.2 s   [==]         2 J, 0.2 s -> nothing left
        //   process 2 |=|           1 J, 0.1 s   [=.]       1.2 J (rounding) -> none, not -0.2
        //   process 3 |===|         3 J, 0.3 s   no sample             -> 3 J, 0.3 s left
        let energy_j = BTreeMap::from([(0, 10.0), (1, 2.0), (2, 1.0), (3, 3.0)]);
        let cpu_ns = BTreeMap::from([(0, 1_000), (1, 200), (2, 100), (3, 300)]);
        let spend = |energy_j, cpu_ns| ProcessSpend { energy_j, cpu_ns };
        let carried = BTreeMap::from([
            (0, spend(6.0, 600)),
            (1, spend(2.0, 200)),
            (2, spend(1.2, 110)),
        ]);
        let spent = ProcessesSpent {
            energy_j: &energy_j,
            cpu_ns: &cpu_ns,
        };
        let split = unsampled(&spent, &carried);
        assert!((split.sampled_j - 9.2).abs() < 1e-12);
        assert!((split.unsampled_j - 7.0).abs() < 1e-12);
        let rest = |process, energy_j, cpu_ns| Rest {
            process,
            energy_j,
            cpu_ns,
        };
        assert_eq!(split.rests, [rest(0, 4.0, 400), rest(3, 3.0, 300)]);

        let e = unsampled_entry(100, &split.rests[0], Provenance::Estimated);
        assert_eq!(
            (e.symbol.as_str(), e.who.pid, e.samples),
            (UNSAMPLED, 100, Some(0))
        );
        assert_eq!((e.energy_j, e.self_energy_j), (4.0, 4.0));
        assert_eq!((e.cpu_time_s, e.self_cpu_time_s), (400e-9, 400e-9));
    }

    #[test]
    fn sampled_stacks_name_their_frames_and_process() {
        let processes = PROCESSES.map(|(pid, comm)| process(pid, comm));
        let frame = |symbol: &str| Frame::named(symbol.into(), "app".into(), FrameKind::Native);
        let data = FunctionRecording {
            frames: vec![frame("main"), frame("parse")],
            // Stack 1 names a frame the table lacks: it is left out of the stack.
            stacks: vec![vec![0, 1], vec![0, 7]],
            ..FunctionRecording::default()
        };
        let totals = |samples, energy_j| FunctionTotals {
            samples,
            cpu_ns: samples as f64 * 1e6,
            energy_j,
            ..FunctionTotals::default()
        };
        let stacks = BTreeMap::from([((1, 0), totals(3, 0.3)), ((0, 1), totals(1, 0.1))]);
        let out = sampled_stacks(&data, &stacks, &names(&processes));
        let seen: Vec<(u32, &str, Vec<&str>, u64)> = out
            .iter()
            .map(|s| {
                let frames = s.frames.iter().map(|f| f.symbol.as_str()).collect();
                (s.pid, s.comm.as_str(), frames, s.samples)
            })
            .collect();
        assert_eq!(
            seen,
            [
                (100, "app", vec!["main"], 1),
                (200, "worker", vec!["main", "parse"], 3),
            ]
        );
        assert_eq!((out[1].energy_j, out[1].cpu_ns), (0.3, 3e6));
    }

    #[test]
    fn the_lists_are_sorted_by_energy_and_cut_at_top_keeping_every_remainder() {
        let unsampled = |pid, energy_j| FunctionEntry {
            symbol: UNSAMPLED.into(),
            ..entry(pid, "", None, energy_j)
        };
        let found = Found {
            entries: vec![
                (TotalKey::Sampled(0), entry(2, "f", None, 1.0)),
                (TotalKey::Sampled(0), entry(1, "f", None, 1.0)),
                (TotalKey::Sampled(1), entry(1, "g", None, 5.0)),
                (TotalKey::Unsampled, unsampled(1, 0.1)),
                (TotalKey::Unsampled, unsampled(2, 0.2)),
            ],
            stacks: [(2, 1.0), (1, 0.5), (1, 2.0)]
                .map(|(pid, energy_j)| StackEnergy {
                    pid,
                    comm: String::new(),
                    frames: Vec::new(),
                    energy_j,
                    cpu_ns: 0.0,
                    samples: 1,
                })
                .into(),
            method: vec!["how".into()],
            notes: vec!["note".into()],
        };
        let built = found.finish(2, Provenance::Measured, None, None);
        // Most energy first, then by pid; past the top two only the remainders stay.
        let listed: Vec<(u32, &str)> = built
            .functions
            .iter()
            .map(|e| (e.who.pid, e.symbol.as_str()))
            .collect();
        assert_eq!(listed, [(1, "g"), (1, "f"), (2, UNSAMPLED), (1, UNSAMPLED)]);
        // Totals: g 5 J, f 2 J (two processes), [unsampled] 0.3 J kept past the cut.
        let totals: Vec<(&str, usize, f64)> = built
            .totals
            .iter()
            .map(|t| (t.symbol.as_str(), t.who.processes_count, t.energy_j))
            .collect();
        assert_eq!(totals[..2], [("g", 1, 5.0), ("f", 2, 2.0)]);
        assert_eq!((totals[2].0, totals[2].1), (UNSAMPLED, 2));
        let profiling = built.profiling.expect("profiling");
        assert_eq!(
            (
                profiling.functions_count,
                profiling.functions_listed_count,
                profiling.function_totals_count,
                profiling.function_totals_listed_count
            ),
            (5, 4, 3, 3)
        );
        assert_eq!(
            (profiling.method, profiling.notes),
            (vec!["how".to_string()], vec!["note".to_string()])
        );
        // Stacks by pid, then most energy first.
        let stacks: Vec<(u32, f64)> = built.stacks.iter().map(|s| (s.pid, s.energy_j)).collect();
        assert_eq!(stacks, [(1, 2.0), (1, 0.5), (2, 1.0)]);
    }

    #[test]
    fn sampling_notes_count_lost_stacks_and_name_unsupported_pythons() {
        let mut summary = SamplerSummary {
            samples: 200,
            ..SamplerSummary::default()
        };
        assert!(sampling_notes(&summary).is_empty());
        summary.lost_kernel_stacks = 2;
        summary.lost_samples = 1;
        summary.notes = vec!["jit map read".into()];
        summary.python = vec![crate::session::functions::PythonSeen {
            pid: 42,
            version: "3.9.2".into(),
            frames: false,
        }];
        let notes = sampling_notes(&summary);
        assert_eq!(notes.len(), 3, "{notes:#?}");
        assert!(notes[0].starts_with("1.50 stacks lost per 100 samples (measured: 2 kernel"));
        assert_eq!(notes[1], "jit map read");
        assert!(notes[2].starts_with("pid 42: CPython 3.9.2 is not supported"));
        let data = FunctionRecording {
            merges: 3,
            notes: vec!["probed libfoo.so late".into()],
            ..FunctionRecording::default()
        };
        assert_eq!(
            recording_notes(&data),
            [
                "probed libfoo.so late",
                "long run: function data was merged 3 time(s) to bound memory"
            ]
        );
    }
}
