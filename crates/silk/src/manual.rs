//! `silk completions SHELL` and `silk man --out DIR`: shell completions (clap_complete) and
//! man pages (clap_mangen), generated from the command line definition itself, so they never
//! drift from the binary. The Debian package installs both.

use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `silk completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Options of `silk man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Where the pages go (created if missing): `silk.1` and one page per subcommand
    /// (`silk-hub.1`, `silk-runs.1`, …).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out: PathBuf,
}

/// Prints the completion script of `args.shell` on stdout.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = crate::cli_command();
    clap_complete::generate(args.shell, &mut cmd, "silk", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// Writes the man pages into `args.out`.
pub fn man(args: ManArgs) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // Not built beforehand: `generate_to` builds the command itself without the `help`
    // subcommand, so no page is written for it.
    clap_mangen::generate_to(crate::cli_command(), &args.out)
        .with_context(|| format!("cannot write the man pages into {}", args.out.display()))?;
    let pages = std::fs::read_dir(&args.out)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "1"))
                .count()
        })
        .unwrap_or(0);
    println!("{pages} man pages in {}", args.out.display());
    Ok(ExitCode::SUCCESS)
}
