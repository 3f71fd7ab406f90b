//! The live feed of a run: what a session tells an observer (the terminal view) while it
//! runs, and how the observer asks it to stop. The session only hands over what it measured
//! (each interval, the processes that changed); the observers (the live view, `serve`)
//! attribute them with the accounting core ([`crate::accounting`]).

use std::{fmt, path::PathBuf, sync::Arc};

use crate::{
    attribution::{Interval, ProcId},
    probes::Losses,
    session::{RunHeader, functions::LiveFunctions, processes::ProcessRecord},
};

/// What an observer learns once, when the run starts (the command, if any, has just been
/// started; calibration, if any, is over).
#[derive(Debug)]
pub struct LiveStart<'a> {
    /// The run's facts, the same the recording carries to the report.
    pub header: &'a RunHeader,
    /// CLOCK_MONOTONIC ns when the run started; intervals start from here.
    pub run_start_ns: u64,
    /// Intervals measured before the run (wrap mode, measured sources): idle fit only.
    pub calibration: &'a [Interval],
}

/// One interval of the run, as soon as it is measured.
#[derive(Debug)]
pub struct LiveSample<'a> {
    pub interval: &'a Interval,
    /// Every process seen so far, indexed by [`ProcId`].
    pub processes: &'a [ProcessRecord],
    /// The processes added or changed since the previous sample (indexes into `processes`).
    pub changed: &'a [ProcId],
    /// Records the kernel side lost so far.
    pub losses: Losses,
    /// Failed reads of sources or probes so far.
    pub read_errors_count: u64,
    /// This interval's function data, named, when function-level profiling runs (`--func`,
    /// `--profile`); the observer attributes it with the interval's process energies.
    pub functions: Option<LiveFunctions<'a>>,
}

/// What the session tells its observer.
#[derive(Debug)]
pub enum LiveEvent<'a> {
    Started(LiveStart<'a>),
    Sample(LiveSample<'a>),
}

/// Called on the session's thread for each event; it must not block.
pub type Observer = Box<dyn FnMut(LiveEvent<'_>) + Send>;

/// How a live view takes part in a run.
pub struct LiveHooks {
    pub observer: Observer,
    /// Notified when the viewer quits: the run stops as on Ctrl-C (in wrap mode the command
    /// gets SIGINT and has 3 s to finish).
    pub stop: Arc<tokio::sync::Notify>,
    /// Wrap mode: the command's stdout and stderr go to this file and its stdin is
    /// `/dev/null`, so that it does not tear the view.
    pub command_output: Option<PathBuf>,
}

impl fmt::Debug for LiveHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveHooks")
            .field("command_output", &self.command_output)
            .finish_non_exhaustive()
    }
}
