//! Per-process figures of each `--timeseries` point (`timeseries[].processes`): the
//! interval's busiest processes by energy, then one entry folding the rest, so that a
//! point's processes add up to its `attributed_energy_j` and the targets' CPU time in it.
//! And each GPU's own figures in the interval (`timeseries[].gpus`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    attribution::{DomainSplit, Interval, ProcId},
    session::processes::ProcessRecord,
    sources::gpu::GpuSummary,
};

/// How many processes each point lists one by one (the rest are folded).
pub const TOP_PROCESSES: usize = 10;

/// One process's share of one interval, or the entry that folds the processes not listed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeProcess {
    /// The process (`processes[]` has the rest of it); `null` on the folded entry.
    pub pid: Option<u32>,
    /// Only on the folded entry: how many processes it holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folded_processes_count: Option<u64>,
    /// Over the top-level domains.
    pub energy_j: f64,
    pub cpu_time_s: f64,
}

/// One GPU's own figures in one interval, as NVML measured them: those of the last poll at
/// or before the interval's end (see [`crate::attribution::gpu::GpuTelemetry`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeGpu {
    /// The GPU's energy domain (`gpu0`; `meta.gpus[]` has the rest of it).
    pub domain: String,
    /// Always `measured`.
    pub provenance: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<f64>,
    /// NVML's power reading (the domain's `power_w` comes from its energy counter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
}

/// The figures of each GPU of `gpus` (the run's, by GPU number) in `interval`; GPUs that
/// gave none are left out.
pub fn gpus_of(interval: &Interval, gpus: &[GpuSummary]) -> Vec<TimeGpu> {
    interval
        .gpus
        .iter()
        .zip(gpus)
        .map(|(usage, gpu)| (&usage.telemetry, gpu))
        .filter(|(t, _)| **t != Default::default())
        .map(|(t, gpu)| TimeGpu {
            domain: gpu.domain.clone(),
            provenance: "measured",
            utilization_pct: t.utilization_pct,
            memory_used_bytes: t.memory_used_bytes,
            temperature_c: t.temperature_c,
            power_w: t.power_w,
        })
        .collect()
}

/// The processes of one interval, busiest first: `shown` one by one, then one folded entry
/// when some are left out. `top` are the top-level domains' indices in `splits`.
pub fn processes_of(
    interval: &Interval,
    splits: &[DomainSplit],
    top: &[usize],
    records: &[ProcessRecord],
    shown: usize,
) -> Vec<TimeProcess> {
    let mut per_process: BTreeMap<ProcId, (f64, u64)> = BTreeMap::new();
    for slice in &interval.slices {
        per_process.entry(slice.process).or_default().1 += slice.on_cpu_ns;
    }
    for &d in top {
        if let Some(split) = splits.get(d) {
            for &(process, energy_j) in &split.targets_j {
                per_process.entry(process).or_default().0 += energy_j;
            }
        }
    }
    let mut all: Vec<(ProcId, f64, u64)> = per_process
        .into_iter()
        .map(|(id, (energy_j, cpu_ns))| (id, energy_j, cpu_ns))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
    let pid = |id: ProcId| records.get(id as usize).map(|r| r.pid);
    let mut out: Vec<TimeProcess> = all
        .iter()
        .take(shown)
        .map(|&(id, energy_j, cpu_ns)| TimeProcess {
            pid: pid(id),
            folded_processes_count: None,
            energy_j: energy_j + 0.0,
            cpu_time_s: cpu_ns as f64 / 1e9,
        })
        .collect();
    if all.len() > shown {
        let rest = &all[shown..];
        out.push(TimeProcess {
            pid: None,
            folded_processes_count: Some(rest.len() as u64),
            energy_j: rest.iter().map(|r| r.1).sum::<f64>() + 0.0,
            cpu_time_s: rest.iter().map(|r| r.2).sum::<u64>() as f64 / 1e9,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::{Coverage, Slice, split_interval};

    const MS: u64 = 1_000_000;

    fn record(pid: u32) -> ProcessRecord {
        ProcessRecord {
            pid,
            ppid: None,
            comm: "p".into(),
            cmdline: Vec::new(),
            uid: None,
            first_seen_ns: 0,
            start_ns: None,
            ended_ns: None,
            ending: None,
            root: false,
            cgroup: None,
            thread_names: crate::small_map::SmallMap::new(),
        }
    }

    #[test]
    fn an_intervals_processes_are_the_busiest_then_the_rest_folded_and_they_add_up() {
        // One CPU, 100 ms, 5 W baseline, 3 J: processes 0..=4 run 10, 20, 30, 5, 5 ms,
        // other tasks 10 ms. Two shown: 2 and 1; 0, 3 and 4 folded.
        //   cpu0 |0 1 1 2 2 2 3 4 o .|
        let slices = [10, 20, 30, 5, 5]
            .iter()
            .enumerate()
            .map(|(p, &ms)| Slice {
                process: p as ProcId,
                tid: 100 + p as u32,
                cpu: 0,
                on_cpu_ns: ms * MS,
            })
            .collect();
        let interval = Interval {
            duration_ns: 100 * MS,
            cpus: vec![crate::attribution::CpuTime {
                idle_ns: 20 * MS,
                other_ns: 10 * MS,
            }],
            slices,
            energy_j: vec![3.0],
            ..Interval::default()
        };
        let splits = split_interval(&interval, &[Coverage::AllCpus], &[5.0]);
        let records: Vec<ProcessRecord> = (0..5).map(|i| record(1000 + i)).collect();
        let points = processes_of(&interval, &splits, &[0], &records, 2);
        assert_eq!(points.len(), 3);
        assert_eq!(points[0].pid, Some(1002));
        assert_eq!(points[1].pid, Some(1001));
        // Active 2.5 J over 80 ms busy.
        assert!((points[0].energy_j - 2.5 * 30.0 / 80.0).abs() < 1e-12);
        assert_eq!(points[2].pid, None);
        assert_eq!(points[2].folded_processes_count, Some(3));
        assert!((points[2].cpu_time_s - 0.020).abs() < 1e-12);
        let sum_j: f64 = points.iter().map(|p| p.energy_j).sum();
        assert!((sum_j - splits[0].attributed_j()).abs() < 1e-12);
        // Shown all: no folded entry.
        assert_eq!(processes_of(&interval, &splits, &[0], &records, 5).len(), 5);
    }
}
