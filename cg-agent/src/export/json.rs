//! The JSON report (schema: `docs/report.md`).

use std::{
    io::{self, Write},
    path::Path,
};

use crate::{
    output::{self, OutputError},
    privileges::Invoker,
    report::Report,
};

/// Writes the report as pretty JSON followed by a newline.
pub fn write(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::other)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Writes the report to `path` (`-` for stdout), through [`crate::output`]: a fresh file
/// next to its final name, renamed into place (a reader never sees half a report), created
/// for `who` (under sudo, as the user who ran it).
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    output::write_file_or_stdout(path, who, |out| write(report, out))
}
