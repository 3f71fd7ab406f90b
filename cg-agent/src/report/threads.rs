//! Per-thread figures of one process (`processes[].threads[]`): its busiest threads by
//! energy, and one entry that folds the rest, so that a process's threads add up to the
//! process exactly (CPU time and energy per domain). A worker pool then shows which of its
//! threads burns the joules.

use serde::Serialize;

use crate::{
    attribution::{Ledger, ProcId},
    report::ProcessDomain,
    small_map::SmallMap,
    sources::{DomainSpec, Provenance},
};

/// How many threads of a process the report lists one by one (the rest are folded).
pub const TOP_THREADS: usize = 10;

/// One thread of a process, or the entry that folds the threads not listed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThreadEntry {
    /// The thread's id; `null` on the folded entry.
    pub tid: Option<u32>,
    /// The thread's name (`comm`): `null` when it could not be read (a thread too short-lived
    /// to be seen in `/proc`) and on the folded entry.
    pub comm: Option<String>,
    /// Only on the folded entry: how many threads it holds. It may hold none and still have
    /// energy: a process's GPU energy, which no thread accounts for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folded_threads_count: Option<u64>,
    pub cpu_time_s: f64,
    /// Sum over top-level domains.
    pub energy_j: f64,
    pub domains: SmallMap<String, ProcessDomain>,
    /// The energy sources': a thread's energy is a share of theirs.
    pub provenance: Provenance,
}

/// What [`entries`] needs to know about the run.
pub struct ThreadContext<'a> {
    pub ledger: &'a Ledger,
    pub domains: &'a [DomainSpec],
    /// Indices of the top-level domains.
    pub top: &'a [usize],
    pub provenance: Provenance,
    /// How many threads to list one by one.
    pub shown: usize,
}

/// The threads of process `id` (named from `names`, by tid), busiest first: the first
/// `ctx.shown` one by one, then one folded entry for the rest (and for the process's
/// energy that no thread accounts for), so that the entries add up to the process.
pub fn entries(
    ctx: &ThreadContext<'_>,
    id: ProcId,
    names: &SmallMap<u32, String>,
) -> Vec<ThreadEntry> {
    let ledger = ctx.ledger;
    let range = (id, 0)..=(id, u32::MAX);
    let mut threads: Vec<(u32, u64, f64)> = ledger
        .thread_cpu_ns
        .range(range.clone())
        .map(|(&(_, tid), &cpu_ns)| {
            let energy_j = ctx
                .top
                .iter()
                .filter_map(|&d| ledger.domains.get(d))
                .filter_map(|l| l.by_thread_j.get(&(id, tid)))
                .sum::<f64>();
            (tid, cpu_ns, energy_j)
        })
        .collect();
    threads.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    let domain_map = |energy_of: &dyn Fn(usize) -> Option<f64>| {
        ctx.domains
            .iter()
            .enumerate()
            .filter_map(|(d, spec)| {
                energy_of(d).map(|energy_j| (spec.name.clone(), ProcessDomain { energy_j }))
            })
            .collect::<SmallMap<_, _>>()
    };
    let mut out: Vec<ThreadEntry> = threads
        .iter()
        .take(ctx.shown)
        .map(|&(tid, cpu_ns, energy_j)| ThreadEntry {
            tid: Some(tid),
            comm: names.get(&tid).cloned(),
            folded_threads_count: None,
            cpu_time_s: cpu_ns as f64 / 1e9,
            energy_j: energy_j + 0.0,
            domains: domain_map(&|d| {
                ledger
                    .domains
                    .get(d)
                    .and_then(|l| l.by_thread_j.get(&(id, tid)))
                    .copied()
            }),
            provenance: ctx.provenance,
        })
        .collect();

    // The rest: what the process has beyond the threads listed, per domain.
    let hidden = threads.len().saturating_sub(ctx.shown);
    let process_cpu_ns = ledger.cpu_ns.get(&id).copied().unwrap_or(0);
    let shown_cpu_ns: u64 = threads.iter().take(ctx.shown).map(|t| t.1).sum();
    let rest_of = |d: usize| -> Option<f64> {
        let l = ledger.domains.get(d)?;
        let process_j = l.by_process_j.get(&id).copied()?;
        let shown_j: f64 = threads
            .iter()
            .take(ctx.shown)
            .filter_map(|t| l.by_thread_j.get(&(id, t.0)))
            .sum();
        // Rounding of the per-thread shares must not make the rest negative.
        Some((process_j - shown_j).max(0.0))
    };
    let rest_domains = domain_map(&rest_of);
    let rest_j: f64 = ctx.top.iter().filter_map(|&d| rest_of(d)).sum::<f64>() + 0.0;
    let process_j: f64 = ctx
        .top
        .iter()
        .filter_map(|&d| ledger.domains.get(d)?.by_process_j.get(&id))
        .sum();
    // Energy beyond rounding (the per-thread shares are the process's own, split): a GPU's.
    let unthreaded = rest_j > 1e-9 * (1.0 + process_j.abs());
    if hidden > 0 || unthreaded {
        out.push(ThreadEntry {
            tid: None,
            comm: None,
            folded_threads_count: Some(hidden as u64),
            cpu_time_s: process_cpu_ns.saturating_sub(shown_cpu_ns) as f64 / 1e9,
            energy_j: rest_j,
            domains: rest_domains,
            provenance: ctx.provenance,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        attribution::{
            Coverage, Interval, Slice, attribute,
            gpu::{GpuShare, GpuUsage, GpuUser},
        },
        sources::{DomainKind, DomainSpec},
    };

    const MS: u64 = 1_000_000;

    fn slice(process: ProcId, tid: u32, cpu: u32, ms: u64) -> Slice {
        Slice {
            process,
            tid,
            cpu,
            on_cpu_ns: ms * MS,
        }
    }

    fn domain(name: &str, coverage: Coverage) -> DomainSpec {
        DomainSpec {
            name: name.to_string(),
            kind: DomainKind::Package,
            parent: None,
            coverage,
            provenance: Provenance::Measured,
            source: "test",
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn top_threads_then_one_folded_entry_that_makes_them_add_up() {
        // Process 0 has 14 threads on one CPU of a 4 W domain: thread 100 runs 50 ms, threads
        // 101..=113 run 1..=13 ms. With 3 shown: 100, 113, 112 and 11 folded.
        //   cpu0 |100 (50 ms)|101 (1)|102 (2)| ... |113 (13)|...
        let mut slices = vec![slice(0, 100, 0, 50)];
        slices.extend((1..=13).map(|i| slice(0, 100 + i, 0, u64::from(i))));
        let interval = Interval {
            duration_ns: 200 * MS,
            cpus: vec![Default::default()],
            slices,
            energy_j: vec![4.0],
            ..Interval::default()
        };
        let domains = [domain("package-0", Coverage::AllCpus)];
        let ledger = attribute(&[interval], &[Coverage::AllCpus], &[0.0]);
        let names = SmallMap::from([(100, "busy".to_string())]);
        let ctx = ThreadContext {
            ledger: &ledger,
            domains: &domains,
            top: &[0],
            provenance: Provenance::Measured,
            shown: 3,
        };
        let threads = entries(&ctx, 0, &names);
        assert_eq!(threads.len(), 4);
        let tids: Vec<Option<u32>> = threads.iter().map(|t| t.tid).collect();
        assert_eq!(tids, [Some(100), Some(113), Some(112), None]);
        assert_eq!(threads[0].comm.as_deref(), Some("busy"));
        assert_eq!(threads[1].comm, None);
        // All 4 J are active (no baseline), split over 141 ms of CPU.
        assert!(close(threads[0].energy_j, 4.0 * 50.0 / 141.0));
        let rest = &threads[3];
        assert_eq!(rest.folded_threads_count, Some(11));
        assert!(close(rest.cpu_time_s, 0.066));
        let cpu_s: f64 = threads.iter().map(|t| t.cpu_time_s).sum();
        let energy_j: f64 = threads.iter().map(|t| t.energy_j).sum();
        assert!(close(cpu_s, 0.141));
        assert!(close(energy_j, ledger.domains[0].by_process_j[&0]));
        assert!(close(rest.domains["package-0"].energy_j, rest.energy_j));
    }

    #[test]
    fn gpu_energy_that_no_thread_accounts_for_lands_in_the_folded_entry() {
        // One thread and a GPU domain: the GPU's share is the process's, not a thread's.
        let interval = Interval {
            duration_ns: 100 * MS,
            cpus: vec![Default::default()],
            slices: vec![slice(0, 7, 0, 100)],
            energy_j: vec![2.0, 3.0],
            gpus: vec![GpuUsage {
                busy_fraction: 1.0,
                shares: vec![GpuShare {
                    user: GpuUser::Target(0),
                    busy_fraction: 1.0,
                }],
                ..Default::default()
            }],
            ..Interval::default()
        };
        let coverage = [Coverage::AllCpus, Coverage::Gpu(0)];
        let domains = [
            domain("package-0", Coverage::AllCpus),
            domain("gpu0", Coverage::Gpu(0)),
        ];
        let ledger = attribute(&[interval], &coverage, &[0.0, 0.0]);
        let ctx = ThreadContext {
            ledger: &ledger,
            domains: &domains,
            top: &[0, 1],
            provenance: Provenance::Measured,
            shown: 10,
        };
        let threads = entries(&ctx, 0, &SmallMap::new());
        assert_eq!(threads.len(), 2, "{threads:?}");
        assert!(close(threads[0].energy_j, 2.0));
        assert_eq!(threads[1].folded_threads_count, Some(0));
        assert_eq!(threads[1].cpu_time_s, 0.0);
        let process_j = ledger.energy_of(0, &[0, 1]);
        assert!(close(threads[0].energy_j + threads[1].energy_j, process_j));
        assert!(close(threads[1].domains["gpu0"].energy_j, 3.0));
    }
}
