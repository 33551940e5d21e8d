//! The Debian package as an operator meets it (issue 19): `packaging/package.sh` makes it
//! and the release archive from the test's binary; `dpkg -i` installs it; the units' command
//! lines (their `ExecStart`, `User`, `EnvironmentFile`, `WorkingDirectory`) run a hub and an
//! agent from `/etc/silk`; the agent registers with the hub over NATS; `dpkg --purge` removes
//! the package. It installs onto this machine, so it needs root and dpkg (CI has both), and
//! it leaves a machine alone where a silk package is installed already.

mod cli_support;

use cli_support::{Proc, closed_port};
use silk_api::agents::AgentState;
use silk_api::client::Client;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A systemd unit's `[Service]` lines that say how its process runs.
struct Unit {
    exec_start: Vec<String>,
    user: String,
    environment_file: Option<PathBuf>,
    working_directory: PathBuf,
}

impl Unit {
    fn read(path: &Path) -> Unit {
        let text = std::fs::read_to_string(path).unwrap();
        let mut keys = BTreeMap::new();
        let mut in_service = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_service = line == "[Service]";
            } else if in_service
                && !line.starts_with('#')
                && let Some((k, v)) = line.split_once('=')
            {
                keys.insert(k.to_owned(), v.to_owned());
            }
        }
        Unit {
            exec_start: keys["ExecStart"]
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            user: keys["User"].clone(),
            // `-` before the path: the file may be missing.
            environment_file: keys
                .get("EnvironmentFile")
                .map(|f| PathBuf::from(f.trim_start_matches('-'))),
            working_directory: PathBuf::from(&keys["WorkingDirectory"]),
        }
    }

    /// The unit's process as systemd starts it: its user, a clean environment with the
    /// environment file's variables, its working directory.
    fn command(&self) -> Command {
        let uid = id(&["-u", &self.user]);
        let gid = id(&["-g", &self.user]);
        let mut cmd = Command::new(&self.exec_start[0]);
        cmd.args(&self.exec_start[1..])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .current_dir(&self.working_directory)
            .uid(uid)
            .gid(gid);
        if let Some(file) = &self.environment_file
            && let Ok(text) = std::fs::read_to_string(file)
        {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                if let Some((k, v)) = line.split_once('=') {
                    cmd.env(k.trim(), v.trim());
                }
            }
        }
        cmd
    }
}

fn id(args: &[&str]) -> u32 {
    let out = Command::new("id").args(args).output().unwrap();
    assert!(out.status.success(), "id {args:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the package and what the test added, however the test ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").args(["--purge", "silk"]).output();
        for file in ["/etc/default/silk-hub", "/etc/default/silk-agent"] {
            let _ = std::fs::remove_file(file);
        }
        let _ = std::fs::remove_dir_all("/var/lib/silk");
        let _ = Command::new("userdel").arg("silk").output();
    }
}

/// Whether this machine can take the test: root, dpkg, no silk package already.
fn machine_allows() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let dpkg = Command::new("dpkg").arg("--version").output().is_ok();
    if !(root && dpkg) {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run this test: it needs root and dpkg"
        );
        println!("skipped: installing a package needs root and dpkg");
        return false;
    }
    let status = Command::new("dpkg-query")
        .args(["-W", "-f", "${Status}", "silk"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if status.contains("installed") && !status.contains("not-installed") {
        println!("skipped: a silk package is installed on this machine already");
        return false;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_package_installs_and_its_units_run_a_hub_and_an_agent() {
    let Some(nats) = silk_testkit::service_url("SILK_TEST_NATS") else {
        return;
    };
    if !machine_allows() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let made = run(Command::new("bash")
        .arg(root.join("packaging/package.sh"))
        .args(["--binary", env!("CARGO_BIN_EXE_silk"), "--out"])
        .arg(&out));
    assert!(made.contains("stripped"), "{made}");
    let find = |suffix: &str| {
        std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .unwrap_or_else(|| panic!("no *{suffix} in {}", out.display()))
    };
    let deb = find(".deb");
    let archive = find("-linux.tar.gz");
    let debug = find(".debug");
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for path in [
        "./usr/bin/silk",
        "./usr/lib/systemd/system/silk-hub.service",
        "./usr/lib/systemd/system/silk-agent.service",
        "./etc/silk/hub.toml",
        "./etc/silk/agent.toml",
        "./usr/share/bash-completion/completions/silk",
        "./usr/share/zsh/vendor-completions/_silk",
        "./usr/share/fish/vendor_completions.d/silk.fish",
        "./usr/share/man/man1/silk.1.gz",
        "./usr/share/man/man1/silk-hub.1.gz",
        "./usr/share/doc/silk/configuration.md",
    ] {
        assert!(
            listing.contains(path),
            "{path} not in the package:\n{listing}"
        );
    }
    let contents = run(Command::new("tar").arg("-tzf").arg(&archive));
    for path in [
        "/silk",
        "/systemd/silk-hub.service",
        "/etc/hub.toml",
        "/man/silk.1.gz",
        "/INSTALL.md",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(path)),
            "{path} not in the archive:\n{contents}"
        );
    }

    let _installed = Installed;
    run(Command::new("dpkg").arg("-i").arg(&deb));
    // The binary is stripped and points at its debug info.
    let link = run(Command::new("readelf").args(["--string-dump=.gnu_debuglink", "/usr/bin/silk"]));
    let debug_name = debug.file_name().unwrap().to_string_lossy().into_owned();
    assert!(link.contains(&debug_name), "{link}");
    let sections = run(Command::new("readelf").args(["-S", "/usr/bin/silk"]));
    assert!(!sections.contains(".debug_line"), "stripped:\n{sections}");
    // The user, its data directory, the config files it may read and no one else.
    let uid = id(&["-u", "silk"]);
    let gid = id(&["-g", "silk"]);
    for data in ["/var/lib/silk", "/var/lib/silk/hub", "/var/lib/silk/agent"] {
        let meta = std::fs::metadata(data).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (uid, 0o750), "{data}");
    }
    let conf = std::fs::metadata("/etc/silk/hub.toml").unwrap();
    assert_eq!((conf.gid(), conf.mode() & 0o777), (gid, 0o640));
    let checked =
        run(Command::new("/usr/bin/silk").args(["config", "check", "/etc/silk/hub.toml"]));
    assert!(checked.contains("good for silk hub"), "{checked}");

    // The services' own overrides, as an operator writes them: a free port, the test's
    // NATS, a namespace of the test's own.
    let port = closed_port();
    let namespace = format!("pkg{}", std::process::id());
    std::fs::write(
        "/etc/default/silk-hub",
        format!("SILK_LISTEN=127.0.0.1:{port}\nSILK_BUS={nats}\nSILK_NAMESPACE={namespace}\n"),
    )
    .unwrap();
    std::fs::write(
        "/etc/default/silk-agent",
        format!("SILK_BUS={nats}\nSILK_NAMESPACE={namespace}\nSILK_ID=packaged-agent\n"),
    )
    .unwrap();
    let hub_unit = Unit::read(Path::new("/usr/lib/systemd/system/silk-hub.service"));
    let agent_unit = Unit::read(Path::new("/usr/lib/systemd/system/silk-agent.service"));
    assert_eq!(
        hub_unit.exec_start,
        ["/usr/bin/silk", "hub", "--config", "/etc/silk/hub.toml"]
    );
    assert_eq!(
        agent_unit.exec_start,
        ["/usr/bin/silk", "agent", "--config", "/etc/silk/agent.toml"]
    );
    let mut hub = Proc::spawn(hub_unit.command(), "silk-hub", &dir.path().join("hub.log"));
    hub.wait_line("silk hub: API on");
    // Printed once the admin token's file is written (after the line above).
    hub.wait_line("web UI:");
    let mut agent = Proc::spawn(
        agent_unit.command(),
        "silk-agent",
        &dir.path().join("agent.log"),
    );
    agent.wait_line("connected to");

    // The hub keeps its data where the package put it, as the silk user.
    let token_file = Path::new("/var/lib/silk/hub/admin.token");
    assert_eq!(std::fs::metadata(token_file).unwrap().uid(), uid);
    let token = std::fs::read_to_string(token_file)
        .unwrap()
        .trim()
        .to_owned();
    let url = reqwest::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let api = Client::new(url, Some(token)).unwrap();
    let every = Duration::from_millis(100);
    let alive = silk_testkit::eventually(Duration::from_secs(30), every, async || {
        let agents = api.agents().await.ok()?;
        agents
            .iter()
            .any(|a| a.id.as_str() == "packaged-agent" && a.state == AgentState::Alive)
            .then_some(())
    })
    .await;
    assert!(
        alive.is_some(),
        "the packaged agent never showed alive on the packaged hub;\nhub:\n{}\nagent:\n{}",
        hub.output(),
        agent.output()
    );
    // The agent kept its id in its data directory, as the silk user.
    let agent_id = std::fs::metadata("/var/lib/silk/agent/agent-id");
    assert!(agent_id.is_err() || agent_id.unwrap().uid() == uid);
}
