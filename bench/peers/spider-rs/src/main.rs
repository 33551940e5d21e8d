//! Peer crawler for `bench/peers.sh`: crawls the Silk demo site with the `spider` crate.
//!
//! ```text
//! spider-peer --start http://127.0.0.1:P/ --hosts N --port P --concurrency C
//! ```
//! (or env `START`, `HOSTS`, `PORT`, `CONCURRENCY`). Prints one JSON line:
//! `{"pages": n, "elapsed_s": t}` where `n` is the number of URLs spider reports as visited.
//!
//! Multi-host: one `Website` rooted at the start URL, with the other hosts added through
//! `with_external_domains` (spider matches them on the bare host, without the port), so the
//! whole 127.0.0.1 … 127.0.0.N site is one crawl in one process sharing one frontier, one
//! visited set and one concurrency limit. Links to hosts outside the list are dropped.
//!
//! Settings: robots.txt respected (spider reads it from the start host only and applies its
//! rules to every host: the demo hosts all serve the same robots.txt), `/calendar/`
//! blacklisted (a regex, hence the `regex` feature: without it the blacklist matches whole
//! URLs only), no delay, concurrency limit C, spider's default redirect policy (which refuses
//! redirects into loopback addresses as an SSRF guard, so `/r/{i}` is fetched but not
//! followed; every `/p/{i}` is also linked directly).

use std::time::{Duration, Instant};

use spider::website::Website;

fn arg(args: &[String], name: &str, env: &str) -> Option<String> {
    let flag = format!("--{name}");
    let eq = format!("--{name}=");
    for (i, a) in args.iter().enumerate() {
        if a == &flag {
            return args.get(i + 1).cloned();
        }
        if let Some(v) = a.strip_prefix(&eq) {
            return Some(v.to_string());
        }
    }
    std::env::var(env).ok()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        eprintln!("usage: spider-peer --start URL --hosts N --port P --concurrency C [--threads T]");
        return;
    }
    let port: u16 = arg(&args, "port", "PORT").map_or(8700, |s| s.parse().expect("--port"));
    let hosts: u32 = arg(&args, "hosts", "HOSTS").map_or(3, |s| s.parse().expect("--hosts"));
    let concurrency: usize =
        arg(&args, "concurrency", "CONCURRENCY").map_or(64, |s| s.parse().expect("--concurrency"));
    let start = arg(&args, "start", "START").unwrap_or_else(|| format!("http://127.0.0.1:{port}/"));
    // Worker threads of the tokio runtime; default: one per available core (the benchmark
    // pins the process to one core, so this is 1 there).
    let threads: usize = arg(&args, "threads", "THREADS").map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |s| s.parse().expect("--threads"),
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("tokio runtime");

    rt.block_on(async move {
        let mut website = Website::new(&start);
        let others: Vec<String> = (1..=hosts).map(|k| format!("127.0.0.{k}")).collect();
        website
            .with_external_domains(Some(others.into_iter()))
            .with_blacklist_url(Some(vec![spider::compact_str::CompactString::from("/calendar/")]))
            .with_respect_robots_txt(true)
            .with_delay(0)
            .with_concurrency_limit(Some(concurrency))
            .with_request_timeout(Some(Duration::from_secs(30)))
            .with_user_agent(Some("spider-peer"));

        let t0 = Instant::now();
        website.crawl().await;
        let elapsed = t0.elapsed().as_secs_f64();
        let pages = website.get_links().len();
        println!("{{\"pages\": {pages}, \"elapsed_s\": {elapsed:.3}}}");
        if std::env::var_os("SPIDER_PEER_DUMP").is_some() {
            let mut links: Vec<String> =
                website.get_links().iter().map(|l| l.inner().to_string()).collect();
            links.sort();
            for l in links {
                eprintln!("{l}");
            }
        }
    });
}
