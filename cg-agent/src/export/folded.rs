//! Folded stacks (`--folded FILE`): one line per stack, `process;outer;...;inner VALUE`,
//! weighted by energy in **microjoules** (integers, as flamegraph tools expect), the format
//! of Brendan Gregg's `stackcollapse` scripts that inferno, speedscope and others read.
//! Each process is the root frame (`comm pid`); `[unsampled]` is the energy no sample
//! carried.

use std::path::Path;

use crate::{
    output::{self, OutputError},
    privileges::Invoker,
    report::Report,
};

/// The folded lines, heaviest first within each process; stacks that round to 0 µJ are
/// left out.
pub fn lines(report: &Report) -> Vec<String> {
    report
        .stacks
        .iter()
        .filter_map(|s| {
            let uj = (s.energy_j * 1e6).round();
            if uj < 1.0 {
                return None;
            }
            let mut line = format!("{} {}", clean(&s.comm), s.pid);
            for frame in &s.frames {
                line.push(';');
                line.push_str(&clean(&frame.label()));
            }
            Some(format!("{line} {uj:.0}"))
        })
        .collect()
}

/// Frame names may not hold the format's frame or line separators (spaces are fine: the
/// count is what follows the last one).
fn clean(frame: &str) -> String {
    frame.replace([';', '\n'], ":")
}

/// Writes the folded stacks to `path`, created for `who` through [`crate::output`].
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    output::write_file(path, who, |out| {
        for line in lines(report) {
            writeln!(out, "{line}")?;
        }
        Ok(())
    })
}
