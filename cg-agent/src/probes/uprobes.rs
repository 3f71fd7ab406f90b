//! The function probes (`--func`): attaches cg-ebpf's entry and return programs to every
//! resolved function (the function's id travels as the attachment's BPF cookie, with
//! [`COOKIE_ENTRY_ONLY`] for functions that count entries only; functions a return probe
//! would harm get none), and reads back the per-thread totals, the entry stacks of threads
//! inside probed functions, and the probes' counters. Nothing about energy here.
//!
//! Attaching takes uprobe_multi links where the kernel has them ([`super::uprobe_multi`]:
//! milliseconds to attach and about 0.1 s to detach 1,000 functions here), else aya's one
//! perf event per probe (about 0.1 s per probe to detach: minutes for 1,000 functions).
//! Either way it asks between steps whether to go on, and dropping [`FunctionMaps`]
//! detaches everything, many links at once. Attaching may happen again during the run (the
//! functions of a library loaded after the start): the new links join the others, on the
//! path the first attach took.

use std::{os::fd::OwnedFd, path::Path};

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLink, UProbeScope},
    },
};

use cg_common::profiling::{
    COOKIE_ENTRY_ONLY, FuncCounters, FuncKey, FuncStats, FuncThread, names,
};

use super::{
    ProbeError, Probes,
    retry::{Retried, again_after_signals, errno_in},
    uprobe_multi::{MultiLoadError, MultiPrograms, unsupported},
};
use crate::functions::resolve::ResolvedFunction;

/// The maps of the function probes.
pub(super) struct FunctionMaps {
    threads: HashMap<MapData, u32, FuncThread>,
    stats: HashMap<MapData, FuncKey, FuncStats>,
    counters: PerCpuArray<MapData, FuncCounters>,
    /// The programs for uprobe_multi links, when the kernel could load them.
    multi: Option<MultiPrograms>,
    /// The uprobe_multi links made (closing them detaches).
    links: Vec<OwnedFd>,
    /// aya's links, one per probe (the fallback path).
    perf_links: Vec<UProbeLink>,
}

/// Environment variable for benchmarks: `1` makes the function probes take aya's one perf
/// event per probe path even where uprobe_multi links work (to compare the two).
pub const BENCH_PERF_UPROBES_ENV: &str = "CG_TRACE_BENCH_PERF_UPROBES";

/// Threads that detach links at once: the kernel waits for RCU grace periods per link,
/// and concurrent waits share them.
const DETACH_THREADS: usize = 32;

impl Drop for FunctionMaps {
    /// Detaches every function probe, many links at once.
    fn drop(&mut self) {
        let count = self.links.len() + self.perf_links.len();
        if count == 0 {
            return;
        }
        let mut groups: Vec<(Vec<OwnedFd>, Vec<UProbeLink>)> = Vec::new();
        groups.resize_with(DETACH_THREADS, Default::default);
        for (i, link) in self.links.drain(..).enumerate() {
            groups[i % DETACH_THREADS].0.push(link);
        }
        for (i, link) in self.perf_links.drain(..).enumerate() {
            groups[i % DETACH_THREADS].1.push(link);
        }
        let started = std::time::Instant::now();
        std::thread::scope(|scope| {
            for group in groups
                .into_iter()
                .filter(|g| !g.0.is_empty() || !g.1.is_empty())
            {
                // Without a thread to spare, the closure (and the links) drop right here.
                let _ = std::thread::Builder::new().spawn_scoped(scope, move || drop(group));
            }
        });
        tracing::info!(
            "detached {count} function probe links in {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
    }
}

const ENTRY: &str = "func_entry";
const RETURN: &str = "func_return";

fn map_error(name: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

impl FunctionMaps {
    pub(super) fn take(ebpf: &mut Ebpf, multi: Option<MultiPrograms>) -> Result<Self, ProbeError> {
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
        Ok(FunctionMaps {
            threads: HashMap::try_from(take(names::FUNC_THREADS)?)
                .map_err(map_error(names::FUNC_THREADS))?,
            stats: HashMap::try_from(take(names::FUNC_STATS)?)
                .map_err(map_error(names::FUNC_STATS))?,
            counters: PerCpuArray::try_from(take(names::FUNC_COUNTERS)?)
                .map_err(map_error(names::FUNC_COUNTERS))?,
            multi,
            links: Vec::new(),
            perf_links: Vec::new(),
        })
    }
}

/// Functions per uprobe_multi link: attaching checks for a stop request between links, and
/// each link costs about one RCU grace period to take down.
const FUNCTIONS_PER_LINK: usize = 256;

/// How the function probes were attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachPath {
    /// uprobe_multi links: many functions per link (Linux 6.6 and later).
    Multi,
    /// One perf event and link per probe (aya's path; older kernels). Slow to take down.
    PerfEvent,
}

/// How attaching ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// Every function is probed.
    All(AttachPath),
    /// `keep_going` said stop after this many functions; what was attached stays attached
    /// until the probes are dropped.
    Stopped { functions: usize },
}

/// Loads the programs for uprobe_multi links: `None` (said in the log) when the kernel has
/// none; call before any map is taken from `ebpf`. `stop()` says whether a stop signal came.
pub(super) fn load_multi(
    ebpf: &Ebpf,
    stop: &mut dyn FnMut() -> Option<i32>,
) -> Result<Option<MultiPrograms>, ProbeError> {
    match MultiPrograms::load(ebpf, super::EBPF_OBJECT, ENTRY, RETURN, stop) {
        Ok(programs) => Ok(Some(programs)),
        Err(MultiLoadError::Unsupported(why)) => {
            tracing::info!(
                "function probes: no uprobe_multi links ({why}); one perf event per probe"
            );
            Ok(None)
        }
        Err(MultiLoadError::Stopped(signal)) => Err(ProbeError::LoadInterrupted { signal }),
        Err(MultiLoadError::Failed(why)) => Err(ProbeError::LoadMulti(why)),
    }
}

/// Attaches the entry and return programs to every function. `keep_going(done, total)` is
/// asked after each step (functions attached so far); false stops attaching.
pub(super) fn attach(
    ebpf: &mut Ebpf,
    maps: &mut FunctionMaps,
    functions: &[ResolvedFunction],
    keep_going: &mut dyn FnMut(usize, usize) -> bool,
) -> Result<Attached, ProbeError> {
    let perf_only = std::env::var_os(BENCH_PERF_UPROBES_ENV).is_some_and(|v| v == "1");
    if let Some(multi) = maps.multi.as_ref().filter(|_| !perf_only) {
        match attach_multi(multi, &mut maps.links, functions, keep_going)? {
            Some(attached) => return Ok(attached),
            None => {
                tracing::info!(
                    "function probes: the kernel refused uprobe_multi links; one perf event per probe"
                );
                // Later attaches (libraries loaded during the run) go the same way.
                maps.multi = None;
            }
        }
    }
    attach_perf_events(ebpf, &mut maps.perf_links, functions, keep_going)
}

/// The uprobe_multi path; `None` when the kernel does not offer such links.
fn attach_multi(
    multi: &MultiPrograms,
    links: &mut Vec<OwnedFd>,
    functions: &[ResolvedFunction],
    keep_going: &mut dyn FnMut(usize, usize) -> bool,
) -> Result<Option<Attached>, ProbeError> {
    let total = functions.len();
    let mut done = 0usize;
    for (module, list) in &by_module(functions) {
        for chunk in list.chunks(FUNCTIONS_PER_LINK) {
            if !keep_going(done, total) {
                return Ok(Some(Attached::Stopped { functions: done }));
            }
            for (program, return_probe) in [(ENTRY, false), (RETURN, true)] {
                let probed = probed_by(chunk, return_probe);
                if probed.is_empty() {
                    continue;
                }
                let offsets: Vec<u64> = probed.iter().map(|f| f.offset).collect();
                let cookies: Vec<u64> = probed.iter().map(|f| cookie(f)).collect();
                let made = again_after_signals(
                    || (!keep_going(done, total)).then_some(0),
                    std::io::Error::raw_os_error,
                    || multi.attach(module, &offsets, &cookies, return_probe),
                );
                match made {
                    Ok(link) => links.push(link),
                    Err(Retried::Stopped(_)) => {
                        return Ok(Some(Attached::Stopped { functions: done }));
                    }
                    Err(Retried::Failed(err)) if links.is_empty() && unsupported(&err) => {
                        return Ok(None);
                    }
                    Err(Retried::Failed(err)) => {
                        return Err(culprit(multi, module, &probed, return_probe, program, err));
                    }
                }
            }
            done += chunk.len();
        }
    }
    keep_going(done, total);
    Ok(Some(Attached::All(AttachPath::Multi)))
}

/// The functions grouped by the file they are in (one link covers one file), files in the
/// order they first come, functions in their order.
fn by_module(functions: &[ResolvedFunction]) -> Vec<(&Path, Vec<&ResolvedFunction>)> {
    let mut modules: Vec<(&Path, Vec<&ResolvedFunction>)> = Vec::new();
    for function in functions {
        match modules
            .iter_mut()
            .find(|(m, _)| *m == function.module.as_path())
        {
            Some((_, list)) => list.push(function),
            None => modules.push((function.module.as_path(), vec![function])),
        }
    }
    modules
}

/// The functions of `chunk` that get the entry probe (all), or the return probe (those not
/// probed at entry only).
fn probed_by<'a>(chunk: &[&'a ResolvedFunction], return_probe: bool) -> Vec<&'a ResolvedFunction> {
    chunk
        .iter()
        .copied()
        .filter(|f| !return_probe || f.entry_only.is_none())
        .collect()
}

/// A probe's BPF cookie: the function's id, and whether its calls are counted at entry
/// with no time (see [`crate::functions::returns`]).
fn cookie(function: &ResolvedFunction) -> u64 {
    let flag = if function.entry_only.is_some_and(|e| e.counts_entries()) {
        COOKIE_ENTRY_ONLY
    } else {
        0
    };
    u64::from(function.id) | flag
}

/// A link of many functions failed: the function that cannot be probed, found by halving
/// the set (each try makes and drops a link), named in the error.
fn culprit(
    multi: &MultiPrograms,
    module: &Path,
    functions: &[&ResolvedFunction],
    return_probe: bool,
    program: &'static str,
    err: std::io::Error,
) -> ProbeError {
    let fails = |set: &[&ResolvedFunction]| {
        let offsets: Vec<u64> = set.iter().map(|f| f.offset).collect();
        let cookies = vec![0; set.len()];
        // (A signal is no function's fault: such tries are made again.)
        match again_after_signals(
            || None,
            std::io::Error::raw_os_error,
            || multi.attach(module, &offsets, &cookies, return_probe),
        ) {
            Ok(_) => None,
            Err(Retried::Failed(e)) => Some(e),
            Err(Retried::Stopped(_)) => None,
        }
    };
    let (suspects, source) = narrow_down(functions, err, fails);
    let function = match suspects.first() {
        Some(f) => format!("{} in {}", f.name, f.module.display()),
        None => module.display().to_string(),
    };
    ProbeError::AttachLink {
        program,
        function,
        source: explained(source),
    }
}

/// The one item of `items` that `fails` (which a set of them together fails with `err`),
/// found by halving: the left half when it fails, else the right one; then the error of that
/// item alone when it fails alone (else the last error seen). An empty set stays empty.
fn narrow_down<T, E>(items: &[T], err: E, fails: impl Fn(&[T]) -> Option<E>) -> (&[T], E) {
    let mut suspects = items;
    let mut source = err;
    while suspects.len() > 1 {
        let (left, right) = suspects.split_at(suspects.len() / 2);
        match fails(left) {
            Some(e) => {
                suspects = left;
                source = e;
            }
            None => suspects = right,
        }
    }
    if !suspects.is_empty()
        && let Some(e) = fails(suspects)
    {
        source = e;
    }
    (suspects, source)
}

/// ENOTSUPP (524) from a uprobe link: the kernel's uprobes refuse the function's first
/// instruction, said so with what to do. Other errors stay as they are.
fn explained(source: std::io::Error) -> std::io::Error {
    if source.raw_os_error() == Some(524) {
        std::io::Error::other(
            "the kernel cannot put a uprobe on this function's first instruction \
             (ENOTSUPP); leave it out of the --func glob",
        )
    } else {
        source
    }
}

/// aya's path: one perf event and link per probe.
fn attach_perf_events(
    ebpf: &mut Ebpf,
    links: &mut Vec<UProbeLink>,
    functions: &[ResolvedFunction],
    keep_going: &mut dyn FnMut(usize, usize) -> bool,
) -> Result<Attached, ProbeError> {
    let total = functions.len();
    for program in [ENTRY, RETURN] {
        let prog: &mut UProbe = ebpf
            .program_mut(program)
            .ok_or(ProbeError::MissingProgram(program))?
            .try_into()
            .map_err(|source| ProbeError::Attach { program, source })?;
        // Loaded once: functions of a library mapped during the run are attached later.
        if prog.fd().is_err() {
            let loaded = again_after_signals(
                || (!keep_going(0, total)).then_some(0),
                |e: &aya::programs::ProgramError| errno_in(e),
                || prog.load(),
            );
            match loaded {
                Ok(()) => {}
                Err(Retried::Stopped(_)) => return Ok(Attached::Stopped { functions: 0 }),
                Err(Retried::Failed(source)) => {
                    return Err(ProbeError::Attach { program, source });
                }
            }
        }
    }
    for (done, function) in functions.iter().enumerate() {
        if !keep_going(done, total) {
            return Ok(Attached::Stopped { functions: done });
        }
        for program in [ENTRY, RETURN] {
            if program == RETURN && function.entry_only.is_some() {
                continue;
            }
            let prog: &mut UProbe = ebpf
                .program_mut(program)
                .ok_or(ProbeError::MissingProgram(program))?
                .try_into()
                .map_err(|source| ProbeError::Attach { program, source })?;
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(function.offset),
                cookie: Some(cookie(function)),
            };
            let error = |source| ProbeError::AttachFunction {
                program,
                function: format!("{} in {}", function.name, function.module.display()),
                source,
            };
            let id = prog
                .attach(point, &function.module, UProbeScope::AllProcesses)
                .map_err(error)?;
            links.push(prog.take_link(id).map_err(error)?);
        }
    }
    keep_going(total, total);
    Ok(Attached::All(AttachPath::PerfEvent))
}

impl Probes {
    fn function_maps(&self) -> Result<&FunctionMaps, ProbeError> {
        self.functions
            .as_ref()
            .ok_or(ProbeError::MissingMap(names::FUNC_STATS))
    }

    /// Every (thread, function) total the kernel holds.
    pub fn function_stats(&self) -> Result<Vec<(FuncKey, FuncStats)>, ProbeError> {
        let maps = self.function_maps()?;
        maps.stats
            .iter()
            .map(|item| item.map_err(map_error(names::FUNC_STATS)))
            .collect()
    }

    /// The entry stacks of threads that are inside probed functions now.
    pub fn function_threads(&self) -> Result<Vec<(u32, FuncThread)>, ProbeError> {
        let maps = self.function_maps()?;
        let mut out = Vec::new();
        for item in maps.threads.iter() {
            let (tid, thread) = item.map_err(map_error(names::FUNC_THREADS))?;
            if thread.depth > 0 {
                out.push((tid, thread));
            }
        }
        Ok(out)
    }

    /// The probes' counters, summed over CPUs.
    pub fn function_counters(&self) -> Result<FuncCounters, ProbeError> {
        let maps = self.function_maps()?;
        let values = maps
            .counters
            .get(&0, 0)
            .map_err(map_error(names::FUNC_COUNTERS))?;
        Ok(summed(values.iter()))
    }

    /// Deletes an exited thread's entry stack and totals (after their last read).
    pub fn forget_function_thread(&mut self, tid: u32, keys: &[FuncKey]) {
        if let Some(maps) = self.functions.as_mut() {
            let _ = maps.threads.remove(&tid);
            for key in keys {
                let _ = maps.stats.remove(key);
            }
        }
    }
}

/// The probes' counters of every CPU, summed (saturating: a counter cannot wrap here).
fn summed<'a>(per_cpu: impl Iterator<Item = &'a FuncCounters>) -> FuncCounters {
    per_cpu.fold(FuncCounters::default(), |a, c| FuncCounters {
        entries: a.entries.saturating_add(c.entries),
        returns: a.returns.saturating_add(c.returns),
        overflows: a.overflows.saturating_add(c.overflows),
        unmatched_returns: a.unmatched_returns.saturating_add(c.unmatched_returns),
        abandoned_frames: a.abandoned_frames.saturating_add(c.abandoned_frames),
        map_full: a.map_full.saturating_add(c.map_full),
        clock_fallbacks: a.clock_fallbacks.saturating_add(c.clock_fallbacks),
        _reserved: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::functions::{elf::FirstInstruction, returns::EntryOnly};

    fn function(id: u32, module: &str, entry_only: Option<EntryOnly>) -> ResolvedFunction {
        ResolvedFunction {
            id,
            name: format!("f{id}"),
            raw: format!("f{id}"),
            module: module.into(),
            address: 0x1000 + u64::from(id) * 0x10,
            offset: u64::from(id) * 0x10,
            first_instruction: FirstInstruction::Emulated,
            entry_only,
            spec: "f*".into(),
        }
    }

    #[test]
    fn a_cookie_is_the_function_id_flagged_when_calls_are_counted_at_entry_only() {
        assert_eq!(cookie(&function(7, "/bin/a", None)), 7);
        // setjmp: counted at entry, no time.
        let setjmp = function(7, "/bin/a", Some(EntryOnly::UsesReturnAddress));
        assert_eq!(cookie(&setjmp), 7 | COOKIE_ENTRY_ONLY);
        // The entry point: pushed at entry and timed while it runs, so no flag.
        let start = function(7, "/bin/a", Some(EntryOnly::EntryPoint));
        assert_eq!(cookie(&start), 7);
    }

    #[test]
    fn functions_are_grouped_by_file_in_the_order_files_first_come() {
        let functions = [
            function(0, "/lib/b.so", None),
            function(1, "/bin/a", None),
            function(2, "/lib/b.so", None),
        ];
        let groups: Vec<(&Path, Vec<u32>)> = by_module(&functions)
            .into_iter()
            .map(|(m, list)| (m, list.iter().map(|f| f.id).collect()))
            .collect();
        assert_eq!(
            groups,
            vec![
                (Path::new("/lib/b.so"), vec![0, 2]),
                (Path::new("/bin/a"), vec![1])
            ]
        );
    }

    #[test]
    fn a_function_probed_at_entry_only_gets_no_return_probe() {
        let functions = [
            function(0, "/bin/a", None),
            function(1, "/bin/a", Some(EntryOnly::NoReturn)),
        ];
        let chunk: Vec<&ResolvedFunction> = functions.iter().collect();
        let ids = |list: Vec<&ResolvedFunction>| list.iter().map(|f| f.id).collect::<Vec<_>>();
        assert_eq!(ids(probed_by(&chunk, false)), vec![0, 1]);
        assert_eq!(ids(probed_by(&chunk, true)), vec![0]);
    }

    #[test]
    fn halving_finds_the_one_function_the_kernel_refuses_and_its_own_error() {
        let items: Vec<u32> = (0..9).collect();
        for bad in 0..9 {
            let fails = |set: &[u32]| set.contains(&bad).then(|| format!("refused {bad}"));
            let (suspects, err) = narrow_down(&items, "the whole set".to_string(), fails);
            assert_eq!(suspects, &[bad]);
            assert_eq!(err, format!("refused {bad}"));
        }
        // Nothing fails alone (the kernel refused the set only): the last error seen stays.
        let (suspects, err) = narrow_down(&items, "the whole set", |_: &[u32]| None);
        assert_eq!((suspects, err), (&[8][..], "the whole set"));
        let (suspects, _) = narrow_down(&[] as &[u32], "none", |_: &[u32]| Some("no"));
        assert!(suspects.is_empty());
    }

    #[test]
    fn enotsupp_says_what_to_do_and_other_errors_stay() {
        let text = explained(std::io::Error::from_raw_os_error(524)).to_string();
        assert!(
            text.contains("first instruction") && text.contains("--func"),
            "{text}"
        );
        let other = explained(std::io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(other.raw_os_error(), Some(libc::EPERM));
    }

    #[test]
    fn the_counters_of_every_cpu_add_up() {
        let cpu = |n: u64| FuncCounters {
            entries: n,
            returns: n,
            overflows: 1,
            unmatched_returns: 0,
            abandoned_frames: 2,
            map_full: 0,
            clock_fallbacks: 3,
            _reserved: 9,
        };
        let sum = summed([cpu(10), cpu(5), cpu(u64::MAX)].iter());
        assert_eq!(sum.entries, u64::MAX);
        let sum = summed([cpu(10), cpu(5)].iter());
        assert_eq!(
            (
                sum.entries,
                sum.returns,
                sum.overflows,
                sum.abandoned_frames
            ),
            (15, 15, 2, 4)
        );
        assert_eq!((sum.clock_fallbacks, sum._reserved), (6, 0));
    }
}
