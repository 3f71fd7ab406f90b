//! A GPU's rest power: what it draws with no kernel running and no process on it, which is the
//! idle baseline of its domain (an H100 draws ~72 W at rest; charging that to the processes
//! that happened to run would hide a tenth of a heavy run's energy in them).
//!
//! Where it comes from, best first (the report names it, `meta.idle_baseline[].rest_source`):
//! 1. `rest_seen_this_run`: the lowest power of a poll at rest during the run, or
//!    `rest_from_state_file`: the lowest seen in an earlier run on the same GPU (by UUID), kept
//!    in a small state file with when it was seen; whichever is lower;
//! 2. `model_table`: the typical rest power of the GPU's model ([`table_rest_w`]), estimated.
//!
//! A poll counts as rest ([`RestTracker`]) only when the GPU was at 0 % utilisation with no
//! process on it for [`QUIET_S`] and its power has stopped falling: after a load an H100 holds
//! ~125 W for over a second with nothing on it, then decays to ~72 W over ~1.5 s (recorded in
//! `shared/data/h100/trace2-nvml.jsonl`), and that tail is not its rest.
//!
//! The state file (`gpu-rest.json` in `/var/lib/cg-trace` as root, else
//! `$XDG_STATE_HOME/cg-trace`, or `--state-dir`) is the machine's, so it is written with the
//! identity cg-trace runs as, through [`crate::output`] (no link followed, a fresh name renamed
//! into place). It is read as hostile: bounded in size and entries, every figure checked; a
//! file that fails any check is ignored as a whole, with a note.

use std::{
    collections::{BTreeMap, VecDeque},
    fs::File,
    io::Read,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::{DomainKind, SourceNote, counter};
pub use crate::attribution::idle::{RestOrigin, RestPower};
use crate::{output, privileges::Invoker};

/// Utilisation 0 % and no process on the GPU for at least this long before a poll is rest
/// (the recorded H100 reached its rest 2.4 s after its last activity).
pub const QUIET_S: f64 = 4.0;
/// Power is settled when it is not below the power at least this long before by more than
/// [`SETTLED_RATIO`] (still falling: the decay after a load).
const SETTLE_WINDOW_S: f64 = 0.5;
const SETTLED_RATIO: f64 = 1.02;

/// The state file's name in the state directory.
pub const STATE_FILE: &str = "gpu-rest.json";
/// Larger state files are not read (a real one holds a few hundred bytes per GPU).
const MAX_STATE_BYTES: u64 = 64 * 1024;
/// At most this many GPUs are kept.
const MAX_STATE_GPUS: usize = 64;
/// Longest UUID and model name accepted from the state file.
const MAX_TEXT_CHARS: usize = 96;

/// Typical rest power of GPU models, watts, by NVML's model name: the last resort (estimated).
/// Each row says where its figure comes from.
const REST_TABLE: &[(&str, f64)] = &[
    // nvidia-smi 72.85 W, a `sleep 4` run 72.3 W, the trace's rest polls 71-72 W
    // (shared/data/h100, driver 580.159.04).
    ("NVIDIA H100 80GB HBM3", 72.0),
];

/// The typical rest power of a GPU model, when the table knows it.
pub fn table_rest_w(model: &str) -> Option<f64> {
    REST_TABLE
        .iter()
        .find(|(name, _)| *name == model)
        .map(|&(_, w)| w)
}

/// Finds a GPU's rest power in its polls (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct RestTracker {
    /// When the GPU was last seen busy or with a process (the first poll counts as such:
    /// what it did before is not known).
    last_activity_s: Option<f64>,
    /// Power of the polls at rest over the last [`SETTLE_WINDOW_S`] and the one before.
    recent: VecDeque<(f64, f64)>,
    lowest_w: Option<f64>,
}

impl RestTracker {
    /// One poll at `at_s` (seconds on the source's clock): its power, utilisation and number
    /// of processes on the GPU, each `None` when not known (then the poll is not at rest).
    pub fn observe(
        &mut self,
        at_s: f64,
        power_w: Option<f64>,
        util_pct: Option<u32>,
        processes: Option<usize>,
    ) {
        let at_rest = util_pct == Some(0) && processes == Some(0);
        if !at_rest || self.last_activity_s.is_none() {
            self.last_activity_s = Some(at_s);
            self.recent.clear();
        }
        let (Some(w), Some(since)) = (power_w, self.last_activity_s) else {
            return;
        };
        if !(at_rest && w.is_finite() && w > 0.0) {
            return;
        }
        self.recent.push_back((at_s, w));
        while self
            .recent
            .get(1)
            .is_some_and(|&(t, _)| t <= at_s - SETTLE_WINDOW_S)
        {
            self.recent.pop_front();
        }
        let settled = self
            .recent
            .front()
            .is_some_and(|&(t, before)| t <= at_s - SETTLE_WINDOW_S && before <= w * SETTLED_RATIO);
        if settled && at_s - since >= QUIET_S {
            self.lowest_w = Some(self.lowest_w.map_or(w, |l| l.min(w)));
        }
    }

    /// The lowest power seen at rest, watts.
    pub fn lowest_w(&self) -> Option<f64> {
        self.lowest_w
    }
}

/// One GPU's rest power as the state file keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub uuid: String,
    pub name: String,
    pub rest_power_w: f64,
    /// When it was seen, seconds since the Unix epoch.
    pub seen_unix_s: f64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateFile {
    version: u32,
    gpus: Vec<Stored>,
}

const STATE_VERSION: u32 = 1;

/// The rest power to use: the lower of the one seen in this run and the stored one, else the
/// model table's.
pub fn choose(
    seen_w: Option<f64>,
    stored: Option<&Stored>,
    table_w: Option<f64>,
    now_unix_s: f64,
) -> Option<RestPower> {
    let from_file = stored.map(|s| RestPower {
        power_w: s.rest_power_w,
        origin: RestOrigin::StateFile {
            age_s: (now_unix_s - s.seen_unix_s).max(0.0),
        },
    });
    let seen = seen_w.map(|power_w| RestPower {
        power_w,
        origin: RestOrigin::SeenThisRun,
    });
    match (seen, from_file) {
        (Some(s), Some(f)) if f.power_w < s.power_w => Some(f),
        (Some(s), _) => Some(s),
        (None, Some(f)) => Some(f),
        (None, None) => table_w.map(|power_w| RestPower {
            power_w,
            origin: RestOrigin::ModelTable,
        }),
    }
}

/// Where cg-trace keeps what it learns about the machine when `--state-dir` is not given:
/// `/var/lib/cg-trace` as root, else `$XDG_STATE_HOME/cg-trace` (`~/.local/state/cg-trace`);
/// `None` when there is no such place.
pub fn default_state_dir() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Some(PathBuf::from("/var/lib/cg-trace"));
    }
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    std::env::var_os("XDG_STATE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".local/state"))
        })
        .map(|d| d.join("cg-trace"))
}

/// The rest powers of earlier runs, by UUID, and where they are kept.
#[derive(Debug, Default)]
pub struct RestStore {
    dir: Option<PathBuf>,
    entries: BTreeMap<String, Stored>,
    /// What went wrong reading or writing it, for the report.
    pub notes: Vec<SourceNote>,
}

impl RestStore {
    /// Reads `dir`'s state file; a missing one is an empty store, a bad one is ignored with a
    /// note. `None`: nothing is kept.
    pub fn load(dir: Option<&Path>, now_unix_s: f64) -> Self {
        let mut store = RestStore {
            dir: dir.map(Path::to_path_buf),
            ..RestStore::default()
        };
        let Some(dir) = dir else {
            return store;
        };
        let path = dir.join(STATE_FILE);
        match read_bounded(&path).map(|text| text.map(|t| parse(&t, now_unix_s))) {
            Ok(None) => {}
            Ok(Some(Ok(entries))) => store.entries = entries,
            Ok(Some(Err(why))) | Err(why) => store.notes.push(SourceNote::info(format!(
                "GPU rest power state file {} ignored ({why}); it is rewritten when a GPU is \
                 next seen at rest",
                path.display()
            ))),
        }
        store
    }

    pub fn get(&self, uuid: &str) -> Option<&Stored> {
        self.entries.get(uuid)
    }

    /// Keeps `seen_w` for the GPU `uuid` when it is lower than what is kept (or nothing is),
    /// and writes the file. Returns whether anything changed.
    pub fn keep(&mut self, uuid: &str, name: &str, seen_w: f64, now_unix_s: f64) -> bool {
        let Some(dir) = self.dir.clone() else {
            return false;
        };
        if !(valid_text(uuid) && seen_w.is_finite() && seen_w > 0.0) {
            return false;
        }
        if self.get(uuid).is_some_and(|s| s.rest_power_w <= seen_w) {
            return false;
        }
        if self.entries.len() >= MAX_STATE_GPUS && !self.entries.contains_key(uuid) {
            return false;
        }
        self.entries.insert(
            uuid.to_string(),
            Stored {
                uuid: uuid.to_string(),
                name: neutralise(name),
                rest_power_w: seen_w,
                seen_unix_s: now_unix_s,
            },
        );
        if let Err(why) = self.write(&dir) {
            self.notes.push(SourceNote::info(format!(
                "the GPU rest power seen in this run could not be kept for later runs in {}: \
                 {why}",
                dir.display()
            )));
        }
        true
    }

    fn write(&self, dir: &Path) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| format!("cannot create the folder: {e}"))?;
        let file = StateFile {
            version: STATE_VERSION,
            gpus: self.entries.values().cloned().collect(),
        };
        output::write_file(&dir.join(STATE_FILE), &Invoker::ourselves(), |out| {
            serde_json::to_writer_pretty(&mut *out, &file).map_err(std::io::Error::other)?;
            out.write_all(b"\n")
        })
        .map_err(|e| e.to_string())
    }
}

/// The file's text; `None` when there is none. No link is followed, and only a regular file of
/// at most [`MAX_STATE_BYTES`] is read.
fn read_bounded(path: &Path) -> Result<Option<String>, String> {
    let file = match File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err("it is a symbolic link".into());
        }
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.len() > MAX_STATE_BYTES {
        return Err(format!("larger than {MAX_STATE_BYTES} bytes"));
    }
    let mut text = String::new();
    file.take(MAX_STATE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("not text: {e}"))?;
    Ok(Some(text))
}

/// The entries of a state file, or what is wrong with it.
fn parse(text: &str, now_unix_s: f64) -> Result<BTreeMap<String, Stored>, String> {
    let file: StateFile = serde_json::from_str(text).map_err(|e| format!("not valid: {e}"))?;
    if file.version != STATE_VERSION {
        return Err(format!("version {} is not {STATE_VERSION}", file.version));
    }
    if file.gpus.len() > MAX_STATE_GPUS {
        return Err(format!("more than {MAX_STATE_GPUS} GPUs"));
    }
    let max_w = counter::max_power_w(DomainKind::Gpu);
    let mut entries = BTreeMap::new();
    for g in file.gpus {
        if !valid_text(&g.uuid) || g.name.chars().count() > MAX_TEXT_CHARS {
            return Err("a GPU's UUID or name is not one NVML gives".into());
        }
        if !(g.rest_power_w.is_finite() && g.rest_power_w > 0.0 && g.rest_power_w <= max_w) {
            return Err(format!("a rest power is not between 0 and {max_w:.0} W"));
        }
        // A day of clock skew is tolerated; a time further ahead is not a time it was seen.
        if !(g.seen_unix_s.is_finite()
            && g.seen_unix_s > 0.0
            && g.seen_unix_s <= now_unix_s + 86_400.0)
        {
            return Err("a time it was seen is not a time".into());
        }
        let name = neutralise(&g.name);
        entries.insert(g.uuid.clone(), Stored { name, ..g });
    }
    Ok(entries)
}

/// A UUID as NVML gives them: short, printable ASCII.
fn valid_text(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_TEXT_CHARS && s.bytes().all(|b| b.is_ascii_graphic())
}

/// A model name with control characters replaced, at most [`MAX_TEXT_CHARS`] long.
fn neutralise(s: &str) -> String {
    s.chars()
        .take(MAX_TEXT_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// Polls every 0.1 s: (power W, utilisation %, processes on the GPU).
    fn replay(polls: &[(f64, u32, usize)]) -> RestTracker {
        let mut tracker = RestTracker::default();
        for (i, &(w, util, procs)) in polls.iter().enumerate() {
            tracker.observe(i as f64 * 0.1, Some(w), Some(util), Some(procs));
        }
        tracker
    }

    fn repeat(n: usize, poll: (f64, u32, usize)) -> Vec<(f64, u32, usize)> {
        vec![poll; n]
    }

    #[test]
    fn the_tail_after_a_load_is_not_rest_the_settled_floor_is() {
        // The recorded H100 after a load (trace2, t = 18.9-24 s), one poll per 0.1 s:
        //   power  |700 ... 700|530 416 296|128 128 ... 128|124 ... 86 74|72 72 72 ... 72|
        //   util   |99  ...  99| 0   0   0 | 2   0  ...   0| 0  ...  0  0| 0  0  0 ...  0|
        //   procs  | 2  ...   2| 2   2   0 | 0   0  ...   0| 0  ...  0  0| 0  0  0 ...  0|
        //          '-- load ---'-- ends ---'- plateau 1.3 s'- decay 1 s --'-- rest -------'
        // Rest starts QUIET_S after the last activity (util 2 %), once power stops falling.
        let mut polls = repeat(20, (700.0, 99, 2));
        polls.extend([(530.0, 0, 2), (416.0, 0, 2), (296.0, 0, 0), (128.0, 2, 0)]);
        polls.extend(repeat(13, (128.0, 0, 0)));
        polls.extend([124.0, 113.0, 102.0, 97.0, 86.0, 74.0].map(|w| (w, 0, 0)));
        let before_rest = replay(&polls);
        assert_eq!(
            before_rest.lowest_w(),
            None,
            "the plateau and the decay are not rest"
        );
        polls.extend(repeat(30, (72.0, 0, 0)));
        assert_eq!(replay(&polls).lowest_w(), Some(72.0));
    }

    #[test]
    fn a_process_on_the_gpu_or_any_utilisation_is_not_rest() {
        //   power |71 71 71 ... 71|   a CUDA context, no kernel: not rest
        //   procs | 1  1  1 ...  1|
        assert_eq!(replay(&repeat(100, (71.0, 0, 1))).lowest_w(), None);
        //   util  | 1  1  1 ...  1|   no process listed, yet busy: not rest
        assert_eq!(replay(&repeat(100, (71.0, 1, 0))).lowest_w(), None);
        // Unknown utilisation or process list: not rest either.
        let mut tracker = RestTracker::default();
        for i in 0..100 {
            tracker.observe(f64::from(i) * 0.1, Some(71.0), None, Some(0));
        }
        assert_eq!(tracker.lowest_w(), None);
    }

    #[test]
    fn the_first_polls_of_a_run_are_not_rest_until_quiet_long_enough() {
        // Opened just after a CUDA warm-up (trace2's first polls: ~120 W, nothing on it):
        //   power |120 120 ... 120|   the run is 3 s long: never QUIET_S at rest
        assert_eq!(replay(&repeat(30, (120.0, 0, 0))).lowest_w(), None);
        //   power |72 72 ... 72|      5 s at rest: rest from 4 s on
        assert_eq!(replay(&repeat(50, (72.0, 0, 0))).lowest_w(), Some(72.0));
    }

    #[test]
    fn rest_seen_or_stored_whichever_is_lower_else_the_table() {
        let stored = Stored {
            uuid: "GPU-1".into(),
            name: "H".into(),
            rest_power_w: 70.0,
            seen_unix_s: 1_000.0,
        };
        let r = choose(Some(72.0), Some(&stored), Some(80.0), 4_600.0).unwrap();
        assert_eq!(r.power_w, 70.0);
        assert_eq!(r.origin, RestOrigin::StateFile { age_s: 3_600.0 });
        let r = choose(Some(69.0), Some(&stored), Some(80.0), 4_600.0).unwrap();
        assert_eq!((r.power_w, r.origin.name()), (69.0, "rest_seen_this_run"));
        let r = choose(None, None, Some(72.0), 0.0).unwrap();
        assert_eq!(r.origin.name(), "model_table");
        assert!(r.origin.is_estimated());
        assert_eq!(choose(None, None, table_rest_w("Unknown GPU"), 0.0), None);
        assert_eq!(table_rest_w("NVIDIA H100 80GB HBM3"), Some(72.0));
    }

    #[test]
    fn keeps_the_lowest_rest_per_gpu_across_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = RestStore::load(Some(dir.path()), 1_000.0);
        assert!(store.keep("GPU-aa", "NVIDIA H100 80GB HBM3", 72.5, 1_000.0));
        // A higher rest later does not replace it; a lower one does.
        let mut store = RestStore::load(Some(dir.path()), 2_000.0);
        assert_eq!(store.get("GPU-aa").unwrap().rest_power_w, 72.5);
        assert!(!store.keep("GPU-aa", "NVIDIA H100 80GB HBM3", 80.0, 2_000.0));
        assert!(store.keep("GPU-bb", "Name\x1b[31m", 30.0, 2_000.0));
        let store = RestStore::load(Some(dir.path()), 3_000.0);
        assert!(store.notes.is_empty(), "{:?}", store.notes);
        assert_eq!(store.get("GPU-aa").unwrap().seen_unix_s, 1_000.0);
        assert_eq!(store.get("GPU-bb").unwrap().name, "Name?[31m");
        // No state directory: nothing kept, nothing said.
        let mut none = RestStore::load(None, 0.0);
        assert!(!none.keep("GPU-aa", "x", 1.0, 0.0));
        assert!(none.notes.is_empty());
    }

    fn load_text(text: &[u8]) -> RestStore {
        let dir = tempfile::tempdir().unwrap();
        let mut f = File::create(dir.path().join(STATE_FILE)).unwrap();
        f.write_all(text).unwrap();
        RestStore::load(Some(dir.path()), 10_000.0)
    }

    #[test]
    fn a_hostile_or_corrupt_state_file_is_ignored_with_a_note() {
        let entry = |uuid: &str, w: &str, seen: &str| {
            format!(
                r#"{{"version":1,"gpus":[{{"uuid":"{uuid}","name":"H","rest_power_w":{w},"seen_unix_s":{seen}}}]}}"#
            )
        };
        let good = load_text(entry("GPU-1", "72.0", "9000").as_bytes());
        assert!(good.notes.is_empty() && good.get("GPU-1").is_some());
        for (text, why) in [
            (b"{not json".to_vec(), "not valid"),
            (entry("GPU-1", "-5", "9000").into_bytes(), "rest power"),
            (entry("GPU-1", "1e9", "9000").into_bytes(), "rest power"),
            (entry("GPU-1", "72", "1e300").into_bytes(), "not a time"),
            (entry("GPU 1\\u001b", "72", "9000").into_bytes(), "UUID"),
            (entry(&"G".repeat(200), "72", "9000").into_bytes(), "UUID"),
            (br#"{"version":2,"gpus":[]}"#.to_vec(), "version 2"),
            (vec![b' '; 70_000], "larger than"),
            (vec![0xff, 0xfe], "not text"),
        ] {
            let store = load_text(&text);
            assert!(store.entries.is_empty());
            assert!(
                store.notes.len() == 1 && store.notes[0].text.contains(why),
                "{why}: {:?}",
                store.notes
            );
        }
        // A link is not followed, and is not replaced by a write either.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, entry("GPU-1", "72", "9000")).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(STATE_FILE)).unwrap();
        let mut store = RestStore::load(Some(dir.path()), 10_000.0);
        assert!(
            store.notes[0].text.contains("symbolic link"),
            "{:?}",
            store.notes
        );
        store.keep("GPU-1", "H", 70.0, 10_000.0);
        assert!(
            store.notes[1].text.contains("could not be kept"),
            "{:?}",
            store.notes
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            entry("GPU-1", "72", "9000")
        );
    }
}
