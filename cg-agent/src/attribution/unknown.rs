//! Energy that is not known: what an interval's figure for a domain is worth. A counter that
//! steps back, jumps, freezes or is replaced gives no figure for that interval (its energy is
//! *unknown*, left out of every total, and counted as such); a read that failed is made good
//! by the next one, whose gain is *spread* over the intervals it covers (known in total, not in
//! time, so kept out of the idle fit).

/// Why an interval's energy for a domain is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Glitch {
    /// The counter went backwards by more than any plausible wraparound.
    StepBack,
    /// The counter advanced faster than the domain can draw power.
    Jump,
    /// The counter did not move while the CPUs it covers were busy.
    Frozen,
    /// The counter's file was deleted and recreated (a new inode): it was reopened.
    Replaced,
    /// The counter's file was deleted and is not back (yet): the open one no longer moves.
    Deleted,
    /// The counter's range is so small that it could have wrapped more than once.
    Ambiguous,
    /// Reads failed and the reading that followed could not be trusted either.
    ReadFailed,
    /// The source had nothing to say: a GPU that stopped answering, a power log without a
    /// sample in the run.
    Unavailable,
    /// A source handed over a figure that is not a number of joules (negative or not finite).
    Invalid,
}

impl Glitch {
    pub const ALL: [Glitch; 9] = [
        Glitch::StepBack,
        Glitch::Jump,
        Glitch::Frozen,
        Glitch::Replaced,
        Glitch::Deleted,
        Glitch::Ambiguous,
        Glitch::ReadFailed,
        Glitch::Unavailable,
        Glitch::Invalid,
    ];

    /// Whether the counter surely moved (its value changed, implausibly): a counter showing
    /// only other glitches may be standing still (see `sources::select::check_advancing`).
    pub fn shows_movement(self) -> bool {
        matches!(self, Glitch::StepBack | Glitch::Jump)
    }

    /// The name in the report (`timeseries[].domains.<d>.glitches`).
    pub fn name(self) -> &'static str {
        match self {
            Glitch::StepBack => "step_back",
            Glitch::Jump => "jump",
            Glitch::Frozen => "frozen",
            Glitch::Replaced => "replaced",
            Glitch::Deleted => "deleted",
            Glitch::Ambiguous => "ambiguous",
            Glitch::ReadFailed => "read_failed",
            Glitch::Unavailable => "unavailable",
            Glitch::Invalid => "invalid",
        }
    }

    /// What happened, in words (for the quality notes).
    pub fn describe(self) -> &'static str {
        match self {
            Glitch::StepBack => "the counter stepped back (not a plausible wraparound)",
            Glitch::Jump => "the counter jumped ahead faster than the domain can draw power",
            Glitch::Frozen => "the counter did not move while its CPUs were busy (frozen)",
            Glitch::Replaced => {
                "the counter's file was deleted and recreated (cg-trace reopened it)"
            }
            Glitch::Deleted => "the counter's file was deleted (and not recreated then)",
            Glitch::Ambiguous => {
                "the counter's range is so small that it may have wrapped more than once"
            }
            Glitch::ReadFailed => {
                "reads failed and the reading after them could not be trusted either"
            }
            Glitch::Unavailable => "the source had no data for it",
            Glitch::Invalid => "the source gave a figure that is not a number of joules",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// How much of one interval's energy for one domain is known (indexed like
/// [`super::Interval::energy_j`]). The default is fully measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnergyState {
    /// Nanoseconds of the interval whose energy is unknown (not in `energy_j`).
    pub unknown_ns: u64,
    /// Reads whose energy is unknown (1 for one interval; merged intervals add theirs up).
    pub unknown_count: u32,
    /// Why ([`Glitch`] bits).
    glitches: u16,
    /// Nanoseconds whose energy is a share, by duration, of what a counter gained over reads
    /// that failed: known in total, not in time.
    pub spread_ns: u64,
    /// Nanoseconds whose energy a later reading will bring (reads failed; the run is still
    /// going on). None is left once the run is over.
    pub pending_ns: u64,
}

impl EnergyState {
    /// A whole interval of `duration_ns` whose energy is unknown because of `glitch`.
    pub fn unknown(duration_ns: u64, glitch: Glitch) -> Self {
        EnergyState {
            unknown_ns: duration_ns,
            unknown_count: 1,
            glitches: glitch.bit(),
            ..EnergyState::default()
        }
    }

    /// A whole interval whose energy is a share of a later reading (reads failed).
    pub fn spread(duration_ns: u64) -> Self {
        EnergyState {
            spread_ns: duration_ns,
            ..EnergyState::default()
        }
    }

    /// A whole interval whose energy a later reading will bring.
    pub fn pending(duration_ns: u64) -> Self {
        EnergyState {
            pending_ns: duration_ns,
            ..EnergyState::default()
        }
    }

    /// Whether the energy of the whole interval is measured, as it happened.
    pub fn is_measured(&self) -> bool {
        self.unknown_ns == 0 && self.spread_ns == 0 && self.pending_ns == 0
    }

    pub fn add_glitch(&mut self, glitch: Glitch) {
        self.glitches |= glitch.bit();
    }

    pub fn glitches(&self) -> impl Iterator<Item = Glitch> + '_ {
        Glitch::ALL
            .into_iter()
            .filter(|g| self.glitches & g.bit() != 0)
    }

    /// Nanoseconds of an interval of `duration_ns` whose energy is known.
    pub fn known_ns(&self, duration_ns: u64) -> u64 {
        duration_ns.saturating_sub(self.unknown_ns)
    }

    /// One state for an interval covering two (see [`crate::session::recorder::merge`]).
    pub fn merge(&self, other: &EnergyState) -> EnergyState {
        EnergyState {
            unknown_ns: self.unknown_ns + other.unknown_ns,
            unknown_count: self.unknown_count + other.unknown_count,
            glitches: self.glitches | other.glitches,
            spread_ns: self.spread_ns + other.spread_ns,
            pending_ns: self.pending_ns + other.pending_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glitches_are_kept_as_a_set_and_merge() {
        let mut a = EnergyState::unknown(100, Glitch::Frozen);
        a.add_glitch(Glitch::Frozen);
        let b = EnergyState::unknown(50, Glitch::StepBack);
        let m = a.merge(&b);
        assert_eq!(
            m.glitches().collect::<Vec<_>>(),
            [Glitch::StepBack, Glitch::Frozen]
        );
        assert_eq!((m.unknown_ns, m.unknown_count), (150, 2));
        assert_eq!(m.known_ns(200), 50);
        assert!(!m.is_measured());
        assert!(EnergyState::default().is_measured());
    }

    #[test]
    fn every_glitch_has_its_own_name_and_bit() {
        let names: std::collections::BTreeSet<_> = Glitch::ALL.iter().map(|g| g.name()).collect();
        assert_eq!(names.len(), Glitch::ALL.len());
        let bits = Glitch::ALL.iter().fold(0u16, |acc, g| {
            assert_eq!(acc & g.bit(), 0);
            acc | g.bit()
        });
        assert_eq!(bits.count_ones() as usize, Glitch::ALL.len());
    }
}
