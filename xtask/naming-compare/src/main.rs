//! Issue 22's measurement: names the same file addresses down to inlined functions and
//! source lines through cg-agent (its ELF symbols + addr2line 0.25 line tables) and through
//! blazesym, and prints what each costs (load, ns per address cold and warm, memory), as
//! medians of interleaved rounds, each round a fresh process per tool and file, and how far
//! they agree, with disagreements judged by binutils' `addr2line`.
//!
//! `naming-compare [--samples N] [--rounds R] [--cg-trace DEBUG-BUILD]` (`--at FILE
//! 0xADDR`: both answers at one address); run by `cargo xtask bench --functions
//! --naming`. Figures are printed, never asserted: compare the ratios of one run.

mod agree;
mod inputs;
mod tools;

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    path::{Path, PathBuf},
    process::Command,
    sync::atomic::{AtomicUsize, Ordering},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use cg_agent::functions::debuginfo::DebugDirs;

use crate::{
    agree::Agreement,
    inputs::Input,
    tools::{Blazesym, CgAgent, Frame},
};

/// Counts the heap bytes live, so that each tool's kept memory can be read.
struct Counting;

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const TOOLS: [&str; 2] = ["cg-agent", "blazesym"];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, tool, file, addresses] = args.as_slice()
        && flag == "--measure"
    {
        return measure(tool, Path::new(file), Path::new(addresses));
    }
    if let [flag, file, vaddr] = args.as_slice()
        && flag == "--at"
    {
        return at(Path::new(file), vaddr);
    }
    let value = |name: &str, default: usize| -> Result<usize> {
        match args.iter().position(|a| a == name) {
            Some(i) => args
                .get(i + 1)
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{name} takes a number")),
            None => Ok(default),
        }
    };
    let cg_trace = match args.iter().position(|a| a == "--cg-trace") {
        Some(i) => PathBuf::from(args.get(i + 1).context("--cg-trace takes a path")?),
        None => inputs::default_cg_trace(),
    };
    compare(
        value("--samples", 200_000)?,
        value("--rounds", 3)?,
        &cg_trace,
    )
}

/// `--at FILE 0xADDR`: both tools' answers at one address, for checking by hand.
fn at(path: &Path, vaddr: &str) -> Result<()> {
    let vaddr = u64::from_str_radix(vaddr.trim_start_matches("0x"), 16)
        .with_context(|| format!("{vaddr}: not a hexadecimal address"))?;
    let dirs = DebugDirs::default();
    let cg = CgAgent::open(path, &dirs)?;
    println!("symbol table: {:?}", cg.symbol(vaddr));
    println!("addr2line:    {:?}", cg.source_frames(vaddr));
    println!(
        "blazesym:     {:?}",
        Blazesym::open(path, &dirs).frames(vaddr)?
    );
    Ok(())
}

/// What one tool cost on one file, in one fresh process.
#[derive(Clone, Copy, Default)]
struct Figures {
    /// cg-agent only: reading the symbol tables (which cg-trace does with or without lines).
    symbols_ms: f64,
    /// Up to the first address named, symbols included.
    load_ms: f64,
    cold_ns: f64,
    warm_ns: f64,
    /// blazesym only: all the addresses in one call, warm.
    batched_ns: f64,
    /// cg-agent only: the heap its symbols keep.
    symbols_heap_mib: f64,
    heap_mib: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
}

impl Figures {
    fn to_line(self) -> String {
        let values = [
            self.symbols_ms,
            self.load_ms,
            self.cold_ns,
            self.warm_ns,
            self.batched_ns,
            self.symbols_heap_mib,
            self.heap_mib,
            self.rss_mib,
            self.peak_rss_mib,
        ];
        let values: Vec<String> = values.iter().map(f64::to_string).collect();
        format!("figures {}", values.join(" "))
    }

    fn from_line(line: &str) -> Option<Self> {
        let values: Vec<f64> = line
            .strip_prefix("figures ")?
            .split(' ')
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        let [
            symbols_ms,
            load_ms,
            cold_ns,
            warm_ns,
            batched_ns,
            symbols_heap_mib,
            heap_mib,
            rss_mib,
            peak_rss_mib,
        ] = values.as_slice()
        else {
            return None;
        };
        Some(Figures {
            symbols_ms: *symbols_ms,
            load_ms: *load_ms,
            cold_ns: *cold_ns,
            warm_ns: *warm_ns,
            batched_ns: *batched_ns,
            symbols_heap_mib: *symbols_heap_mib,
            heap_mib: *heap_mib,
            rss_mib: *rss_mib,
            peak_rss_mib: *peak_rss_mib,
        })
    }
}

/// The child: one tool, one file, its addresses; prints one line of [`Figures`].
fn measure(tool: &str, path: &Path, addresses: &Path) -> Result<()> {
    let addresses = inputs::read_addresses(addresses)?;
    let Some(&first) = addresses.first() else {
        bail!("no addresses");
    };
    let dirs = DebugDirs::default();
    // Resets VmHWM to the current RSS (Linux 4.0 and later).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (heap_before, rss_before) = (LIVE_BYTES.load(Ordering::Relaxed), rss_kib("VmRSS:"));
    let heap_mib = || {
        LIVE_BYTES
            .load(Ordering::Relaxed)
            .saturating_sub(heap_before) as f64
            / (1 << 20) as f64
    };
    let started = Instant::now();
    let (mut symbols_ms, mut symbols_heap_mib) = (f64::NAN, f64::NAN);
    let (cg, blazesym) = match tool {
        "cg-agent" => {
            let symbols = CgAgent::symbols(path, &dirs)?;
            symbols_ms = started.elapsed().as_secs_f64() * 1e3;
            symbols_heap_mib = heap_mib();
            (Some(CgAgent::with_lines(path, symbols, &dirs)?), None)
        }
        "blazesym" => (None, Some(Blazesym::open(path, &dirs))),
        _ => bail!("unknown tool {tool}"),
    };
    let frames = |vaddr: u64| -> Vec<Frame> {
        match (&cg, &blazesym) {
            (Some(cg), _) => cg.frames(vaddr),
            (_, Some(b)) => b.frames(vaddr).unwrap_or_default(),
            _ => Vec::new(),
        }
    };
    // Both read their files lazily: the first address opens them.
    black_box(frames(first));
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let pass = || {
        let started = Instant::now();
        for &vaddr in &addresses {
            black_box(frames(vaddr));
        }
        started.elapsed().as_secs_f64() * 1e9 / addresses.len() as f64
    };
    let (cold_ns, warm_ns) = (pass(), pass());
    // Memory before the batched pass, whose answers (all the addresses' frames at once)
    // would count as the tool's.
    let mib = |kib: f64| kib / 1024.0;
    let (heap_mib, rss_mib, peak_rss_mib) = (
        heap_mib(),
        mib(rss_kib("VmRSS:") - rss_before),
        mib(rss_kib("VmHWM:") - rss_before),
    );
    let batched_ns = match &blazesym {
        Some(b) => {
            let started = Instant::now();
            black_box(b.frames_batched(&addresses)?);
            started.elapsed().as_secs_f64() * 1e9 / addresses.len() as f64
        }
        None => f64::NAN,
    };
    let figures = Figures {
        symbols_ms,
        load_ms,
        cold_ns,
        warm_ns,
        batched_ns,
        symbols_heap_mib,
        heap_mib,
        rss_mib,
        peak_rss_mib,
    };
    println!("{}", figures.to_line());
    drop((cg, blazesym));
    Ok(())
}

/// A line of /proc/self/status in KiB.
fn rss_kib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with(field))?;
            line[field.len()..].split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(f64::NAN)
}

/// Runs a measuring child.
fn run_child(tool: &str, input: &Input, addresses: &Path) -> Result<Figures> {
    let output = Command::new("/proc/self/exe")
        .arg("--measure")
        .arg(tool)
        .arg(&input.path)
        .arg(addresses)
        .output()
        .context("running a measuring child")?;
    let text = String::from_utf8_lossy(&output.stdout);
    match text.lines().find_map(Figures::from_line) {
        Some(figures) => Ok(figures),
        None => bail!(
            "{tool} on {}: {}",
            input.path.display(),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn compare(samples: usize, rounds: usize, cg_trace: &Path) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("naming-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = compare_in(&dir, samples, rounds, cg_trace);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn compare_in(dir: &Path, samples: usize, rounds: usize, cg_trace: &Path) -> Result<()> {
    let inputs = inputs::prepare(dir, cg_trace)?;
    let dirs = DebugDirs::default();
    println!(
        "naming {samples} addresses per file, cg-agent (ELF symbols + addr2line 0.25) against \
         blazesym 0.2.7 (code info, inlined functions, debug dirs {:?})",
        dirs.0
    );
    let mut address_files: Vec<PathBuf> = Vec::new();
    let mut agreements = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        let cg = CgAgent::open(&input.path, &dirs)?;
        let functions: Vec<(u64, u64)> = cg.functions().collect();
        if functions.is_empty() {
            bail!("{}: no function symbols", input.path.display());
        }
        let addresses = inputs::addresses(&functions, samples);
        let file = dir.join(format!("addresses-{i}"));
        inputs::write_addresses(&file, &addresses)?;
        address_files.push(file);
        let blazesym = Blazesym::open(&input.path, &dirs);
        // The two engines' own answers (DWARF names), and both as cg-trace would name them.
        let (mut dwarf, mut named) = (Agreement::default(), Agreement::default());
        let mut errors = 0usize;
        for &vaddr in &addresses {
            let theirs = blazesym.frames(vaddr).unwrap_or_else(|_| {
                errors += 1;
                Vec::new()
            });
            let (ours, symbol) = (cg.dwarf_frames(vaddr), cg.symbol(vaddr));
            named.add(
                vaddr,
                tools::named_as_cg_trace(ours.clone(), symbol),
                tools::named_as_cg_trace(theirs.clone(), symbol),
            );
            dwarf.add(vaddr, ours, theirs);
        }
        println!();
        println!(
            "{}: {} functions with a size, symbols from {:?}{}",
            input.label,
            functions.len(),
            cg.source,
            if errors > 0 {
                format!("; blazesym errors: {errors}")
            } else {
                String::new()
            }
        );
        println!("  DWARF as each gives it (names from DWARF, as binutils addr2line):");
        print_agreement(&input.path, &dwarf)?;
        println!("  as cg-trace names frames (outermost by its symbol table name):");
        print_agreement(&input.path, &named)?;
        agreements.push((dwarf, named));
    }

    println!();
    println!("timing: {rounds} rounds, tools and files interleaved, a fresh process each");
    let mut figures = vec![[const { Vec::<Figures>::new() }, const { Vec::new() }]; inputs.len()];
    for round in 0..rounds {
        for (i, input) in inputs.iter().enumerate() {
            // Alternate which tool goes first, so that neither always finds the page cache
            // warmed by the other.
            for t in 0..2 {
                let tool = (t + round + i) % 2;
                figures[i][tool].push(run_child(TOOLS[tool], input, &address_files[i])?);
            }
        }
        eprint!(".");
    }
    eprintln!();
    print_table(&inputs, &figures, &agreements);
    Ok(())
}

fn print_agreement(path: &Path, a: &Agreement) -> Result<()> {
    let agree =
        |count: usize| format!("{:.3} % ({} differ)", a.percent(count), a.addresses - count);
    println!(
        "  agree on innermost name {}, file:line {} (full path {}), inline depth {}, all three \
         {}",
        agree(a.name),
        agree(a.file_line),
        agree(a.path_line),
        agree(a.depth),
        agree(a.all)
    );
    println!(
        "  with a line: cg-agent {:.2} %, blazesym {:.2} %; in an inlined function: cg-agent \
         {:.2} %, blazesym {:.2} %; named by one only: cg-agent {}, blazesym {}",
        a.percent(a.cg_lines),
        a.percent(a.blazesym_lines),
        a.percent(a.cg_inlined),
        a.percent(a.blazesym_inlined),
        a.only_cg,
        a.only_blazesym
    );
    if a.examples.is_empty() {
        return Ok(());
    }
    let vaddrs: Vec<u64> = a.examples.iter().map(|e| e.vaddr).collect();
    let referee = agree::referee(path, &vaddrs).unwrap_or_else(|err| {
        println!("  (no referee: {err:#})");
        vec![None; vaddrs.len()]
    });
    let show = |frames: &[Frame]| -> String {
        frames
            .iter()
            .map(|f| {
                let file = f.file.as_deref().map_or("??", agree::base_name);
                let line = f.line.map_or("?".into(), |l| l.to_string());
                format!("{} ({file}:{line})", f.function)
            })
            .collect::<Vec<_>>()
            .join(" < ")
    };
    let (mut cg_right, mut blazesym_right, mut judged) = (0, 0, 0);
    println!("  disagreements (innermost first; referee: binutils addr2line -i -f -C):");
    for (example, referee) in a.examples.iter().zip(&referee) {
        println!("  {:#x} {}:", example.vaddr, example.kind);
        println!("    cg-agent: {}", show(&example.cg));
        println!("    blazesym: {}", show(&example.blazesym));
        if let Some(frames) = referee {
            let text: Vec<String> = frames
                .iter()
                .map(|(name, file, line)| format!("{name} ({file}:{line})"))
                .collect();
            println!("    binutils: {}", text.join(" < "));
            let (cg, blazesym) = agree::verdict(example, frames);
            judged += 1;
            cg_right += usize::from(cg);
            blazesym_right += usize::from(blazesym);
        }
    }
    println!(
        "  referee on {judged} disagreements: agrees with cg-agent on {cg_right}, with \
         blazesym on {blazesym_right}"
    );
    Ok(())
}

fn print_table(
    inputs: &[Input],
    figures: &[[Vec<Figures>; 2]],
    agreements: &[(Agreement, Agreement)],
) {
    println!();
    println!(
        "medians; ratio = blazesym / cg-agent (< 1: blazesym cheaper); memory after the cold \
         and warm passes: heap kept, RSS growth (blazesym maps its files: their pages count \
         here), peak RSS growth"
    );
    for ((input, [cg, blazesym]), agreement) in inputs.iter().zip(figures).zip(agreements) {
        let m = |runs: &[Figures], f: fn(&Figures) -> f64| median(runs.iter().map(f).collect());
        println!();
        println!("{}", input.label);
        println!(
            "  {:<28} {:>12} {:>12} {:>8}",
            "", "cg-agent", "blazesym", "ratio"
        );
        let row = |label: &str, f: fn(&Figures) -> f64, digits: usize| {
            let (a, b) = (m(cg, f), m(blazesym, f));
            println!(
                "  {label:<28} {a:>12.digits$} {b:>12.digits$} {:>8.2}",
                b / a
            );
        };
        println!(
            "  {:<28} {:>12.1} {:>12}",
            "symbol tables, ms",
            m(cg, |f| f.symbols_ms),
            "-"
        );
        row("load + first address, ms", |f| f.load_ms, 1);
        row("cold pass, ns/address", |f| f.cold_ns, 0);
        row("warm pass, ns/address", |f| f.warm_ns, 0);
        println!(
            "  {:<28} {:>12} {:>12.0}",
            "warm, one batch, ns/address",
            "-",
            m(blazesym, |f| f.batched_ns)
        );
        println!(
            "  {:<28} {:>12.1} {:>12}",
            "heap of symbol tables, MiB",
            m(cg, |f| f.symbols_heap_mib),
            "-"
        );
        row("heap kept, MiB", |f| f.heap_mib, 1);
        row("RSS growth, MiB", |f| f.rss_mib, 1);
        row("peak RSS growth, MiB", |f| f.peak_rss_mib, 1);
        for (label, a) in [("DWARF", &agreement.0), ("as named", &agreement.1)] {
            println!(
                "  agree ({label}): name {:.3} %, file:line {:.3} %, depth {:.3} %, all {:.3} %",
                a.percent(a.name),
                a.percent(a.file_line),
                a.percent(a.depth),
                a.percent(a.all)
            );
        }
    }
}
