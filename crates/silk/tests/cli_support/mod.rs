//! What the CLI tests share: running the `silk` binary, child processes killed on drop, and a
//! real local platform to talk to (`silk demo-site` + `silk up` on free loopback ports, in a
//! temporary directory that is also the CLI's working directory, so that the default
//! `--data-dir .silk` finds the hub's admin token).
#![allow(dead_code)]

use silk_api::agents::{AgentState, AgentView};
use silk_testkit::eventually_blocking;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long a process may take to get ready, a command to finish, a condition to hold.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The `silk` binary, with a clean environment for the client options.
pub fn silk() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_silk"));
    cmd.env("RUST_LOG", "warn")
        .env_remove("SILK_SERVER")
        .env_remove("SILK_TOKEN")
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to the end; the output and its stderr as text.
pub fn output(cmd: &mut Command) -> (Output, String) {
    let out = cmd.output().expect("silk runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

/// A local port where nothing listens (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A child process killed when dropped (a failing test leaves nothing behind); its stdout
/// and stderr lines go to a log file and, as they come, to `lines`.
pub struct Proc {
    pub child: Child,
    pub name: String,
    pub log: PathBuf,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Spawns `cmd` with its output captured to `log`.
    pub fn spawn(mut cmd: Command, name: &str, log: &Path) -> Proc {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let (tx, rx) = mpsc::channel::<String>();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap();
            std::thread::spawn(move || {
                use std::io::Write;
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    // One write per line: both streams append to the same file, and a
                    // line written in two pieces could take the other's in between.
                    let _ = file.write_all(format!("{line}\n").as_bytes());
                    let _ = tx.send(line);
                }
            });
        }
        Proc {
            child,
            name: name.to_owned(),
            log: log.to_owned(),
            lines: rx,
        }
    }

    /// Waits until a line of its output contains `text`; returns that line.
    pub fn wait_line(&mut self, text: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(_) => panic!(
                    "{} did not print {text:?}; output:\n{}",
                    self.name,
                    self.output()
                ),
            }
        }
    }

    /// Waits for the process to exit (killing it past the deadline); its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let every = Duration::from_millis(20);
        let child = &mut self.child;
        match eventually_blocking(DEADLINE, every, || child.try_wait().unwrap()) {
            Some(status) => status.code(),
            None => {
                self.kill();
                panic!("{} did not exit; output:\n{}", self.name, self.output());
            }
        }
    }

    /// Everything it printed so far, with API tokens masked (this goes into failure
    /// messages).
    pub fn output(&self) -> String {
        mask_tokens(&self.raw_output())
    }

    /// Everything it printed so far, as printed.
    pub fn raw_output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A real platform on loopback: the demo site and `silk up` with two local agents, in a
/// temporary directory (the hub's data in `DIR/.silk`, the CLI runs in `DIR`).
pub struct Platform {
    pub dir: TempDir,
    pub server: String,
    pub site_port: u16,
    pub up: Proc,
    pub site: Proc,
}

impl Platform {
    /// Starts the demo site (`pages` pages per host, 3 hosts) and `silk up`, and waits until
    /// both agents are alive.
    pub fn start(pages: u32) -> Platform {
        Self::start_in(TempDir::new().unwrap(), pages, &[])
    }

    /// As [`Platform::start`] in `dir`, with more `silk up` arguments.
    pub fn start_in(dir: TempDir, pages: u32, up_args: &[&str]) -> Platform {
        let mut cmd = silk();
        cmd.args(["demo-site", "--port", "0", "--hosts", "3", "--pages"])
            .arg(pages.to_string());
        let mut site = Proc::spawn(cmd, "demo-site", &dir.path().join("site.log"));
        let line = site.wait_line("demo site:");
        let site_port: u16 = line
            .rsplit(' ')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        let port = silk_testkit::free_port();
        let mut cmd = silk();
        cmd.env("RUST_LOG", "info")
            .current_dir(dir.path())
            // The test sites are on loopback, which agents do not reach unless allowed.
            .args(["up", "--agents", "2", "--allow-network", "127.0.0.0/8"])
            .args(["--data-dir", ".silk", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .args(up_args);
        let mut up = Proc::spawn(cmd, "silk up", &dir.path().join("up.log"));
        up.wait_line("silk is up");
        let platform = Platform {
            dir,
            server: format!("http://127.0.0.1:{port}"),
            site_port,
            up,
            site,
        };
        platform.until_view("two live agents", &["agents"], |a: &Vec<AgentView>| {
            a.iter().filter(|x| x.state == AgentState::Alive).count() >= 2
        });
        platform
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `silk` run in the platform's directory, talking to its hub (the address from
    /// `SILK_SERVER`, the token from `.silk/hub/admin.token`).
    pub fn cli(&self) -> Command {
        let mut cmd = silk();
        cmd.current_dir(self.dir.path())
            .env("SILK_SERVER", &self.server);
        cmd
    }

    /// Runs `silk ARGS` and expects success; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let (out, stderr) = output(self.cli().args(args));
        assert!(
            out.status.success(),
            "silk {} failed ({:?}): {stderr}\n--- hub ---\n{}",
            args.join(" "),
            out.status.code(),
            self.up.output()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `silk ARGS --json` and parses its stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// Runs `silk ARGS --json` and reads its stdout as a type of the API (`silk_api`).
    pub fn view<T: serde::de::DeserializeOwned>(&self, args: &[&str]) -> T {
        let value = self.json(args);
        serde_json::from_value(value.clone())
            .unwrap_or_else(|e| panic!("not the API's type ({e}): {value}"))
    }

    /// Polls `silk ARGS` (JSON, read as a type of the API) until `check` holds.
    pub fn until_view<T: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        args: &[&str],
        check: impl Fn(&T) -> bool,
    ) -> T {
        let value = self.until(what, args, |v| {
            serde_json::from_value::<T>(v.clone()).is_ok_and(|t| check(&t))
        });
        serde_json::from_value(value).unwrap()
    }

    /// Polls `silk ARGS` (JSON) until `check` holds.
    pub fn until(
        &self,
        what: &str,
        args: &[&str],
        check: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let mut last = (serde_json::Value::Null, String::new());
        let every = Duration::from_millis(100);
        let passed = eventually_blocking(DEADLINE, every, || {
            let (out, stderr) = output(self.cli().args(&all));
            let value = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            last = (value, stderr);
            check(&last.0).then(|| last.0.clone())
        });
        passed.unwrap_or_else(|| {
            panic!(
                "timed out waiting for {what}; last answer: {} {}\n--- hub ---\n{}",
                last.0,
                last.1,
                self.up.output()
            )
        })
    }

    /// A spider of the demo site (`extra` lines appended), written to `name`.
    pub fn spider(&self, name: &str, spider_name: &str, extra: &str) -> PathBuf {
        let yaml = format!(
            "name: {spider_name}\nstart_urls: ['http://127.0.0.1:{}/']\n\
             allowed_domains: [127.0.0.1, 127.0.0.2, 127.0.0.3]\nfollow: [{{deny: ['/calendar/']}}]\n\
             item_when: '/p/\\d+$'\nextract: {{title: {{css: 'h1.title'}}}}\n\
             timeout_ms: 3000\n{extra}",
            self.site_port
        );
        let path = self.path(name);
        std::fs::write(&path, yaml).unwrap();
        path
    }
}

/// Replaces the secret of every `silk_<id>_<secret>` token in `text` with `***`.
pub fn mask_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("silk_") {
        out.push_str(&rest[..at + 5]);
        rest = &rest[at + 5..];
        let id_len = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
        if id_len > 0 && rest.as_bytes().get(id_len) == Some(&b'_') {
            let secret_len = rest[id_len + 1..]
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
                .count();
            if secret_len >= 16 {
                out.push_str(&rest[..id_len + 1]);
                out.push_str("***");
                rest = &rest[id_len + 1 + secret_len..];
            }
        }
    }
    out.push_str(rest);
    out
}
