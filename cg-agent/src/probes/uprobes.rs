//! The function probes (`--func`): attaches cg-ebpf's entry and return programs to every
//! resolved function (the function's id travels as the attachment's BPF cookie), and reads
//! back the per-thread totals, the entry stacks of threads inside probed functions, and the
//! probes' counters. Nothing about energy here.

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope},
    },
};
use cg_common::profiling::{FuncCounters, FuncKey, FuncStats, FuncThread, names};

use super::{ProbeError, Probes};
use crate::functions::resolve::ResolvedFunction;

/// The maps of the function probes.
pub(super) struct FunctionMaps {
    threads: HashMap<MapData, u32, FuncThread>,
    stats: HashMap<MapData, FuncKey, FuncStats>,
    counters: PerCpuArray<MapData, FuncCounters>,
}

const ENTRY: &str = "func_entry";
const RETURN: &str = "func_return";

fn map_error(name: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

impl FunctionMaps {
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<Self, ProbeError> {
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
        Ok(FunctionMaps {
            threads: HashMap::try_from(take(names::FUNC_THREADS)?)
                .map_err(map_error(names::FUNC_THREADS))?,
            stats: HashMap::try_from(take(names::FUNC_STATS)?)
                .map_err(map_error(names::FUNC_STATS))?,
            counters: PerCpuArray::try_from(take(names::FUNC_COUNTERS)?)
                .map_err(map_error(names::FUNC_COUNTERS))?,
        })
    }
}

/// Loads the entry and return programs (once) and attaches both to every function.
pub(super) fn attach(ebpf: &mut Ebpf, functions: &[ResolvedFunction]) -> Result<(), ProbeError> {
    for (program, _) in [(ENTRY, true), (RETURN, false)] {
        let prog: &mut UProbe = ebpf
            .program_mut(program)
            .ok_or(ProbeError::MissingProgram(program))?
            .try_into()
            .map_err(|source| ProbeError::Attach { program, source })?;
        prog.load()
            .map_err(|source| ProbeError::Attach { program, source })?;
        for function in functions {
            let point = UProbeAttachPoint {
                location: UProbeAttachLocation::AbsoluteOffset(function.offset),
                cookie: Some(u64::from(function.id)),
            };
            prog.attach(point, &function.module, UProbeScope::AllProcesses)
                .map_err(|source| ProbeError::AttachFunction {
                    program,
                    function: format!("{} in {}", function.name, function.module.display()),
                    source,
                })?;
        }
    }
    Ok(())
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
        Ok(values
            .iter()
            .fold(FuncCounters::default(), |a, c| FuncCounters {
                entries: a.entries + c.entries,
                returns: a.returns + c.returns,
                overflows: a.overflows + c.overflows,
                unmatched_returns: a.unmatched_returns + c.unmatched_returns,
                abandoned_frames: a.abandoned_frames + c.abandoned_frames,
                map_full: a.map_full + c.map_full,
                clock_fallbacks: a.clock_fallbacks + c.clock_fallbacks,
                _reserved: 0,
            }))
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
