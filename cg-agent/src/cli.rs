//! The command line (a contract: scripts depend on these words). Parsing only; `app` turns
//! the parsed arguments into a run; the hint for a command given without `--` is here too.

use std::{collections::BTreeMap, ffi::OsString, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{grouping::GroupBy, session::IdleWatts, sources::SourceChoice};

pub(crate) const EXAMPLES: &str = "\
Examples:
  cg-trace -- ./build.sh --release         run a command, report its energy and its children's
  sudo cg-trace --pid 1234,1240 -o run.json attach to running processes until Ctrl-C
  sudo cg-trace --all --duration 10         the whole machine for 10 s
  cg-trace --source model --model-watts 8:45 -- python3 train.py
  cg-trace --power-log power.csv -- ./bench  a wall-power meter's log as the energy truth
  cg-trace sources                          what this machine can measure (no root needed)
  sudo cg-trace top                         live view of the whole machine (q quits, ? keys)
  cg-trace --tui -- ./app                   live view of a command; its output goes to a file
  cg-trace --func 'compress_*' -- ./app     calls, time and energy of chosen functions
  cg-trace --profile --flamegraph e.svg -- python3 train.py   energy flamegraph

Needs root, or CAP_BPF and CAP_PERFMON. Under sudo the command runs as the invoking user.
Every figure says whether it was measured (RAPL, NVML, a meter) or estimated (the built-in
power model).";

/// `cg-trace --version`: the version, the commit built and the eBPF object inside (both from
/// build.rs).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("CG_TRACE_GIT_COMMIT"),
    "\neBPF object: ",
    env!("CG_TRACE_EBPF_INFO"),
);

/// cg-trace: how many joules a process, and each of its children, cost. No instrumentation.
#[derive(Debug, Parser)]
#[command(name = "cg-trace", version, long_version = LONG_VERSION, about, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub subcommand: Option<Command>,

    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands; without one, cg-trace traces (`-- CMD`, `--pid`, `--all`), or, with nothing
/// to trace and a terminal on stdout, runs `top`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the energy sources this machine offers (perf RAPL, powercap, NVML GPUs, a power
    /// log given with --power-log, the model), their domains, whether they can be read with
    /// the current privileges and why not, and which ones `--source auto` would use. Needs no
    /// root.
    Sources(SourcesArgs),
    /// Live view: the whole machine's power per process, like htop (with --pid or -- CMD,
    /// those targets). q quits, ? lists the keys; the report is written on quit with -o.
    /// Options go after `top`
    Top(Box<RunArgs>),
    /// Print a shell completion script for cg-trace on stdout, e.g.
    /// `cg-trace completions bash > /usr/share/bash-completion/completions/cg-trace`
    /// (the install script places them)
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout: `cg-trace man-page | man -l -`; with a
    /// subcommand, its own page (cg-trace-diff(1): `cg-trace man-page diff`)
    #[command(hide = true)]
    ManPage(ManPageArgs),
    /// Compare two reports: the change in energy and CPU time of the targets, the whole
    /// machine, per domain, process group and function; with --repeat runs on both sides, a
    /// Mann-Whitney U test per row. Exits 3 on a regression of what --gate names (default:
    /// the targets' energy) beyond --max-increase, 2 on a report it cannot read
    Diff(DiffArgs),
    /// Measure two shell commands head to head, runs interleaved (A B A B ...), and print
    /// the diff of B against A: `cg-trace compare -n 10 'CMD_A' 'CMD_B'`. Needs root, like a
    /// run; exits 3 on a regression beyond --max-increase
    Compare(CompareArgs),
    /// Turn a JSON report into one self-contained HTML page that opens offline (power over
    /// time, energy per process group and function, repeat statistics, sources and quality):
    /// `cg-trace report RUN.json -o report.html`
    Report(ReportArgs),
    /// Exporter: trace the whole machine until SIGINT or SIGTERM and serve its energy per
    /// domain and process group as Prometheus metrics on http://LISTEN/metrics (and
    /// /healthz). Needs root, like --all. The source options go before or after `serve`
    Serve(ServeArgs),
}

/// Options of `cg-trace report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The report (JSON, as `-o FILE.json` writes it)
    #[arg(value_name = "RUN.json")]
    pub input: PathBuf,

    /// The HTML page to write (`-` for standard output)
    #[arg(short = 'o', long = "output", value_name = "FILE.html")]
    pub html_output: PathBuf,
}

/// Options of `cg-trace serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to serve on (a loopback address unless told otherwise)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9464")]
    pub listen: std::net::SocketAddr,

    /// Attribution interval in milliseconds (the power gauges cover the last one)
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub interval: u64,

    /// Process groups exported with their own series (by energy; the rest is `other`)
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub top: u64,

    /// What makes a process group: the command name, the cgroup (container, Kubernetes pod,
    /// systemd unit or path; series labelled container_id, pod_uid, systemd_unit) or the
    /// systemd unit
    #[arg(long, value_name = "BY", default_value = "comm",
          value_parser = GroupBy::parser(GroupBy::SERIES, false))]
    pub group_by: GroupBy,

    /// Seconds a group without live processes keeps its series before its energy moves to
    /// `exited`
    #[arg(long, value_name = "SECS", default_value_t = 300.0, value_parser = parse_grace)]
    pub grace: f64,

    /// Stop after this long (tests): seconds (2.5) or a span (90s, 1m, 1h30m)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// This node's pod list, for the namespace, pod and container labels of pods' series
    /// (with --group-by cgroup): an https URL answering a PodList (the kubelet's
    /// https://NODE:10250/pods, say), or `off`. Default: in a pod, the cluster's API server
    /// (KUBERNETES_SERVICE_HOST/PORT), asked for the pods of the node NODE_NAME names
    #[arg(long, value_name = "URL|off")]
    pub kube_pods_url: Option<crate::serve::kube::PodsUrl>,

    /// Directory holding the service account's `token` and `ca.crt`, for the pod list
    #[arg(long, value_name = "DIR", default_value = crate::serve::kube::DEFAULT_CREDENTIALS)]
    pub kube_credentials: PathBuf,

    #[command(flatten)]
    pub sources: SourceArgs,

    /// Benchmark (`cargo xtask bench --serve`): simulate DAYS of process churn through the
    /// accounting code, print the memory at checkpoints and the time of a scrape; traces
    /// nothing
    #[arg(long, value_name = "DAYS", hide = true)]
    pub bench_churn: Option<f64>,
}

/// `--accounting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccountingArg {
    Iterator,
    Switch,
}

impl From<AccountingArg> for crate::probes::Accounting {
    fn from(arg: AccountingArg) -> Self {
        match arg {
            AccountingArg::Iterator => crate::probes::Accounting::Iterator,
            AccountingArg::Switch => crate::probes::Accounting::Switch,
        }
    }
}

fn parse_grace(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86_400.0 * 30.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?}: seconds from 0 to 2592000 (30 days)")),
    }
}

/// Options of `cg-trace man-page`.
#[derive(Debug, Args)]
pub struct ManPageArgs {
    /// The subcommand whose page to print (cg-trace-SUBCOMMAND(1)); none: cg-trace(1)
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,

    /// Print the file names of all the pages instead, one a line (cg-trace.1,
    /// cg-trace-diff.1, ...)
    #[arg(long, conflicts_with = "subcommand")]
    pub list: bool,
}

/// Options of `cg-trace completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Options of `cg-trace diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The base report (JSON, as `-o FILE.json` writes it)
    #[arg(value_name = "BASE.json")]
    pub base: PathBuf,

    /// The new report
    #[arg(value_name = "NEW.json")]
    pub new: PathBuf,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// The gate of `diff` and `compare`.
#[derive(Clone, Debug, Args)]
pub struct GateArgs {
    /// Fail (exit 3) when what --gate names rose by more than PCT percent: significantly,
    /// when both sides have --repeat runs; by the figures alone (untested) otherwise
    #[arg(long, value_name = "PCT")]
    pub max_increase: Option<f64>,

    /// What --max-increase judges (repeatable): targets (the traced command and its
    /// descendants, in total and per top-level domain; the default), total (the whole
    /// machine), group:NAME (a program's processes), function:NAME (module:symbol or symbol)
    #[arg(long, value_name = "WHAT", value_parser = clap::value_parser!(crate::compare::Gate))]
    pub gate: Vec<crate::compare::Gate>,
}

/// Where and how `diff` and `compare` write the comparison.
#[derive(Clone, Debug, Args)]
pub struct OutputArgs {
    /// Output: a text table, a Markdown table (for a pull-request comment), JSON, or a
    /// self-contained HTML page
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,

    /// Write it to FILE instead of standard output
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Options of `cg-trace compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Measured runs of each command
    #[arg(short = 'n', long = "runs", value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,

    /// Unmeasured runs of each command first (interleaved too)
    #[arg(long, value_name = "K", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub warmup: u32,

    /// A shell command run before every run (traced, not counted), e.g. to clear a cache
    #[arg(long, value_name = "CMD")]
    pub prepare: Option<String>,

    /// Pause between runs, in seconds
    #[arg(long, value_name = "SECS", default_value_t = 0.0, value_parser = parse_cooldown)]
    pub cooldown: f64,

    #[command(flatten)]
    pub gate: GateArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The base command, a shell command line (run with `sh -c`)
    #[arg(value_name = "CMD_A")]
    pub command_a: String,

    /// The new command, compared with the base
    #[arg(value_name = "CMD_B")]
    pub command_b: String,
}

/// `cg-trace diff --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    Text,
    Markdown,
    Json,
    Html,
}

/// Options of `cg-trace sources`.
#[derive(Debug, Args)]
pub struct SourcesArgs {
    /// Print JSON (for scripts) instead of a table
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub sources: SourceArgs,
}

/// The options that choose and configure the energy sources: those of a tracing run, `top`,
/// `sources` and `serve` (not of `diff`, `report`, ...). They may also come before the
/// subcommand (`cg-trace --source model top`): [`SourceArgs::after`] joins the two places.
/// No defaults here, so that "not given" is seen; `run_config::source_options` applies them.
#[derive(Clone, Debug, Default, Args)]
#[command(next_help_heading = "Energy sources")]
pub struct SourceArgs {
    /// Energy source of the CPUs and the machine: auto (the default) prefers a measured
    /// source (perf, then powercap) and falls back to the model; NVIDIA GPUs are added when
    /// found
    #[arg(long, value_enum)]
    pub source: Option<SourceChoice>,

    /// Root of the powercap tree (default: /sys/class/powercap; a host can expose its RAPL
    /// zones to a VM this way)
    #[arg(long, value_name = "DIR")]
    pub powercap_root: Option<PathBuf>,

    /// Where the perf event sources are listed, the RAPL `power` and `power_core` PMUs
    /// (default: /sys/bus/event_source/devices)
    #[arg(long, value_name = "DIR")]
    pub perf_root: Option<PathBuf>,

    /// Tests and benchmarks: read the perf counters from files DIR/<pmu>/<event>/cpu<N>
    /// (8-byte counts) instead of opening perf events
    #[arg(long, value_name = "DIR", hide = true)]
    pub perf_counters_from: Option<PathBuf>,

    /// The NVML library to load for NVIDIA GPUs (default: libnvidia-ml.so.1, and no GPU source
    /// when it is missing; a library named here must work)
    #[arg(long, value_name = "FILE", conflicts_with = "no_gpu")]
    pub nvml_lib: Option<PathBuf>,

    /// Do not measure NVIDIA GPUs
    #[arg(long)]
    pub no_gpu: bool,

    /// Where cg-trace keeps what it learns about this machine between runs (each GPU's rest
    /// power, its idle baseline) (default: /var/lib/cg-trace as root, else
    /// $XDG_STATE_HOME/cg-trace)
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// A power meter's log (CSV `time,id,pm1,pm2,sum` or `time,watts`), followed while it
    /// grows: the energy of the whole machine, with RAPL and GPU domains nested inside it
    #[arg(long, value_name = "FILE")]
    pub power_log: Option<PathBuf>,

    /// Power model of the whole machine, idle and fully busy, in watts (estimated figures)
    #[arg(long, value_name = "IDLE:MAX", value_parser = parse_model_watts)]
    pub model_watts: Option<ModelWatts>,
}

impl SourceArgs {
    /// The options given after a subcommand, with those given before it added; one given in
    /// both places is an error (as clap refuses an option given twice).
    pub fn after(self, before: &SourceArgs) -> Result<SourceArgs, String> {
        fn join<T: Clone>(
            after: Option<T>,
            before: &Option<T>,
            name: &str,
        ) -> Result<Option<T>, String> {
            match (after, before) {
                (Some(_), Some(_)) => Err(format!(
                    "{name} was given both before and after the subcommand: give it once"
                )),
                (after, before) => Ok(after.or_else(|| before.clone())),
            }
        }
        let joined = SourceArgs {
            source: join(self.source, &before.source, "--source")?,
            powercap_root: join(self.powercap_root, &before.powercap_root, "--powercap-root")?,
            perf_root: join(self.perf_root, &before.perf_root, "--perf-root")?,
            perf_counters_from: join(
                self.perf_counters_from,
                &before.perf_counters_from,
                "--perf-counters-from",
            )?,
            nvml_lib: join(self.nvml_lib, &before.nvml_lib, "--nvml-lib")?,
            no_gpu: self.no_gpu || before.no_gpu,
            state_dir: join(self.state_dir, &before.state_dir, "--state-dir")?,
            power_log: join(self.power_log, &before.power_log, "--power-log")?,
            model_watts: join(self.model_watts, &before.model_watts, "--model-watts")?,
        };
        if joined.no_gpu && joined.nvml_lib.is_some() {
            return Err("--nvml-lib and --no-gpu cannot be used together".into());
        }
        Ok(joined)
    }

    /// The first source option given, for the subcommands that take none.
    pub fn first_given(&self) -> Option<&'static str> {
        [
            (self.source.is_some(), "--source"),
            (self.powercap_root.is_some(), "--powercap-root"),
            (self.perf_root.is_some(), "--perf-root"),
            (self.perf_counters_from.is_some(), "--perf-counters-from"),
            (self.nvml_lib.is_some(), "--nvml-lib"),
            (self.no_gpu, "--no-gpu"),
            (self.state_dir.is_some(), "--state-dir"),
            (self.power_log.is_some(), "--power-log"),
            (self.model_watts.is_some(), "--model-watts"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }
}

/// Options of a tracing run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Attach to running processes (comma-separated), their threads and the children they
    /// start; stops on Ctrl-C, SIGTERM, --duration, or when all of them have exited
    #[arg(short = 'p', long, value_name = "PID[,PID...]", value_delimiter = ',', conflicts_with_all = ["all", "command"])]
    pub pid: Vec<u32>,

    /// Trace the whole machine, every process
    #[arg(short = 'a', long, conflicts_with = "command")]
    pub all: bool,

    /// Write the report to FILE, in the format its extension names (*.json, *.csv, *.html) or
    /// --format gives; `-` for standard output (JSON unless --format says otherwise; the
    /// wrapped command's stdout then goes to stderr)
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Format of the report written with -o (default: from the file's extension)
    #[arg(long, value_enum, value_name = "FORMAT", requires = "output")]
    pub format: Option<ReportFormat>,

    /// Also write the report as CSV to FILE (next to -o's JSON: both from the same run)
    #[arg(long, value_name = "FILE.csv")]
    pub csv: Option<PathBuf>,

    /// Also write the report as one self-contained HTML page to FILE (charts, tables, the
    /// energy flamegraph with --profile); it opens offline
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,

    /// Attribution interval in milliseconds
    #[arg(long, value_name = "MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub interval: u64,

    /// Stop after this long: seconds (2.5) or a span (90s, 1m, 1h30m); in wrap mode the
    /// command is then sent SIGTERM
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Idle baseline in watts: one figure for a single top-level domain, or DOMAIN=W,...
    /// (default: estimated from the run, see the report's meta.idle_baseline)
    #[arg(long, value_name = "W|DOMAIN=W,...", value_parser = parse_idle_watts)]
    pub idle_watts: Option<IdleWatts>,

    /// Idle calibration before the command starts, in milliseconds (wrap mode, measured
    /// sources; 0 to skip)
    #[arg(long, value_name = "MS", default_value_t = 500, value_parser = parse_calibrate_ms)]
    pub calibrate_ms: u64,

    /// Include a per-interval time series in the report
    #[arg(long)]
    pub timeseries: bool,

    /// Only errors on stderr: no summary, no source line, no warnings (the report has them)
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// Summary: list each process's busiest threads under it (the report always has them)
    #[arg(long)]
    pub threads: bool,

    /// Summary: one row per program name (comm), per process subtree (tree: each child of the
    /// command with its descendants), per cgroup (container, Kubernetes pod, systemd unit,
    /// else the path; also the live view's grouping, where `C` switches it), or per process
    /// (none)
    #[arg(long, value_name = "HOW", default_value = "none",
          value_parser = GroupBy::parser(GroupBy::ROWS, true))]
    pub group_by: GroupBy,

    #[command(flatten)]
    pub view: ViewArgs,

    /// For `cargo xtask bench`: attach the probes but let sched_switch do nothing, to measure
    /// what merely having a program on that hook costs
    #[arg(long, hide = true)]
    pub bench_noop_probes: bool,

    /// How each thread's CPU time is read: `iterator` (the kernel's own runtime of each
    /// thread, read once per interval; no program on context switches) or `switch` (a
    /// program on every context switch: time per CPU, which several RAPL packages and --func
    /// need). Default: switch; the report's meta.accounting says which ran and why
    #[arg(long, value_enum, value_name = "HOW")]
    pub accounting: Option<AccountingArg>,

    // Each of these three sets a help heading of its own, for what follows too.
    #[command(flatten)]
    pub sources: SourceArgs,

    #[command(flatten)]
    pub repeat: RepeatArgs,

    #[command(flatten)]
    pub functions: FunctionArgs,

    /// The command to run and follow, after `--`
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Options of the live view (`cg-trace top`, `--tui`).
#[derive(Clone, Debug, Args)]
pub struct ViewArgs {
    /// Show the live view (as `cg-trace top` does) for the targets: `--tui -- CMD`,
    /// `--tui --pid PID`
    #[arg(long)]
    pub tui: bool,

    /// Live view: how often the figures on screen are renewed, in milliseconds (independent
    /// of --interval; at most once per interval)
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(50..=3_600_000))]
    pub refresh: u64,

    /// Live view, wrap mode: the file that receives the command's stdout and stderr
    /// (default: cg-trace-PID-RANDOM.out in the temporary directory; named on screen)
    #[arg(long, value_name = "FILE")]
    pub command_output: Option<PathBuf>,

    /// Live view, wrap mode: close the view as soon as the command ends (for scripts)
    /// instead of keeping the final figures on screen until `q`
    #[arg(long)]
    pub exit_on_end: bool,

    /// For `cargo xtask bench`: write the live view's frame render times to FILE at the end
    #[arg(long, hide = true, value_name = "FILE")]
    pub bench_frame_stats: Option<PathBuf>,
}

/// Function-level energy: uprobes on chosen functions, and stack sampling.
#[derive(Debug, Args)]
#[command(next_help_heading = "Function-level energy")]
pub struct FunctionArgs {
    /// Energy of chosen functions, [BINARY_OR_LIBRARY:]SYMBOL_GLOB (repeatable, or several
    /// separated by commas; a comma inside <>, () or [] belongs to the symbol): calls,
    /// on-CPU time and energy, inclusive and self. Without a binary, the traced executable;
    /// a library by path or by file name among those the target loads (`libz.so*`). Each
    /// call costs ~2 µs (first instruction emulated) to ~13 µs (single-stepped) of probes
    #[arg(long = "func", value_name = "SPEC")]
    pub func: Vec<String>,

    /// Refuse to probe more functions than this
    #[arg(long, value_name = "N", default_value_t = crate::functions::DEFAULT_FUNC_LIMIT)]
    pub func_limit: usize,

    /// Whole-program energy profile by stack sampling (CPU clock), down to Python functions
    /// on CPython 3.11-3.13
    #[arg(long)]
    pub profile: bool,

    /// Samples per second per CPU for --profile (-F/--freq as in perf and py-spy)
    #[arg(short = 'F', long, visible_alias = "freq", value_name = "HZ", default_value_t = crate::functions::DEFAULT_SAMPLE_HZ,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub sample_hz: u64,

    /// How --profile walks user stacks: auto copies the top 16 KiB of each sampled stack
    /// and unwinds it by the binaries' .eh_frame (code without frame pointers: Rust
    /// release builds, distribution packages), by frame pointer where a file has none; fp
    /// walks frame pointers only (cheapest; stacks of code without them stop early); dwarf
    /// unwinds every sample from the copy
    #[arg(long, value_enum, value_name = "HOW", default_value = "auto")]
    pub stacks: crate::functions::StackWalking,

    /// Functions listed in the report and the summary, by energy
    #[arg(long, value_name = "N", default_value_t = crate::functions::DEFAULT_TOP_FUNCTIONS)]
    pub top_functions: usize,

    /// Write folded stacks weighted by energy in microjoules (implies --profile)
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,

    /// Write an energy flamegraph, SVG (implies --profile)
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,

    /// Write the profile for speedscope: JSON, energy in joules and on-CPU time (implies
    /// --profile)
    #[arg(long, value_name = "FILE.json")]
    pub speedscope: Option<PathBuf>,

    /// Write the profile for pprof, Pyroscope and Parca: gzipped protobuf, energy in
    /// microjoules and on-CPU time in nanoseconds (implies --profile)
    #[arg(long, value_name = "FILE.pb.gz")]
    pub pprof: Option<PathBuf>,

    /// Name native frames by function only, without the source lines and inlined functions
    /// that line tables (DWARF) give
    #[arg(long)]
    pub no_lines: bool,

    /// Where separate debug files of stripped binaries are looked up (repeatable, in order;
    /// replaces the default /usr/lib/debug): DIR/.build-id/xx/rest.debug by build id, and
    /// DIR/<the binary's folder>/<its .gnu_debuglink name>
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dir: Vec<PathBuf>,

    /// For `cargo xtask bench`: function probes that return at once (the cost of an empty
    /// uprobe + uretprobe pair)
    #[arg(long, hide = true)]
    pub bench_empty_func: bool,

    /// For `cargo xtask bench`: time the symbolization of N synthetic samples and exit
    #[arg(long, hide = true, value_name = "N")]
    pub bench_symbolize: Option<usize>,
}

/// The report's format (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// The JSON report (docs/report.md)
    Json,
    /// One row per domain, process and function (and per run with --repeat), units in the
    /// header
    Csv,
    /// One self-contained page that opens offline (as --html writes it)
    Html,
}

impl ReportFormat {
    /// The format a file name's extension names.
    pub fn from_extension(extension: &str) -> Option<Self> {
        match extension {
            "json" => Some(ReportFormat::Json),
            "csv" => Some(ReportFormat::Csv),
            "html" | "htm" => Some(ReportFormat::Html),
            _ => None,
        }
    }
}

/// `--model-watts IDLE:MAX`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelWatts {
    pub idle_w: f64,
    pub max_w: f64,
}

/// The most watts an option may give (`--model-watts`, `--idle-watts`): a megawatt, far above
/// any one machine, and low enough that a year of it stays a finite number of joules.
pub const MAX_WATTS: f64 = 1e6;

fn parse_watts(text: &str) -> Result<f64, String> {
    let w: f64 = text
        .trim()
        .trim_end_matches(['W', 'w'])
        .parse()
        .map_err(|_| format!("{text:?} is not a number of watts"))?;
    if !w.is_finite() || w < 0.0 {
        return Err(format!("{text:?}: watts must be a finite number >= 0"));
    }
    if w > MAX_WATTS {
        return Err(format!(
            "{text:?}: at most {MAX_WATTS:.0} W (a megawatt; one machine draws far less)"
        ));
    }
    Ok(w)
}

fn parse_model_watts(text: &str) -> Result<ModelWatts, String> {
    let (idle, max) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected IDLE:MAX, e.g. 8:45"))?;
    let (idle_w, max_w) = (parse_watts(idle)?, parse_watts(max)?);
    if max_w < idle_w {
        return Err(format!("{text:?}: MAX must be at least IDLE"));
    }
    Ok(ModelWatts { idle_w, max_w })
}

fn parse_idle_watts(text: &str) -> Result<IdleWatts, String> {
    if !text.contains('=') {
        return parse_watts(text).map(IdleWatts::Total);
    }
    let mut map = BTreeMap::new();
    for part in text.split(',').filter(|p| !p.trim().is_empty()) {
        let (domain, watts) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected DOMAIN=W"))?;
        map.insert(domain.trim().to_string(), parse_watts(watts)?);
    }
    Ok(IdleWatts::PerDomain(map))
}

/// The longest `--duration`: a year (much longer overflows the clocks; nobody means it).
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// `--calibrate-ms`: milliseconds, bounded as `--duration` is.
fn parse_calibrate_ms(text: &str) -> Result<u64, String> {
    let ms: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of milliseconds"))?;
    if u128::from(ms) > MAX_DURATION.as_millis() {
        return Err(format!(
            "{text:?}: the calibration can be at most a year ({} ms); 500 (the default) is \
             plenty, 0 skips it",
            MAX_DURATION.as_millis()
        ));
    }
    Ok(ms)
}

/// `--duration`: seconds (`2.5`, `2.5s`) or a humantime span (`90s`, `1m`, `1h30m`, `500ms`).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let duration = match trimmed.strip_suffix('s').unwrap_or(trimmed).parse::<f64>() {
        Ok(seconds) if !seconds.is_finite() || seconds <= 0.0 => {
            return Err(format!(
                "{text:?}: the duration must be more than 0 seconds"
            ));
        }
        Ok(seconds) if seconds > MAX_DURATION.as_secs_f64() => {
            return Err(format!(
                "{text:?}: the duration can be at most a year ({} s)",
                MAX_DURATION.as_secs()
            ));
        }
        Ok(seconds) => Duration::from_secs_f64(seconds),
        Err(_) => humantime::parse_duration(trimmed).map_err(|err| {
            format!(
                "{text:?} is not a duration ({err}): give seconds (2.5) or a span such as 90s, \
                 1m, 1h30m"
            )
        })?,
    };
    if duration.is_zero() {
        return Err(format!(
            "{text:?}: the duration must be more than 0 seconds"
        ));
    }
    if duration > MAX_DURATION {
        return Err(format!(
            "{text:?}: the duration can be at most a year ({} s)",
            MAX_DURATION.as_secs()
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser};

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("cg-trace").chain(args.iter().copied()))
    }

    #[test]
    fn wrap_takes_everything_after_the_double_dash() {
        let cli = parse(&["-o", "r.json", "--", "python3", "-c", "print(1)", "--all"]).unwrap();
        assert_eq!(cli.run.command, ["python3", "-c", "print(1)", "--all"]);
        assert!(!cli.run.all);
        assert_eq!(cli.run.interval, 100);
    }

    #[test]
    fn pids_are_comma_separated_and_exclusive_with_other_modes() {
        assert_eq!(parse(&["--pid", "1,2,3"]).unwrap().run.pid, [1, 2, 3]);
        assert!(parse(&["--pid", "1", "--all"]).is_err());
        assert!(parse(&["--pid", "1", "--", "true"]).is_err());
        assert!(parse(&["--pid", "x"]).is_err());
    }

    #[test]
    fn watts_options_parse_and_reject_nonsense() {
        assert_eq!(
            parse_model_watts("8:45W").unwrap(),
            ModelWatts {
                idle_w: 8.0,
                max_w: 45.0
            }
        );
        assert!(parse_model_watts("45:8").is_err());
        assert!(parse_model_watts("8").is_err());
        assert_eq!(parse_idle_watts("12.5").unwrap(), IdleWatts::Total(12.5));
        match parse_idle_watts("package-0=10,dram-0=2").unwrap() {
            IdleWatts::PerDomain(map) => {
                assert_eq!(map["package-0"], 10.0);
                assert_eq!(map["dram-0"], 2.0);
            }
            other => panic!("{other:?}"),
        }
        assert!(parse_idle_watts("-3").is_err());
        // Finite but absurd: products with seconds would overflow to infinity.
        assert!(
            parse_model_watts("1e308:1.7e308")
                .unwrap_err()
                .contains("at most")
        );
        assert!(parse_model_watts("8:1e7").is_err());
        assert!(parse_model_watts("0:1000000").is_ok());
        assert!(parse_idle_watts("package-0=1e300").is_err());
        assert!(parse_duration("0").is_err());
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
    }

    #[test]
    fn unknown_source_is_rejected() {
        let err = parse(&["--source", "magic", "--all"]).unwrap_err();
        assert!(err.to_string().contains("magic"));
    }

    #[test]
    fn sources_is_a_subcommand_and_takes_the_source_options() {
        let cli = parse(&["sources", "--json", "--powercap-root", "/x"]).unwrap();
        match cli.subcommand {
            Some(Command::Sources(args)) => {
                assert!(args.json);
                assert_eq!(args.sources.powercap_root, Some(PathBuf::from("/x")));
            }
            other => panic!("{other:?}"),
        }
        // Before the subcommand, they reach it too.
        let cli = parse(&["--power-log", "p.csv", "sources"]).unwrap();
        let Some(Command::Sources(args)) = cli.subcommand else {
            panic!("not sources");
        };
        let joined = args.sources.after(&cli.run.sources).unwrap();
        assert_eq!(joined.power_log, Some(PathBuf::from("p.csv")));
        // A command named `sources` is still run after `--`.
        let cli = parse(&["--", "sources", "--json"]).unwrap();
        assert!(cli.subcommand.is_none());
        assert_eq!(cli.run.command, ["sources", "--json"]);
        // The tracing forms are unchanged.
        assert!(parse(&["--all", "--no-gpu"]).unwrap().subcommand.is_none());
        assert_eq!(parse(&["--pid", "7"]).unwrap().run.pid, [7]);
        assert_eq!(
            parse(&["--source", "perf", "--all"])
                .unwrap()
                .run
                .sources
                .source,
            Some(SourceChoice::Perf)
        );
    }

    #[test]
    fn top_is_a_subcommand_and_wrap_still_takes_everything_after_the_double_dash() {
        let cli = parse(&["top", "--refresh", "500", "-o", "r.json"]).unwrap();
        match cli.subcommand {
            Some(Command::Top(args)) => {
                assert_eq!(args.view.refresh, 500);
                assert!(args.command.is_empty() && !args.all);
            }
            other => panic!("{other:?}"),
        }
        // A command named `top` after `--` is a command, not the subcommand.
        let cli = parse(&["--", "top", "-b"]).unwrap();
        assert!(cli.subcommand.is_none());
        assert_eq!(cli.run.command, ["top", "-b"]);
        let cli = parse(&["top", "--pid", "42"]).unwrap();
        assert!(matches!(cli.subcommand, Some(Command::Top(ref a)) if a.pid == [42]));
        // The source options given before `top` reach it too (the app refuses other options
        // before `top`).
        let cli = parse(&["--source", "model", "top"]).unwrap();
        let Some(Command::Top(ref args)) = cli.subcommand else {
            panic!("not top");
        };
        let joined = args.sources.clone().after(&cli.run.sources).unwrap();
        assert_eq!(joined.source, Some(SourceChoice::Model));
        let cli = parse(&["top", "--power-log", "p.csv"]).unwrap();
        assert!(
            matches!(cli.subcommand, Some(Command::Top(ref a)) if a.sources.power_log == Some(PathBuf::from("p.csv")))
        );
        let cli = parse(&["--tui", "--command-output", "out.txt", "--", "make"]).unwrap();
        assert!(cli.run.view.tui);
        assert!(!cli.run.view.exit_on_end);
        let cli = parse(&["--tui", "--exit-on-end", "--", "make"]).unwrap();
        assert!(cli.run.view.exit_on_end);
        assert_eq!(cli.run.view.refresh, 1000);
        assert!(parse(&["top", "--refresh", "10"]).is_err());
        // Nothing at all parses (the app decides: the live view on a terminal, else usage).
        assert!(parse(&[]).unwrap().subcommand.is_none());
    }

    #[test]
    fn function_options_parse() {
        let cli = parse(&[
            "--func",
            "work_*",
            "--func",
            "libz.so*:deflate*",
            "--sample-hz",
            "999",
            "--folded",
            "out.folded",
            "--",
            "true",
        ])
        .unwrap();
        assert_eq!(cli.run.functions.func, ["work_*", "libz.so*:deflate*"]);
        assert_eq!(cli.run.functions.sample_hz, 999);
        assert!(!cli.run.functions.profile);
        assert!(parse(&["--sample-hz", "0", "--all"]).is_err());
        // perf's and py-spy's spelling.
        assert_eq!(
            parse(&["-F", "49", "--all"])
                .unwrap()
                .run
                .functions
                .sample_hz,
            49
        );
        assert_eq!(
            parse(&["--freq", "97", "--all"])
                .unwrap()
                .run
                .functions
                .sample_hz,
            97
        );
        assert_eq!(parse(&["--all"]).unwrap().run.functions.func_limit, 1000);
    }

    #[test]
    fn durations_take_seconds_and_spans_and_are_bounded() {
        let secs = |text| parse_duration(text).map(|d| d.as_secs_f64());
        assert_eq!(secs("2.5"), Ok(2.5));
        assert_eq!(secs("1s"), Ok(1.0));
        assert_eq!(secs("1m"), Ok(60.0));
        assert_eq!(secs("90s"), Ok(90.0));
        assert_eq!(secs("1h30m"), Ok(5400.0));
        assert_eq!(secs("500ms"), Ok(0.5));
        for bad in [
            "1e20", "inf", "NaN", "-1", "0s", "0ms", "400days", "soon", "",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(
            parse_duration("1e20")
                .unwrap_err()
                .contains("at most a year")
        );
        // Through clap, as the binary parses it.
        assert!(parse(&["--all", "--duration", "1e20"]).is_err());
        assert_eq!(
            parse(&["--all", "--duration", "1m"]).unwrap().run.duration,
            Some(Duration::from_secs(60))
        );
    }

    #[test]
    fn the_calibration_is_bounded_as_the_duration_is() {
        assert_eq!(parse_calibrate_ms("0"), Ok(0));
        assert_eq!(parse_calibrate_ms("60000"), Ok(60_000));
        assert_eq!(
            parse_calibrate_ms(&MAX_DURATION.as_millis().to_string()),
            Ok(MAX_DURATION.as_millis() as u64)
        );
        for bad in [
            "18446744073709551615",
            "31622400001",
            "-1",
            "1.5",
            "soon",
            "",
        ] {
            assert!(parse_calibrate_ms(bad).is_err(), "{bad}");
        }
        assert!(
            parse_calibrate_ms("18446744073709551615")
                .unwrap_err()
                .contains("at most a year")
        );
        // Through clap, as the binary parses it; the default stays.
        assert!(parse(&["--calibrate-ms", "18446744073709551615", "--", "true"]).is_err());
        assert_eq!(parse(&["--", "true"]).unwrap().run.calibrate_ms, 500);
    }

    #[test]
    fn format_needs_an_output_and_knows_json_and_csv() {
        let cli = parse(&["--all", "-o", "run.out", "--format", "json"]).unwrap();
        assert_eq!(cli.run.format, Some(ReportFormat::Json));
        assert!(parse(&["--all", "--format", "json"]).is_err());
        let cli = parse(&["--all", "-o", "-", "--format", "csv"]).unwrap();
        assert_eq!(cli.run.format, Some(ReportFormat::Csv));
        assert!(parse(&["--all", "-o", "r", "--format", "xml"]).is_err());
        assert_eq!(
            ReportFormat::from_extension("json"),
            Some(ReportFormat::Json)
        );
        assert_eq!(ReportFormat::from_extension("csv"), Some(ReportFormat::Csv));
        assert_eq!(
            ReportFormat::from_extension("html"),
            Some(ReportFormat::Html)
        );
        assert_eq!(ReportFormat::from_extension("txt"), None);
    }

    #[test]
    fn completions_and_the_man_page_are_subcommands() {
        let cli = parse(&["completions", "zsh"]).unwrap();
        assert!(matches!(
            cli.subcommand,
            Some(Command::Completions(CompletionsArgs {
                shell: clap_complete::Shell::Zsh
            }))
        ));
        assert!(parse(&["completions", "tcsh"]).is_err());
        assert!(matches!(
            parse(&["man-page"]).unwrap().subcommand,
            Some(Command::ManPage(ManPageArgs {
                subcommand: None,
                list: false
            }))
        ));
        assert!(matches!(
            parse(&["man-page", "diff"]).unwrap().subcommand,
            Some(Command::ManPage(ManPageArgs { subcommand: Some(ref s), .. })) if s == "diff"
        ));
        // A command named `completions` is still run after `--`.
        assert_eq!(
            parse(&["--", "completions"]).unwrap().run.command,
            ["completions"]
        );
    }

    #[test]
    fn diff_takes_two_reports_a_threshold_and_a_format() {
        let cli = parse(&[
            "diff",
            "a.json",
            "b.json",
            "--max-increase",
            "5",
            "--format",
            "markdown",
        ])
        .unwrap();
        let Some(Command::Diff(args)) = cli.subcommand else {
            panic!("not diff");
        };
        assert_eq!(args.base, PathBuf::from("a.json"));
        assert_eq!(args.new, PathBuf::from("b.json"));
        assert_eq!(args.gate.max_increase, Some(5.0));
        assert_eq!(args.output.format, DiffFormat::Markdown);
        assert!(args.gate.gate.is_empty() && args.output.output.is_none());
        assert!(parse(&["diff", "a.json"]).is_err());
        let html = parse(&["diff", "a", "b", "--format", "html", "-o", "d.html"]).unwrap();
        assert!(matches!(html.subcommand, Some(Command::Diff(a))
            if a.output.format == DiffFormat::Html
                && a.output.output == Some(PathBuf::from("d.html"))));
        assert!(parse(&["diff", "a", "b", "--format", "pdf"]).is_err());
    }

    #[test]
    fn gates_name_the_targets_the_machine_a_group_or_a_function() {
        use crate::compare::Gate;
        let cli = parse(&[
            "diff",
            "a",
            "b",
            "--gate",
            "targets",
            "--gate",
            "total",
            "--gate",
            "group:python3",
            "--gate",
            "function:libz.so:deflate",
        ])
        .unwrap();
        let Some(Command::Diff(args)) = cli.subcommand else {
            panic!("not diff");
        };
        assert_eq!(
            args.gate.gate,
            [
                Gate::Targets,
                Gate::Total,
                Gate::Group("python3".into()),
                Gate::Function("libz.so:deflate".into())
            ]
        );
        for bad in [
            "machine",
            "group:",
            "function:",
            "group",
            "targets:x",
            "group:a\nb",
        ] {
            assert!(parse(&["diff", "a", "b", "--gate", bad]).is_err(), "{bad}");
        }
        assert_eq!(Gate::Group("x".into()).to_string(), "group:x");
    }

    #[test]
    fn compare_takes_two_commands_runs_a_prepare_step_and_the_diff_options() {
        let cli = parse(&[
            "--source",
            "model",
            "compare",
            "-n",
            "8",
            "--prepare",
            "sync",
            "--max-increase",
            "5",
            "--format",
            "json",
            "-o",
            "c.json",
            "./a --x",
            "./b",
        ])
        .unwrap();
        let Some(Command::Compare(args)) = cli.subcommand else {
            panic!("not compare");
        };
        assert_eq!((args.runs, args.warmup, args.cooldown), (8, 0, 0.0));
        assert_eq!(args.prepare.as_deref(), Some("sync"));
        assert_eq!(
            (args.command_a.as_str(), args.command_b.as_str()),
            ("./a --x", "./b")
        );
        assert_eq!(args.gate.max_increase, Some(5.0));
        assert_eq!(args.output.format, DiffFormat::Json);
        assert_eq!(cli.run.sources.source, Some(SourceChoice::Model));
        assert!(parse(&["compare", "./a"]).is_err());
        assert!(parse(&["compare", "-n", "0", "a", "b"]).is_err());
    }

    #[test]
    fn report_takes_a_report_and_the_page_to_write() {
        let cli = parse(&["report", "run.json", "-o", "run.html"]).unwrap();
        let Some(Command::Report(args)) = cli.subcommand else {
            panic!("not report");
        };
        assert_eq!(args.input, PathBuf::from("run.json"));
        assert_eq!(args.html_output, PathBuf::from("run.html"));
        // The page must be named.
        assert!(parse(&["report", "run.json"]).is_err());
        let run = parse(&["--html", "r.html", "--", "true"]).unwrap();
        assert_eq!(run.run.html, Some(PathBuf::from("r.html")));
    }

    #[test]
    fn source_options_join_before_and_after_a_subcommand_once() {
        let sources = |args: &[&str]| match parse(args).unwrap() {
            Cli {
                subcommand: Some(Command::Serve(serve)),
                run,
            } => serve.sources.after(&run.sources),
            other => panic!("{other:?}"),
        };
        let joined = sources(&[
            "--source",
            "model",
            "--no-gpu",
            "serve",
            "--perf-root",
            "/p",
        ])
        .unwrap();
        assert_eq!(joined.source, Some(SourceChoice::Model));
        assert_eq!(joined.perf_root, Some(PathBuf::from("/p")));
        assert!(joined.no_gpu);
        let twice = sources(&["--source", "model", "serve", "--source", "perf"]).unwrap_err();
        assert!(
            twice.contains("--source was given both before and after"),
            "{twice}"
        );
        let clash = sources(&["--no-gpu", "serve", "--nvml-lib", "x.so"]).unwrap_err();
        assert!(clash.contains("--nvml-lib and --no-gpu"), "{clash}");
        // Nothing given: nothing set, the defaults are the app's.
        let none = sources(&["serve"]).unwrap();
        assert!(none.first_given().is_none() && none.source.is_none());
    }

    /// The `--help` text of a subcommand.
    fn help_of(subcommand: &str) -> String {
        let mut command = Cli::command();
        command.build();
        let sub = command
            .find_subcommand_mut(subcommand)
            .unwrap_or_else(|| panic!("no subcommand {subcommand}"));
        sub.render_long_help().to_string()
    }

    #[test]
    fn diff_and_report_list_only_their_own_options() {
        let source_options = [
            "--source",
            "--powercap-root",
            "--perf-root",
            "--nvml-lib",
            "--no-gpu",
            "--power-log",
            "--model-watts",
        ];
        for subcommand in ["diff", "report", "completions"] {
            let help = help_of(subcommand);
            for option in source_options {
                assert!(
                    !help.contains(option),
                    "`{subcommand} --help` lists {option}:\n{help}"
                );
            }
        }
        assert!(help_of("diff").contains("--max-increase"));
        assert!(help_of("report").contains("--output"));
        for subcommand in ["sources", "top", "serve"] {
            let help = help_of(subcommand);
            for option in source_options {
                assert!(
                    help.contains(option),
                    "`{subcommand} --help` lacks {option}:\n{help}"
                );
            }
        }
        // Given to them anyway, they are refused.
        assert!(parse(&["diff", "a.json", "b.json", "--source", "model"]).is_err());
        assert!(parse(&["report", "r.json", "-o", "r.html", "--powercap-root", "/x"]).is_err());
    }

    #[test]
    fn the_documented_options_table_has_every_visible_option_of_a_run() {
        let page = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/modes-and-options.md"
        ))
        .expect("docs/modes-and-options.md in the workspace");
        let table: Vec<&str> = page
            .lines()
            .skip_while(|l| !l.starts_with("| option | default | meaning |"))
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert!(
            table.len() > 10,
            "no options table in docs/modes-and-options.md"
        );
        // The first cell of each row: `-p`, `--pid PID[,PID...]` and the like.
        let cells: Vec<&str> = table
            .iter()
            .filter_map(|row| row.split(" | ").next())
            .collect();
        let names_option = |name: &str| {
            cells.iter().any(|cell| {
                cell.match_indices(name).any(|(at, _)| {
                    !cell[at + name.len()..]
                        .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
                })
            })
        };
        let mut command = Cli::command();
        command.build();
        let mut missing = Vec::new();
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            if matches!(arg.get_id().as_str(), "help" | "version") {
                continue;
            }
            let long = arg.get_long().map(|l| format!("--{l}"));
            let short = arg.get_short().map(|s| format!("-{s}"));
            missing.extend(long.into_iter().chain(short).filter(|n| !names_option(n)));
        }
        assert!(
            missing.is_empty(),
            "docs/modes-and-options.md's options table lacks {missing:?}"
        );
    }

    #[test]
    fn interval_bounds() {
        assert!(parse(&["--interval", "5", "--all"]).is_err());
        assert_eq!(
            parse(&["--interval", "250", "--all"]).unwrap().run.interval,
            250
        );
    }
}

/// Repeated runs and energy budgets.
#[derive(Clone, Debug, Args)]
#[command(next_help_heading = "Repeated runs and budgets")]
pub struct RepeatArgs {
    /// Wrap mode: run the command N times, measured, after one idle calibration shared by all;
    /// the report keeps every run and adds statistics and a noise verdict (on the targets'
    /// energy)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeat: Option<u32>,

    /// With --repeat: run the command K times first, unmeasured
    #[arg(long, value_name = "K", default_value_t = 0, requires = "repeat", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub warmup: u32,

    /// With --repeat: pause between runs, in seconds
    #[arg(long, value_name = "SECS", default_value_t = 0.0, requires = "repeat", value_parser = parse_cooldown)]
    pub cooldown: f64,

    /// Energy budget in joules of the targets (the command and its descendants; the median
    /// over runs with --repeat); `NAME=J` for the processes whose program is NAME;
    /// repeatable. Exceeded: exit status 3
    #[arg(long, value_name = "J|NAME=J", value_parser = parse_budget)]
    pub max_energy: Vec<BudgetArg>,

    /// Average power budget in watts of the targets (the median over runs with --repeat);
    /// `NAME=W` for the processes whose program is NAME; repeatable. Exceeded: exit status 3
    #[arg(long, value_name = "W|NAME=W", value_parser = parse_budget)]
    pub max_power: Vec<BudgetArg>,
}

/// `--max-energy`/`--max-power`: a limit, for the targets or the processes of one program.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetArg {
    pub name: Option<String>,
    pub limit: f64,
}

fn parse_budget(text: &str) -> Result<BudgetArg, String> {
    let (name, value) = match text.rsplit_once('=') {
        Some((name, value)) if !name.trim().is_empty() => (Some(name.trim().to_string()), value),
        Some(_) => return Err(format!("{text:?}: give NAME=LIMIT or a bare LIMIT")),
        None => (None, text),
    };
    match value.trim().parse::<f64>() {
        Ok(limit) if limit.is_finite() && limit >= 0.0 => Ok(BudgetArg { name, limit }),
        _ => Err(format!(
            "{text:?}: the limit must be a finite number of at least 0 (joules for \
             --max-energy, watts for --max-power)"
        )),
    }
}

fn parse_cooldown(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.0..=3600.0).contains(&secs) => Ok(secs),
        _ => Err(format!(
            "{text:?}: the cooldown is a number of seconds from 0 to 3600"
        )),
    }
}

/// A hint to add to clap's error when a word that is not a subcommand stands where a
/// subcommand could: the user meant to run a command and left out `--`. `args` are the
/// arguments after the program's name.
pub fn missing_double_dash_hint(err: &clap::Error, args: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(
        err.kind(),
        ErrorKind::UnknownArgument | ErrorKind::InvalidSubcommand
    ) {
        return None;
    }
    let word = match err
        .get(ContextKind::InvalidArg)
        .or_else(|| err.get(ContextKind::InvalidSubcommand))?
    {
        ContextValue::String(word) => word.clone(),
        _ => return None,
    };
    if word.starts_with('-') || args.iter().any(|a| a == "--") {
        return None;
    }
    // Everything from the stray word on is the command the user meant.
    let at = args.iter().position(|a| *a == *word)?;
    let options: Vec<String> = args[..at]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let command: Vec<String> = args[at..]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cli = <Cli as clap::CommandFactory>::command();
    let similar = cli
        .get_subcommands()
        .map(|s| s.get_name())
        .find(|s| strsim::jaro_winkler(s, &word) > 0.8)
        .map(|s| format!(" (or did you mean the subcommand `{s}`?)"))
        .unwrap_or_default();
    let mut shown = vec!["cg-trace".to_string()];
    shown.extend(options);
    shown.push("--".into());
    shown.extend(command);
    Some(format!(
        "`{word}` is not a cg-trace subcommand: to trace a command, put `--` before it: \
         `{}`{similar}",
        shown.join(" ")
    ))
}

#[cfg(test)]
mod hint_tests {
    use std::ffi::OsString;

    use clap::Parser as _;

    use super::*;

    fn hint(args: &[&str]) -> Option<String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let err =
            Cli::try_parse_from(std::iter::once(OsString::from("cg-trace")).chain(args.clone()))
                .expect_err("the arguments must not parse");
        missing_double_dash_hint(&err, &args)
    }

    #[test]
    fn a_command_without_double_dash_gets_the_hint() {
        let text = hint(&["ls"]).unwrap();
        assert!(
            text.contains("put `--` before it: `cg-trace -- ls`"),
            "{text}"
        );
        let text = hint(&["-o", "r.json", "ls", "-la"]).unwrap();
        assert!(text.contains("`cg-trace -o r.json -- ls -la`"), "{text}");
        let text = hint(&["sourcs"]).unwrap();
        assert!(
            text.contains("did you mean the subcommand `sources`"),
            "{text}"
        );
        // Other errors keep clap's words alone.
        let args = [OsString::from("--bogus")];
        let err = Cli::try_parse_from(["cg-trace", "--bogus"]).unwrap_err();
        assert_eq!(missing_double_dash_hint(&err, &args), None);
    }
}
