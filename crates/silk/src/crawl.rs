//! `silk crawl SPIDER`: runs a declarative spider to completion with a live progress line on
//! a terminal (plain periodic log lines otherwise). Ctrl-C (or SIGTERM) stops gracefully: the
//! requests in flight finish and are acked; a second Ctrl-C exits at once (the frontier is
//! crash-safe, so even that loses nothing). The same `--data-dir` resumes.

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use silk_core::SystemClock;
use silk_core::spider::Spider;
use silk_crawl::{Crawl, CrawlOptions, Finish, Progress};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Options of `silk crawl`.
#[derive(Debug, Args)]
pub struct CrawlArgs {
    /// The spider file (YAML; see docs/spider.md).
    pub spider: PathBuf,
    /// Where items go (JSON Lines, appended; default `NAME.jsonl`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Where the crawl keeps its state; the same directory resumes (default `.silk/crawl/NAME`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Write the final counters to this file as JSON.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Also serve the built-in demo site on the port of the spider's first start URL.
    #[arg(long)]
    pub with_demo_site: bool,
    /// Seconds between progress lines when not on a terminal.
    #[arg(long, default_value_t = 5)]
    pub log_every_s: u64,
    /// An argument `NAME=VALUE` (repeatable): fills `${args.NAME}` in the spider file and
    /// `{arg: NAME}` parameters of its `expand`.
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = crate::client::jobfile::parse_arg)]
    pub args: Vec<(String, String)>,
}

/// Runs `silk crawl`.
pub async fn run(args: CrawlArgs) -> anyhow::Result<ExitCode> {
    crate::init_logging("warn,silk=info,silk_crawl=info");
    let text = std::fs::read_to_string(&args.spider)
        .with_context(|| format!("cannot read spider file {}", args.spider.display()))?;
    let file = args.spider.display().to_string();
    let values: BTreeMap<String, String> = args.args.iter().cloned().collect();
    let text = match silk_hub::jobs::fill_args(&text, &values) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {file}: {e} (give it with --arg NAME=VALUE)");
            return Ok(ExitCode::from(2));
        }
    };
    let spider = match Spider::from_yaml(&text, &file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let name = spider.spec.name.clone();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{name}.jsonl")));
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(".silk/crawl").join(&name));
    // CSS, XPath and JSON-path rules (and proxies, headers) compile when the crawl opens: a
    // bad one is a bad spider file too.
    let demo_port = spider
        .start_urls()
        .first()
        .and_then(|u| u.port_or_known_default())
        .unwrap_or(8700);
    let opened = Crawl::open(
        spider,
        CrawlOptions {
            data_dir: data_dir.clone(),
            out: out.clone(),
            clock: Arc::new(SystemClock),
            args: values,
            // `expand` files are next to the spider file.
            files_dir: Some(
                args.spider
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_default(),
            ),
        },
    )
    .await;
    let crawl = match opened {
        Ok(crawl) => crawl,
        Err(e) if e.is_bad_spider() => {
            eprintln!("error: {file}: {e}");
            return Ok(ExitCode::from(2));
        }
        Err(e) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("cannot open the crawl in {}", data_dir.display()));
        }
    };
    let _demo = if args.with_demo_site {
        let site = crate::demo::start(silk_testkit::demo::DemoConfig {
            port: demo_port,
            ..Default::default()
        })
        .await?;
        eprintln!("demo site serving at {}", site.start_url());
        Some(site)
    } else {
        None
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        crate::wait_for_stop_signal().await;
        eprintln!("\nstopping: letting requests in flight finish (Ctrl-C again to quit now)");
        let _ = stop_tx.send(true);
        crate::wait_for_stop_signal().await;
        eprintln!("quitting now; run the same command again to resume");
        std::process::exit(130);
    });

    let display = tokio::spawn(show_progress(
        crawl.progress(),
        std::io::stderr().is_terminal(),
        args.log_every_s,
    ));
    // On the runtime's workers, with the request tasks it spawns: driven by `block_on` on
    // the main thread instead, every hand-off between it and them is a thread wake-up.
    let summary = tokio::spawn(crawl.run(stop_rx)).await;
    display.abort();
    let summary = summary.context("the crawl task failed")??;
    let p = &summary.progress;
    eprintln!("{}", final_line(summary.finish, p, &out));
    if let Some(path) = &args.stats_json {
        let json = serde_json::json!({
            "finish": summary.finish,
            "total": p.frontier.total,
            "left": p.frontier.left,
            "in_flight": p.frontier.in_flight,
            "success": p.frontier.success,
            "failed": p.frontier.failed,
            "dropped": p.frontier.dropped,
            "duplicates": p.frontier.duplicates,
            "bloom_bytes_per_url": p.frontier.bloom_bytes_per_url(),
            "store_bytes_per_url": p.frontier.store_bytes_per_url(),
            "processed": p.processed,
            "fetched": p.fetched,
            "items": p.items,
            "duplicate_items": p.duplicate_items,
            "robots_denied": p.robots_denied,
            "bytes": p.bytes,
            "elapsed_s": p.elapsed_s,
            "pages_per_s": p.pages_per_s,
            "frontier": p.frontier,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(match summary.finish {
        Finish::Stopped => ExitCode::from(130),
        _ => ExitCode::SUCCESS,
    })
}

fn line(p: &Progress) -> String {
    let f = &p.frontier;
    format!(
        "{:.0} pages/s | fetched {} | queued {} | in flight {} | failed {} | dups dropped {} | items {} | {}",
        p.pages_per_s,
        p.fetched,
        f.pending,
        f.in_flight,
        f.failed,
        f.duplicates,
        p.items,
        humantime::format_duration(Duration::from_secs(p.elapsed_s as u64)),
    )
}

fn final_line(finish: Finish, p: &Progress, out: &std::path::Path) -> String {
    let how = match finish {
        Finish::Complete => "crawl complete",
        Finish::MaxPages => "max_pages reached",
        Finish::MaxItems => "max_items reached",
        Finish::MaxDuration => "max_duration_ms reached (run again to resume)",
        Finish::Stopped => "stopped (run again with the same --data-dir to resume)",
    };
    let mut text = format!("{how}: {} -> {}", line(p), out.display());
    if finish == Finish::Complete && p.processed == 0 && p.frontier.total > 0 {
        text.push_str(
            "\nnothing was left to fetch: this data dir already crawled every URL of the current \
             recrawl segment (use another --data-dir to start over)",
        );
    }
    text
}

async fn show_progress(mut rx: watch::Receiver<Progress>, tty: bool, every_s: u64) {
    if tty {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        while rx.changed().await.is_ok() {
            let msg = line(&rx.borrow_and_update());
            bar.set_message(msg);
        }
        bar.finish_and_clear();
    } else {
        let mut tick = tokio::time::interval(Duration::from_secs(every_s.max(1)));
        tick.tick().await;
        loop {
            tick.tick().await;
            let msg = line(&rx.borrow());
            tracing::info!("progress: {msg}");
        }
    }
}
