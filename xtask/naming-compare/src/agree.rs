//! How far the two tools agree on a file's addresses (innermost function, its file:line,
//! inline depth), with examples of where they differ judged by binutils' `addr2line -i -f
//! -C` as the referee.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result};

use crate::tools::Frame;

/// Agreement counts over all addresses of a file.
#[derive(Default)]
pub struct Agreement {
    pub addresses: usize,
    /// Addresses one tool named and the other did not.
    pub only_cg: usize,
    pub only_blazesym: usize,
    pub name: usize,
    /// Same file name (without its directory) and line.
    pub file_line: usize,
    /// Same full path and line.
    pub path_line: usize,
    pub depth: usize,
    /// Name, file name:line and depth all the same.
    pub all: usize,
    /// Addresses each tool gave with a line.
    pub cg_lines: usize,
    pub blazesym_lines: usize,
    /// Addresses inside an inlined function, per tool.
    pub cg_inlined: usize,
    pub blazesym_inlined: usize,
    /// Up to [`EXAMPLES`] disagreements of each kind (name, file:line, depth), in address
    /// draw order (already random).
    pub examples: Vec<Example>,
}

/// How many examples of each kind of disagreement are kept.
pub const EXAMPLES: usize = 6;

pub struct Example {
    pub kind: &'static str,
    pub vaddr: u64,
    pub cg: Vec<Frame>,
    pub blazesym: Vec<Frame>,
}

pub fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn file_line(frame: Option<&Frame>) -> Option<(&str, u32)> {
    let frame = frame?;
    Some((base_name(frame.file.as_deref()?), frame.line?))
}

impl Agreement {
    pub fn add(&mut self, vaddr: u64, cg: Vec<Frame>, blazesym: Vec<Frame>) {
        self.addresses += 1;
        match (cg.is_empty(), blazesym.is_empty()) {
            (false, true) => self.only_cg += 1,
            (true, false) => self.only_blazesym += 1,
            _ => {}
        }
        let (a, b) = (cg.first(), blazesym.first());
        self.cg_lines += usize::from(file_line(a).is_some());
        self.blazesym_lines += usize::from(file_line(b).is_some());
        self.cg_inlined += usize::from(cg.len() > 1);
        self.blazesym_inlined += usize::from(blazesym.len() > 1);
        let name = a.map(|f| &f.function) == b.map(|f| &f.function);
        let line = file_line(a) == file_line(b);
        let path = a.map(|f| (&f.file, f.line)) == b.map(|f| (&f.file, f.line));
        let depth = cg.len() == blazesym.len();
        self.name += usize::from(name);
        self.file_line += usize::from(line);
        self.path_line += usize::from(path);
        self.depth += usize::from(depth);
        self.all += usize::from(name && line && depth);
        let kind = match (name, line, depth) {
            (_, _, false) => "depth",
            (_, false, _) => "file:line",
            (false, _, _) => "name",
            _ => return,
        };
        if self.examples.iter().filter(|e| e.kind == kind).count() < EXAMPLES {
            self.examples.push(Example {
                kind,
                vaddr,
                cg,
                blazesym,
            });
        }
    }

    /// A count as a percentage of the addresses.
    pub fn percent(&self, count: usize) -> f64 {
        100.0 * count as f64 / self.addresses.max(1) as f64
    }
}

/// A frame as binutils prints it: function, file name, line (0: none).
pub type RefereeFrame = (String, String, u32);

/// binutils' frames at each of `vaddrs` (innermost first), from one `addr2line -a -i -f -C
/// -e FILE` run; `None` where it printed nothing we can read.
pub fn referee(path: &Path, vaddrs: &[u64]) -> Result<Vec<Option<Vec<RefereeFrame>>>> {
    let output = Command::new("addr2line")
        .args(["-a", "-i", "-f", "-C", "-e"])
        .arg(path)
        .args(vaddrs.iter().map(|a| format!("{a:#x}")))
        .output()
        .context("running binutils addr2line")?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut out: Vec<Option<Vec<RefereeFrame>>> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("0x") {
            out.push(Some(Vec::new()));
            continue;
        }
        let Some(location) = lines.next() else { break };
        // "file.c:12 (discriminator 3)", "??:0", "??:?"
        let location = location.split(" (").next().unwrap_or(location);
        let (file, number) = location.rsplit_once(':').unwrap_or((location, "?"));
        if let Some(Some(frames)) = out.last_mut() {
            frames.push((
                line.to_string(),
                base_name(file).to_string(),
                number.parse().unwrap_or(0),
            ));
        }
    }
    out.resize(vaddrs.len(), None);
    Ok(out)
}

/// Which of the two matches the referee on an example's kind of disagreement: depth (frame
/// count), innermost file name:line, or innermost name (binutils' demangling keeps C++
/// parameters: also compared up to the first `(`).
pub fn verdict(example: &Example, referee: &[RefereeFrame]) -> (bool, bool) {
    let matches = |frames: &[Frame]| -> bool {
        match example.kind {
            "depth" => frames.len() == referee.len(),
            "file:line" => {
                let theirs = referee.first().and_then(|(_, file, line)| {
                    (!file.is_empty() && file != "??" && *line != 0)
                        .then_some((file.as_str(), *line))
                });
                file_line(frames.first()) == theirs
            }
            _ => match (frames.first(), referee.first()) {
                (Some(ours), Some((theirs, _, _))) => {
                    *theirs == ours.function
                        || theirs.split('(').next() == Some(ours.function.as_str())
                }
                _ => false,
            },
        }
    };
    (matches(&example.cg), matches(&example.blazesym))
}
