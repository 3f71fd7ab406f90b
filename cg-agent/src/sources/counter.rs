//! Counter arithmetic shared by every cumulative energy counter: the one place where
//! wraparound is handled.

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
