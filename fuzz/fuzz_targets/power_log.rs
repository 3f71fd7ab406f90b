//! The power meter's log (`--power-log`): the real reader follows a file, so each input is
//! written to one, read whole, and read again in two parts (the logger appending mid-line).
//! Input: one byte that says where to cut, then the log.
#![no_main]

use std::{fs, io::Write as _, time::Duration};

use cg_agent::sources::{
    EnergySource as _, WallSpan,
    meter::{MAX_POWER_W, MeterSource, Sample, parse_time},
};
use libfuzzer_sys::fuzz_target;

/// From 1970 to 2262 (the last time nanoseconds in an i64 can hold): what a log's times can be.
const LAST_NS: i64 = i64::MAX;

fn check_samples(samples: &[Sample]) {
    for s in samples {
        assert!(
            (0..=LAST_NS).contains(&s.t_ns),
            "sample time {} ns is outside 1970..2262",
            s.t_ns
        );
        assert!(
            s.power_w.is_finite() && (0.0..=MAX_POWER_W).contains(&s.power_w),
            "power {} W accepted",
            s.power_w
        );
    }
    for w in samples.windows(2) {
        assert!(w[0].t_ns < w[1].t_ns, "samples out of order: {w:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, log)) = data.split_first() else {
        return;
    };
    if let Ok(text) = std::str::from_utf8(log)
        && let Ok(t_ns) = parse_time(text)
    {
        assert!((0..=LAST_NS).contains(&t_ns), "time {text:?} -> {t_ns} ns");
    }
    let dir = cg_trace_fuzz::fresh_dir();
    let whole_path = dir.join("whole.csv");
    fs::write(&whole_path, log).unwrap();
    let whole = MeterSource::open(&whole_path, Duration::ZERO);

    // The same bytes in two writes: the first part may end mid-line.
    let cut = log.len() * usize::from(cut) / 255;
    let parts_path = dir.join("parts.csv");
    fs::write(&parts_path, &log[..cut]).unwrap();
    let parts = MeterSource::open(&parts_path, Duration::ZERO).and_then(|mut source| {
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(&parts_path)
            .unwrap();
        file.write_all(&log[cut..]).unwrap();
        source.poll().map(|()| source)
    });

    let Ok(mut whole) = whole else {
        return;
    };
    let parts = parts.unwrap_or_else(|err| panic!("whole log read, in two parts: {err}"));
    assert_eq!(
        whole.samples(),
        parts.samples(),
        "two parts read differently"
    );
    let samples = whole.samples().to_vec();
    check_samples(&samples);

    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return;
    };
    let (start, end) = (first.t_ns as u64, last.t_ns as u64);
    let mid = start + (end - start) / 2;
    let spans = [
        WallSpan {
            start_ns: start.saturating_sub(1_000_000_000),
            end_ns: mid,
        },
        WallSpan {
            start_ns: mid,
            end_ns: end.saturating_add(1_000_000_000),
        },
    ];
    let settled = whole.settle(&spans);
    let summary = whole.summary();
    if let Some(meter) = &summary.meter {
        assert!(meter.median_period_s.is_none_or(f64::is_finite));
        assert!(meter.gaps.iter().all(|g| g.duration_s.is_finite()));
    }
    // Every accepted power is plausible (checked above), so the energy over any span is
    // finite and not negative.
    if let Some(Ok(energies)) = settled {
        for e in energies.iter().flatten() {
            assert!(e.is_finite() && *e >= 0.0, "interval energy {e} J");
        }
    }
});
