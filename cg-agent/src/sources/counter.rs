//! Counter arithmetic and plausibility shared by every cumulative energy counter: the one place
//! where wraparound is handled, and where a reading is judged.
//!
//! A counter's advance is trusted only where the power it implies over the interval is one the
//! domain can draw ([`max_power_w`]): a reading below the previous one is a wraparound only if
//! the energy up to the maximum and on from zero is plausible, otherwise the counter *stepped
//! back*; an advance implying more power *jumped*; a counter whose range is smaller than what
//! the domain can draw in one interval is *ambiguous* (it may have wrapped more than once). A
//! counter that does not move while the CPUs it covers are clearly busy for a few intervals in
//! a row is *frozen* ([`FreezeWatch`]). Each such interval's energy is unknown
//! ([`Glitch`]), and the next interval starts from the new reading, so the rest of the run is
//! unaffected.

use crate::attribution::Glitch;

use super::{DomainKind, Reading};

/// The most power a domain of this kind is taken to draw, in watts, where the hardware does
/// not say (generous: the largest parts of 2026 draw about half of it).
///
/// | kind | W | why |
/// |---|---|---|
/// | package, core | 1,000 | server packages run at up to ~500 W |
/// | uncore, dram | 500 | an integrated GPU; a socket's DIMMs |
/// | psys | 2,000 | a whole platform (RAPL has psys on client parts) |
/// | gpu | 3,000 | data-centre GPU boards draw up to ~1,200 W |
/// | meter | 1,000,000 | a wall meter on one machine: anything above is not a reading |
/// | model | no bound | an estimate |
///
/// Each RAPL bound times the longest interval (60 s) stays below a real RAPL counter's range
/// (262,143 J; 65,712 J for DRAM), so a real counter is never ambiguous.
pub fn max_power_w(kind: DomainKind) -> f64 {
    match kind {
        DomainKind::Package | DomainKind::Core => 1_000.0,
        DomainKind::Uncore | DomainKind::Dram => 500.0,
        DomainKind::Psys => 2_000.0,
        DomainKind::Gpu => 3_000.0,
        DomainKind::Meter => 1_000_000.0,
        DomainKind::Model => f64::INFINITY,
    }
}

/// A plausible advance is judged over at least this long (RAPL updates about every
/// millisecond, so a very short interval can see two updates' worth).
pub const MIN_JUDGED_NS: u64 = 10_000_000;

/// A monotonically increasing counter that wraps to zero after `max_value`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrappingCounter {
    max_value: u64,
    last: Option<u64>,
}

impl WrappingCounter {
    /// A counter that counts `0..=max_value` and then wraps (powercap's
    /// `max_energy_range_uj`; `u64::MAX` for 64-bit perf counters).
    pub fn new(max_value: u64) -> Self {
        Self {
            max_value,
            last: None,
        }
    }

    /// Records a new reading and returns how far the counter advanced since the previous one
    /// (0 for the first). A reading below the previous one means the counter wrapped once:
    /// the advance is the steps up to the maximum, one to zero, and the new value.
    pub fn advance(&mut self, value: u64) -> u64 {
        let delta = match self.last {
            None => 0,
            Some(last) if value >= last => value - last,
            // Counting modulo max_value + 1 (which is 2^64 for a full 64-bit counter).
            Some(last) => (self.max_value - last.min(self.max_value))
                .wrapping_add(value)
                .wrapping_add(1),
        };
        self.last = Some(value);
        delta
    }

    pub fn last(&self) -> Option<u64> {
        self.last
    }

    pub fn max_value(&self) -> u64 {
        self.max_value
    }
}

/// What a judged reading was, with the figures a note needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Judged {
    pub previous: u64,
    pub value: u64,
    /// Joules the advance (or the wraparound) would be.
    pub joules: f64,
    /// Joules the domain could have drawn at most.
    pub allowed_j: f64,
}

/// A cumulative energy counter whose every advance is judged plausible or not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckedCounter {
    raw: WrappingCounter,
    joules_per_count: f64,
    max_power_w: f64,
}

impl CheckedCounter {
    /// A counter of `joules_per_count` J per count, wrapping after `max_value`, for a domain
    /// that draws at most `max_power_w`.
    pub fn new(max_value: u64, joules_per_count: f64, max_power_w: f64) -> Self {
        CheckedCounter {
            raw: WrappingCounter::new(max_value),
            joules_per_count,
            max_power_w,
        }
    }

    /// Takes `value` as the origin of the next advance, without judging it (the first
    /// reading, a zero-length read, a reopened file).
    pub fn reset(&mut self, value: u64) {
        self.raw = WrappingCounter {
            max_value: self.raw.max_value,
            last: Some(value),
        };
    }

    pub fn max_power_w(&self) -> f64 {
        self.max_power_w
    }

    /// The origin of the next advance.
    pub fn last(&self) -> Option<u64> {
        self.raw.last()
    }

    /// Joules since the previous reading, `duration_ns` ago, or why that is not known. The
    /// new reading is the origin of the next one either way.
    pub fn advance(&mut self, value: u64, duration_ns: u64) -> Result<f64, (Glitch, Judged)> {
        let Some(previous) = self.raw.last else {
            self.reset(value);
            return Ok(0.0);
        };
        if duration_ns == 0 {
            self.reset(value);
            return Ok(0.0);
        }
        let counts = self.raw.advance(value);
        let joules = counts as f64 * self.joules_per_count;
        let allowed_j = self.max_power_w * duration_ns.max(MIN_JUDGED_NS) as f64 / 1e9;
        let judged = Judged {
            previous,
            value,
            joules,
            allowed_j,
        };
        let range_j = (self.raw.max_value as f64 + 1.0) * self.joules_per_count;
        if range_j <= allowed_j {
            return Err((Glitch::Ambiguous, judged));
        }
        if joules <= allowed_j {
            Ok(joules)
        } else if value >= previous {
            Err((Glitch::Jump, judged))
        } else {
            Err((Glitch::StepBack, judged))
        }
    }
}

/// Consecutive qualifying intervals without movement after which a counter is frozen.
pub const FREEZE_INTERVALS: u32 = 3;
/// An interval qualifies when it is at least this long (RAPL updates about every millisecond)...
pub const FREEZE_MIN_INTERVAL_NS: u64 = 20_000_000;
/// ... and the CPUs the counter covers were on average at least this many CPUs busy.
pub const FREEZE_MIN_BUSY_CPUS: f64 = 0.5;

/// Watches a domain's counter for a freeze: zero advances over [`FREEZE_INTERVALS`]
/// consecutive intervals of at least [`FREEZE_MIN_INTERVAL_NS`] with at least
/// [`FREEZE_MIN_BUSY_CPUS`] busy CPUs. A short interval or idle CPUs may read 0 J: they
/// neither count nor break the streak. Once frozen, every further zero advance is unknown
/// until the counter moves again.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FreezeWatch {
    /// Zero readings so far in the streak (reported as 0 J), and the time they cover.
    streak_count: u32,
    streak_ns: u64,
    qualifying: u32,
    frozen: bool,
}

impl FreezeWatch {
    /// Judges a plausible advance of `joules` over `duration_ns`, during which the domain's
    /// CPUs were `busy_cpus` busy on average.
    pub fn observe(&mut self, joules: f64, duration_ns: u64, busy_cpus: f64) -> Reading {
        if joules > 0.0 || duration_ns == 0 {
            *self = FreezeWatch::default();
            return Reading::Joules(joules);
        }
        if self.frozen {
            return Reading::unknown(Glitch::Frozen);
        }
        if duration_ns >= FREEZE_MIN_INTERVAL_NS && busy_cpus >= FREEZE_MIN_BUSY_CPUS {
            self.qualifying += 1;
        }
        if self.qualifying >= FREEZE_INTERVALS {
            let reading = Reading::Unknown(super::Unknown {
                glitch: Glitch::Frozen,
                earlier_count: self.streak_count,
                earlier_ns: self.streak_ns,
            });
            *self = FreezeWatch {
                frozen: true,
                ..FreezeWatch::default()
            };
            return reading;
        }
        self.streak_count += 1;
        self.streak_ns += duration_ns;
        Reading::Joules(0.0)
    }

    /// A reading that was not judged (it failed or glitched): the streak of consecutive
    /// readings is broken.
    pub fn interrupt(&mut self) {
        *self = FreezeWatch::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Unknown;

    const MS: u64 = 1_000_000;

    #[test]
    fn first_reading_sets_the_origin() {
        let mut c = WrappingCounter::new(1000);
        assert_eq!(c.advance(400), 0);
        assert_eq!(c.advance(450), 50);
    }

    #[test]
    fn wraps_counter_at_max_range() {
        let mut c = WrappingCounter::new(1000);
        c.advance(900);
        // 900 -> 1000 (100), wrap to 0 (1), 0 -> 30 (30).
        assert_eq!(c.advance(30), 131);
        assert_eq!(c.advance(40), 10);
    }

    #[test]
    fn full_64_bit_counters_wrap_too() {
        let mut c = WrappingCounter::new(u64::MAX);
        c.advance(u64::MAX - 5);
        assert_eq!(c.advance(4), 10);
    }

    /// powercap's package counter: µJ, wrapping after 262,143 J, at most 1,000 W.
    fn package() -> CheckedCounter {
        CheckedCounter::new(262_143_328_850, 1e-6, 1_000.0)
    }

    #[test]
    fn a_plausible_wraparound_is_accepted() {
        let mut c = package();
        assert_eq!(c.advance(262_143_000_000, 100 * MS), Ok(0.0));
        // 0.328850 J up to the maximum, 1 µJ to zero, 2 J after: 2.3 J in 100 ms (23 W).
        let j = c.advance(2_000_000, 100 * MS).unwrap();
        assert!((j - 2.328_851).abs() < 1e-9, "{j}");
        assert_eq!(c.advance(3_000_000, 100 * MS), Ok(1.0));
    }

    #[test]
    fn a_step_back_is_a_glitch_not_a_wraparound_and_the_next_reading_starts_from_it() {
        let mut c = package();
        c.advance(262_000_000_000, 100 * MS).unwrap();
        // 1 J back: as a wraparound, 262,142 J in 100 ms (2.6 MW).
        let (glitch, judged) = c.advance(261_999_000_000, 100 * MS).unwrap_err();
        assert_eq!(glitch, Glitch::StepBack);
        assert!(
            judged.joules > 262_000.0 && judged.allowed_j == 100.0,
            "{judged:?}"
        );
        // The run goes on from the new reading.
        assert_eq!(c.advance(262_000_000_000, 100 * MS), Ok(1.0));
    }

    #[test]
    fn a_jump_beyond_the_domains_power_is_a_glitch() {
        let mut c = package();
        c.advance(5_000_000, 100 * MS).unwrap();
        // +1000 J in 100 ms: 10 kW.
        let (glitch, _) = c.advance(1_005_000_000, 100 * MS).unwrap_err();
        assert_eq!(glitch, Glitch::Jump);
        assert_eq!(c.advance(1_006_000_000, 100 * MS), Ok(1.0));
        // The same 1000 J over 5 s (200 W) is plausible.
        assert_eq!(c.advance(2_006_000_000, 5_000 * MS), Ok(1000.0));
    }

    #[test]
    fn very_short_intervals_are_judged_over_ten_milliseconds() {
        let mut c = package();
        c.advance(0, 100 * MS).unwrap();
        // 5 J in 1 ms would be 5 kW; RAPL's update granularity allows it over 10 ms (500 W).
        assert_eq!(c.advance(5_000_000, MS), Ok(5.0));
    }

    #[test]
    fn a_counter_whose_range_a_domain_can_exhaust_in_one_interval_is_ambiguous() {
        // A 10 J range at up to 1,000 W: it may wrap several times in 100 ms.
        let mut c = CheckedCounter::new(10_000_000, 1e-6, 1_000.0);
        c.advance(1_000_000, 100 * MS).unwrap();
        assert_eq!(
            c.advance(2_000_000, 100 * MS).unwrap_err().0,
            Glitch::Ambiguous
        );
        // At up to 50 W it cannot (5 J per 100 ms).
        let mut c = CheckedCounter::new(10_000_000, 1e-6, 50.0);
        c.advance(9_000_000, 100 * MS).unwrap();
        let j = c.advance(500_000, 100 * MS).unwrap();
        assert!((j - 1.500_001).abs() < 1e-9, "{j}");
    }

    #[test]
    fn a_zero_length_read_only_moves_the_origin() {
        let mut c = package();
        c.advance(1_000_000, 100 * MS).unwrap();
        assert_eq!(c.advance(1, 0), Ok(0.0));
        assert_eq!(c.advance(1_000_001, 100 * MS), Ok(1.0));
    }

    #[test]
    fn a_freeze_needs_a_few_busy_intervals_and_then_covers_them_all() {
        let mut w = FreezeWatch::default();
        // Idle or short intervals reading 0 J are fine.
        assert_eq!(w.observe(0.0, 100 * MS, 0.1), Reading::Joules(0.0));
        assert_eq!(w.observe(0.0, 5 * MS, 2.0), Reading::Joules(0.0));
        // A busy one counts; so does the next.
        assert_eq!(w.observe(0.0, 100 * MS, 1.0), Reading::Joules(0.0));
        assert_eq!(w.observe(0.0, 100 * MS, 1.0), Reading::Joules(0.0));
        // The third: frozen, and the four zero readings before it were too.
        assert_eq!(
            w.observe(0.0, 100 * MS, 1.0),
            Reading::Unknown(Unknown {
                glitch: Glitch::Frozen,
                earlier_count: 4,
                earlier_ns: 305 * MS,
            })
        );
        // Still frozen, busy or not, until it moves.
        assert_eq!(
            w.observe(0.0, 100 * MS, 0.0),
            Reading::unknown(Glitch::Frozen)
        );
        assert_eq!(w.observe(0.5, 100 * MS, 1.0), Reading::Joules(0.5));
        assert_eq!(w.observe(0.0, 100 * MS, 1.0), Reading::Joules(0.0));
    }

    #[test]
    fn a_moving_counter_or_a_failed_read_breaks_the_streak() {
        let mut w = FreezeWatch::default();
        for _ in 0..2 {
            assert_eq!(w.observe(0.0, 100 * MS, 1.0), Reading::Joules(0.0));
        }
        assert_eq!(w.observe(0.1, 100 * MS, 1.0), Reading::Joules(0.1));
        for _ in 0..2 {
            assert_eq!(w.observe(0.0, 100 * MS, 1.0), Reading::Joules(0.0));
        }
        w.interrupt();
        for _ in 0..2 {
            assert_eq!(w.observe(0.0, 100 * MS, 1.0), Reading::Joules(0.0));
        }
    }
}
