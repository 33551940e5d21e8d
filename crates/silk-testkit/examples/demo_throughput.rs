//! Measures how many demo pages one server core serves per second.
//!
//! The site runs on its own thread (`DemoSite::start_dedicated`, one core at most); a
//! minimal keep-alive HTTP/1.1 client on this thread hammers it over several connections.
//! Reported: requests per wall-clock second, and requests per second of the server thread's
//! own CPU time (from /proc, Linux only) — the latter is the server's one-core capacity.
//!
//! `cargo run --release -p silk-testkit --example demo_throughput -- [seconds] [connections]`

use std::time::{Duration, Instant};

use silk_testkit::{DemoConfig, DemoSite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// CPU nanoseconds of the thread named `name` in this process, if /proc tells.
fn thread_cpu_ns(name: &str) -> Option<u64> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim() == name {
            let schedstat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
            return schedstat.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

async fn hammer(addr: String, pages: u32, offset: u32, until: Instant) -> (u64, u64) {
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut requests, mut bytes) = (0u64, 0u64);
    let mut i = offset;
    while Instant::now() < until {
        i = (i + 7) % pages;
        let req = format!("GET /p/{i} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut filled = 0;
        let (head_end, body_len) = loop {
            let n = stream.read(&mut buf[filled..]).await.unwrap();
            assert!(n > 0, "server closed");
            filled += n;
            if let Some(end) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..end]).unwrap();
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().unwrap())
                    })
                    .unwrap();
                break (end + 4, len);
            }
        };
        while filled < head_end + body_len {
            let n = stream.read(&mut buf[filled..]).await.unwrap();
            assert!(n > 0, "server closed");
            filled += n;
        }
        requests += 1;
        bytes += body_len as u64;
    }
    (requests, bytes)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(5, |s| s.parse().unwrap());
    let connections: u32 = args.next().map_or(16, |s| s.parse().unwrap());
    let cfg = DemoConfig {
        hosts: 3,
        pages: 20_000,
        record_timings: false,
        ..DemoConfig::default()
    };
    let site = DemoSite::start_dedicated(cfg).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cpu_before = thread_cpu_ns("silk-demo-site");
        let started = Instant::now();
        let until = started + Duration::from_secs(seconds);
        let mut tasks = tokio::task::JoinSet::new();
        for c in 0..connections {
            let host = c % 3 + 1;
            let addr = format!("127.0.0.{host}:{}", site.port());
            tasks.spawn(hammer(addr, 20_000, c * 1000, until));
        }
        let (mut requests, mut bytes) = (0, 0);
        while let Some(r) = tasks.join_next().await {
            let (n, b) = r.unwrap();
            requests += n;
            bytes += b;
        }
        let wall = started.elapsed().as_secs_f64();
        let cpu_after = thread_cpu_ns("silk-demo-site");
        println!(
            "{requests} pages in {wall:.2} s over {connections} connections: {:.0} pages/s wall, {:.1} MB/s, avg page {} B",
            requests as f64 / wall,
            bytes as f64 / wall / 1e6,
            bytes / requests.max(1)
        );
        if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
            let cpu = (b - a) as f64 / 1e9;
            println!(
                "server thread CPU {cpu:.2} s ({:.0}% of one core): {:.0} pages per CPU-second",
                cpu / wall * 100.0,
                requests as f64 / cpu
            );
        }
        assert_eq!(site.stats().total_requests, requests);
        site.shutdown().await;
    });
}
