//! cg-trace's user-space agent.
//!
//! Data flows one way:
//!
//! ```text
//!  probes (eBPF maps, ring buffer) ─┐
//!                                   ├─> accounting (one step, one idle fit) ─> report ─> export
//!  sources (energy counters) ───────┘    (session samples both each interval)    (ui, serve)
//! ```
//!
//! - [`probes`] loads cg-ebpf and turns kernel data into plain types; nothing about energy.
//! - [`sources`] reads energy counters (RAPL through perf or powercap, NVIDIA GPUs through
//!   NVML, a power meter's log) or estimates them (model); [`inventory`] lists them
//!   (`cg-trace sources`).
//! - [`attribution`] is pure: it splits each domain's energy into idle, targets and other.
//! - [`accounting`] is pure: the per-interval step (a snapshot's activity to an attributed
//!   interval) and the running idle fit that the report, the live view and [`serve`] share.
//! - [`session`] runs a mode (wrap, attach, system) and records every interval; [`run_config`]
//!   turns the command line into its configuration, [`app`] runs it and writes the outputs.
//! - [`report`] builds the report model (and [`report::read`] reads a written one back);
//!   [`export`] writes it; [`compare`] compares two read reports, and [`diff`] is the
//!   subcommand that writes the comparison through the renderer asked for; [`interleaved`]
//!   is `cg-trace compare` (two commands measured head to head, then compared).
//! - [`serve`] is the long-running exporter (`cg-trace serve`): Prometheus metrics over HTTP.
//! - [`ui`] is the live terminal view (`cg-trace top`, `--tui`); it reads
//!   [`report::live`], the report's counterpart while a run goes on.
//! - [`functions`] is function-level profiling's user-space half (SPECs, ELF symbols,
//!   CPython, symbolization); its kernel half is in [`probes`].
//! - [`cgroup`] reads a process's cgroup and what its path says (container, pod, unit);
//!   [`grouping`] lists the ways processes are grouped (`--group-by`).
//! - [`console`] is what cg-trace says on stderr besides the summary (`-q`, the log).
//! - [`printable`] shows text from outside (names, command lines, paths) with its control
//!   characters escaped, in every text output.
//! - [`fast_hash`] is the hash map of the per-interval path (keys the kernel assigns).
//! - [`small_map`] is the small sorted map each process's per-domain and per-thread maps
//!   use (a run may see millions of processes).
//! - [`manual`] generates the shell completions and the man page from the command line.
//! - [`privileges`] decides whom a run is for (sudo's user, or ourselves); [`output`] creates
//!   every file cg-trace writes, as that user, without following links.

pub mod accounting;
pub mod app;
pub mod attribution;
pub mod cgroup;
pub mod cli;
pub mod compare;
pub mod console;
pub mod diff;
pub mod export;
pub mod fast_hash;
pub mod functions;
pub mod grouping;
pub mod host;
pub mod interleaved;
pub mod inventory;
pub mod manual;
pub mod output;
pub mod printable;
pub mod privileges;
pub mod probes;
pub mod report;
pub mod run_config;
pub mod serve;
pub mod session;
pub mod small_map;
pub mod sources;
pub mod ui;
