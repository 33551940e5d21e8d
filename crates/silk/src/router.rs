//! `silk router`: runs the task router alone (its own HTTP server), checks a config, or explains
//! what the router would do with one task. The router itself is `silk-router`.

use anyhow::Context;
use clap::{Args, Subcommand};
use silk_router::Vars;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `silk router`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = false)]
pub struct RouterArgs {
    /// What to do (default: run the router).
    #[command(subcommand)]
    pub action: Option<RouterAction>,
    #[command(flatten)]
    pub common: ConfigArgs,
}

/// Where the config comes from.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// The main config file (YAML; `include` brings in more files and folders).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// A placeholder value, `NAME=VALUE` (repeatable); fills `{NAME}` in the config.
    #[arg(long = "var", global = true)]
    pub vars: Vec<String>,
    /// A YAML file of placeholder values (repeatable).
    #[arg(long = "var-file", global = true)]
    pub var_files: Vec<PathBuf>,
}

/// `silk router` sub-commands.
#[derive(Debug, Subcommand)]
pub enum RouterAction {
    /// Validate a config and print every error at once (file, line, rule).
    Check,
    /// Print what `POST /inbound/NAME/check_task/` would answer for a task (JSON file).
    Explain {
        /// The inbound that receives the task.
        #[arg(long)]
        inbound: String,
        /// The task, a JSON file (`-` for standard input).
        task: PathBuf,
    },
}

/// Runs `silk router …`.
pub async fn run(args: RouterArgs) -> anyhow::Result<ExitCode> {
    let Some(config_path) = args.common.config.clone() else {
        anyhow::bail!("--config is required (the router's main YAML file)");
    };
    let mut vars = Vars::new();
    for file in &args.common.var_files {
        if let Err(errors) = vars.load_file(file) {
            for e in errors {
                eprintln!("error: {e}");
            }
            return Ok(ExitCode::from(2));
        }
    }
    for arg in &args.common.vars {
        if let Err(e) = vars.set_arg(arg) {
            eprintln!("error: --var {arg}: {e}");
            return Ok(ExitCode::from(2));
        }
    }
    let config = match silk_router::check(&[&config_path], &vars) {
        Ok(config) => config,
        Err(errors) => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            eprintln!("{} error(s) in {}", errors.len(), config_path.display());
            return Ok(ExitCode::from(2));
        }
    };
    for w in &config.warnings {
        eprintln!("warning: {w}");
    }
    match args.action {
        Some(RouterAction::Check) => {
            println!("{}: ok", config_path.display());
            Ok(ExitCode::SUCCESS)
        }
        Some(RouterAction::Explain { inbound, task }) => {
            let text = if task.as_os_str() == "-" {
                std::io::read_to_string(std::io::stdin())
                    .context("cannot read the task from standard input")?
            } else {
                std::fs::read_to_string(&task)
                    .with_context(|| format!("cannot read {}", task.display()))?
            };
            let task_json: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{}: not JSON", task.display()))?;
            let answer = silk_router::explain(&config, &inbound, &task_json);
            println!("{}", serde_json::to_string_pretty(&answer)?);
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let level = config
                .logging
                .level
                .clone()
                .unwrap_or_else(|| "info".into());
            crate::init_logging(&format!("warn,silk_router={level}"));
            eprintln!(
                "router listening on {}:{}",
                config.server.bind, config.server.port
            );
            silk_router::serve(config, crate::wait_for_stop_signal()).await?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
