//! The `cg-trace` binary: parses the command line and hands it to [`cg_agent::app`].

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CG_TRACE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = cg_agent::cli::Cli::parse();
    std::process::exit(cg_agent::app::main_with(cli));
}
