//! The stack sampler (`--profile`): attaches cg-ebpf's perf-event program to each online
//! CPU's software CPU clock at the requested frequency, and reads back what it aggregated:
//! samples per (thread, stacks) since the last read, the stacks' addresses, and the Python
//! frames the CPython walker recorded. Nothing about energy here.

use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, StackTraceMap},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use cg_common::profiling::{PyProcess, PyStack, SampleKey, SamplerCounters, names};

use super::{ProbeError, Probes};

const PROGRAM: &str = "sample_stack";

/// The sampler's maps.
pub(super) struct SamplerMaps {
    stacks: StackTraceMap<MapData>,
    samples: [HashMap<MapData, SampleKey, u64>; 2],
    select: Array<MapData, u32>,
    /// Which of `samples` the kernel writes now.
    active: u32,
    counters: PerCpuArray<MapData, SamplerCounters>,
    py_procs: HashMap<MapData, u32, PyProcess>,
    py_stacks: HashMap<MapData, u64, PyStack>,
}

fn map_error(name: &'static str) -> impl Fn(aya::maps::MapError) -> ProbeError {
    move |source| ProbeError::Map { name, source }
}

impl SamplerMaps {
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<Self, ProbeError> {
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
        Ok(SamplerMaps {
            stacks: StackTraceMap::try_from(take(names::STACKS)?)
                .map_err(map_error(names::STACKS))?,
            samples: [
                HashMap::try_from(take(names::SAMPLES_A)?).map_err(map_error(names::SAMPLES_A))?,
                HashMap::try_from(take(names::SAMPLES_B)?).map_err(map_error(names::SAMPLES_B))?,
            ],
            select: Array::try_from(take(names::SAMPLE_SELECT)?)
                .map_err(map_error(names::SAMPLE_SELECT))?,
            active: 0,
            counters: PerCpuArray::try_from(take(names::SAMPLER_COUNTERS)?)
                .map_err(map_error(names::SAMPLER_COUNTERS))?,
            py_procs: HashMap::try_from(take(names::PY_PROCS)?)
                .map_err(map_error(names::PY_PROCS))?,
            py_stacks: HashMap::try_from(take(names::PY_STACKS)?)
                .map_err(map_error(names::PY_STACKS))?,
        })
    }
}

/// Loads the sampling program and attaches it to every online CPU at `hz` samples/s.
pub(super) fn attach(ebpf: &mut Ebpf, hz: u64) -> Result<(), ProbeError> {
    let program = PROGRAM;
    let prog: &mut PerfEvent = ebpf
        .program_mut(program)
        .ok_or(ProbeError::MissingProgram(program))?
        .try_into()
        .map_err(|source| ProbeError::Attach { program, source })?;
    prog.load()
        .map_err(|source| ProbeError::Attach { program, source })?;
    let cpus = aya::util::online_cpus().map_err(|(_, source)| ProbeError::Read {
        name: "/sys/devices/system/cpu/online",
        source,
    })?;
    for cpu in cpus {
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(hz),
            false,
        )
        .map_err(|source| ProbeError::Attach { program, source })?;
    }
    Ok(())
}

impl Probes {
    fn sampler_maps(&self) -> Result<&SamplerMaps, ProbeError> {
        self.sampler
            .as_ref()
            .ok_or(ProbeError::MissingMap(names::SAMPLES_A))
    }

    /// Takes the samples counted since the last call: makes the kernel count into the other
    /// map, then reads and clears this one.
    pub fn take_samples(&mut self) -> Result<Vec<(SampleKey, u64)>, ProbeError> {
        let Some(maps) = self.sampler.as_mut() else {
            return Ok(Vec::new());
        };
        let reading = maps.active as usize;
        let next = 1 - maps.active;
        maps.select
            .set(0, next, 0)
            .map_err(map_error(names::SAMPLE_SELECT))?;
        maps.active = next;
        let name = [names::SAMPLES_A, names::SAMPLES_B][reading];
        let map = &mut maps.samples[reading];
        let entries: Vec<(SampleKey, u64)> = map
            .iter()
            .collect::<Result<_, _>>()
            .map_err(map_error(name))?;
        for (key, _) in &entries {
            let _ = map.remove(key);
        }
        Ok(entries)
    }

    /// The addresses of stack `id`, innermost first.
    pub fn stack(&self, id: i32) -> Option<Vec<u64>> {
        let maps = self.sampler_maps().ok()?;
        let id = u32::try_from(id).ok()?;
        let trace = maps.stacks.get(&id, 0).ok()?;
        Some(trace.frames().iter().map(|f| f.ip).collect())
    }

    /// The code objects of Python stack `key`, innermost first, and whether the walk was cut.
    pub fn python_stack(&self, key: u64) -> Option<(Vec<u64>, bool)> {
        let maps = self.sampler_maps().ok()?;
        let stack = maps.py_stacks.get(&key, 0).ok()?;
        let len = (stack.len as usize).min(stack.codes.len());
        Some((stack.codes[..len].to_vec(), stack.truncated != 0))
    }

    /// Makes the sampler walk the Python frames of process `tgid`.
    pub fn set_python(&mut self, tgid: u32, process: PyProcess) -> Result<(), ProbeError> {
        let Some(maps) = self.sampler.as_mut() else {
            return Ok(());
        };
        maps.py_procs
            .insert(tgid, process, 0)
            .map_err(map_error(names::PY_PROCS))
    }

    /// Stops walking process `tgid`'s Python frames (it exec'd or exited).
    pub fn forget_python(&mut self, tgid: u32) {
        if let Some(maps) = self.sampler.as_mut() {
            let _ = maps.py_procs.remove(&tgid);
        }
    }

    /// The sampler's counters, summed over CPUs.
    pub fn sampler_counters(&self) -> Result<SamplerCounters, ProbeError> {
        let maps = self.sampler_maps()?;
        let values = maps
            .counters
            .get(&0, 0)
            .map_err(map_error(names::SAMPLER_COUNTERS))?;
        Ok(values
            .iter()
            .fold(SamplerCounters::default(), |a, c| SamplerCounters {
                samples: a.samples + c.samples,
                lost_samples: a.lost_samples + c.lost_samples,
                lost_user_stacks: a.lost_user_stacks + c.lost_user_stacks,
                lost_py: a.lost_py + c.lost_py,
            }))
    }
}
