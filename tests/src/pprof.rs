//! A reader of pprof profiles (gzip-compressed `profile.proto`), written from the
//! protobuf wire format and profile.proto's field numbers, apart from cg-trace's writer, so
//! that a test checks the file as pprof's own reader would see it. Only the fields
//! cg-trace's tests look at are kept.

use std::{collections::BTreeMap, io::Read};

/// A decoded profile; string-table indices are resolved.
#[derive(Debug, Default)]
pub struct Profile {
    /// (type, unit) per value of every sample.
    pub sample_types: Vec<(String, String)>,
    pub samples: Vec<Sample>,
    /// Location id -> its lines (function id, line), innermost inlined first.
    pub locations: BTreeMap<u64, Vec<(u64, i64)>>,
    pub functions: BTreeMap<u64, Function>,
    pub comments: Vec<String>,
    pub default_sample_type: String,
    pub duration_nanos: i64,
}

#[derive(Debug, Default)]
pub struct Sample {
    /// Leaf first.
    pub location_ids: Vec<u64>,
    pub values: Vec<i64>,
    /// (key, number) labels.
    pub num_labels: Vec<(String, i64)>,
}

#[derive(Debug, Default, Clone)]
pub struct Function {
    pub name: String,
    pub filename: String,
    pub start_line: i64,
}

/// One field of a message: a varint, or the bytes of a length-delimited field.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first().ok_or("truncated varint")?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes".into())
}

/// The fields of a message, in order.
fn fields(mut bytes: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut bytes)?),
            2 => {
                let len = usize::try_from(varint(&mut bytes)?).map_err(|e| e.to_string())?;
                if len > bytes.len() {
                    return Err(format!("field {} runs past its message", key >> 3));
                }
                let (field, rest) = bytes.split_at(len);
                bytes = rest;
                Field::Bytes(field)
            }
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                bytes = bytes.get(n..).ok_or("truncated fixed-size field")?;
                continue;
            }
            other => return Err(format!("wire type {other} is not in profile.proto")),
        };
        out.push((key >> 3, field));
    }
    Ok(out)
}

/// A repeated integer field, packed or not.
fn ints(field: &Field, into: &mut Vec<u64>) -> Result<(), String> {
    match field {
        Field::Varint(v) => into.push(*v),
        Field::Bytes(b) => {
            let mut b = *b;
            while !b.is_empty() {
                into.push(varint(&mut b)?);
            }
        }
    }
    Ok(())
}

fn int(field: &Field) -> Result<u64, String> {
    match field {
        Field::Varint(v) => Ok(*v),
        Field::Bytes(_) => Err("a length-delimited field where an integer belongs".into()),
    }
}

fn message<'a>(field: &Field<'a>) -> Result<Vec<(u64, Field<'a>)>, String> {
    match field {
        Field::Bytes(b) => fields(b),
        Field::Varint(_) => Err("an integer where a message belongs".into()),
    }
}

/// Decodes a gzip-compressed profile.
pub fn decode_gz(gz: &[u8]) -> Result<Profile, String> {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("not gzip: {e}"))?;
    decode(&bytes)
}

/// Decodes an uncompressed profile.
pub fn decode(bytes: &[u8]) -> Result<Profile, String> {
    let mut strings: Vec<String> = Vec::new();
    let top = fields(bytes)?;
    for (number, field) in &top {
        if *number == 6 {
            let Field::Bytes(b) = field else {
                return Err("string_table entry is not a string".into());
            };
            strings.push(String::from_utf8(b.to_vec()).map_err(|e| e.to_string())?);
        }
    }
    if strings.first().map(String::as_str) != Some("") {
        return Err("string_table[0] must be \"\"".into());
    }
    let s = |index: u64| -> Result<String, String> {
        strings
            .get(usize::try_from(index).map_err(|e| e.to_string())?)
            .cloned()
            .ok_or_else(|| format!("string index {index} past the table"))
    };
    let mut p = Profile::default();
    for (number, field) in &top {
        match number {
            1 => {
                let (mut kind, mut unit) = (0, 0);
                for (n, f) in message(field)? {
                    match n {
                        1 => kind = int(&f)?,
                        2 => unit = int(&f)?,
                        _ => {}
                    }
                }
                p.sample_types.push((s(kind)?, s(unit)?));
            }
            2 => {
                let mut sample = Sample::default();
                let mut values = Vec::new();
                for (n, f) in message(field)? {
                    match n {
                        1 => ints(&f, &mut sample.location_ids)?,
                        2 => ints(&f, &mut values)?,
                        3 => {
                            let (mut key, mut num) = (0, 0);
                            for (n, f) in message(&f)? {
                                match n {
                                    1 => key = int(&f)?,
                                    3 => num = int(&f)? as i64,
                                    _ => {}
                                }
                            }
                            sample.num_labels.push((s(key)?, num));
                        }
                        _ => {}
                    }
                }
                sample.values = values.into_iter().map(|v| v as i64).collect();
                p.samples.push(sample);
            }
            4 => {
                let (mut id, mut lines) = (0, Vec::new());
                for (n, f) in message(field)? {
                    match n {
                        1 => id = int(&f)?,
                        4 => {
                            let (mut function, mut line) = (0, 0);
                            for (n, f) in message(&f)? {
                                match n {
                                    1 => function = int(&f)?,
                                    2 => line = int(&f)? as i64,
                                    _ => {}
                                }
                            }
                            lines.push((function, line));
                        }
                        _ => {}
                    }
                }
                p.locations.insert(id, lines);
            }
            5 => {
                let (mut id, mut f) = (0, Function::default());
                for (n, field) in message(field)? {
                    match n {
                        1 => id = int(&field)?,
                        2 => f.name = s(int(&field)?)?,
                        4 => f.filename = s(int(&field)?)?,
                        5 => f.start_line = int(&field)? as i64,
                        _ => {}
                    }
                }
                p.functions.insert(id, f);
            }
            10 => p.duration_nanos = int(field)? as i64,
            13 => {
                let mut ids = Vec::new();
                ints(field, &mut ids)?;
                for id in ids {
                    p.comments.push(s(id)?);
                }
            }
            14 => p.default_sample_type = s(int(field)?)?,
            _ => {}
        }
    }
    Ok(p)
}

impl Profile {
    /// A sample's frames, outermost first, as cg-trace's folded stacks name them
    /// (`function`, `function (file:line)`, `... (inlined)`): every line of every location,
    /// inlined functions as frames of their own.
    pub fn stack(&self, sample: &Sample) -> Result<Vec<String>, String> {
        let mut frames = Vec::new();
        for id in sample.location_ids.iter().rev() {
            let lines = self
                .locations
                .get(id)
                .ok_or_else(|| format!("sample names location {id}, which is not there"))?;
            // Outermost first: the function, then those inlined into it.
            for (i, (function, line)) in lines.iter().rev().enumerate() {
                let f = self
                    .functions
                    .get(function)
                    .ok_or_else(|| format!("location {id} names function {function}, not there"))?;
                let file = f.filename.rsplit('/').next().unwrap_or(&f.filename);
                frames.push(match (file.is_empty() || *line == 0, i > 0) {
                    (true, _) => f.name.clone(),
                    (false, false) => format!("{} ({file}:{line})", f.name),
                    (false, true) => format!("{} ({file}:{line}) (inlined)", f.name),
                });
            }
        }
        Ok(frames)
    }
}
