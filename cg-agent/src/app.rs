//! From parsed arguments to a finished run: picks the mode, runs the session, builds the
//! report, prints the summary and writes the outputs; returns the process exit code.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    cli::{Cli, Command, RunArgs},
    export::{json, summary},
    inventory, report,
    session::{self, IdleWatts, Mode, RunConfig},
    sources::SourceOptions,
};

/// Exit code for bad usage (as clap uses).
pub const EXIT_USAGE: i32 = 2;

/// Runs the command line; returns the exit code.
pub fn main_with(cli: Cli) -> i32 {
    if let Some(Command::Sources(sources_args)) = &cli.subcommand {
        return inventory::main(&source_options(&cli.run), sources_args.json);
    }
    let args = cli.run;
    let config = match run_config(&args) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("cg-trace: {message}");
            return EXIT_USAGE;
        }
    };
    let outcome = match session::run(config) {
        Ok(outcome) => outcome,
        Err(err) => {
            eprintln!("cg-trace: {err}");
            return err.exit_code();
        }
    };
    let report = report::build(&outcome.recording);
    if !args.quiet {
        eprint!("{}", summary::render(&report));
    }
    if let Some(path) = &args.output {
        match json::write_to_path(&report, path) {
            Ok(()) if path != Path::new("-") => {
                eprintln!("cg-trace: report written to {}", path.display());
            }
            Ok(()) => {}
            Err(err) => {
                eprintln!("cg-trace: writing the report to {}: {err}", path.display());
                return 1;
            }
        }
    }
    outcome.exit_code
}

/// Checks the arguments that clap cannot check alone and builds the run's configuration.
pub fn run_config(args: &RunArgs) -> Result<RunConfig, String> {
    let mode = if !args.command.is_empty() {
        Mode::Wrap {
            command: args.command.clone(),
        }
    } else if !args.pid.is_empty() {
        Mode::Attach {
            pids: args.pid.clone(),
        }
    } else if args.all {
        Mode::System
    } else {
        return Err(
            "say what to trace: `cg-trace [OPTIONS] -- CMD [ARGS...]`, `--pid PID[,PID...]` or \
             `--all` (see --help)"
                .into(),
        );
    };
    if let Some(path) = &args.output {
        check_output_path(path)?;
    }
    Ok(RunConfig {
        mode,
        interval: Duration::from_millis(args.interval),
        duration: args.duration.map(Duration::from_secs_f64),
        sources: source_options(args),
        idle_watts: args.idle_watts.clone().unwrap_or(IdleWatts::Estimate),
        calibration: Duration::from_millis(args.calibrate_ms),
        timeseries: args.timeseries,
        proc_root: "/proc".into(),
        noop_probes: args.bench_noop_probes,
    })
}

/// The options that choose and configure the energy sources.
pub fn source_options(args: &RunArgs) -> SourceOptions {
    SourceOptions {
        choice: args.source,
        powercap_root: args.powercap_root.clone(),
        perf_root: args.perf_root.clone(),
        perf_counters_from: args.perf_counters_from.clone(),
        model_watts: args.model_watts.map(|m| (m.idle_w, m.max_w)),
        nvml_lib: (!args.no_gpu).then(|| {
            args.nvml_lib
                .clone()
                .unwrap_or_else(|| PathBuf::from(crate::sources::nvml::DEFAULT_LIB))
        }),
        nvml_required: args.nvml_lib.is_some(),
        power_log: args.power_log.clone(),
    }
}

/// The report format follows the file name; the directory must exist before we measure.
fn check_output_path(path: &Path) -> Result<(), String> {
    if path == Path::new("-") {
        return Ok(());
    }
    if path.extension().and_then(|e| e.to_str()) != Some("json") {
        return Err(format!(
            "-o {}: unknown report format; name the file *.json, or use `-o -` for JSON on stdout",
            path.display()
        ));
    }
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() {
        return Err(format!(
            "-o {}: directory {} does not exist",
            path.display(),
            parent.display()
        ));
    }
    Ok(())
}
