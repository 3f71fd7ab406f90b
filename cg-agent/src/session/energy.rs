//! The session's side of the energy sources beyond plain counters: GPU usage per interval
//! (pids turned into the run's process ids), wall-clock bounds, figures that a source revises
//! after the run (a power meter's log), and what the sources report at the end.

use std::time::SystemTime;

use super::processes::ProcessTable;
use crate::{
    attribution::{
        Interval,
        gpu::{GpuShare, GpuUsage, GpuUser},
    },
    sources::{EnergySource, SourceNote, WallSpan, gpu::GpuSummary, meter::MeterSummary},
};

/// Converts CLOCK_MONOTONIC nanoseconds (the probes' clock) into wall-clock nanoseconds since
/// the Unix epoch, with the offset between the two clocks taken once, at the start.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    offset_ns: i128,
}

impl WallClock {
    pub fn new(monotonic_now_ns: u64) -> Self {
        let wall_now_ns = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        WallClock {
            offset_ns: wall_now_ns - i128::from(monotonic_now_ns),
        }
    }

    pub fn wall_ns(&self, monotonic_ns: u64) -> u64 {
        (i128::from(monotonic_ns) + self.offset_ns).max(0) as u64
    }
}

/// GPU usage of the last read, per GPU number, with pids mapped to the run's processes:
/// targets get their process id, everything else is other.
pub fn gpu_usage(
    sources: &[Box<dyn EnergySource>],
    table: &mut ProcessTable,
    now_ns: u64,
) -> Vec<GpuUsage> {
    let mut usage = Vec::new();
    for source in sources {
        for activity in source.gpu_activity() {
            let mut shares: Vec<GpuShare> = Vec::new();
            for (pid, busy_fraction) in activity.processes {
                let user = if table.is_target(pid) {
                    GpuUser::Target(table.id_of(pid, now_ns))
                } else {
                    GpuUser::Other
                };
                match shares.iter_mut().find(|s| s.user == user) {
                    Some(s) => s.busy_fraction += busy_fraction,
                    None => shares.push(GpuShare {
                        user,
                        busy_fraction,
                    }),
                }
            }
            usage.push(GpuUsage {
                busy_fraction: activity.busy_fraction,
                shares,
            });
        }
    }
    usage
}

/// Lets sources that revise their figures after the run (a power meter's log) rewrite the
/// energy of every stored interval; returns notes on what went wrong.
pub fn settle<'a>(
    sources: &mut [Box<dyn EnergySource>],
    intervals: impl Iterator<Item = &'a mut Interval>,
) -> Vec<SourceNote> {
    let mut intervals: Vec<&mut Interval> = intervals.collect();
    let spans: Vec<WallSpan> = intervals
        .iter()
        .map(|i| WallSpan {
            start_ns: i.wall_start_ns,
            end_ns: i.wall_start_ns + i.duration_ns,
        })
        .collect();
    let mut notes = Vec::new();
    let mut offset = 0;
    for source in sources.iter_mut() {
        let width = source.domains().len();
        match source.settle(&spans) {
            None => {}
            Some(Ok(values)) => {
                for (interval, energy) in intervals.iter_mut().zip(values) {
                    for (d, joules) in energy.into_iter().enumerate().take(width) {
                        if let Some(slot) = interval.energy_j.get_mut(offset + d) {
                            *slot = joules;
                        }
                    }
                }
            }
            Some(Err(err)) => notes.push(SourceNote::degraded(format!(
                "{}: revising the run's figures failed, the live readings stand: {}",
                source.name(),
                err
            ))),
        }
        offset += width;
    }
    notes
}

/// What the sources say at the end of the run.
#[derive(Debug, Default)]
pub struct Reports {
    pub notes: Vec<SourceNote>,
    pub gpus: Vec<GpuSummary>,
    pub meter: Option<MeterSummary>,
    /// Per domain (all sources, in order).
    pub busy_slope_w: Vec<Option<f64>>,
}

pub fn collect(sources: &[Box<dyn EnergySource>]) -> Reports {
    let mut reports = Reports::default();
    for source in sources {
        let summary = source.summary();
        reports.notes.extend(summary.notes);
        reports.gpus.extend(summary.gpus);
        if summary.meter.is_some() {
            reports.meter = summary.meter;
        }
        let slopes = source.busy_slope_w();
        for d in 0..source.domains().len() {
            reports
                .busy_slope_w
                .push(slopes.as_ref().and_then(|s| s.get(d).copied()));
        }
    }
    reports
}
