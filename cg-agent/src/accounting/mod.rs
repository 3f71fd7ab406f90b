//! The accounting core: the one per-interval step that turns a probe snapshot's activity
//! plus the sources' readings into an attributed interval, and the one running idle-baseline
//! fit. The report ([`crate::report::build`]), the live view ([`crate::report::live`]),
//! `serve` ([`crate::serve::model`]) and serve's churn benchmark all call these; none of
//! them keeps a copy.
//!
//! Pure: no I/O, no clocks. It stands below `session`, `report` and `serve` (it imports none
//! of them); the session feeds it ([`step::interval_of`] with the process each thread
//! belongs to), and [`attribution`](crate::attribution) does the arithmetic of a split.

pub mod baseline;
pub mod step;

pub use baseline::{BaselineInputs, IdleWatts, RunningFit};
pub use step::{Attributor, interval_of};
