//! `silk config check FILE` and `silk config show`: a settings file checked whole before a
//! process is started with it, and the settings a process would run with, with where each
//! comes from (see [`crate::settings`]).

use crate::settings::{Inputs, Process, Settings};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `silk config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// The subcommands of `silk config`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Check a settings file (and the `SILK_…` variables set): every problem at once, each
    /// with its key. Exit 0 when it is good, 2 when not.
    Check {
        /// The TOML file.
        file: PathBuf,
        /// The process it is for; default from the file's name (`hub.toml`, `agent.toml`,
        /// `up.toml`).
        #[arg(long = "for", value_enum, value_name = "PROCESS")]
        process: Option<Process>,
    },
    /// Print every setting of a process with its value and where it comes from (flag,
    /// variable, file, default); secrets as `***`.
    Show {
        /// The process.
        #[arg(long = "for", value_enum, value_name = "PROCESS")]
        process: Process,
        /// A settings file.
        #[arg(long, value_name = "FILE", env = "SILK_CONFIG")]
        config: Option<PathBuf>,
        /// A setting, as the process's `--set KEY=VALUE` (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Print every setting of every process with its default, unit, flag and meaning
    /// (Markdown: docs/configuration.md is this).
    Reference,
}

/// Runs `silk config`.
pub fn run(args: ConfigArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ConfigCommand::Check { file, process } => {
            let Some(process) = process.or_else(|| Process::of_file(&file)) else {
                eprintln!(
                    "error: which process is {} for? Give --for hub|agent|up",
                    file.display()
                );
                return Ok(ExitCode::from(2));
            };
            let inputs = Inputs {
                file: Some(file.clone()),
                flags: Vec::new(),
                env: Inputs::process_env(),
            };
            Ok(report(process, &inputs, |_| {
                println!("{}: good for {}", file.display(), process.command())
            }))
        }
        ConfigCommand::Reference => {
            print!("{}", crate::settings::reference());
            Ok(ExitCode::SUCCESS)
        }
        ConfigCommand::Show {
            process,
            config,
            set,
        } => {
            let args = crate::settings::SettingsArgs { config, set };
            let inputs = Inputs {
                file: args.config.clone(),
                flags: crate::settings::given_sets(&args),
                env: Inputs::process_env(),
            };
            Ok(report(process, &inputs, |s| print!("{}", s.show())))
        }
    }
}

/// Resolves and either hands the settings to `good` (exit 0) or prints every problem
/// (exit 2).
fn report(process: Process, inputs: &Inputs, good: impl FnOnce(&Settings)) -> ExitCode {
    match Settings::resolve(process, inputs) {
        Ok(settings) => {
            good(&settings);
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for p in &problems {
                eprintln!("error: {p}");
            }
            eprintln!(
                "{} problem(s) in the settings of {}",
                problems.len(),
                process.command()
            );
            ExitCode::from(2)
        }
    }
}
