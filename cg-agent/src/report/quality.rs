//! `meta.measurement_quality`: whether a run's figures are measured, degraded or estimated,
//! and a note for each reason (an idle baseline that is not a rest power or comes from a
//! weak fit, records the kernel lost, reads that failed, intervals merged, late or missing,
//! CPU time placed back or left out).

use super::Quality;
use crate::{
    attribution::{
        Ledger,
        idle::{IdleBaseline, IdleMethod, RestOrigin},
    },
    probes::Losses,
    session::Recording,
    sources::{DomainKind, DomainSpec, Provenance, human_duration},
};

/// Intervals much longer than asked: the agent was not scheduled in time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Starved {
    pub count: u64,
    pub longest_s: f64,
}

/// A stored interval counts as starved past twice its asked length plus 50 ms (stored
/// intervals are asked length x 2^merges).
pub(super) fn starved_intervals(rec: &Recording) -> Starved {
    let asked_ns = (rec.header.baseline.interval.as_nanos() as u64) << rec.recorder.merges.min(32);
    let limit_ns = asked_ns.saturating_mul(2).saturating_add(50_000_000);
    let mut starved = Starved::default();
    for interval in rec.recorder.intervals() {
        starved.longest_s = starved.longest_s.max(interval.duration_ns as f64 / 1e9);
        if interval.duration_ns > limit_ns {
            starved.count += 1;
        }
    }
    starved
}

/// The one place a run says why its energy is estimated (the summary prints it among the
/// quality notes; the line at the start of the run only points here).
fn estimated_note(selection_reason: &str) -> String {
    format!(
        "energy is ESTIMATED by the built-in power model, not measured: {selection_reason} \
         (`cg-trace sources` shows what this machine can measure and what root would change)"
    )
}

/// `meta.measurement_quality`: `estimated` when a source is, else `degraded` when some
/// figure is uncertain or missing, else `measured`; with a note for each reason.
pub(super) fn quality(rec: &Recording, baselines: &[IdleBaseline], ledger: &Ledger) -> Quality {
    let estimated = rec.header.provenance() == Provenance::Estimated;
    let mut q = QualityNotes::default();
    if estimated {
        q.note(estimated_note(&rec.header.selection_reason));
    }
    for (d, b) in rec.header.baseline.domains.iter().zip(baselines) {
        baseline_note(&mut q, d, b);
    }
    loss_notes(&mut q, &rec.losses);
    for (error, count) in &rec.source_errors {
        q.degrading(format!("{count} read(s) failed: {error}"));
    }
    for note in &rec.source_notes {
        q.note(note.text.clone());
        q.degraded |= note.degraded;
    }
    // Energy that is not known, or known only in total (the notes above say why).
    if ledger
        .domains
        .iter()
        .any(|l| l.unknown_ns > 0 || l.unknown_count > 0 || l.spread_ns > 0)
    {
        q.degraded = true;
    }
    recorder_notes(&mut q, rec);
    placement_notes(&mut q, rec);
    Quality {
        grade: if estimated {
            "estimated"
        } else if q.degraded {
            "degraded"
        } else {
            "measured"
        },
        notes: q.notes,
    }
}

/// The quality notes of a run, and whether one of them degrades its figures.
#[derive(Debug, Default, PartialEq)]
struct QualityNotes {
    notes: Vec<String>,
    degraded: bool,
}

impl QualityNotes {
    /// A note that leaves the figures as trustworthy as they were.
    fn note(&mut self, text: String) {
        self.notes.push(text);
    }

    /// A note on figures that are uncertain or incomplete.
    fn degrading(&mut self, text: String) {
        self.degraded = true;
        self.notes.push(text);
    }
}

/// What to know of a domain's idle baseline: not its rest power (a GPU), assumed (too
/// steady a load), taken from a table or an earlier run, or a weak fit.
fn baseline_note(q: &mut QualityNotes, d: &DomainSpec, b: &IdleBaseline) {
    let quiet_s = crate::sources::gpu_rest::QUIET_S;
    match b.method {
        IdleMethod::Regression { .. } | IdleMethod::Prior { .. } if d.kind == DomainKind::Gpu => {
            q.degrading(format!(
                "idle baseline of {} is not its rest power, which is not known: it was \
                     not seen at rest ({quiet_s} s at 0 % with no process on it) in this run or an \
                     earlier one, and its model is not in the table; let it rest once during \
                     a run (cg-trace keeps what it sees), or pass --idle-watts {}=W",
                d.name, d.name
            ));
        }
        IdleMethod::Prior {
            slope_w_per_cpu, ..
        } => q.degrading(format!(
            "idle baseline of {} ({:.2} W) assumes {slope_w_per_cpu:.1} W per busy CPU: the \
             load was too steady to fit one; pass --idle-watts for an exact split",
            d.name, b.power_w,
        )),
        IdleMethod::Rest(RestOrigin::ModelTable) => q.note(format!(
            "idle baseline of {} ({:.1} W) is the typical rest power of its model \
             (estimated): it was not seen at rest ({quiet_s} s at 0 % with no process on it) in \
             this run or an earlier one",
            d.name, b.power_w,
        )),
        IdleMethod::Rest(RestOrigin::StateFile { age_s }) => q.note(format!(
            "idle baseline of {} ({:.1} W) is its rest power seen {} ago, in an earlier run",
            d.name,
            b.power_w,
            human_duration((age_s * 1e9) as u64)
        )),
        IdleMethod::Regression { r_squared, .. } if r_squared < 0.5 => q.degrading(format!(
            "idle baseline of {} comes from a weak fit (r² = {r_squared:.2})",
            d.name
        )),
        _ => {}
    }
}

/// What the kernel side lost, or never reported.
fn loss_notes(q: &mut QualityNotes, lost: &Losses) {
    if lost.on_cpu_map_full + lost.events_dropped + lost.targets_map_full > 0 {
        q.degrading(format!(
            "the kernel side lost records: {} thread-map-full, {} events dropped, {} \
             target-map-full",
            lost.on_cpu_map_full, lost.events_dropped, lost.targets_map_full
        ));
    }
    if lost.unmatched_switches > 0 {
        q.note(format!(
            "{} context switch(es) were never reported by the kernel's sched_switch tracepoint \
             (ftrace misses them too); targets lost nothing (each is charged the growth of its \
             runtime since it was last charged), other tasks' slices around them count as idle",
            lost.unmatched_switches
        ));
    }
    if lost.marks_failed > 0 {
        q.degrading(format!(
            "{} time(s) the kernel could not keep a thread's runtime mark (out of memory): \
             those slices were charged as the CPU saw them, and a switch it missed loses them",
            lost.marks_failed
        ));
    }
    if lost.finals_missing > 0 {
        q.degrading(format!(
            "{} thread(s) closed without their final runtime (the kernel reported no free of \
             the task): each counts the runtime its exit reported, short by the slice it was \
             running then (nearly all of a very short process)",
            lost.finals_missing
        ));
    }
}

/// What the recorder did to the intervals: merged them (a long run), measured none, or
/// got them late (the agent was starved of CPU).
fn recorder_notes(q: &mut QualityNotes, rec: &Recording) {
    if rec.recorder.merges > 0 {
        q.note(format!(
            "long run: stored intervals were merged {} time(s) to bound memory (each stored \
             interval now spans about {})",
            rec.recorder.merges,
            human_duration(
                (rec.header.baseline.interval.as_nanos() as u64)
                    .saturating_mul(1 << rec.recorder.merges.min(40))
            )
        ));
    }
    if rec.recorder.intervals().is_empty() {
        q.degrading("the run ended before a single interval was measured".into());
    }
    let starved = starved_intervals(rec);
    if starved.count > 0 {
        q.note(format!(
            "cg-trace was starved of CPU: {} of {} intervals lasted more than twice the {} ms \
             asked (the longest {}); their figures are exact in sum but coarser in time",
            starved.count,
            rec.recorder.intervals().len(),
            rec.header.baseline.interval.as_millis(),
            human_duration((starved.longest_s * 1e9) as u64)
        ));
    }
}

/// Targets' CPU time that was placed back late, or fitted in no interval at all.
fn placement_notes(q: &mut QualityNotes, rec: &Recording) {
    if rec.late_placed_ns > 0 {
        q.note(format!(
            "{} of the targets' CPU time was read only when its slice ended (the kernel did not \
             report the switch that started it, so no read showed it running) and was placed \
             back in the run's last intervals where its CPU showed room",
            human_duration(rec.late_placed_ns)
        ));
    }
    if rec.carried_past_end_ns > 0 {
        q.degrading(format!(
            "{} of the targets' CPU time read at the end of the run fitted in no interval, not even placed back (each \
             holds at most its length per CPU) and is not charged",
            human_duration(rec.carried_past_end_ns)
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::Coverage;

    fn domain(name: &str, kind: DomainKind) -> DomainSpec {
        DomainSpec {
            name: name.into(),
            kind,
            parent: None,
            coverage: Coverage::AllCpus,
            provenance: Provenance::Measured,
            source: "powercap",
        }
    }

    fn noted(d: &DomainSpec, power_w: f64, method: IdleMethod) -> QualityNotes {
        let mut q = QualityNotes::default();
        baseline_note(&mut q, d, &IdleBaseline { power_w, method });
        q
    }

    #[test]
    fn baselines_that_are_guesses_degrade_and_known_ones_only_say_where_they_came_from() {
        let package = domain("package-0", DomainKind::Package);
        let gpu = domain("gpu0", DomainKind::Gpu);
        let fit = |r_squared| IdleMethod::Regression {
            points: 40,
            slope_w_per_cpu: 6.5,
            r_squared,
        };
        // A good fit, a given value, the model: nothing to say.
        for method in [fit(0.9), IdleMethod::Given, IdleMethod::Model] {
            assert_eq!(noted(&package, 5.0, method), QualityNotes::default());
        }
        // A weak fit degrades, and says how weak.
        let weak = noted(&package, 5.0, fit(0.3));
        assert!(weak.degraded);
        assert_eq!(
            weak.notes,
            ["idle baseline of package-0 comes from a weak fit (r² = 0.30)"]
        );
        // Too steady a load: the slope is assumed, per busy CPU.
        let prior = IdleMethod::Prior {
            points: 40,
            slope_w_per_cpu: 6.5,
        };
        let assumed = noted(&package, 4.25, prior.clone());
        assert!(assumed.degraded);
        assert!(
            assumed.notes[0]
                .starts_with("idle baseline of package-0 (4.25 W) assumes 6.5 W per busy CPU"),
            "{:?}",
            assumed.notes
        );
        // A GPU is never fitted: its rest power is not known, whatever the fit.
        for method in [fit(0.99), prior] {
            let q = noted(&gpu, 70.0, method);
            assert!(q.degraded);
            assert!(
                q.notes[0].contains("gpu0 is not its rest power")
                    && q.notes[0].contains("--idle-watts gpu0=W"),
                "{:?}",
                q.notes
            );
        }
        // Rest power from the model table or an earlier run: said, not degraded.
        let table = noted(&gpu, 72.0, IdleMethod::Rest(RestOrigin::ModelTable));
        assert!(!table.degraded);
        assert!(table.notes[0].contains("(72.0 W) is the typical rest power of its model"));
        let earlier = noted(
            &gpu,
            72.0,
            IdleMethod::Rest(RestOrigin::StateFile { age_s: 7200.0 }),
        );
        assert!(!earlier.degraded);
        assert!(
            earlier.notes[0].contains("seen 2 h 0 min ago, in an earlier run"),
            "{:?}",
            earlier.notes
        );
        assert_eq!(
            noted(&gpu, 72.0, IdleMethod::Rest(RestOrigin::SeenThisRun)),
            QualityNotes::default()
        );
    }

    #[test]
    fn lost_records_degrade_but_switches_never_reported_only_get_a_note() {
        let mut q = QualityNotes::default();
        loss_notes(&mut q, &Losses::default());
        assert_eq!(q, QualityNotes::default());

        let mut q = QualityNotes::default();
        loss_notes(
            &mut q,
            &Losses {
                unmatched_switches: 3,
                ..Losses::default()
            },
        );
        assert!(!q.degraded);
        assert!(q.notes[0].starts_with("3 context switch(es) were never reported"));

        let mut q = QualityNotes::default();
        loss_notes(
            &mut q,
            &Losses {
                events_dropped: 2,
                marks_failed: 1,
                finals_missing: 4,
                ..Losses::default()
            },
        );
        assert!(q.degraded);
        assert_eq!(q.notes.len(), 3, "{:?}", q.notes);
        assert!(q.notes[0].contains("0 thread-map-full, 2 events dropped, 0 target-map-full"));
        assert!(q.notes[1].starts_with("1 time(s) the kernel could not keep"));
        assert!(q.notes[2].starts_with("4 thread(s) closed without their final runtime"));
    }
}
