//! A container engine for tests that build images: podman with runc, the host's network and
//! lower limits (what works in these sandboxes: crun fails on hybrid cgroups, the default
//! limits are refused), and a base image made on the spot — a static busybox imported — since
//! no registry is reachable. Panics on an engine failure (it is test scaffolding).

use std::path::Path;
use std::process::Command;

/// The name of the base image [`TestEngine::base_image`] makes.
pub const BASE_IMAGE: &str = "localhost/silk-test/busybox:latest";

/// A container engine's command line and the arguments that make it work here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestEngine {
    /// The program (`podman`).
    pub cli: String,
    /// Arguments before the subcommand.
    pub global_args: Vec<String>,
    /// Arguments of `build` and `run`.
    pub build_args: Vec<String>,
}

impl TestEngine {
    /// podman, or `None` with a "skipped" line when it is not installed — except under CI
    /// (`CI` set), where its absence fails the test.
    pub fn podman() -> Option<TestEngine> {
        let found = Command::new("podman")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            assert!(
                std::env::var_os("CI").is_none(),
                "podman is needed under CI (.ci/run installs it)"
            );
            eprintln!("skipped: no podman on PATH");
            return None;
        }
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect();
        Some(TestEngine {
            cli: "podman".into(),
            global_args: args(&["--runtime", "runc"]),
            build_args: args(&[
                "--network",
                "host",
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
            ]),
        })
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.cli);
        cmd.args(&self.global_args);
        cmd
    }

    /// Makes [`BASE_IMAGE`] (a static busybox with `sh`) under `dir`; its name.
    pub fn base_image(&self, dir: &Path) -> String {
        let root = dir.join("rootfs");
        std::fs::create_dir_all(root.join("bin")).expect("rootfs");
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("a static busybox (Debian's busybox-static)");
        std::fs::copy(busybox, root.join("bin/busybox")).expect("copy busybox");
        let sh = root.join("bin/sh");
        if !sh.exists() {
            std::os::unix::fs::symlink("busybox", &sh).expect("sh");
        }
        let tar = dir.join("rootfs.tar");
        let ok = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "tar of the rootfs");
        let out = self
            .command()
            .arg("import")
            .arg(&tar)
            .arg(BASE_IMAGE)
            .output()
            .expect("the engine runs");
        assert!(
            out.status.success(),
            "import: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        BASE_IMAGE.to_owned()
    }

    /// Runs `sh -c script` in `image`; its standard output.
    pub fn run(&self, image: &str, script: &str) -> String {
        let out = self
            .command()
            .args(["run", "--rm"])
            .args(&self.build_args)
            .arg(image)
            .args(["sh", "-c", script])
            .output()
            .expect("the engine runs");
        assert!(
            out.status.success(),
            "run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Whether the engine has `image`.
    pub fn has_image(&self, image: &str) -> bool {
        self.command()
            .args(["image", "exists", image])
            .status()
            .is_ok_and(|s| s.success())
    }
}
