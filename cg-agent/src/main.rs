//! The `cg-trace` binary: parses the command line, sets up what it prints on stderr
//! ([`cg_agent::console`]) and hands the run to [`cg_agent::app`].

use std::ffi::OsString;

use cg_agent::{
    cli::{Cli, Command},
    console,
};
use clap::Parser;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(err) => {
            let hint =
                cg_agent::cli::missing_double_dash_hint(&err, args.get(1..).unwrap_or_default());
            let _ = err.print();
            if let Some(hint) = hint {
                eprintln!("\ncg-trace: {hint}");
            }
            std::process::exit(err.exit_code());
        }
    };
    let quiet = cli.run.quiet || matches!(&cli.subcommand, Some(Command::Top(args)) if args.quiet);
    console::set_quiet(quiet);
    console::init_logging(quiet);
    if loads_ebpf(cli.subcommand.as_ref()) {
        // SAFETY: first, while this is the only thread and nothing else has started (it may
        // start the program again).
        unsafe { cg_agent::probes::features::settle() };
    }
    std::process::exit(cg_agent::app::main_with(cli));
}

/// Whether the command loads eBPF programs (a run, `top`, `serve`, `compare`): those ask the
/// kernel's features first ([`cg_agent::probes::features`]).
fn loads_ebpf(command: Option<&Command>) -> bool {
    match command {
        None | Some(Command::Top(_) | Command::Serve(_) | Command::Compare(_)) => true,
        Some(
            Command::Sources(_)
            | Command::Completions(_)
            | Command::ManPage(_)
            | Command::Diff(_)
            | Command::Report(_),
        ) => false,
    }
}
