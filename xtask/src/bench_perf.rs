//! `cargo xtask bench --functions --against-perf`: cg-trace's stacks (`--stacks auto`, the
//! default) against `perf record --call-graph dwarf` on distribution binaries built without
//! frame pointers: Debian's stripped `xz -9 -T1` and `gzip -9` compressing the same 12 MB.
//! Per program, printed, never asserted:
//! - the share of samples whose stack reaches the C entry, `__libc_start_call_main` (named
//!   by libc's debug file from libc6-dbg; `main` itself has no name in a stripped binary),
//!   and `main` (named when the program's `-dbgsym` debug file is installed);
//! - the self shares of the top functions, by symbol: the innermost frame that is not an
//!   inlined one, in both tools (where their inline information differs, perf 6.1 misses
//!   inlined calls that cg-trace and llvm-symbolizer name: docs/functions.md). A frame
//!   without a name is counted under the `.eh_frame` FDE (one function's code range,
//!   `readelf --debug-dump=frames`) its address falls in, the same way for both tools, so
//!   stripped code is compared function by function.
//!
//! The programs are looked up in `PATH`: to compare binaries that have their `-dbgsym`
//! files, put a directory of them first (docs/functions.md says how they were built here).
//!
//! perf's shares are of samples, cg-trace's of the sampled energy (`--source model`: in
//! proportion to CPU time, as samples are); the two runs are separate, so each share also
//! carries its own sampling error (about 0.6 points for a 20 % share of 5,000 samples).

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};

use crate::status;

/// What the C runtime's start-up calls `main` from: a stack through it reached the entry.
const ENTRY: &str = "__libc_start_call_main";

/// The programs: (name shown, command, its arguments before the input file).
const PROGRAMS: &[(&str, &str, &[&str])] = &[
    ("xz -9 -T1", "xz", &["-9", "-T1", "-c"]),
    ("gzip -9", "gzip", &["-9", "-c"]),
];

/// Functions shown per program (by perf's self share).
const TOP: usize = 8;

pub fn run(cg_trace: &Path) -> Result<()> {
    for tool in [["perf", "--version"], ["readelf", "--version"]] {
        let found = Command::new(tool[0])
            .arg(tool[1])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            bail!(
                "bench --functions --against-perf needs `{}` (apt-get install linux-perf binutils libc6-dbg)",
                tool[0]
            );
        }
    }
    let out = std::env::temp_dir().join(format!("cg-trace-bench-perf-{}", std::process::id()));
    std::fs::create_dir_all(&out)?;
    let data = out.join("data");
    std::fs::write(&data, input(12_000_000))?;
    println!("against perf --call-graph dwarf (999 Hz, 16 KiB copies), distribution binaries:");
    for (name, program, args) in PROGRAMS {
        compare(cg_trace, &out, &data, name, program, args)?;
    }
    println!(
        "  (named libc frames may carry another alias in each tool: perf's __GI___libc_read is cg-trace's read)"
    );
    std::fs::remove_dir_all(&out).ok();
    Ok(())
}

/// Runs one program under perf and under cg-trace, and prints how their stacks compare.
fn compare(
    cg_trace: &Path,
    out: &Path,
    data: &Path,
    name: &str,
    program: &str,
    args: &[&str],
) -> Result<()> {
    let perf_data = out.join(format!("{program}.perf"));
    let mut perf = Command::new("perf");
    perf.args([
        "record",
        "-q",
        "-F",
        "999",
        "--call-graph",
        "dwarf,16384",
        "-o",
    ])
    .arg(&perf_data)
    .arg("--")
    .arg(program)
    .args(args)
    .arg(data)
    .stdout(Stdio::null());
    status(&mut perf)?;
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym,dso", "-i"])
        .arg(&perf_data)
        .stderr(Stdio::null())
        .output()
        .context("perf script")?;
    let mut fdes = Fdes::default();
    let perf = perf_stacks(&String::from_utf8_lossy(&script.stdout), &mut fdes)?;

    let folded = out.join(format!("{program}.folded"));
    let mut cg = Command::new(cg_trace);
    cg.args(["--source", "model", "--profile", "--sample-hz", "999"])
        .args(["--stacks", "auto", "--quiet", "--folded"])
        .arg(&folded)
        .arg("-o")
        .arg(out.join(format!("{program}.json")))
        .arg("--")
        .arg(program)
        .args(args)
        .arg(data)
        .stdout(Stdio::null());
    status(&mut cg)?;
    let cg = folded_stacks(&std::fs::read_to_string(&folded)?, &fdes);

    println!(
        "  {name}: stacks reaching {ENTRY}: perf {:.2} % of {} samples, cg-trace {:.2} % of the sampled energy",
        100.0 * perf.reached / perf.total.max(f64::MIN_POSITIVE),
        perf.total,
        100.0 * cg.reached / cg.total.max(f64::MIN_POSITIVE),
    );
    println!(
        "    stacks reaching main: perf {:.2} %, cg-trace {:.2} % (0 where main has no name)",
        100.0 * perf.reached_main / perf.total.max(f64::MIN_POSITIVE),
        100.0 * cg.reached_main / cg.total.max(f64::MIN_POSITIVE),
    );
    println!("    self share by symbol, % perf  cg-trace  difference (points)");
    let mut top: Vec<(&String, &f64)> = perf.self_weight.iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(a.1));
    let mut worst = 0f64;
    for (function, weight) in top.into_iter().take(TOP) {
        let p = 100.0 * weight / perf.total;
        let c = 100.0 * cg.self_weight.get(function).copied().unwrap_or(0.0) / cg.total;
        worst = worst.max((c - p).abs());
        println!("    {function:<32} {p:6.2}  {c:6.2}  {:+6.2}", c - p);
    }
    println!("    largest difference among the top {TOP}: {worst:.2} points");
    Ok(())
}

/// Stacks reduced to what is compared: weights in samples (perf) or µJ (cg-trace).
#[derive(Default)]
struct Stacks {
    total: f64,
    reached: f64,
    reached_main: f64,
    /// Self weight by function (a name, or `file+0xFDE_START` for stripped code).
    self_weight: BTreeMap<String, f64>,
}

impl Stacks {
    /// A stack of `weight` whose innermost function is `leaf`, through the C entry and
    /// `main` or not.
    fn add(&mut self, leaf: String, [entry, main]: [bool; 2], weight: f64) {
        self.total += weight;
        if entry {
            self.reached += weight;
        }
        if main {
            self.reached_main += weight;
        }
        *self.self_weight.entry(leaf).or_default() += weight;
    }
}

/// `perf script -F ip,sym,dso`: one block per sample, a line per frame, leaf first
/// (`\t<ip hex> <symbol> (<file>)`); kernel frames are left out, as cg-trace's are here.
fn perf_stacks(script: &str, fdes: &mut Fdes) -> Result<Stacks> {
    let mut stacks = Stacks::default();
    for sample in script.split("\n\n") {
        let frames: Vec<(u64, &str, &str)> = sample
            .lines()
            .filter_map(|line| {
                let (ip, rest) = line.trim().split_once(' ')?;
                let (symbol, file) = rest.rsplit_once(" (")?;
                Some((
                    u64::from_str_radix(ip, 16).ok()?,
                    symbol,
                    file.strip_suffix(')')?,
                ))
            })
            .filter(|(_, _, file)| !file.starts_with('['))
            .collect();
        // The innermost frame that is not inlined (perf writes those `name (inlined)`).
        let Some(&(ip, symbol, file)) = frames.iter().find(|(_, _, file)| *file != "inlined")
        else {
            continue;
        };
        let leaf = if symbol == "[unknown]" {
            fdes.learn(file)?;
            fdes.function(base_name(file), ip)
        } else {
            symbol.to_string()
        };
        let reached = |name: &str| frames.iter().any(|(_, s, _)| *s == name);
        stacks.add(leaf, [reached(ENTRY), reached("main")], 1.0);
    }
    Ok(stacks)
}

/// cg-trace's folded stacks (`comm pid;outermost;...;leaf µJ`): frames without a name read
/// `file+0xOFFSET`, named ones `function (file:line)`; kernel frames (` [k]`) and the
/// energy no sample stands for (`[unsampled]`) are left out.
fn folded_stacks(text: &str, fdes: &Fdes) -> Stacks {
    let mut stacks = Stacks::default();
    for line in text.lines() {
        let Some((stack, uj)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(uj) = uj.parse::<f64>() else { continue };
        let frames: Vec<&str> = stack
            .split(';')
            .skip(1)
            .filter(|f| !f.ends_with(" [k]"))
            .collect();
        // The innermost frame that is not inlined, as for perf.
        let Some(leaf) = frames.iter().rev().find(|f| !f.ends_with(" (inlined)")) else {
            continue;
        };
        if leaf.starts_with('[') {
            continue;
        }
        let unnamed = leaf
            .rsplit_once("+0x")
            .and_then(|(file, offset)| Some((file, u64::from_str_radix(offset, 16).ok()?)));
        let leaf = match unnamed {
            Some((file, offset)) => fdes.function(file, offset),
            None => leaf.split(" (").next().unwrap_or(leaf).to_string(),
        };
        let reached = |name: &str| frames.iter().any(|f| f.split(" (").next() == Some(name));
        stacks.add(leaf, [reached(ENTRY), reached("main")], uj);
    }
    stacks
}

/// The FDE ranges (`[start, end)`, sorted) of each file met, by base name.
#[derive(Default)]
struct Fdes(HashMap<String, Vec<(u64, u64)>>);

impl Fdes {
    /// Reads a file's FDE ranges once.
    fn learn(&mut self, path: &str) -> Result<()> {
        let name = base_name(path).to_string();
        if self.0.contains_key(&name) {
            return Ok(());
        }
        let dump = Command::new("readelf")
            .args(["--debug-dump=frames"])
            .arg(PathBuf::from(path))
            .stderr(Stdio::null())
            .output()
            .with_context(|| format!("readelf {path}"))?;
        let text = String::from_utf8_lossy(&dump.stdout);
        let mut ranges: Vec<(u64, u64)> = text
            .split_whitespace()
            .filter_map(|word| {
                let (start, end) = word.strip_prefix("pc=")?.split_once("..")?;
                Some((
                    u64::from_str_radix(start, 16).ok()?,
                    u64::from_str_radix(end, 16).ok()?,
                ))
            })
            .collect();
        ranges.sort_unstable();
        self.0.insert(name, ranges);
        Ok(())
    }

    /// `file+0xSTART` of the FDE holding `address`, or `file+?` when none does.
    fn function(&self, file: &str, address: u64) -> String {
        let ranges = self.0.get(file).map(Vec::as_slice).unwrap_or_default();
        let at = ranges.partition_point(|&(start, _)| start <= address);
        match at.checked_sub(1).map(|i| ranges[i]) {
            Some((start, end)) if address < end => format!("{file}+{start:#x}"),
            _ => format!("{file}+?"),
        }
    }
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `len` bytes of text-like input (words drawn from a small vocabulary by a fixed
/// xorshift, a line of noise now and then), the same on every machine.
fn input(len: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "energy",
        "joule",
        "watt",
        "sample",
        "stack",
        "frame",
        "kernel",
        "thread",
        "process",
        "counter",
        "interval",
        "measured",
        "estimated",
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
    ];
    let mut out = Vec::with_capacity(len + 64);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    while out.len() < len {
        let r = next();
        if r % 97 == 0 {
            out.extend((0..32).map(|_| (next() >> 24) as u8));
            out.push(b'\n');
        } else {
            out.extend_from_slice(WORDS[(r >> 8) as usize % WORDS.len()].as_bytes());
            out.push(if r % 13 == 0 { b'\n' } else { b' ' });
        }
    }
    out.truncate(len);
    out
}
