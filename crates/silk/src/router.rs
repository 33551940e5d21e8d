//! `silk router`: runs the task router alone (its own HTTP server), checks a config, or explains
//! what the router would do with one task. The router itself is `silk-router`; `silk up` and
//! `silk hub` run it in their process with `--router` ([`load`] is shared).

use anyhow::Context;
use clap::{Args, Subcommand};
use silk_router::{Config, Registry, Vars};
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
    /// The folder the config's Python converts (`ic.ExtractTaskParams`…) are loaded from;
    /// wins over the config's `plugins`.
    #[arg(long, global = true, value_name = "DIR")]
    pub plugins: Option<PathBuf>,
}

/// `silk router` sub-commands.
#[derive(Debug, Subcommand)]
pub enum RouterAction {
    /// List the failure records of the router a hub runs (`silk hub --router`), newest
    /// first. Admin only.
    Failures {
        #[command(flatten)]
        filter: crate::client::router::FailureFilter,
        /// Only records replayed before (`true`) or never replayed (`false`).
        #[arg(long)]
        replayed: Option<bool>,
    },
    /// Submit failure records' tasks to the hub's router again: `--id` ones, or those the
    /// filter takes (oldest first, each once unless `--again`). Admin only.
    Replay {
        #[command(flatten)]
        filter: crate::client::router::FailureFilter,
        /// A record's id (repeatable).
        #[arg(long = "id", value_name = "ID")]
        ids: Vec<String>,
        /// Also records replayed before.
        #[arg(long)]
        again: bool,
    },
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

/// Loads the config at `path` with placeholders from `var_files` then `vars`, with the
/// classes of `registry`. Every problem is printed to standard error; `Err` is then the exit
/// code (2).
pub fn load(
    path: &std::path::Path,
    vars: &[String],
    var_files: &[PathBuf],
    registry: &Registry,
) -> Result<Config, ExitCode> {
    let mut values = Vars::new();
    for file in var_files {
        if let Err(errors) = values.load_file(file) {
            for e in errors {
                eprintln!("error: {e}");
            }
            return Err(ExitCode::from(2));
        }
    }
    for arg in vars {
        if let Err(e) = values.set_arg(arg) {
            eprintln!("error: --var {arg}: {e}");
            return Err(ExitCode::from(2));
        }
    }
    match Config::load_with(&[path], &values, registry) {
        Ok(config) => {
            for w in &config.warnings {
                eprintln!("warning: {w}");
            }
            Ok(config)
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("error: {e}");
            }
            eprintln!("{} error(s) in {}", errors.len(), path.display());
            Err(ExitCode::from(2))
        }
    }
}

/// Runs `silk router …`.
pub async fn run(args: RouterArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        Some(RouterAction::Failures { filter, replayed }) => {
            return crate::client::router::failures(filter, replayed).await;
        }
        Some(RouterAction::Replay { filter, ids, again }) => {
            return crate::client::router::replay(filter, ids, again).await;
        }
        _ => {}
    }
    let Some(config_path) = args.common.config.clone() else {
        anyhow::bail!("--config is required (the router's main YAML file)");
    };
    // `check` and `explain` know the hub's classes (a config for `silk hub --router` checks
    // clean); the router run alone cannot use them and says so.
    let mut registry = match args.action {
        Some(_) => silk_hub::HubClasses::new().registry(),
        None => Registry::standard(),
    };
    if let Some(dir) = &args.common.plugins {
        registry.set_plugins_dir(dir);
    }
    let config = match load(
        &config_path,
        &args.common.vars,
        &args.common.var_files,
        &registry,
    ) {
        Ok(config) => config,
        Err(code) => return Ok(code),
    };
    match args.action {
        // Talk to a hub, not a config: answered above.
        Some(RouterAction::Failures { .. } | RouterAction::Replay { .. }) => Ok(ExitCode::SUCCESS),
        Some(RouterAction::Check) => {
            // The Python converts' classes are instantiated with their `init` (the
            // operator's own code, from the config's plugins folder).
            if let Err(errors) = config.verify_plugins().await {
                for e in &errors {
                    eprintln!("error: {e}");
                }
                eprintln!("{} error(s) in {}", errors.len(), config_path.display());
                return Ok(ExitCode::from(2));
            }
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
            let answer = silk_router::explain(&config, &inbound, &task_json).await;
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
