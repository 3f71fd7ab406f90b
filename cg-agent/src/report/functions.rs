//! The function part of the report: runs function-level attribution
//! ([`crate::attribution::functions`]) over the recording's function data with each
//! process's energy per interval, and builds the `functions` list (per process), the
//! `function_totals` list (per function, over all processes, summed before the
//! `--top-functions` cut), `meta.function_profiling` and the energy per stack that folded
//! stacks and flamegraphs are drawn from.

use std::collections::BTreeMap;

use serde::Serialize;

use super::FunctionEntry;
use crate::{
    attribution::{
        ProcId,
        functions::{IntervalSpend, attribute_calls, attribute_samples},
    },
    functions::{
        StackWalking,
        elf::FirstInstruction,
        returns::EntryOnly,
        symbolize::{Frame, UNSAMPLED, file_name, function_stacks},
    },
    session::{Recording, functions::SamplerSummary},
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

/// One function over all the processes that ran it: the sum of its per-process entries
/// (`function_totals[]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionTotal {
    pub symbol: String,
    pub module: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// `uprobe` or `sampling`.
    pub source: &'static str,
    /// Processes with an entry for it.
    pub processes_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calls: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    pub cpu_time_s: f64,
    pub energy_j: f64,
    pub self_cpu_time_s: f64,
    pub self_energy_j: f64,
    /// Whether a call was still running at the end in some process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_only: Option<bool>,
    pub provenance: Provenance,
}

/// Sums per-process entries into per-function totals, most energy first; `key` tells
/// which entries are the same function (a probed function's id, a frame's id).
pub fn function_totals<'a, K: Ord>(
    entries: impl IntoIterator<Item = (K, &'a FunctionEntry)>,
) -> Vec<FunctionTotal> {
    let mut totals: BTreeMap<K, FunctionTotal> = BTreeMap::new();
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    let or = |a: Option<bool>, b: Option<bool>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
    };
    for (key, e) in entries {
        let total = totals.entry(key).or_insert_with(|| FunctionTotal {
            symbol: e.symbol.clone(),
            module: e.module.clone(),
            line: e.line,
            source: e.source,
            processes_count: 0,
            calls: None,
            samples: None,
            cpu_time_s: 0.0,
            energy_j: 0.0,
            self_cpu_time_s: 0.0,
            self_energy_j: 0.0,
            partial: None,
            entry_only: None,
            provenance: e.provenance,
        });
        total.processes_count += 1;
        total.calls = add(total.calls, e.calls);
        total.samples = add(total.samples, e.samples);
        total.cpu_time_s += e.cpu_time_s;
        total.energy_j += e.energy_j;
        total.self_cpu_time_s += e.self_cpu_time_s;
        total.self_energy_j += e.self_energy_j;
        total.partial = or(total.partial, e.partial);
        total.entry_only = or(total.entry_only, e.entry_only);
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
pub struct Built {
    pub functions: Vec<FunctionEntry>,
    /// Per function over all processes, cut at `--top-functions` like `functions`.
    pub totals: Vec<FunctionTotal>,
    pub profiling: Option<FunctionProfiling>,
    pub stacks: Vec<StackEnergy>,
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
        return Built {
            functions: Vec::new(),
            totals: Vec::new(),
            profiling: None,
            stacks: Vec::new(),
        };
    };
    let provenance = rec.header.provenance();
    let pid = |id: ProcId| rec.processes.get(id as usize).map_or(0, |p| p.pid);
    let mut entries: Vec<FunctionEntry> = Vec::new();
    // Which function each entry is, in step with `entries`.
    let mut keys: Vec<TotalKey> = Vec::new();
    let mut method = Vec::new();
    let mut notes = Vec::new();

    let uprobes = (!data.probed.is_empty()).then(|| {
        let calls = attribute_calls(spend, &data.intervals);
        let mut target_calls = 0u64;
        let mut estimated_cost_s = 0.0;
        for (&(process, func), totals) in &calls {
            let Some(probed) = data.probed.get(func as usize) else {
                continue;
            };
            target_calls += totals.calls;
            estimated_cost_s +=
                totals.calls as f64 * probed.first_instruction.estimated_pair_cost_us() / 1e6;
            keys.push(TotalKey::Probed(func));
            entries.push(FunctionEntry {
                symbol: probed.name.clone(),
                module: file_name(&probed.module),
                pid: pid(process),
                calls: Some(totals.calls),
                samples: None,
                cpu_time_s: totals.cpu_ns / 1e9,
                energy_j: totals.energy_j,
                self_cpu_time_s: totals.self_cpu_ns / 1e9,
                self_energy_j: totals.self_energy_j,
                source: "uprobe",
                line: None,
                partial: Some(data.partial.contains(&(process, func))),
                entry_only: Some(probed.entry_only.is_some()),
                provenance,
            });
        }
        method.push(
            "probed functions: on-CPU time between entry and return (time off-CPU inside the \
             function does not count), times the process's energy per on-CPU second in each \
             interval; inclusive time counts the outermost of recursive calls only; times \
             include part of the probes' own cost (the trap after entry and before return)"
                .to_string(),
        );
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
                "{} function(s) probed at entry only (entry_only: true), because a return \
                 probe (which replaces the return address on the stack) would harm the \
                 program: one that never returns is timed from its entry while it runs (its \
                 calls never complete: partial), the others count their calls at entry, with \
                 no time or energy. {}",
                entry_only.values().map(Vec::len).sum::<usize>(),
                groups.join("; ")
            ));
        }
        let counters = data.uprobe_counters.unwrap_or_default();
        let attach_method = match data.attach_path {
            Some(crate::probes::uprobes::AttachPath::PerfEvent) => {
                notes.push(
                    "function probes were attached one perf event per probe (this kernel \
                     offered no uprobe_multi links, Linux 6.6 and later): taking them down \
                     costs the kernel about a tenth of a second each"
                        .to_string(),
                );
                "perf_event"
            }
            _ => "uprobe_multi",
        };
        UprobeStats {
            attach_method,
            functions: data
                .probed
                .iter()
                .map(|p| ProbedEntry {
                    symbol: p.name.clone(),
                    module: p.module.display().to_string(),
                    file_offset: p.offset,
                    first_instruction: p.first_instruction,
                    return_probe: p.entry_only.is_none(),
                    entry_only_reason: p.entry_only,
                    estimated_probe_pair_cost_us: p.first_instruction.estimated_pair_cost_us(),
                    max_calls_per_s: p.max_calls_per_s,
                })
                .collect(),
            probe_hits_count: counters.entries,
            target_calls_count: target_calls,
            estimated_probe_cost_s: estimated_cost_s,
            depth_overflow_count: counters.overflows,
            unmatched_returns_count: counters.unmatched_returns,
            abandoned_frames_count: counters.abandoned_frames,
            map_full_count: counters.map_full,
            clock_fallbacks_count: counters.clock_fallbacks,
        }
    });

    let mut stacks = Vec::new();
    let sampling = data.sampler.as_ref().map(|summary| {
        // Function figures over functions; the stacks keep their lines.
        let by_function = function_stacks(&data.frames, &data.stacks);
        let sampled = attribute_samples(spend, &data.intervals, &by_function);
        for (&(process, frame), totals) in &sampled.frames {
            let Some(f) = data.frames.get(frame as usize) else {
                continue;
            };
            keys.push(TotalKey::Sampled(frame));
            entries.push(FunctionEntry {
                symbol: f.symbol.clone(),
                module: f.module.clone(),
                pid: pid(process),
                calls: None,
                samples: Some(totals.samples),
                cpu_time_s: totals.cpu_ns / 1e9,
                energy_j: totals.energy_j,
                self_cpu_time_s: totals.self_cpu_ns / 1e9,
                self_energy_j: totals.self_energy_j,
                source: "sampling",
                line: f.line,
                partial: None,
                entry_only: None,
                provenance,
            });
        }
        let (mut sampled_j, mut unsampled_j) = (0.0, 0.0);
        for (&process, &energy_j) in process_energy {
            let carried = sampled.sampled.get(&process).copied().unwrap_or_default();
            let rest_j = (energy_j - carried.energy_j).max(0.0);
            let cpu_ns = process_cpu_ns.get(&process).copied().unwrap_or(0);
            let rest_ns = cpu_ns.saturating_sub(carried.cpu_ns);
            sampled_j += carried.energy_j;
            unsampled_j += rest_j;
            if rest_j > 1e-9 {
                keys.push(TotalKey::Unsampled);
                entries.push(FunctionEntry {
                    symbol: UNSAMPLED.into(),
                    module: String::new(),
                    pid: pid(process),
                    calls: None,
                    samples: Some(0),
                    cpu_time_s: rest_ns as f64 / 1e9,
                    energy_j: rest_j,
                    self_cpu_time_s: rest_ns as f64 / 1e9,
                    self_energy_j: rest_j,
                    source: "sampling",
                    line: None,
                    partial: None,
                    entry_only: None,
                    provenance,
                });
                let comm = rec
                    .processes
                    .get(process as usize)
                    .map_or_else(String::new, |p| p.comm.clone());
                stacks.push(StackEnergy {
                    pid: pid(process),
                    comm,
                    frames: vec![Frame::unsampled()],
                    energy_j: rest_j,
                    cpu_ns: rest_ns as f64,
                    samples: 0,
                });
            }
        }
        for (&(process, stack), totals) in &sampled.stacks {
            let frames = data
                .stacks
                .get(stack as usize)
                .map(|ids| {
                    ids.iter()
                        .filter_map(|&id| data.frames.get(id as usize))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            let comm = rec
                .processes
                .get(process as usize)
                .map_or_else(String::new, |p| p.comm.clone());
            stacks.push(StackEnergy {
                pid: pid(process),
                comm,
                frames,
                energy_j: totals.energy_j,
                cpu_ns: totals.cpu_ns,
                samples: totals.samples,
            });
        }
        method.push(format!(
            "sampled functions: CPU-clock samples at {} Hz per CPU; within each interval a \
             thread's energy is divided equally over its samples; a function's energy is the \
             sum over samples whose stack contains it (inclusive) or ends in it (self); per \
             process, self energies plus [unsampled] add up to the process's energy; figures of \
             functions with few samples are noisy (relative error about 1/sqrt(samples))",
            summary.sample_hz
        ));
        notes.extend(truncated_stacks_note(summary));
        let lost_pct = lost_stacks_pct(summary);
        if lost_pct > 0.0 {
            notes.push(format!(
                "{lost_pct:.2} stacks lost per 100 samples (measured: {} kernel and {} user \
                 stacks the kernel could not walk, {} samples lost whole because the agent \
                 read the sample ring late, e.g. on a starved machine); a sample that lost a \
                 stack keeps its energy with its process (under [no stack] when no frame is \
                 left)",
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
            sampled_energy_j: sampled_j,
            unsampled_energy_j: unsampled_j,
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
    });
    notes.extend(data.notes.iter().cloned());
    if data.merges > 0 {
        notes.push(format!(
            "long run: function data was merged {} time(s) to bound memory",
            data.merges
        ));
    }

    let totals = function_totals(keys.into_iter().zip(&entries));
    let totals_count = totals.len();
    let listed_totals: Vec<FunctionTotal> = totals
        .into_iter()
        .enumerate()
        .filter(|(i, t)| *i < data.top || t.symbol == UNSAMPLED)
        .map(|(_, t)| t)
        .collect();
    let total = entries.len();
    entries.sort_by(|a, b| {
        b.energy_j
            .total_cmp(&a.energy_j)
            .then_with(|| a.pid.cmp(&b.pid))
            .then_with(|| a.symbol.cmp(&b.symbol))
    });
    // The remainders always stay listed: they make the list add up.
    let listed: Vec<FunctionEntry> = entries
        .into_iter()
        .enumerate()
        .filter(|(i, e)| *i < data.top || e.symbol == UNSAMPLED)
        .map(|(_, e)| e)
        .collect();
    stacks.sort_by(|a, b| {
        a.pid
            .cmp(&b.pid)
            .then_with(|| b.energy_j.total_cmp(&a.energy_j))
    });
    Built {
        profiling: Some(FunctionProfiling {
            functions_count: total,
            functions_listed_count: listed.len(),
            function_totals_count: totals_count,
            function_totals_listed_count: listed_totals.len(),
            provenance,
            uprobes,
            sampling,
            method,
            notes,
        }),
        functions: listed,
        totals: listed_totals,
        stacks,
    }
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
            pid,
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
        assert_eq!(probed.processes_count, 3);
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
}
