//! `silk demo-site`: serves the deterministic synthetic site of `silk-testkit` until Ctrl-C.

use clap::Args;
use silk_testkit::demo::{DemoConfig, DemoSite};
use std::process::ExitCode;

/// Options of `silk demo-site`.
#[derive(Debug, Args)]
pub struct DemoSiteArgs {
    /// Port to listen on (the same on every host 127.0.0.1 … 127.0.0.N); 0 picks a free one.
    #[arg(long, default_value_t = 8700)]
    pub port: u16,
    /// Number of hosts (127.0.0.1 … 127.0.0.N).
    #[arg(long, default_value_t = 3)]
    pub hosts: u32,
    /// Content pages per host.
    #[arg(long, default_value_t = 200)]
    pub pages: u32,
    /// Seed of the pseudo-random link structure.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Do not record per-request timings (for benchmarks).
    #[arg(long)]
    pub no_timings: bool,
    /// At exit (Ctrl-C or SIGTERM), write the hit count of every URL requested, as JSON.
    #[arg(long)]
    pub hits_json: Option<std::path::PathBuf>,
}

impl DemoSiteArgs {
    fn config(&self) -> DemoConfig {
        DemoConfig {
            port: self.port,
            hosts: self.hosts,
            pages: self.pages,
            seed: self.seed,
            record_timings: !self.no_timings,
            ..DemoConfig::default()
        }
    }
}

/// Starts the demo site with `cfg` and returns it (used by `silk crawl --with-demo-site`).
pub async fn start(cfg: DemoConfig) -> anyhow::Result<DemoSite> {
    use anyhow::Context;
    DemoSite::start(cfg)
        .await
        .context("cannot start the demo site")
}

/// Runs `silk demo-site`.
pub async fn run(args: DemoSiteArgs) -> anyhow::Result<ExitCode> {
    let site = start(args.config()).await?;
    println!(
        "demo site: {} hosts x {} pages on port {}",
        args.hosts,
        args.pages,
        site.port()
    );
    for base in site.base_urls() {
        println!("  {base}");
    }
    println!("start url: {}", site.start_url());
    crate::wait_for_stop_signal().await;
    if let Some(path) = &args.hits_json {
        use anyhow::Context;
        let hits = site.stats().hits;
        std::fs::write(path, serde_json::to_vec(&hits)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
