//! The JSON report (schema: `docs/report.md`).

use std::{
    fs,
    io::{self, Write},
    path::Path,
};

use crate::report::Report;

/// Writes the report as pretty JSON followed by a newline.
pub fn write(report: &Report, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report).map_err(io::Error::other)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Writes the report to `path` (`-` for stdout). The file is written next to its final name
/// and renamed into place, so a reader never sees half a report; under sudo it is handed to
/// the invoking user.
pub fn write_to_path(report: &Report, path: &Path) -> io::Result<()> {
    if path == Path::new("-") {
        return write(report, &mut io::stdout().lock());
    }
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file path"))?;
    let tmp = path.with_file_name(format!(".{}.partial", file_name.to_string_lossy()));
    {
        let mut file = io::BufWriter::new(fs::File::create(&tmp)?);
        write(report, &mut file)?;
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    give_to_sudo_user(path);
    Ok(())
}

/// Under `sudo`, makes a file we created belong to the user who ran sudo.
pub fn give_to_sudo_user(path: &Path) {
    let id = |name| std::env::var(name).ok().and_then(|v| v.parse::<u32>().ok());
    if let (Some(uid), Some(gid)) = (id("SUDO_UID"), id("SUDO_GID")) {
        // SAFETY: geteuid has no preconditions; chown failing is harmless (file stays root's).
        if unsafe { libc::geteuid() } == 0 {
            let _ = std::os::unix::fs::chown(path, Some(uid), Some(gid));
        }
    }
}
