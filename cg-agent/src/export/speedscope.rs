//! The speedscope profile (`--speedscope FILE.json`): the sampled stacks in speedscope's own
//! JSON format (<https://www.speedscope.app/file-format-schema.json>), which
//! <https://www.speedscope.app> and its command-line viewer open. Two `sampled` profiles
//! over the same stacks: energy in joules (measured or estimated, as the profile's name
//! says) and on-CPU time in nanoseconds (measured). Frames are shared, named as in the folded
//! stacks (each process's root frame is `comm pid`, a native frame with lines `function
//! (file.c:LINE)`), with their source file and line when known.

use std::{collections::HashMap, path::Path};

use serde::Serialize;

use crate::{
    functions::symbolize::{Frame, FrameKind},
    output::{self, OutputError},
    privileges::Invoker,
    report::{Report, functions::StackEnergy},
    sources::Provenance,
};

/// The whole file.
#[derive(Debug, Serialize)]
pub struct File {
    #[serde(rename = "$schema")]
    pub schema: &'static str,
    pub shared: Shared,
    pub profiles: Vec<Profile>,
    pub name: String,
    #[serde(rename = "activeProfileIndex")]
    pub active_profile_index: usize,
    pub exporter: String,
}

#[derive(Debug, Serialize)]
pub struct Shared {
    pub frames: Vec<SharedFrame>,
}

#[derive(Debug, PartialEq, Eq, Hash, Serialize)]
pub struct SharedFrame {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// One `sampled` profile: `samples[i]` (frame indices, outermost first) weighs
/// `weights[i]` in `unit`.
#[derive(Debug, Serialize)]
pub struct Profile {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub name: String,
    /// `none` for joules (speedscope has no energy unit; the name says it).
    pub unit: &'static str,
    #[serde(rename = "startValue")]
    pub start_value: f64,
    #[serde(rename = "endValue")]
    pub end_value: f64,
    pub samples: Vec<Vec<usize>>,
    pub weights: Vec<f64>,
}

/// The speedscope file of a report's sampled stacks.
pub fn build(report: &Report) -> File {
    let name = match &report.meta.command {
        Some(command) => format!("cg-trace energy profile: {}", command.join(" ")),
        None => "cg-trace energy profile".into(),
    };
    let mut file = from_stacks(&report.stacks, energy_provenance(report), name);
    file.exporter = format!("cg-trace {}", report.meta.tool_version);
    file
}

/// The speedscope file of `stacks`, whose energy is `provenance`.
pub fn from_stacks(stacks: &[StackEnergy], provenance: Provenance, name: String) -> File {
    let mut frames: Vec<SharedFrame> = Vec::new();
    let mut index: HashMap<SharedFrame, usize> = HashMap::new();
    let mut intern = |frame: SharedFrame| {
        *index.entry(frame).or_insert_with_key(|frame| {
            frames.push(SharedFrame {
                name: frame.name.clone(),
                file: frame.file.clone(),
                line: frame.line,
            });
            frames.len() - 1
        })
    };
    let mut samples = Vec::new();
    let (mut energy_j, mut cpu_ns) = (Vec::new(), Vec::new());
    for stack in stacks {
        let mut sample = vec![intern(SharedFrame {
            name: format!("{} {}", stack.comm, stack.pid),
            file: None,
            line: None,
        })];
        sample.extend(stack.frames.iter().map(|f| intern(shared_frame(f))));
        samples.push(sample);
        energy_j.push(stack.energy_j);
        cpu_ns.push(stack.cpu_ns);
    }
    let energy_name = match provenance {
        Provenance::Measured => "Energy in joules (measured)",
        Provenance::Estimated => {
            "Energy in joules (ESTIMATED by the power model: no hardware \
                                  counter measured this run)"
        }
    };
    let profile = |name: &str, unit, weights: Vec<f64>| Profile {
        kind: "sampled",
        name: name.into(),
        unit,
        start_value: 0.0,
        end_value: weights.iter().sum(),
        samples: samples.clone(),
        weights,
    };
    let profiles = vec![
        profile(energy_name, "none", energy_j),
        profile(
            "On-CPU time in nanoseconds (measured)",
            "nanoseconds",
            cpu_ns,
        ),
    ];
    File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared { frames },
        profiles,
        name,
        active_profile_index: 0,
        exporter: "cg-trace".into(),
    }
}

/// Whether the energy of the sampled stacks was measured or estimated.
pub fn energy_provenance(report: &Report) -> Provenance {
    report
        .meta
        .function_profiling
        .as_ref()
        .map_or(Provenance::Estimated, |f| f.provenance)
}

/// A frame as speedscope shows it: its folded-stack name, and where its source is when known.
fn shared_frame(frame: &Frame) -> SharedFrame {
    let file = match frame.kind {
        FrameKind::Python if frame.line.is_some() => Some(frame.module.clone()),
        FrameKind::Native => frame.file.clone(),
        _ => None,
    };
    SharedFrame {
        name: frame.label(),
        line: file.as_ref().and(frame.line),
        file,
    }
}

/// Writes the profile to `path`, created for `who` through [`crate::output`].
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    let file = build(report);
    output::write_file(path, who, |out| {
        serde_json::to_writer(&mut *out, &file)?;
        writeln!(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(symbol: &str, kind: FrameKind, module: &str, line: Option<u32>) -> Frame {
        Frame {
            line,
            ..Frame::named(symbol.into(), module.into(), kind)
        }
    }

    #[test]
    fn stacks_share_their_frames_and_python_frames_keep_file_and_line() {
        let main = frame("main", FrameKind::Native, "app", None);
        let work = frame("work", FrameKind::Python, "w.py", Some(25));
        let stack = |frames: Vec<Frame>, energy_j, cpu_ns| StackEnergy {
            pid: 7,
            comm: "app".into(),
            frames,
            energy_j,
            cpu_ns,
            samples: 1,
        };
        let file = from_stacks(
            &[
                stack(vec![main.clone()], 1.0, 10.0),
                stack(vec![main, work], 2.0, 20.0),
            ],
            Provenance::Estimated,
            "run".into(),
        );
        let names: Vec<&str> = file.shared.frames.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["app 7", "main", "work (w.py:25)"]);
        assert_eq!(file.shared.frames[2].file.as_deref(), Some("w.py"));
        assert_eq!(file.shared.frames[2].line, Some(25));
        assert_eq!(file.shared.frames[1].file, None);
        let [energy, cpu] = &file.profiles[..] else {
            panic!("two profiles")
        };
        assert_eq!(energy.samples, [vec![0, 1], vec![0, 1, 2]]);
        assert_eq!(energy.weights, [1.0, 2.0]);
        assert_eq!(energy.end_value, 3.0);
        assert!(energy.name.contains("ESTIMATED"), "{}", energy.name);
        assert_eq!((cpu.unit, cpu.end_value), ("nanoseconds", 30.0));
    }
}
