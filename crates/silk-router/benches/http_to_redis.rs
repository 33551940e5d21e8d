//! Tasks routed per second, end to end: HTTP `POST /task/` → HTTP inbound (one selector) →
//! 10 outbounds × 3 selectors → Redis lists (`redis_queue.RedisListOutbound`).
//!
//! ```text
//! SILK_TEST_REDIS=redis://127.0.0.1:6379/0 cargo bench -p silk-router --bench http_to_redis
//! ```
//!
//! The router runs in this process on a 2-thread runtime, listening on 127.0.0.1; the load
//! generator runs on its own 1-thread runtime with `BENCH_CONNECTIONS` (64) keep-alive
//! connections speaking minimal HTTP/1.1, so its own cost stays small. A task counts when
//! its `POST` was answered 200, which the router does only after the task is in Redis; at
//! the end the lists' lengths are checked against the count. Tasks spread evenly over the
//! 10 outbounds, so a task evaluates 15 outbound selectors on average (5 rules × 3).
//! `BENCH_TASKS` (200000) tasks one per request, then the same in arrays of `BENCH_BATCH`
//! (100) per request. Skipped when `SILK_TEST_REDIS` is unset.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use silk_router::{Config, Router, Vars};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OUTBOUNDS: usize = 10;

fn config_text(prefix: &str) -> String {
    let mut text = String::from(
        "project: bench\nserver: {shutdown_grace_ms: 5000}\ninbound:\n  - name: api\n    class: http.HttpInbound\n    selector: [\"company_name or credit_no\"]\noutbound:\n",
    );
    for i in 0..OUTBOUNDS {
        text.push_str(&format!(
            "  - name: q{i}
    selector:
      - \"task_type == '找新' and province in ['JS', 'TJ', 'ZJ'] and task_result == 1000 and task_src == {i}\"
      - \"data_type == 'change' and int(task_src) in [{i}, {j}] and not detail_url\"
      - \"data_type == 'employee' and task_src == {i} and credit_no\"
    class: redis_queue.RedisListOutbound
    init: {{url: '{{redis_url}}', key: '{prefix}:q{i}'}}
    task_params: [company_name, credit_no, search_key, data_type, task_src, province]
    priority: 10
    rt_priority: 100
",
            j = i + 100
        ));
    }
    text
}

fn task(n: u64) -> serde_json::Value {
    let src = n % OUTBOUNDS as u64;
    let data_type = if n.is_multiple_of(2) {
        "change"
    } else {
        "employee"
    };
    serde_json::json!({
        "company_name": format!("宁乡县老粮仓镇楚江冻库{n}"),
        "credit_no": format!("92430124MA4MGMN{n:06}"),
        "search_key": format!("92430124MA4MGMN{n:06}"),
        "data_type": data_type,
        "task_src": src,
        "province": "HN",
        "rt": n.is_multiple_of(10),
    })
}

/// One keep-alive HTTP/1.1 connection posting bodies and reading the answers.
async fn post_loop(
    addr: std::net::SocketAddr,
    next: Arc<AtomicU64>,
    total: u64,
    batch: u64,
    done: Arc<AtomicU64>,
) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let start = next.fetch_add(batch, Ordering::Relaxed);
        if start >= total {
            return;
        }
        let end = (start + batch).min(total);
        let body = if batch == 1 {
            task(start).to_string()
        } else {
            serde_json::Value::Array((start..end).map(task).collect()).to_string()
        };
        let request = format!(
            "POST /task/ HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        // Read the head, then exactly Content-Length bytes of body.
        let mut filled = 0;
        let (head_end, length) = loop {
            let n = stream.read(&mut buf[filled..]).await.expect("read");
            assert!(n > 0, "connection closed");
            filled += n;
            if let Some(i) = buf[..filled].windows(4).position(|w| w == b"\r\n\r\n") {
                let head = std::str::from_utf8(&buf[..i]).expect("ascii head");
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().expect("length"))
                    })
                    .expect("content-length");
                break (i + 4, length);
            }
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
        };
        while filled < head_end + length {
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
            let n = stream.read(&mut buf[filled..]).await.expect("read");
            assert!(n > 0, "connection closed");
            filled += n;
        }
        done.fetch_add(end - start, Ordering::Relaxed);
    }
}

fn run_load(addr: std::net::SocketAddr, total: u64, batch: u64, connections: usize) -> Duration {
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("client runtime");
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    client.block_on(async {
        let loops: Vec<_> = (0..connections)
            .map(|_| tokio::spawn(post_loop(addr, next.clone(), total, batch, done.clone())))
            .collect();
        for l in loops {
            l.await.expect("client");
        }
    });
    let elapsed = start.elapsed();
    assert_eq!(done.load(Ordering::Relaxed), total);
    elapsed
}

fn main() {
    let Ok(url) = std::env::var("SILK_TEST_REDIS") else {
        println!("skipped: SILK_TEST_REDIS not set");
        return;
    };
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let total = env("BENCH_TASKS", 200_000);
    let batch = env("BENCH_BATCH", 100).max(1);
    let connections = env("BENCH_CONNECTIONS", 64) as usize;
    let prefix = format!("silk-router-bench-{}", std::process::id());

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("main.yaml");
    std::fs::write(&path, config_text(&prefix)).expect("config");
    let mut vars = Vars::new().with_env(false);
    vars.set("redis_url", url.clone());
    let config = Config::load(&[&path], &vars).unwrap_or_else(|e| panic!("{e:?}"));

    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("server runtime");
    let (router, addr, stop, served) = server.block_on(async {
        let router = Router::start(config).await.expect("router");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(silk_router::serve_on(
            router.clone(),
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        (router, addr, stop, served)
    });

    let mut conn = server.block_on(async {
        redis::Client::open(url.as_str())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis")
    });
    let lengths = |conn: &mut redis::aio::MultiplexedConnection| -> u64 {
        server.block_on(async {
            let mut sum = 0u64;
            for i in 0..OUTBOUNDS {
                let n: u64 = conn.llen(format!("{prefix}:q{i}")).await.expect("llen");
                sum += n;
            }
            sum
        })
    };
    let clear = |conn: &mut redis::aio::MultiplexedConnection| {
        server.block_on(async {
            for i in 0..OUTBOUNDS {
                let _: () = conn.del(format!("{prefix}:q{i}")).await.expect("del");
            }
        })
    };

    println!(
        "router bench: {OUTBOUNDS} outbounds x 3 selectors, HTTP inbound -> Redis lists at {url}"
    );
    // Warm-up.
    run_load(addr, 5_000, 1, connections);
    clear(&mut conn);
    for (label, per_request) in [("one task per request", 1), ("arrays per request", batch)] {
        let elapsed = run_load(addr, total, per_request, connections);
        let in_redis = lengths(&mut conn);
        assert_eq!(in_redis, total, "every answered task is in Redis");
        clear(&mut conn);
        let rate = total as f64 / elapsed.as_secs_f64();
        println!(
            "{label:>22} (x{per_request}): {total} tasks in {:.2} s = {rate:.0} tasks/s ({connections} connections)",
            elapsed.as_secs_f64()
        );
    }
    let _ = stop.send(());
    server.block_on(async {
        let _ = served.await;
    });
    drop(router);
}
