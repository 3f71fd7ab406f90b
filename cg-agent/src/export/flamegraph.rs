//! The energy flamegraph (`--flamegraph FILE.svg`): the folded stacks drawn by inferno, each
//! frame as wide as the energy (µJ) of the samples that contain it; interactive (search,
//! zoom) in a browser.

use std::{io, path::Path};

use crate::{
    output::{self, OutputError},
    privileges::Invoker,
    report::Report,
};

/// Writes the SVG to `path`, created for `who` through [`crate::output`]. A run with no
/// sampled energy still gets a (blank) valid SVG.
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    output::write_file(path, who, |file| draw(report, file))
}

/// Draws the SVG into `out` (the HTML report embeds it).
pub fn draw(report: &Report, out: &mut dyn io::Write) -> io::Result<()> {
    let lines = super::folded::lines(report);
    let estimated = report.meta.measurement_quality.grade == "estimated";
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!(
        "Energy flamegraph{}",
        match &report.meta.command {
            Some(command) => format!(": {}", command.join(" ")),
            None => String::new(),
        }
    );
    options.subtitle = Some(format!(
        "width = energy in microjoules ({}), {:.3} J attributed to targets",
        if estimated { "ESTIMATED" } else { "measured" },
        report.totals.attributed_energy_j
    ));
    options.count_name = "µJ".into();
    options.name_type = "Function:".into();
    options.deterministic = true;
    if lines.is_empty() {
        // inferno refuses empty input; draw one frame saying so.
        let placeholder = ["no samples 1".to_string()];
        inferno::flamegraph::from_lines(&mut options, placeholder.iter().map(String::as_str), out)
    } else {
        inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
    }
}
