//! `loadfleet-coordinator` from the command line to its exit status.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, PlanCommand};
use crate::compare;
use crate::console::Console;
use crate::plan_cmd;
use crate::run;
use crate::search;

/// The whole command: flags, the runtime, the subcommand, and its exit
/// status (README, "Exit status"). The binary is only this call, so that
/// the library's surface is what tests and fuzz targets drive.
pub fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never in logs.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            Console::stderr().line(&format!(
                "loadfleet-coordinator: error: cannot start the runtime: {e}"
            ));
            return ExitCode::from(3);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(*args).await,
            Command::Search(args) => search::run(*args).await,
            Command::Compare(args) => compare::run(&args, &mut std::io::stdout().lock()),
            Command::Plan(PlanCommand::Check { file }) => {
                plan_cmd::check(&file, &mut std::io::stdout().lock()).map(|()| 0)
            }
            Command::Plan(PlanCommand::Preview {
                file,
                agents,
                flags,
            }) => {
                plan_cmd::preview(&file, &flags, agents, &mut std::io::stdout().lock()).map(|()| 0)
            }
        }
    });
    match outcome {
        Ok(code) => ExitCode::from(code),
        // `plan preview … | head`: the reader has all it wanted.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            Console::stderr().line(&format!("loadfleet-coordinator: error: {e:#}"));
            ExitCode::from(e.exit_code())
        }
    }
}
