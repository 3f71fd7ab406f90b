//! The pprof profile (`--pprof FILE.pb.gz`): the sampled stacks as pprof's gzip-compressed
//! protobuf (`profile.proto` of github.com/google/pprof), which `go tool pprof`, Pyroscope and
//! Parca read. Two values per sample: `energy/microjoules` (the default; rounded to whole µJ as
//! the folded stacks are, so both add up to the same total) and `cpu/nanoseconds` (on-CPU
//! time, measured). A comment says whether the energy was measured or estimated. Each
//! process's root frame is `comm pid`, as in the folded stacks, and each sample has a `pid`
//! label. The protobuf is written by hand ([`Message`]): the format needs five message types
//! and two wire types.

use std::{collections::HashMap, io::Write, path::Path};

use crate::{
    functions::symbolize::{Frame, FrameKind},
    output::{self, OutputError},
    privileges::Invoker,
    report::{Report, functions::StackEnergy},
    sources::Provenance,
};

/// What the profile says about the run besides its stacks.
#[derive(Clone, Debug, PartialEq)]
pub struct About {
    pub energy: Provenance,
    /// When the run started, nanoseconds since the Unix epoch (0: unknown).
    pub time_nanos: i64,
    pub duration_nanos: i64,
}

/// A protobuf message being written: fields in the wire format (varint and
/// length-delimited, the only two wire types profile.proto needs).
#[derive(Default)]
pub struct Message(Vec<u8>);

impl Message {
    fn raw_varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.raw_varint(u64::from(field) << 3 | u64::from(wire_type));
    }

    /// An integer field (`uint64`, or `int64` in two's complement); 0, the default, is left out.
    pub fn int(&mut self, field: u32, value: u64) -> &mut Self {
        if value != 0 {
            self.key(field, 0);
            self.raw_varint(value);
        }
        self
    }

    /// A length-delimited field (bytes, a string, one element of a repeated string), always
    /// written.
    pub fn bytes(&mut self, field: u32, bytes: &[u8]) -> &mut Self {
        self.key(field, 2);
        self.raw_varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }

    /// An embedded message.
    pub fn message(&mut self, field: u32, message: &Message) -> &mut Self {
        self.bytes(field, &message.0)
    }

    /// A packed repeated integer field.
    pub fn packed(&mut self, field: u32, values: &[u64]) -> &mut Self {
        let mut packed = Message::default();
        for &v in values {
            packed.raw_varint(v);
        }
        self.bytes(field, &packed.0)
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

/// The `Profile` message's string table: index 0 is "".
struct Strings(Table<String>);

impl Strings {
    fn new() -> Self {
        let mut strings = Strings(Table::default());
        strings.id("");
        strings
    }

    fn id(&mut self, text: &str) -> u64 {
        // Tables number from 1; the string table from 0.
        self.0.id(text.to_string()) - 1
    }
}

/// A function as pprof names it: the name, and its source file and first line when known.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Function {
    name: String,
    file: String,
    start_line: u32,
}

/// A location: its lines, each a function and the line in it (0: unknown), innermost
/// first (the functions inlined at an address, then the one they were inlined into).
type Location = Vec<(u64, u32)>;

/// A frame as pprof says it: its function and line.
fn function_and_line(frame: &Frame) -> (Function, u32) {
    match (frame.kind, frame.line, &frame.file) {
        // A Python frame's line is its function's first line.
        (FrameKind::Python, Some(line), _) => (
            Function {
                name: frame.symbol.clone(),
                file: frame.module.clone(),
                start_line: line,
            },
            line,
        ),
        (FrameKind::Native, Some(line), Some(file)) => (
            Function {
                name: frame.symbol.clone(),
                file: file.clone(),
                start_line: 0,
            },
            line,
        ),
        _ => (named(frame.label()), 0),
    }
}

/// A stack's locations, outermost first, from its frames (function, line, whether it
/// joins the location before it): a frame inlined into the one before joins its location,
/// innermost line first.
fn locations_of(
    frames: impl Iterator<Item = (Function, u32, bool)>,
    functions: &mut Table<Function>,
) -> Vec<Location> {
    let mut out: Vec<Location> = Vec::new();
    for (function, line, joins) in frames {
        let line = (functions.id(function), line);
        match out.last_mut() {
            Some(location) if joins => location.insert(0, line),
            _ => out.push(vec![line]),
        }
    }
    out
}

fn named(name: String) -> Function {
    Function {
        name,
        file: String::new(),
        start_line: 0,
    }
}

/// Interns functions and locations, numbering each from 1 in order of first use.
struct Table<T> {
    ids: HashMap<T, u64>,
    order: Vec<T>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            ids: HashMap::new(),
            order: Vec::new(),
        }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Table<T> {
    fn id(&mut self, item: T) -> u64 {
        if let Some(&id) = self.ids.get(&item) {
            return id;
        }
        self.order.push(item.clone());
        let id = self.order.len() as u64;
        self.ids.insert(item, id);
        id
    }
}

/// The profile's uncompressed protobuf bytes: one location per distinct address (its
/// lines: the functions inlined there and the one they are in), one sample per stack whose
/// values are not both 0.
pub fn encode(stacks: &[StackEnergy], about: &About) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut functions: Table<Function> = Table::default();
    let mut locations: Table<Location> = Table::default();
    let mut profile = Message::default();
    let value_type = |strings: &mut Strings, kind: &str, unit: &str| {
        let mut m = Message::default();
        m.int(1, strings.id(kind)).int(2, strings.id(unit));
        m
    };
    profile.message(1, &value_type(&mut strings, "energy", "microjoules"));
    profile.message(1, &value_type(&mut strings, "cpu", "nanoseconds"));
    for stack in stacks {
        let energy_uj = (stack.energy_j * 1e6).round();
        let cpu_ns = stack.cpu_ns.round();
        if !(energy_uj >= 1.0 || cpu_ns >= 1.0) {
            continue;
        }
        let root = (named(format!("{} {}", stack.comm, stack.pid)), 0, false);
        // An inlined frame joins the native frame before it (the Python walk may keep an
        // inlined leaf without the function it is in).
        let joins = stack.frames.iter().scan(FrameKind::Unknown, |before, f| {
            let kind = std::mem::replace(before, f.kind);
            Some(f.inlined && kind == FrameKind::Native)
        });
        let outermost_first =
            std::iter::once(root).chain(stack.frames.iter().zip(joins).map(|(f, joins)| {
                let (function, line) = function_and_line(f);
                (function, line, joins)
            }));
        let mut ids: Vec<u64> = locations_of(outermost_first, &mut functions)
            .into_iter()
            .map(|location| locations.id(location))
            .collect();
        // pprof lists a sample's locations leaf first.
        ids.reverse();
        let mut label = Message::default();
        label.int(1, strings.id("pid")).int(3, u64::from(stack.pid));
        let mut sample = Message::default();
        sample
            .packed(1, &ids)
            .packed(2, &[energy_uj as i64 as u64, cpu_ns as i64 as u64])
            .message(3, &label);
        profile.message(2, &sample);
    }
    for (i, lines) in locations.order.iter().enumerate() {
        let mut location = Message::default();
        location.int(1, i as u64 + 1);
        for &(function, line_number) in lines {
            let mut line = Message::default();
            line.int(1, function).int(2, u64::from(line_number));
            location.message(4, &line);
        }
        profile.message(4, &location);
    }
    for (i, f) in functions.order.iter().enumerate() {
        let mut function = Message::default();
        let name = strings.id(&f.name);
        function
            .int(1, i as u64 + 1)
            .int(2, name)
            .int(3, name)
            .int(4, strings.id(&f.file))
            .int(5, u64::from(f.start_line));
        profile.message(5, &function);
    }
    let comments = [
        match about.energy {
            Provenance::Measured => "energy: measured by the run's energy sources, in microjoules",
            Provenance::Estimated => {
                "energy: ESTIMATED by the power model (not a hardware counter), in microjoules"
            }
        },
        "cpu: on-CPU time, measured, in nanoseconds",
    ];
    let comments: Vec<u64> = comments.iter().map(|c| strings.id(c)).collect();
    let default_type = strings.id("energy");
    for s in &strings.0.order {
        profile.bytes(6, s.as_bytes());
    }
    profile
        .int(9, about.time_nanos as u64)
        .int(10, about.duration_nanos as u64)
        .packed(13, &comments)
        .int(14, default_type);
    profile.into_bytes()
}

/// What a report says about its run, for the profile.
pub fn about(report: &Report) -> About {
    let time_nanos = report
        .meta
        .started_at
        .parse::<jiff::Timestamp>()
        .map_or(0, |t| {
            t.as_nanosecond().clamp(0, i128::from(i64::MAX)) as i64
        });
    About {
        energy: super::speedscope::energy_provenance(report),
        time_nanos,
        duration_nanos: (report.meta.duration_s * 1e9).clamp(0.0, i64::MAX as f64) as i64,
    }
}

/// Writes the gzip-compressed profile to `path`, created for `who` through
/// [`crate::output`].
pub fn write_to_path(report: &Report, path: &Path, who: &Invoker) -> Result<(), OutputError> {
    let bytes = encode(&report.stacks, &about(report));
    output::write_file(path, who, |out| {
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        gz.write_all(&bytes)?;
        gz.finish().map(drop)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_protobuf_wire_format() {
        // The protobuf encoding guide's examples: field 1 = 150 is 08 96 01; field 2 = "testing"
        // is 12 07 74 65 73 74 69 6e 67; packed field 4 = [3, 270, 86942] is 22 06 03 8e 02 9e a7 05.
        let mut m = Message::default();
        m.int(1, 150)
            .bytes(2, b"testing")
            .packed(4, &[3, 270, 86942])
            .int(5, 0);
        assert_eq!(
            m.into_bytes(),
            [
                0x08, 0x96, 0x01, 0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g', 0x22, 0x06,
                0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05
            ]
        );
        // A negative int64 takes ten bytes.
        let mut m = Message::default();
        m.int(1, -1i64 as u64);
        assert_eq!(m.into_bytes().len(), 11);
    }
}
