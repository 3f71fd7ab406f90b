//! An external power meter's log (`--power-log FILE`) as the energy source of the whole
//! machine: domain `meter`, measured at the wall, split over processes like any other domain.
//!
//! Two CSV forms are read, with or without their header line:
//!
//! ```text
//! time,id,pm1,pm2,sum                 a WattsUp-style logger: power in `sum` (W)
//! 2026-02-04 10:15:23,0,125.3,118.7,244.0
//!
//! time,watts                          a plain log
//! 2026-02-04T10:15:23.5+01:00,244.0   RFC 3339 (with an offset or Z), or
//! 1770196523.5,244.0                  seconds since the Unix epoch
//! ```
//!
//! Times without an offset are local wall-clock times, read in cg-trace's time zone (`TZ`,
//! else `/etc/localtime`) by `jiff`: a time the clocks skipped when DST started is read one
//! hour later, one they repeated when it ended as the first of the two (jiff's `compatible`
//! rule, that of java.time and RFC 5545).
//! Rows are read by csv's incremental parser (`csv-core`, the `csv` crate's core, as the file
//! is followed piece by piece): quoted fields (with commas or doubled quotes inside),
//! CRLF line ends and a UTF-8 byte-order mark (a log written on Windows) are accepted; blank
//! lines and lines starting with `#` are skipped. A power
//! that is negative, not finite or above [`MAX_POWER_W`] is not a reading: the row is an error
//! naming the file and line. The file is followed while the logger appends to it (a partial last line is kept until its
//! newline arrives). Energy over an interval is the integral of the power between the samples,
//! linearly interpolated (the trapezoidal rule), over the interval's wall-clock bounds; before
//! the first sample and after the last one, the nearest sample's power is held. A logger
//! writes a sample up to one period after the time it describes, so the live figures are
//! provisional: at the end of the run cg-trace waits (at most a few sample periods) for the
//! log to pass the end of the run and recomputes every interval ([`EnergySource::settle`]).
//! Gaps longer than [`GAP_PERIODS`] sample periods, and a log that does not cover the run, are
//! reported in the quality notes; a log with no sample within the run (or one sample period of
//! it) measured nothing, and is an error.

use std::{
    fs::File,
    io,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde::Serialize;

use super::{
    DomainKind, DomainSpec, EnergySource, Provenance, ReadContext, Reading, SourceError,
    SourceNote, SourceSummary, WallSpan, human_duration,
};
use crate::attribution::{Coverage, Glitch};

/// A gap between two samples longer than this many median sample periods is reported.
pub const GAP_PERIODS: f64 = 3.0;
/// The longest cg-trace waits at the end of a run for the logger to catch up.
pub const DEFAULT_SETTLE_WAIT: Duration = Duration::from_secs(5);
/// The most power a wall meter on one machine can report, in watts: anything above is not a
/// reading (the largest single servers draw about 10 kW).
pub const MAX_POWER_W: f64 = 1e6;

/// One line of the log: power at a wall-clock time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Nanoseconds since the Unix epoch.
    pub t_ns: i64,
    pub power_w: f64,
}

/// Which form the log has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// `time,id,pm1,pm2,sum`: power in `sum`.
    PmSum,
    /// `time,watts`.
    TimeWatts,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::PmSum => "time,id,pm1,pm2,sum",
            LogFormat::TimeWatts => "time,watts",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Layout {
    format: LogFormat,
    columns: usize,
    time: usize,
    power: usize,
}

/// A gap in the log during the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeterGap {
    /// RFC 3339 UTC time of the sample before the gap.
    pub after: String,
    pub duration_s: f64,
}

/// The log as the report describes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeterSummary {
    pub path: String,
    /// `time,id,pm1,pm2,sum` or `time,watts`.
    pub format: &'static str,
    /// Samples in the whole file.
    pub samples_count: usize,
    /// Samples within the run (from the first interval's start to the last one's end).
    pub run_samples_count: usize,
    /// Median time between samples.
    pub median_period_s: Option<f64>,
    /// Gaps longer than a few sample periods during the run.
    pub gaps: Vec<MeterGap>,
}

/// The power meter's log, followed as it grows.
pub struct MeterSource {
    path: PathBuf,
    file: File,
    /// Bytes consumed so far.
    offset: u64,
    /// Still at the start of the file, whose first bytes (`head`) may be a byte-order mark.
    at_start: bool,
    head: Vec<u8>,
    /// Complete lines consumed (for line numbers in errors).
    lines: usize,
    /// csv's incremental parser, fed as the file grows, with the buffers it writes the current
    /// record's fields (`csv_len` bytes) and their ends (`csv_ends_len`) into, and the bytes
    /// it consumed since the last record (for the line's text and number in messages).
    csv: csv_core::Reader,
    csv_fields: Vec<u8>,
    csv_len: usize,
    csv_ends: Vec<usize>,
    csv_ends_len: usize,
    csv_text: Vec<u8>,
    layout: Option<Layout>,
    samples: Vec<Sample>,
    domains: Vec<DomainSpec>,
    max_settle_wait: Duration,
    /// Wall-clock bounds of everything read so far.
    window: Option<(i64, i64)>,
    notes: Vec<SourceNote>,
}

impl std::fmt::Debug for MeterSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeterSource")
            .field("path", &self.path)
            .field("samples", &self.samples.len())
            .finish_non_exhaustive()
    }
}

impl MeterSource {
    /// Opens the log and reads what it holds so far. `max_settle_wait` bounds the wait at the
    /// end of the run for the logger to pass the run's end ([`DEFAULT_SETTLE_WAIT`]).
    pub fn open(path: &Path, max_settle_wait: Duration) -> Result<Self, SourceError> {
        let file = File::open(path).map_err(|err| SourceError::PowerLog {
            path: path.to_path_buf(),
            line: None,
            reason: format!("cannot open: {err}"),
        })?;
        let mut source = MeterSource {
            path: path.to_path_buf(),
            file,
            offset: 0,
            at_start: true,
            head: Vec::new(),
            lines: 0,
            csv: csv_core::ReaderBuilder::new().comment(Some(b'#')).build(),
            csv_fields: Vec::new(),
            csv_len: 0,
            csv_ends: Vec::new(),
            csv_ends_len: 0,
            csv_text: Vec::new(),
            layout: None,
            samples: Vec::new(),
            domains: vec![DomainSpec {
                name: "meter".into(),
                kind: DomainKind::Meter,
                parent: None,
                coverage: Coverage::AllCpus,
                provenance: Provenance::Measured,
                source: "meter",
            }],
            max_settle_wait,
            window: None,
            notes: Vec::new(),
        };
        source.poll()?;
        Ok(source)
    }

    /// The samples read so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// Reads whatever the logger appended since the last call.
    pub fn poll(&mut self) -> Result<(), SourceError> {
        let len = self
            .file
            .metadata()
            .map_err(|err| self.error(None, format!("cannot stat: {err}")))?
            .len();
        if len < self.offset {
            return Err(self.error(
                None,
                format!(
                    "the file shrank from {} to {len} bytes while cg-trace was following it \
                     (truncated or rotated)",
                    self.offset
                ),
            ));
        }
        if len == self.offset {
            return Ok(());
        }
        let mut buf = vec![0u8; (len - self.offset) as usize];
        let mut filled = 0;
        while filled < buf.len() {
            match self
                .file
                .read_at(&mut buf[filled..], self.offset + filled as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(self.error(None, format!("cannot read: {err}"))),
            }
        }
        buf.truncate(filled);
        self.offset += filled as u64;
        let mut input = &buf[..];
        let head;
        if self.at_start {
            // A byte-order mark, as Windows tools write, is not part of the first field; wait
            // until its three bytes can be told apart.
            self.head.extend_from_slice(input);
            let bom = "\u{feff}".as_bytes();
            if self.head.len() < bom.len() && bom.starts_with(&self.head) {
                return Ok(());
            }
            self.at_start = false;
            head = std::mem::take(&mut self.head);
            input = head.strip_prefix(bom).unwrap_or(&head);
        }
        // csv-core is fed every byte as it arrives and keeps a record that has not ended (a
        // line the logger is still writing) until the rest comes: the log reads the same in
        // any number of pieces.
        let mut first_error = None;
        while !input.is_empty() {
            let need = self.csv_len + input.len() + 1;
            if self.csv_fields.len() < need {
                self.csv_fields.resize(need, 0);
            }
            let need = self.csv_ends_len + input.len() + 2;
            if self.csv_ends.len() < need {
                self.csv_ends.resize(need, 0);
            }
            let (result, read, written, ended) = self.csv.read_record(
                input,
                &mut self.csv_fields[self.csv_len..],
                &mut self.csv_ends[self.csv_ends_len..],
            );
            self.csv_text.extend_from_slice(&input[..read]);
            input = &input[read..];
            self.csv_len += written;
            self.csv_ends_len += ended;
            if result != csv_core::ReadRecordResult::Record {
                // InputEmpty: all fed, the record goes on in the next bytes. Neither output
                // can fill (both are sized for the whole input) and End needs an empty input.
                continue;
            }
            let text = std::mem::take(&mut self.csv_text);
            // The record's own text: past the line ends and `#` lines csv skipped before it.
            let mut first = 0;
            while first < text.len() {
                match text[first] {
                    b'\r' | b'\n' => first += 1,
                    b'#' if first == 0 || text[first - 1] == b'\n' => {
                        first = text[first..]
                            .iter()
                            .position(|&b| b == b'\n')
                            .map_or(text.len(), |n| first + n + 1);
                    }
                    _ => break,
                }
            }
            let line = self.lines + 1 + text[..first].iter().filter(|&&b| b == b'\n').count();
            self.lines += text.iter().filter(|&&b| b == b'\n').count();
            let mut fields = Vec::with_capacity(self.csv_ends_len);
            let mut field_start = 0;
            for &end in &self.csv_ends[..self.csv_ends_len] {
                fields.push(String::from_utf8_lossy(&self.csv_fields[field_start..end]));
                field_start = end;
            }
            let fields: Vec<String> = fields.iter().map(|f| f.trim().to_string()).collect();
            (self.csv_len, self.csv_ends_len) = (0, 0);
            let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
            let line_text = String::from_utf8_lossy(&text[first..]);
            // A bad row is reported (once) but does not stop the rows after it.
            if let Err(reason) = self.parse_record(&fields, line_text.trim())
                && first_error.is_none()
            {
                first_error = Some(self.error(Some(line), reason));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn error(&self, line: Option<usize>, reason: String) -> SourceError {
        SourceError::PowerLog {
            path: self.path.clone(),
            line,
            reason,
        }
    }

    /// One CSV record (`fields`, trimmed and unquoted), `line` its text for messages.
    fn parse_record(&mut self, fields: &[&str], line: &str) -> Result<(), String> {
        if fields.iter().all(|f| f.is_empty()) || fields[0].starts_with('#') {
            return Ok(());
        }
        let layout = match self.layout {
            Some(layout) => layout,
            None => {
                let (layout, header) = detect_layout(fields)?;
                self.layout = Some(layout);
                if header {
                    return Ok(());
                }
                layout
            }
        };
        if fields.len() != layout.columns {
            return Err(format!(
                "{} fields, expected {} ({}): {line:?}",
                fields.len(),
                layout.columns,
                layout.format.as_str()
            ));
        }
        let t_ns = parse_time(fields[layout.time])
            .map_err(|reason| format!("time {:?}: {reason}", fields[layout.time]))?;
        let power_w: f64 = fields[layout.power]
            .parse()
            .ok()
            .filter(|w: &f64| w.is_finite() && *w >= 0.0)
            .ok_or_else(|| {
                format!(
                    "power {:?} is not a number of watts >= 0",
                    fields[layout.power]
                )
            })?;
        if power_w > MAX_POWER_W {
            return Err(format!(
                "power {:?} W is above {MAX_POWER_W:.0} W (1 MW): not a reading of a machine's \
                 power (wrong column or unit?)",
                fields[layout.power]
            ));
        }
        match self.samples.last() {
            Some(last) if t_ns < last.t_ns => Err(format!(
                "time {:?} is earlier than the previous row's",
                fields[layout.time]
            )),
            // The same second twice (a 1 s logger running slightly fast): keep the first.
            Some(last) if t_ns == last.t_ns => Ok(()),
            _ => {
                self.samples.push(Sample { t_ns, power_w });
                Ok(())
            }
        }
    }

    fn widen_window(&mut self, start_ns: i64, end_ns: i64) {
        self.window = Some(match self.window {
            Some((a, b)) => (a.min(start_ns), b.max(end_ns)),
            None => (start_ns, end_ns),
        });
    }

    /// Why the log says nothing about the run `[start, end]`: no sample within it or one
    /// sample period of it (`None`: it covers at least part of the run).
    fn missed_run(&self, start: i64, end: i64) -> Option<String> {
        let period = median_period_ns(&self.samples).unwrap_or(1_000_000_000) as i64;
        let (Some(first), Some(last)) = (self.samples.first(), self.samples.last()) else {
            return Some(
                "no sample at all: is the logger running and writing to this file?".into(),
            );
        };
        let near = self.samples.iter().any(|s| {
            s.t_ns >= start.saturating_sub(period) && s.t_ns <= end.saturating_add(period)
        });
        if near {
            return None;
        }
        Some(if last.t_ns < start {
            format!(
                "no sample within the run or one sample period ({}) of it: the last sample \
                 ({}) is {} before the run started (the logger stopped, or writes elsewhere)",
                human_duration(period as u64),
                rfc3339_ns(last.t_ns),
                human_duration((start - last.t_ns) as u64)
            )
        } else if first.t_ns > end {
            format!(
                "no sample within the run or one sample period ({}) of it: the first sample \
                 ({}) is {} after the run ended (is the logger's clock ahead of this machine's?)",
                human_duration(period as u64),
                rfc3339_ns(first.t_ns),
                human_duration((first.t_ns - end) as u64)
            )
        } else {
            format!(
                "no sample within the run or one sample period ({}) of it: the log has a gap \
                 over the whole run",
                human_duration(period as u64)
            )
        })
    }

    /// Notes on how well the log covered `[start, end]`.
    fn coverage_notes(&self, start: i64, end: i64) -> Vec<SourceNote> {
        let mut notes = Vec::new();
        let name = self.path.display();
        let (Some(first), Some(last)) = (self.samples.first(), self.samples.last()) else {
            notes.push(SourceNote::degraded(format!(
                "power log {name} has no samples"
            )));
            return notes;
        };
        let period = median_period_ns(&self.samples).unwrap_or(1_000_000_000) as f64;
        if first.t_ns as f64 > start as f64 + period {
            notes.push(SourceNote::degraded(format!(
                "power log {name} starts {} after the run started: the first sample's power \
                 was assumed before it",
                human_duration((first.t_ns - start) as u64)
            )));
        }
        if (last.t_ns as f64) < end as f64 - period {
            notes.push(SourceNote::degraded(format!(
                "power log {name} ends {} before the run ended: the last sample's power was \
                 assumed after it",
                human_duration((end - last.t_ns) as u64)
            )));
        }
        let gaps = gaps(&self.samples, start, end);
        if !gaps.is_empty() {
            let listed: Vec<String> = gaps
                .iter()
                .take(5)
                .map(|(at, len)| {
                    format!("{} after {}", human_duration(*len as u64), rfc3339_ns(*at))
                })
                .collect();
            notes.push(SourceNote::degraded(format!(
                "power log {name} has {} gap(s) longer than {GAP_PERIODS} sample periods ({}) \
                 during the run, bridged by linear interpolation: {}{}",
                gaps.len(),
                human_duration((period * GAP_PERIODS) as u64),
                listed.join(", "),
                if gaps.len() > 5 { ", ..." } else { "" }
            )));
        }
        notes
    }
}

impl EnergySource for MeterSource {
    fn name(&self) -> &'static str {
        "meter"
    }

    fn provenance(&self) -> Provenance {
        Provenance::Measured
    }

    fn domains(&self) -> &[DomainSpec] {
        &self.domains
    }

    fn read(&mut self, ctx: &ReadContext<'_>) -> Result<Vec<Reading>, SourceError> {
        let (start, end) = (ctx.wall_start_ns as i64, ctx.wall_end_ns as i64);
        if ctx.duration_ns > 0 {
            self.widen_window(start, end);
        }
        let polled = self.poll();
        // Provisional: the logger has not written the samples of this interval yet. `settle`
        // recomputes it once the log has caught up.
        let energy = if self.samples.is_empty() {
            Reading::unknown(Glitch::Unavailable)
        } else {
            Reading::Joules(integrate_j(&self.samples, start, end))
        };
        polled.map(|()| vec![energy])
    }

    fn failed_read_carries_over(&self) -> bool {
        // Each read integrates its own interval; `settle` recomputes them all at the end.
        false
    }

    fn settle(&mut self, spans: &[WallSpan]) -> Option<Result<Vec<Vec<f64>>, SourceError>> {
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
            return Some(Ok(Vec::new()));
        };
        let (start, end) = (first.start_ns as i64, last.end_ns as i64);
        // Wait for a sample at or after the end of the run: at most a few sample periods.
        let period = median_period_ns(&self.samples).unwrap_or(1_000_000_000);
        let wait = Duration::from_nanos(period.saturating_mul(GAP_PERIODS as u64))
            .min(self.max_settle_wait);
        let began = Instant::now();
        let mut poll_error = None;
        loop {
            if let Err(err) = self.poll() {
                poll_error.get_or_insert(err);
            }
            if self.samples.last().is_some_and(|s| s.t_ns >= end) || began.elapsed() >= wait {
                break;
            }
            std::thread::sleep(Duration::from_millis(20).min(wait));
        }
        if let Some(err) = poll_error {
            self.notes.push(SourceNote::degraded(err.to_string()));
        }
        self.widen_window(start, end);
        if let Some(reason) = self.missed_run(start, end) {
            return Some(Err(self.error(None, reason)));
        }
        self.notes.extend(self.coverage_notes(start, end));
        Some(Ok(spans
            .iter()
            .map(|s| {
                vec![integrate_j(
                    &self.samples,
                    s.start_ns as i64,
                    s.end_ns as i64,
                )]
            })
            .collect()))
    }

    fn describe(&self) -> String {
        format!(
            "external power meter log {} ({}), the whole machine at the wall",
            self.path.display(),
            self.layout
                .map_or("format not known yet", |l| l.format.as_str())
        )
    }

    fn summary(&self) -> SourceSummary {
        let (start, end) = self.window.unwrap_or((i64::MIN, i64::MAX));
        SourceSummary {
            notes: self.notes.clone(),
            meter: Some(MeterSummary {
                path: self.path.display().to_string(),
                format: self.layout.map_or("unknown", |l| l.format.as_str()),
                samples_count: self.samples.len(),
                run_samples_count: self
                    .samples
                    .iter()
                    .filter(|s| s.t_ns >= start && s.t_ns <= end)
                    .count(),
                median_period_s: median_period_ns(&self.samples).map(|p| p as f64 / 1e9),
                gaps: gaps(&self.samples, start, end)
                    .into_iter()
                    .map(|(after, len)| MeterGap {
                        after: rfc3339_ns(after),
                        duration_s: len as f64 / 1e9,
                    })
                    .collect(),
            }),
            ..SourceSummary::default()
        }
    }
}

/// Decides the layout from the first row: `(layout, whether that row is a header)`.
fn detect_layout(fields: &[&str]) -> Result<(Layout, bool), String> {
    let by_count = |columns: usize| match columns {
        2 => Some(Layout {
            format: LogFormat::TimeWatts,
            columns: 2,
            time: 0,
            power: 1,
        }),
        5 => Some(Layout {
            format: LogFormat::PmSum,
            columns: 5,
            time: 0,
            power: 4,
        }),
        _ => None,
    };
    if parse_time(fields[0]).is_ok() {
        return by_count(fields.len()).map(|l| (l, false)).ok_or_else(|| {
            format!(
                "{} fields; expected time,id,pm1,pm2,sum or time,watts",
                fields.len()
            )
        });
    }
    let names: Vec<String> = fields.iter().map(|f| f.to_ascii_lowercase()).collect();
    let find = |candidates: &[&str]| {
        candidates
            .iter()
            .find_map(|c| names.iter().position(|n| n == c))
    };
    let time = find(&["time", "timestamp"]);
    let sum = find(&["sum"]);
    let watts = find(&["watts", "power_w", "power", "w"]);
    match (time, sum, watts) {
        (Some(time), Some(power), _) => Ok((
            Layout {
                format: LogFormat::PmSum,
                columns: fields.len(),
                time,
                power,
            },
            true,
        )),
        (Some(time), None, Some(power)) => Ok((
            Layout {
                format: LogFormat::TimeWatts,
                columns: fields.len(),
                time,
                power,
            },
            true,
        )),
        _ => Err(format!(
            "unrecognised header {:?}: expected time,id,pm1,pm2,sum or time,watts",
            fields.join(",")
        )),
    }
}

/// Parses a sample time into nanoseconds since the Unix epoch: seconds since the epoch
/// (`1770196523.25`), RFC 3339 with an offset (`2026-02-04T10:15:23.25Z`, `+01:00`), or a local
/// date and time (`2026-02-04 10:15:23[.25]`, also with `T`).
pub fn parse_time(text: &str) -> Result<i64, String> {
    parse_time_in(text, None)
}

/// [`parse_time`] with local times read in `zone` (`None`: the system's, looked up only for
/// a local time: the lookup costs as much as reading epoch seconds).
fn parse_time_in(text: &str, zone: Option<&jiff::tz::TimeZone>) -> Result<i64, String> {
    let text = text.trim();
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let (secs, frac) = text.split_once('.').unwrap_or((text, ""));
        let secs: i64 = secs
            .parse()
            .map_err(|_| "not a number of seconds".to_string())?;
        return Ok(secs
            .checked_mul(1_000_000_000)
            .ok_or("out of range")?
            .saturating_add(fraction_ns(frac)?));
    }
    const EXPECTED: &str = "expected YYYY-MM-DD HH:MM:SS, RFC 3339 or epoch seconds";
    // The shape jiff would also take in shorter forms (a date alone, no seconds) is required.
    let bytes = text.as_bytes();
    let digit_at = |i: usize| bytes.get(i).is_some_and(u8::is_ascii_digit);
    if bytes.len() < 19
        || ![0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
            .into_iter()
            .all(digit_at)
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b' ' | b'T' | b't')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return Err(EXPECTED.into());
    }
    // With an offset (RFC 3339) it is an instant; without, a local wall-clock time in the
    // system's time zone, where a time the clocks skipped (DST starts) is read one hour later
    // and a time they repeated (DST ends) as the first of the two (`compatible`).
    let after_seconds = text[19..].strip_prefix('.').unwrap_or(&text[19..]);
    let timestamp = if after_seconds.bytes().all(|b| b.is_ascii_digit()) {
        let civil: jiff::civil::DateTime =
            text.parse().map_err(|err| format!("{EXPECTED} ({err})"))?;
        let system;
        let zone = match zone {
            Some(zone) => zone,
            None => {
                system = jiff::tz::TimeZone::system();
                &system
            }
        };
        zone.to_ambiguous_timestamp(civil)
            .compatible()
            .map_err(|err| format!("not a valid local time: {err}"))?
    } else {
        text.parse::<jiff::Timestamp>()
            .map_err(|err| format!("{EXPECTED} ({err})"))?
    };
    i64::try_from(timestamp.as_nanosecond())
        .ok()
        .filter(|ns| *ns >= 0)
        .ok_or_else(|| "out of range (times from 1970 to 2262 are read)".to_string())
}

/// `"25"` -> 250 ms in nanoseconds (digits past nanoseconds are dropped).
fn fraction_ns(digits: &str) -> Result<i64, String> {
    if digits.is_empty() {
        return Ok(0);
    }
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err("bad fraction of a second".into());
    }
    let mut padded: String = digits.chars().take(9).collect();
    while padded.len() < 9 {
        padded.push('0');
    }
    padded
        .parse()
        .map_err(|_| "bad fraction of a second".into())
}

/// Power at `t` with the samples linearly interpolated and held flat beyond both ends.
fn power_at(samples: &[Sample], t: i64) -> f64 {
    let k = samples.partition_point(|s| s.t_ns <= t);
    match (
        k.checked_sub(1).and_then(|i| samples.get(i)),
        samples.get(k),
    ) {
        (Some(a), Some(b)) if b.t_ns > a.t_ns => {
            let f = (t - a.t_ns) as f64 / (b.t_ns - a.t_ns) as f64;
            a.power_w + f * (b.power_w - a.power_w)
        }
        (Some(a), _) => a.power_w,
        (None, Some(b)) => b.power_w,
        (None, None) => 0.0,
    }
}

/// Joules between `start` and `end` (ns since the epoch): the trapezoidal rule over the
/// samples inside, with the power at both bounds interpolated.
pub fn integrate_j(samples: &[Sample], start: i64, end: i64) -> f64 {
    if samples.is_empty() || end <= start {
        return 0.0;
    }
    let first = samples.partition_point(|s| s.t_ns <= start);
    let last = samples.partition_point(|s| s.t_ns < end);
    let (mut t, mut p) = (start, power_at(samples, start));
    let mut joules_ns = 0.0;
    for s in &samples[first..last.max(first)] {
        joules_ns += (p + s.power_w) / 2.0 * (s.t_ns - t) as f64;
        (t, p) = (s.t_ns, s.power_w);
    }
    joules_ns += (p + power_at(samples, end)) / 2.0 * (end - t) as f64;
    joules_ns / 1e9
}

/// Median time between consecutive samples.
fn median_period_ns(samples: &[Sample]) -> Option<u64> {
    let mut deltas: Vec<i64> = samples
        .windows(2)
        .map(|w| w[1].t_ns - w[0].t_ns)
        .filter(|d| *d > 0)
        .collect();
    if deltas.is_empty() {
        return None;
    }
    deltas.sort_unstable();
    Some(deltas[deltas.len() / 2] as u64)
}

/// Gaps longer than [`GAP_PERIODS`] median periods that overlap `[start, end]`: (time of the
/// sample before the gap, length), nanoseconds.
fn gaps(samples: &[Sample], start: i64, end: i64) -> Vec<(i64, i64)> {
    let Some(period) = median_period_ns(samples) else {
        return Vec::new();
    };
    let limit = period as f64 * GAP_PERIODS;
    samples
        .windows(2)
        .filter(|w| (w[1].t_ns - w[0].t_ns) as f64 > limit && w[1].t_ns > start && w[0].t_ns < end)
        .map(|w| (w[0].t_ns, w[1].t_ns - w[0].t_ns))
        .collect()
}

fn rfc3339_ns(t_ns: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_nanos(t_ns.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use std::{fs, io::Write};

    use super::*;

    const S: i64 = 1_000_000_000;
    /// 2026-02-04T10:15:23Z.
    const T0: i64 = 1_770_200_123;

    fn ctx(start_ns: i64, end_ns: i64) -> ReadContext<'static> {
        ReadContext {
            duration_ns: (end_ns - start_ns) as u64,
            busy_ns_per_cpu: &[],
            wall_start_ns: start_ns as u64,
            wall_end_ns: end_ns as u64,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * (1.0 + a.abs().max(b.abs()))
    }

    fn log(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("power.csv");
        fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn append(path: &Path, text: &str) {
        let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// Formats epoch seconds as local time, as the seed's logger writes it.
    fn local(epoch_s: i64) -> String {
        // SAFETY: localtime_r fills the struct we own.
        let tm = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            let t: libc::time_t = epoch_s;
            libc::localtime_r(&t, &mut tm);
            tm
        };
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            tm.tm_year + 1900,
            tm.tm_mon + 1,
            tm.tm_mday,
            tm.tm_hour,
            tm.tm_min,
            tm.tm_sec
        )
    }

    #[test]
    fn reads_the_pm_sum_form_in_local_time() {
        // As in the seed: a header, local times, power in `sum`.
        let text = format!(
            "time,id,pm1,pm2,sum\n{},0,125.3,118.7,244.0\n{},1,126.1,119.2,245.3\n",
            local(T0),
            local(T0 + 1)
        );
        let (_dir, path) = log(&text);
        let m = MeterSource::open(&path, Duration::ZERO).unwrap();
        assert_eq!(
            m.samples(),
            [
                Sample {
                    t_ns: T0 * S,
                    power_w: 244.0
                },
                Sample {
                    t_ns: (T0 + 1) * S,
                    power_w: 245.3
                }
            ]
        );
        assert_eq!(m.layout.unwrap().format, LogFormat::PmSum);
    }

    #[test]
    fn reads_the_time_watts_form_in_rfc3339_and_epoch_seconds() {
        let (_dir, path) = log(
            "time,watts\n2026-02-04T10:15:23.5Z,100\n2026-02-04T11:15:24+01:00,110.5\n\
             1770200125.25,120\n",
        );
        let m = MeterSource::open(&path, Duration::ZERO).unwrap();
        let times: Vec<i64> = m.samples().iter().map(|s| s.t_ns).collect();
        assert_eq!(times, [T0 * S + S / 2, (T0 + 1) * S, (T0 + 2) * S + S / 4]);
        // Headerless works too.
        let (_dir, path) = log("1770200123,50\n1770200124,60\n");
        let m = MeterSource::open(&path, Duration::ZERO).unwrap();
        assert_eq!(m.samples().len(), 2);
        assert_eq!(m.layout.unwrap().format, LogFormat::TimeWatts);
    }

    #[test]
    fn integrates_with_the_trapezoidal_rule_over_wall_clock_bounds() {
        // 100 W at T0, 200 W at T0+1 s, 200 W at T0+2 s.
        //   W 200 |      /------
        //     100 |-----/
        //         T0   +1     +2
        let samples = [
            Sample {
                t_ns: T0 * S,
                power_w: 100.0,
            },
            Sample {
                t_ns: (T0 + 1) * S,
                power_w: 200.0,
            },
            Sample {
                t_ns: (T0 + 2) * S,
                power_w: 200.0,
            },
        ];
        assert!(close(integrate_j(&samples, T0 * S, (T0 + 2) * S), 350.0));
        // Half a second inside the ramp: from 125 W to 175 W -> 75 J.
        assert!(close(
            integrate_j(&samples, T0 * S + S / 4, T0 * S + 3 * S / 4),
            75.0
        ));
        // Before the first and after the last sample, the nearest power is held.
        assert!(close(integrate_j(&samples, (T0 - 1) * S, T0 * S), 100.0));
        assert!(close(
            integrate_j(&samples, (T0 + 2) * S, (T0 + 3) * S),
            200.0
        ));
        // Splitting an interval never changes the total.
        let whole = integrate_j(&samples, T0 * S - S / 3, (T0 + 2) * S + S / 7);
        let parts: f64 = (0..10)
            .map(|i| {
                let a = T0 * S - S / 3 + i * (2 * S + S / 3 + S / 7) / 10;
                let b = T0 * S - S / 3 + (i + 1) * (2 * S + S / 3 + S / 7) / 10;
                integrate_j(&samples, a, b)
            })
            .sum();
        assert!(close(whole, parts), "{whole} vs {parts}");
    }

    #[test]
    fn follows_the_file_as_the_logger_appends_and_keeps_a_partial_line() {
        let (_dir, path) = log("time,watts\n1770200123,100\n1770200124,1");
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        assert_eq!(m.samples().len(), 1, "the partial last line waits");
        // The logger finishes that line ("1" + "00") and writes another.
        append(&path, "00\n1770200125,300\n");
        let j = m.read(&ctx(T0 * S, (T0 + 2) * S)).unwrap();
        assert_eq!(m.samples().len(), 3);
        assert!(close(j[0].joules().unwrap(), 100.0 + 200.0), "{j:?}");
    }

    #[test]
    fn settle_recomputes_intervals_once_the_log_has_caught_up() {
        let (_dir, path) = log("time,watts\n1770200123,100\n");
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        // Live, the interval [T0+1, T0+2] only knows the sample at T0: 100 J provisional.
        let live = m.read(&ctx((T0 + 1) * S, (T0 + 2) * S)).unwrap();
        assert!(close(live[0].joules().unwrap(), 100.0));
        append(&path, "1770200124,300\n1770200125,300\n");
        let spans = [
            WallSpan {
                start_ns: (T0 * S) as u64,
                end_ns: ((T0 + 1) * S) as u64,
            },
            WallSpan {
                start_ns: ((T0 + 1) * S) as u64,
                end_ns: ((T0 + 2) * S) as u64,
            },
        ];
        let settled = m.settle(&spans).unwrap().unwrap();
        assert!(close(settled[0][0], 200.0) && close(settled[1][0], 300.0));
        assert!(m.summary().notes.is_empty(), "{:?}", m.summary().notes);
    }

    #[test]
    fn malformed_rows_name_the_file_and_line() {
        let (_dir, path) = log("time,watts\n1770200123,100\n1770200124,lots\n");
        let err = MeterSource::open(&path, Duration::ZERO).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("power.csv:3") && text.contains("lots"),
            "{text}"
        );

        let (_dir, path) = log("time,id,pm1,pm2,sum\n2026-02-04 10:15:23,0,1,2\n");
        let err = MeterSource::open(&path, Duration::ZERO).unwrap_err();
        assert!(
            err.to_string().contains(":2: 4 fields, expected 5"),
            "{err}"
        );

        let (_dir, path) = log("when,what\n1,2\n");
        let err = MeterSource::open(&path, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("unrecognised header"), "{err}");

        let (_dir, path) = log("time,watts\n2026-13-04 10:15:23,100\n");
        let err = MeterSource::open(&path, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains(":2: time"), "{err}");

        let (_dir, path) = log("time,watts\n1770200124,1\n1770200123,1\n");
        let err = MeterSource::open(&path, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("earlier"), "{err}");

        let err = MeterSource::open(Path::new("/nonexistent/p.csv"), Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/p.csv"), "{err}");
    }

    #[test]
    fn a_bad_row_mid_run_is_reported_and_later_rows_still_count() {
        let (_dir, path) = log("time,watts\n1770200123,100\n");
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        append(&path, "garbage\n1770200124,100\n");
        let err = m.read(&ctx(T0 * S, (T0 + 1) * S)).unwrap_err();
        assert!(err.to_string().contains(":3:"), "{err}");
        assert_eq!(m.samples().len(), 2);
    }

    #[test]
    fn gaps_and_a_log_that_misses_the_run_end_are_reported() {
        // Samples every second, then nothing for 6 s, then two more; the run goes on 10 s
        // past the last sample.
        let mut text = String::from("time,watts\n");
        for t in [0, 1, 2, 3, 9, 10] {
            text.push_str(&format!("{},100\n", T0 + t));
        }
        let (_dir, path) = log(&text);
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        let spans = [WallSpan {
            start_ns: (T0 * S) as u64,
            end_ns: ((T0 + 20) * S) as u64,
        }];
        let settled = m.settle(&spans).unwrap().unwrap();
        assert!(close(settled[0][0], 2000.0));
        let summary = m.summary();
        let notes: Vec<&str> = summary.notes.iter().map(|n| n.text.as_str()).collect();
        assert!(summary.notes.iter().all(|n| n.degraded));
        assert!(
            notes
                .iter()
                .any(|n| n.contains("1 gap(s)") && n.contains("6.0 s after")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.contains("ends 10 s before")),
            "{notes:?}"
        );
        let meter = summary.meter.unwrap();
        assert_eq!(meter.gaps.len(), 1);
        assert_eq!(meter.median_period_s, Some(1.0));
        assert_eq!(meter.samples_count, 6);
    }

    #[test]
    fn powers_that_are_not_readings_are_rejected_with_file_and_line() {
        for bad in ["1e300", "1.7e308", "1000001", "-5", "inf", "NaN", "-0.5"] {
            let (_dir, path) = log(&format!("time,watts\n1770200123,100\n1770200124,{bad}\n"));
            let err = MeterSource::open(&path, Duration::ZERO)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("power.csv:3") && err.contains(bad),
                "{bad}: {err}"
            );
        }
        let (_dir, path) = log("time,watts\n1770200123,1e300\n");
        let err = MeterSource::open(&path, Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(err.contains("above 1000000 W"), "{err}");
        // A large but possible machine is fine.
        let (_dir, path) = log("time,watts\n1770200123,999999\n");
        assert_eq!(
            MeterSource::open(&path, Duration::ZERO)
                .unwrap()
                .samples()
                .len(),
            1
        );
    }

    #[test]
    fn a_byte_order_mark_and_crlf_line_ends_are_accepted() {
        let (_dir, path) = log("\u{feff}time,watts\r\n1770200123,100\r\n1770200124,110.5\r\n");
        let m = MeterSource::open(&path, Duration::ZERO).unwrap();
        assert_eq!(m.layout.unwrap().format, LogFormat::TimeWatts);
        assert_eq!(
            m.samples(),
            [
                Sample {
                    t_ns: T0 * S,
                    power_w: 100.0
                },
                Sample {
                    t_ns: (T0 + 1) * S,
                    power_w: 110.5
                }
            ]
        );
        // Without a header, the mark sits before the first time.
        let text = format!(
            "\u{feff}{},0,1,2,244.0\r\n{},1,1,2,245.0\r\n",
            local(T0),
            local(T0 + 1)
        );
        let (_dir, path) = log(&text);
        let m = MeterSource::open(&path, Duration::ZERO).unwrap();
        assert_eq!(m.layout.unwrap().format, LogFormat::PmSum);
        assert_eq!(m.samples()[0].t_ns, T0 * S);
        // Only at the very start: elsewhere it is a malformed row.
        let (_dir, path) = log("time,watts\n\u{feff}1770200123,100\n");
        assert!(MeterSource::open(&path, Duration::ZERO).is_err());
    }

    #[test]
    fn quoted_fields_are_read_as_csv() {
        // A logger that quotes every field; its meter name holds a comma and a quote.
        let (_dir, path) = log("\"time\",\"id\",\"pm1\",\"pm2\",\"sum\"\r\n\
             \"1770200123\",\"rack 2, \"\"left\"\"\",\"1\",\"2\",\"244.5\"\r\n\
             \"1770200124\",\"rack 2, right\",1,2,245\r\n\
             1770200125,x,1,2,\"lots, really\"\r\n");
        let err = MeterSource::open(&path, Duration::ZERO)
            .unwrap_err()
            .to_string();
        // The bad row is line 4, named whole.
        assert!(err.contains("power.csv:4: power \"lots, really\""), "{err}");
        // Comment and blank lines count in line numbers.
        let (_dir, path) =
            log("time,watts\n# a \"comment, quoted\n\n1770200123,100\n\n1770200124,x\n");
        let err = MeterSource::open(&path, Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(err.contains("power.csv:6: power \"x\""), "{err}");
        let (_dir, path) = log("\"time\",\"id\",\"pm1\",\"pm2\",\"sum\"\r\n\
             \"1770200123\",\"rack 2, \"\"left\"\"\",\"1\",\"2\",\"244.5\"\r\n\
             \"1770200124\",\"rack 2, right\",1,2,245\r\n");
        let m = MeterSource::open(&path, Duration::ZERO).unwrap();
        assert_eq!(m.layout.unwrap().format, LogFormat::PmSum);
        assert_eq!(
            m.samples(),
            [
                Sample {
                    t_ns: T0 * S,
                    power_w: 244.5
                },
                Sample {
                    t_ns: (T0 + 1) * S,
                    power_w: 245.0
                }
            ]
        );
    }

    #[test]
    fn a_log_reads_the_same_written_byte_by_byte() {
        // A mark, a quoted field over two lines, CRLF, a comment: in one piece and byte by byte.
        let text = "\u{feff}time,id,pm1,pm2,sum\r\n# x\r\n1770200123,\"a,\r\nb\",1,2,244\r\n\
                    1770200124,c,1,2,245\r\n1770200125,d,1,2,x\r\n";
        let (_dir, whole) = log(text);
        let err = MeterSource::open(&whole, Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(err.contains("power.csv:6: power \"x\""), "{err}");
        let (_dir, path) = log("");
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        let mut errors = Vec::new();
        for byte in text.as_bytes() {
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(&[*byte]).unwrap();
            if let Err(err) = m.poll() {
                errors.push(err.to_string());
            }
        }
        assert_eq!(m.layout.unwrap().format, LogFormat::PmSum);
        let powers: Vec<f64> = m.samples().iter().map(|s| s.power_w).collect();
        assert_eq!(powers, [244.0, 245.0]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("power.csv:6: power \"x\""), "{errors:?}");
    }

    #[test]
    fn a_log_without_a_sample_in_the_run_is_an_error_not_measured_energy() {
        // Samples every second, ending 100 s before the run.
        let mut text = String::from("time,watts\n");
        for t in 0..4 {
            text.push_str(&format!("{},100\n", T0 + t));
        }
        let (_dir, path) = log(&text);
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        let spans = [WallSpan {
            start_ns: ((T0 + 103) * S) as u64,
            end_ns: ((T0 + 110) * S) as u64,
        }];
        let err = m.settle(&spans).unwrap().unwrap_err().to_string();
        assert!(
            err.contains("power.csv")
                && err.contains("no sample within the run")
                && err.contains("1 min 40 s before the run started"),
            "{err}"
        );
        // The run between two samples of a slow logger is covered.
        let spans = [WallSpan {
            start_ns: (T0 * S + S / 4) as u64,
            end_ns: (T0 * S + S / 2) as u64,
        }];
        assert!(m.settle(&spans).unwrap().is_ok());
        // An empty log: unknown while the run goes on, an error at the end.
        let (_dir, path) = log("time,watts\n");
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        assert_eq!(
            m.read(&ctx(T0 * S, (T0 + 1) * S)).unwrap(),
            vec![Reading::unknown(Glitch::Unavailable)]
        );
        let err = m.settle(&spans).unwrap().unwrap_err().to_string();
        assert!(err.contains("no sample at all"), "{err}");
    }

    #[test]
    fn a_truncated_log_is_an_error_not_a_silent_restart() {
        let (_dir, path) = log("time,watts\n1770200123,100\n");
        let mut m = MeterSource::open(&path, Duration::ZERO).unwrap();
        fs::write(&path, "t").unwrap();
        let err = m.read(&ctx(T0 * S, (T0 + 1) * S)).unwrap_err();
        assert!(err.to_string().contains("shrank"), "{err}");
    }

    #[test]
    fn parses_times() {
        assert_eq!(parse_time("1770200123"), Ok(T0 * S));
        assert_eq!(parse_time("1770200123.000000001"), Ok(T0 * S + 1));
        assert_eq!(parse_time("2026-02-04T10:15:23Z"), Ok(T0 * S));
        assert_eq!(parse_time("2026-02-04t10:15:23.125z"), Ok(T0 * S + S / 8));
        assert_eq!(parse_time("2026-02-04T05:15:23-05:00"), Ok(T0 * S));
        assert_eq!(parse_time("2026-02-04T12:15:23+0200"), Ok(T0 * S));
        assert_eq!(parse_time(&local(T0)), Ok(T0 * S));
        assert_eq!(parse_time(&format!("{}.5", local(T0))), Ok(T0 * S + S / 2));
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("2026-02-04 25:00:00").is_err());
        assert!(parse_time("2026-02-04T10:15:23+1").is_err());
    }

    #[test]
    fn local_times_across_dst_edges_and_rfc3339_offsets() {
        let paris = jiff::tz::TimeZone::get("Europe/Paris").unwrap();
        let utc = |text: &str| parse_time_in(text, Some(&jiff::tz::TimeZone::UTC)).unwrap();
        let at = |text: &str| parse_time_in(text, Some(&paris)).unwrap();
        // Clocks go from 02:00 to 03:00 on 2026-03-29: one second apart across the edge...
        assert_eq!(at("2026-03-29 03:00:00") - at("2026-03-29 01:59:59"), S);
        assert_eq!(at("2026-03-29 03:00:00"), utc("2026-03-29 01:00:00"));
        // ...and a skipped time is read one hour later.
        assert_eq!(at("2026-03-29 02:30:00"), utc("2026-03-29 01:30:00"));
        // Back from 03:00 to 02:00 on 2026-10-25: a repeated time is the first of the two.
        assert_eq!(at("2026-10-25 02:30:00"), utc("2026-10-25 00:30:00"));
        assert_eq!(at("2026-10-25 03:00:00"), utc("2026-10-25 02:00:00"));
        // Winter and summer offsets.
        assert_eq!(at("2026-02-04 11:15:23"), T0 * S);
        assert_eq!(at("2026-07-01 12:00:00"), utc("2026-07-01 10:00:00"));
        // An RFC 3339 offset wins over the zone.
        for zone in [Some(&paris), Some(&jiff::tz::TimeZone::UTC), None] {
            assert_eq!(parse_time_in("2026-02-04T11:45:23+01:30", zone), Ok(T0 * S));
            assert_eq!(
                parse_time_in("2026-02-04T00:15:23.25-10:00", zone),
                Ok(T0 * S + S / 4)
            );
        }
        assert!(parse_time_in("2026-02-04T10:15:23+1:00", Some(&paris)).is_err());
        assert!(parse_time_in("2026-02-04", Some(&paris)).is_err());
    }

    /// Found by the `power_log` fuzz target: a time after 2262 overflowed the nanoseconds.
    #[test]
    fn times_nanoseconds_cannot_hold_are_refused() {
        // The fuzz input: a byte for the target, then the text.
        let input = include_str!("../../../fuzz/regressions/power_log/year-6022");
        let time = &input[1..];
        assert!(parse_time(time).unwrap_err().contains("out of range"));
        let (_dir, path) = log(&format!("time,watts\n{time},10\n"));
        let err = MeterSource::open(&path, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        assert!(parse_time("2262-04-12T00:00:00Z").is_err());
        assert!(parse_time("1969-12-31T23:59:59Z").is_err());
        assert!(parse_time("0000-01-01T00:00:00Z").is_err());
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(0));
        assert!(parse_time("2262-04-11T00:00:00Z").is_ok());
    }
}
