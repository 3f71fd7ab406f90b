//! The session's side of the energy sources beyond plain counters: the books of energy that
//! is not known or arrives late ([`Books`]), GPU usage per interval (pids turned into the
//! run's process ids), wall-clock bounds, figures that a source revises after the run (a
//! power meter's log), and what the sources report at the end.

use std::{collections::BTreeMap, time::SystemTime};

use super::{processes::ProcessTable, recorder::Recorder};
use crate::{
    attribution::{
        EnergyState, Glitch, Interval,
        gpu::{GpuShare, GpuUsage, GpuUser},
        idle::RestPower,
    },
    sources::{
        DomainSpec, EnergySource, ReadContext, Reading, SourceError, SourceNote, WallSpan,
        gpu::GpuSummary, human_duration, meter::MeterSummary,
    },
};

/// Reads every source over `ctx`: per domain, the interval's known joules and how much of
/// them is known ([`Books`] may revise the intervals `recorder` stored so far). A failed read
/// is counted in `errors` under its message; a source that gives the wrong number of
/// readings makes its domains unknown.
pub fn read_sources(
    sources: &mut [Box<dyn EnergySource>],
    books: &mut Books,
    recorder: &mut Recorder,
    errors: &mut BTreeMap<String, u64>,
    ctx: &ReadContext<'_>,
) -> (Vec<f64>, Vec<EnergyState>) {
    let mut energy = Vec::new();
    let mut states = Vec::new();
    for source in sources {
        for reading in readings_of(source.as_mut(), errors, ctx) {
            let d = energy.len();
            let (joules, state) = books.book(d, reading, ctx.duration_ns, recorder.all_mut().rev());
            energy.push(joules);
            states.push(state);
        }
    }
    (energy, states)
}

/// One source's readings over `ctx`, one per domain whatever happens.
fn readings_of(
    source: &mut dyn EnergySource,
    errors: &mut BTreeMap<String, u64>,
    ctx: &ReadContext<'_>,
) -> Vec<Reading> {
    let width = source.domains().len();
    match source.read(ctx) {
        Ok(readings) if readings.len() == width => readings,
        Ok(readings) => {
            tracing::warn!(
                "{}: {} readings for {width} domains",
                source.name(),
                readings.len()
            );
            vec![Reading::unknown(Glitch::Invalid); width]
        }
        Err(err) => {
            *errors
                .entry(format!("{}: {err}", source.name()))
                .or_default() += 1;
            // Cumulative counters keep their last good value, so the energy of this
            // interval shows up in the next successful read, which is spread back.
            let missed = if source.failed_read_carries_over() {
                Reading::Pending
            } else {
                Reading::unknown(Glitch::ReadFailed)
            };
            vec![missed; width]
        }
    }
}

/// Reads and the time they cover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub count: u64,
    pub ns: u64,
}

impl Tally {
    fn add(&mut self, count: u64, ns: u64) {
        self.count += count;
        self.ns += ns;
    }
}

/// Per domain, what the session keeps between reads: reads that failed, whose energy a later
/// reading brings (then spread over them by duration), and tallies of unknown and spread
/// energy for the report's notes. Every revision keeps the books exact: joules are moved
/// between intervals, never invented or dropped, and unknown energy is counted, not guessed.
#[derive(Debug, Default)]
pub struct Books {
    /// Per domain: failed reads since the last good one.
    pending: Vec<Tally>,
    unknown: BTreeMap<(usize, Glitch), Tally>,
    /// Per domain: intervals whose energy was spread from a later reading.
    spread: BTreeMap<usize, Tally>,
}

impl Books {
    pub fn new(domain_count: usize) -> Self {
        Books {
            pending: vec![Tally::default(); domain_count],
            ..Books::default()
        }
    }

    /// How many domains these books keep.
    pub fn domain_count(&self) -> usize {
        self.pending.len()
    }

    /// Books domain `d`'s reading for an interval of `duration_ns`: returns the interval's
    /// joules and state. `stored` are the intervals recorded so far, newest first, which a
    /// reading may revise: a good reading after failed ones is spread over them by duration
    /// (they leave the idle fit); an unknown one makes them unknown too, and so are the
    /// earlier reads a glitch covers (a freeze found after a few intervals).
    pub fn book<'a>(
        &mut self,
        d: usize,
        reading: Reading,
        duration_ns: u64,
        stored: impl Iterator<Item = &'a mut Interval>,
    ) -> (f64, EnergyState) {
        if self.pending.len() <= d {
            self.pending.resize(d + 1, Tally::default());
        }
        let reading = match reading {
            Reading::Joules(j) if !j.is_finite() || j < 0.0 => Reading::unknown(Glitch::Invalid),
            r => r,
        };
        if duration_ns == 0 {
            // The first read only sets the counters' origins.
            return (0.0, EnergyState::default());
        }
        let pending = std::mem::take(&mut self.pending[d]);
        match reading {
            Reading::Joules(j) if pending.count == 0 => (j, EnergyState::default()),
            Reading::Joules(j) => {
                let per_ns = j / (pending.ns + duration_ns) as f64;
                let mut left_ns = pending.ns;
                let mut spread_j = 0.0;
                for interval in stored {
                    if left_ns == 0 {
                        break;
                    }
                    let Some((joules, state)) = interval.energy_mut(d) else {
                        continue;
                    };
                    let take_ns = state.pending_ns.min(left_ns);
                    if take_ns == 0 {
                        continue;
                    }
                    let share_j = per_ns * take_ns as f64;
                    *joules += share_j;
                    spread_j += share_j;
                    state.pending_ns -= take_ns;
                    state.spread_ns += take_ns;
                    left_ns -= take_ns;
                }
                self.spread
                    .entry(d)
                    .or_default()
                    .add(pending.count + 1, pending.ns + duration_ns);
                // This interval takes the rest, so that nothing is lost to rounding.
                ((j - spread_j).max(0.0), EnergyState::spread(duration_ns))
            }
            Reading::Pending => {
                self.pending[d] = Tally {
                    count: pending.count + 1,
                    ns: pending.ns + duration_ns,
                };
                (0.0, EnergyState::pending(duration_ns))
            }
            Reading::Unknown(u) => {
                if pending.count > 0 {
                    self.unknown
                        .entry((d, Glitch::ReadFailed))
                        .or_default()
                        .add(pending.count, pending.ns);
                }
                mark_unknown(
                    stored,
                    d,
                    pending.ns,
                    (u.glitch, u.earlier_count, u.earlier_ns),
                );
                self.unknown
                    .entry((d, u.glitch))
                    .or_default()
                    .add(1 + u64::from(u.earlier_count), duration_ns + u.earlier_ns);
                (0.0, EnergyState::unknown(duration_ns, u.glitch))
            }
        }
    }

    /// At the end of the run: reads that failed and were never made good are unknown.
    pub fn finish<'a>(&mut self, stored: impl Iterator<Item = &'a mut Interval>) {
        let domains: Vec<usize> = (0..self.pending.len())
            .filter(|&d| self.pending[d].count > 0)
            .collect();
        if domains.is_empty() {
            return;
        }
        for &d in &domains {
            let pending = std::mem::take(&mut self.pending[d]);
            self.unknown
                .entry((d, Glitch::ReadFailed))
                .or_default()
                .add(pending.count, pending.ns);
        }
        for interval in stored {
            for &d in &domains {
                if let Some((_, state)) = interval.energy_mut(d)
                    && state.pending_ns > 0
                {
                    state.unknown_ns += std::mem::take(&mut state.pending_ns);
                    state.unknown_count += 1;
                    state.add_glitch(Glitch::ReadFailed);
                }
            }
        }
    }

    /// Forgets what was booked for domain `d` (its source revised every interval).
    fn forget(&mut self, d: usize) {
        self.unknown.retain(|(domain, _), _| *domain != d);
        self.spread.remove(&d);
        if let Some(p) = self.pending.get_mut(d) {
            *p = Tally::default();
        }
    }

    /// Unknown energy of domain `d` by glitch.
    pub fn unknown(&self, d: usize) -> impl Iterator<Item = (Glitch, Tally)> + '_ {
        self.unknown
            .iter()
            .filter(move |((domain, _), _)| *domain == d)
            .map(|((_, g), t)| (*g, *t))
    }

    /// The quality notes: per domain, its unknown energy by cause and what was spread.
    pub fn notes(&self, domains: &[DomainSpec]) -> Vec<SourceNote> {
        let name = |d: usize| domains.get(d).map_or("?", |s| s.name.as_str());
        let mut notes: Vec<SourceNote> = self
            .unknown
            .iter()
            .map(|((d, glitch), t)| {
                SourceNote::degraded(format!(
                    "{}: energy unknown for {} interval(s), {}: {}; left out of its figures \
                     (totals.domains.{}.unknown_energy_*)",
                    name(*d),
                    t.count,
                    human_duration(t.ns),
                    glitch.describe(),
                    name(*d)
                ))
            })
            .collect();
        for (d, t) in &self.spread {
            notes.push(SourceNote::degraded(format!(
                "{}: reads failed; what its counter gained over {} interval(s), {}, was spread \
                 over them by duration (known in total, not in time) and kept out of the idle fit",
                name(*d),
                t.count,
                human_duration(t.ns)
            )));
        }
        notes
    }
}

/// Marks, in `stored` (newest first), domain `d`'s pending time (`pending_ns`) as unknown
/// (reads failed), then the `earlier` reads of `glitch` (count, ns) before it.
fn mark_unknown<'a>(
    stored: impl Iterator<Item = &'a mut Interval>,
    d: usize,
    mut pending_ns: u64,
    (glitch, mut earlier_count, mut earlier_ns): (Glitch, u32, u64),
) {
    for interval in stored {
        if pending_ns == 0 && earlier_ns == 0 {
            break;
        }
        let duration_ns = interval.duration_ns;
        let Some((_, state)) = interval.energy_mut(d) else {
            continue;
        };
        if pending_ns > 0 && state.pending_ns > 0 {
            let take = state.pending_ns.min(pending_ns);
            state.pending_ns -= take;
            state.unknown_ns += take;
            state.unknown_count += 1;
            state.add_glitch(Glitch::ReadFailed);
            pending_ns -= take;
        }
        if pending_ns == 0 && earlier_ns > 0 {
            // A share spread back (of 0 J: the counter was still) may be marked too.
            let markable = duration_ns
                .saturating_sub(state.unknown_ns)
                .saturating_sub(state.pending_ns);
            let take = markable.min(earlier_ns);
            if take > 0 {
                // Those reads were 0 J: nothing to take out of `energy_j`.
                state.unknown_ns += take;
                state.spread_ns = state
                    .spread_ns
                    .min(duration_ns.saturating_sub(state.unknown_ns));
                if earlier_count > 0 {
                    state.unknown_count += 1;
                    earlier_count -= 1;
                }
                state.add_glitch(glitch);
                earlier_ns -= take;
            }
        }
    }
}

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
                telemetry: activity.telemetry,
            });
        }
    }
    usage
}

/// Lets sources that revise their figures after the run (a power meter's log) rewrite the
/// energy of every stored interval (which is then measured: whatever was booked for those
/// domains is forgotten); returns notes, and the first source that measured nothing of the
/// run (its energy is then unknown for every interval: an error, exit 2).
pub fn settle<'a>(
    sources: &mut [Box<dyn EnergySource>],
    intervals: impl Iterator<Item = &'a mut Interval>,
    books: &mut Books,
) -> (Vec<SourceNote>, Option<SourceError>) {
    let mut intervals: Vec<&mut Interval> = intervals.collect();
    let spans: Vec<WallSpan> = intervals
        .iter()
        .map(|i| WallSpan {
            start_ns: i.wall_start_ns,
            end_ns: i.wall_start_ns + i.duration_ns,
        })
        .collect();
    let mut notes = Vec::new();
    let mut fatal = None;
    let mut offset = 0;
    for source in sources.iter_mut() {
        let width = source.domains().len();
        match source.settle(&spans) {
            None => {}
            Some(Ok(values)) => {
                for d in offset..offset + width {
                    books.forget(d);
                }
                for (interval, energy) in intervals.iter_mut().zip(values) {
                    let duration_ns = interval.duration_ns;
                    for (d, joules) in energy.into_iter().enumerate().take(width) {
                        if let Some((slot, state)) = interval.energy_mut(offset + d) {
                            // A revised figure that is not a number of joules is not one.
                            *state = if joules.is_finite() && joules >= 0.0 {
                                *slot = joules;
                                EnergyState::default()
                            } else {
                                *slot = 0.0;
                                EnergyState::unknown(duration_ns, Glitch::Invalid)
                            };
                        }
                    }
                }
            }
            Some(Err(err)) => {
                for d in offset..offset + width {
                    books.forget(d);
                    let mut tally = Tally::default();
                    for interval in intervals.iter_mut() {
                        let duration_ns = interval.duration_ns;
                        if let Some((slot, state)) = interval.energy_mut(d) {
                            *slot = 0.0;
                            *state = EnergyState::unknown(duration_ns, Glitch::Unavailable);
                            tally.add(1, duration_ns);
                        }
                    }
                    books.unknown.insert((d, Glitch::Unavailable), tally);
                }
                notes.push(SourceNote::degraded(format!(
                    "{} measured nothing of the run, its energy is unknown: {err}",
                    source.name()
                )));
                fatal.get_or_insert(err);
            }
        }
        offset += width;
    }
    (notes, fatal)
}

/// What the sources say at the end of the run.
#[derive(Debug, Default)]
pub struct Reports {
    pub notes: Vec<SourceNote>,
    pub gpus: Vec<GpuSummary>,
    pub meter: Option<MeterSummary>,
    /// Per domain (all sources, in order).
    pub busy_slope_w: Vec<Option<f64>>,
    /// Per domain (all sources, in order): a GPU's rest power.
    pub rest_power: Vec<Option<RestPower>>,
}

/// Per domain (all sources, in order): a GPU's rest power, when its source knows it.
pub fn rest_powers(sources: &[Box<dyn EnergySource>]) -> Vec<Option<RestPower>> {
    sources
        .iter()
        .flat_map(|s| {
            let rest = s.rest_power();
            (0..s.domains().len())
                .map(move |d| rest.as_ref().and_then(|r| r.get(d).copied().flatten()))
        })
        .collect()
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
    reports.rest_power = rest_powers(sources);
    reports
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{DomainKind, Provenance, ReadContext, Unknown};

    const MS: u64 = 1_000_000;

    /// Books one domain's readings (with each interval's length in ms) as the session does:
    /// each interval is stored after its reading, which may revise those stored before.
    fn run(books: &mut Books, readings: &[(Reading, u64)]) -> Vec<Interval> {
        let mut stored: Vec<Interval> = Vec::new();
        let mut start_ns = 0;
        for &(reading, ms) in readings {
            let (joules, state) = books.book(0, reading, ms * MS, stored.iter_mut().rev());
            stored.push(Interval {
                start_ns,
                duration_ns: ms * MS,
                energy_j: vec![joules],
                energy_state: vec![state],
                ..Interval::default()
            });
            start_ns += ms * MS;
        }
        stored
    }

    fn energy(stored: &[Interval]) -> Vec<f64> {
        stored.iter().map(|i| i.energy_j[0]).collect()
    }

    fn domain() -> Vec<DomainSpec> {
        vec![DomainSpec {
            name: "package-0".into(),
            kind: DomainKind::Package,
            parent: None,
            coverage: crate::attribution::Coverage::AllCpus,
            provenance: Provenance::Measured,
            source: "powercap",
        }]
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_reading_after_failed_reads_is_spread_over_them_by_duration() {
        // 1 J; two reads fail (100 ms, 200 ms); the next (100 ms) brings 8 J for all 400 ms.
        let mut books = Books::new(1);
        let stored = run(
            &mut books,
            &[
                (Reading::Joules(1.0), 100),
                (Reading::Pending, 100),
                (Reading::Pending, 200),
                (Reading::Joules(8.0), 100),
            ],
        );
        let e = energy(&stored);
        assert!(
            close(e[0], 1.0) && close(e[1], 2.0) && close(e[2], 4.0) && close(e[3], 2.0),
            "{e:?}"
        );
        assert!(close(e.iter().sum::<f64>(), 9.0));
        assert!(stored[0].energy_state(0).is_measured());
        for (i, ms) in [(1, 100), (2, 200), (3, 100)] {
            let state = stored[i].energy_state(0);
            assert_eq!((state.spread_ns, state.pending_ns), (ms * MS, 0), "{i}");
            assert_eq!(state.unknown_ns, 0);
        }
        let notes = books.notes(&domain());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].degraded
                && notes[0].text.contains("3 interval(s), 400 ms")
                && notes[0].text.contains("idle fit"),
            "{notes:?}"
        );
    }

    #[test]
    fn an_untrustworthy_reading_after_failed_reads_makes_them_unknown_too() {
        let mut books = Books::new(1);
        let stored = run(
            &mut books,
            &[
                (Reading::Joules(1.0), 100),
                (Reading::Pending, 100),
                (Reading::Pending, 100),
                (Reading::unknown(Glitch::StepBack), 100),
                (Reading::Joules(1.5), 100),
            ],
        );
        assert_eq!(energy(&stored), [1.0, 0.0, 0.0, 0.0, 1.5]);
        for interval in &stored[1..=3] {
            let state = interval.energy_state(0);
            assert_eq!((state.unknown_ns, state.unknown_count), (100 * MS, 1));
            assert_eq!(state.pending_ns, 0);
        }
        assert_eq!(
            stored[1].energy_state(0).glitches().collect::<Vec<_>>(),
            [Glitch::ReadFailed]
        );
        assert_eq!(
            books.unknown(0).collect::<Vec<_>>(),
            [
                (
                    Glitch::StepBack,
                    Tally {
                        count: 1,
                        ns: 100 * MS
                    }
                ),
                (
                    Glitch::ReadFailed,
                    Tally {
                        count: 2,
                        ns: 200 * MS
                    }
                ),
            ]
        );
        let notes = books.notes(&domain());
        assert!(
            notes.iter().any(|n| n.text.contains(
                "package-0: energy unknown for 1 interval(s), 100 ms: the counter stepped back"
            )),
            "{notes:?}"
        );
    }

    #[test]
    fn a_freeze_found_after_a_few_intervals_marks_the_earlier_ones() {
        let mut books = Books::new(1);
        let stored = run(
            &mut books,
            &[
                (Reading::Joules(1.0), 100),
                (Reading::Joules(0.0), 100),
                (Reading::Joules(0.0), 50),
                (
                    Reading::Unknown(Unknown {
                        glitch: Glitch::Frozen,
                        earlier_count: 2,
                        earlier_ns: 150 * MS,
                    }),
                    100,
                ),
            ],
        );
        assert!(stored[0].energy_state(0).is_measured());
        for (i, ms) in [(1, 100), (2, 50), (3, 100)] {
            let state = stored[i].energy_state(0);
            assert_eq!((state.unknown_ns, state.unknown_count), (ms * MS, 1), "{i}");
            assert_eq!(state.glitches().collect::<Vec<_>>(), [Glitch::Frozen]);
        }
        assert_eq!(
            books.unknown(0).collect::<Vec<_>>(),
            [(
                Glitch::Frozen,
                Tally {
                    count: 3,
                    ns: 250 * MS
                }
            )]
        );
    }

    #[test]
    fn a_freeze_across_a_failed_read_marks_no_more_than_it_covers() {
        // 1 J; then still readings, one read failing among them; the freeze is found with
        // two still readings before it (200 ms): the first interval stays measured.
        let mut books = Books::new(1);
        let stored = run(
            &mut books,
            &[
                (Reading::Joules(1.0), 100),
                (Reading::Joules(0.0), 100),
                (Reading::Pending, 100),
                (Reading::Joules(0.0), 100),
                (
                    Reading::Unknown(Unknown {
                        glitch: Glitch::Frozen,
                        earlier_count: 2,
                        earlier_ns: 200 * MS,
                    }),
                    100,
                ),
            ],
        );
        assert!(stored[0].energy_state(0).is_measured());
        let unknown_ns: u64 = stored.iter().map(|i| i.energy_state(0).unknown_ns).sum();
        assert_eq!(unknown_ns, 300 * MS);
        for interval in &stored {
            let state = interval.energy_state(0);
            assert!(state.unknown_ns + state.spread_ns <= interval.duration_ns);
        }
        assert_eq!(energy(&stored), [1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn failed_reads_never_made_good_are_unknown_at_the_end() {
        let mut books = Books::new(1);
        let mut stored = run(
            &mut books,
            &[
                (Reading::Joules(1.0), 100),
                (Reading::Pending, 100),
                (Reading::Pending, 100),
            ],
        );
        books.finish(stored.iter_mut());
        assert!(stored[0].energy_state(0).is_measured());
        for interval in &stored[1..=2] {
            let state = interval.energy_state(0);
            assert_eq!((state.unknown_ns, state.pending_ns), (100 * MS, 0));
        }
        assert_eq!(
            books.unknown(0).collect::<Vec<_>>(),
            [(
                Glitch::ReadFailed,
                Tally {
                    count: 2,
                    ns: 200 * MS
                }
            )]
        );
    }

    #[test]
    fn a_figure_that_is_not_a_number_of_joules_is_never_booked() {
        let mut books = Books::new(1);
        let stored = run(
            &mut books,
            &[
                (Reading::Joules(f64::NAN), 100),
                (Reading::Joules(f64::INFINITY), 100),
                (Reading::Joules(-1.0), 100),
            ],
        );
        assert_eq!(energy(&stored), [0.0, 0.0, 0.0]);
        assert_eq!(
            books.unknown(0).collect::<Vec<_>>(),
            [(
                Glitch::Invalid,
                Tally {
                    count: 3,
                    ns: 300 * MS
                }
            )]
        );
    }

    /// A source that revises the run's figures with `settled` at the end.
    struct Revising {
        domains: Vec<DomainSpec>,
        settled: Option<Result<Vec<Vec<f64>>, SourceError>>,
    }

    impl EnergySource for Revising {
        fn name(&self) -> &'static str {
            "meter"
        }
        fn provenance(&self) -> Provenance {
            Provenance::Measured
        }
        fn domains(&self) -> &[DomainSpec] {
            &self.domains
        }
        fn read(&mut self, _: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError> {
            Ok(vec![Reading::Joules(0.0)])
        }
        fn describe(&self) -> String {
            "revising".into()
        }
        fn settle(&mut self, _: &[WallSpan]) -> Option<Result<Vec<Vec<f64>>, SourceError>> {
            self.settled.take()
        }
    }

    #[test]
    fn revised_figures_replace_what_was_booked_live() {
        let mut books = Books::new(1);
        let mut stored = run(
            &mut books,
            &[
                (Reading::unknown(Glitch::ReadFailed), 100),
                (Reading::Joules(1.0), 100),
            ],
        );
        let mut sources: Vec<Box<dyn EnergySource>> = vec![Box::new(Revising {
            domains: domain(),
            settled: Some(Ok(vec![vec![3.0], vec![f64::NAN]])),
        })];
        let (notes, fatal) = settle(&mut sources, stored.iter_mut(), &mut books);
        assert!(notes.is_empty() && fatal.is_none());
        assert_eq!(energy(&stored), [3.0, 0.0]);
        assert!(stored[0].energy_state(0).is_measured());
        // A revised figure that is not one is unknown, not booked.
        assert_eq!(
            stored[1].energy_state(0).glitches().collect::<Vec<_>>(),
            [Glitch::Invalid]
        );
        assert!(books.notes(&domain()).is_empty());
    }

    #[test]
    fn a_source_that_measured_nothing_of_the_run_is_unknown_throughout_and_an_error() {
        let mut books = Books::new(1);
        let mut stored = run(
            &mut books,
            &[(Reading::Joules(2.0), 100), (Reading::Joules(1.0), 50)],
        );
        let mut sources: Vec<Box<dyn EnergySource>> = vec![Box::new(Revising {
            domains: domain(),
            settled: Some(Err(SourceError::PowerLog {
                path: "p.csv".into(),
                line: None,
                reason: "no sample at all".into(),
            })),
        })];
        let (notes, fatal) = settle(&mut sources, stored.iter_mut(), &mut books);
        assert!(fatal.unwrap().to_string().contains("no sample at all"));
        assert!(notes[0].degraded && notes[0].text.contains("measured nothing"));
        assert_eq!(energy(&stored), [0.0, 0.0]);
        assert_eq!(stored[1].energy_state(0).unknown_ns, 50 * MS);
        assert_eq!(
            books.unknown(0).collect::<Vec<_>>(),
            [(
                Glitch::Unavailable,
                Tally {
                    count: 2,
                    ns: 150 * MS
                }
            )]
        );
    }
}
