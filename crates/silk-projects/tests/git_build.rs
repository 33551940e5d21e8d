//! Checkouts and builds against a real git server (git's `http-backend` behind basic auth on
//! loopback): the right password fetches the tag's commit, a wrong one is a clear failure
//! that never shows it, a tag that moved is refused, builds log line by line and are killed
//! with their process group at the timeout.

use silk_api::projects::{BuildKind, BuildSpec};
use silk_projects::build::{self, BuildJob, Engine, LogFn, Output, Stream};
use silk_projects::git::{self, Remote};
use silk_testkit::{GitServer, WorkRepo};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

const USER: &str = "builder";
const PASSWORD: &str = "pw-Секрет-42";

struct Fixture {
    dir: tempfile::TempDir,
    server: GitServer,
    repo: WorkRepo,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("srv");
    let repo = WorkRepo::init(&dir.path().join("work"), &root, "shop");
    repo.commit(
        &[
            ("README.md", "shop crawler\n"),
            ("shop/spider.py", "print('crawl')\n"),
        ],
        "first",
    );
    repo.tag("release/shop/1.0.0");
    repo.push();
    let server = GitServer::start(&root, USER, PASSWORD).await.unwrap();
    Fixture { dir, server, repo }
}

fn remote(f: &Fixture, password: &str) -> Remote {
    Remote {
        url: f.server.url("shop"),
        username: Some(USER.into()),
        password: Some(password.into()),
    }
}

fn spec(command: Option<&str>, timeout_ms: Option<u64>) -> BuildSpec {
    BuildSpec {
        kind: BuildKind::Command,
        command: command.map(str::to_owned),
        containerfile: None,
        context: None,
        timeout_ms,
        env: BTreeMap::from([("SHOP_MODE".to_owned(), "release".to_owned())]),
    }
}

/// The lines a build logged.
type Lines = Arc<parking_lot::Mutex<Vec<(Stream, String)>>>;

fn collecting() -> (LogFn, Lines) {
    let lines = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let log: LogFn = Arc::new(move |stream, line| sink.lock().push((stream, line)));
    (log, lines)
}

#[tokio::test]
async fn a_tag_is_fetched_over_http_with_the_password_and_never_shown() {
    let f = fixture().await;
    let head = f.repo.head();
    let dest = f.dir.path().join("co1");
    let stop = AtomicBool::new(false);
    let r = remote(&f, PASSWORD);
    let checked = tokio::task::spawn_blocking({
        let dest = dest.clone();
        move || git::checkout(&r, "refs/tags/release/shop/1.0.0", &dest, &stop)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(checked.commit, head);
    // The annotated tag's object id counts as where the tag was, like its commit.
    let tag_object = f
        .repo
        .git(&["rev-parse", "release/shop/1.0.0"])
        .trim()
        .to_owned();
    assert_ne!(tag_object, head);
    assert!(checked.was_at(&tag_object) && checked.was_at(&head[..12]));
    assert!(!checked.was_at("0123456789abcdef"));
    assert_eq!(
        std::fs::read_to_string(dest.join("shop/spider.py")).unwrap(),
        "print('crawl')\n"
    );

    // A wrong password: a clear git error, naming the repository, without the password.
    let refused_before = f.server.refused();
    let wrong = "wrong-password-123";
    let r = remote(&f, wrong);
    let dest = f.dir.path().join("co2");
    let e = tokio::task::spawn_blocking(move || {
        git::checkout(
            &r,
            "refs/tags/release/shop/1.0.0",
            &dest,
            &AtomicBool::new(false),
        )
    })
    .await
    .unwrap()
    .unwrap_err()
    .to_string();
    assert!(e.contains(&f.server.url("shop")), "{e}");
    assert!(!e.contains(wrong) && !e.contains(PASSWORD), "{e}");
    assert!(f.server.refused() > refused_before);

    // An unknown tag: an error naming it.
    let r = remote(&f, PASSWORD);
    let dest = f.dir.path().join("co3");
    let e = tokio::task::spawn_blocking(move || {
        git::checkout(
            &r,
            "refs/tags/release/shop/9.9.9",
            &dest,
            &AtomicBool::new(false),
        )
    })
    .await
    .unwrap()
    .unwrap_err()
    .to_string();
    assert!(e.contains("9.9.9"), "{e}");

    // file:// needs no credentials.
    let r = Remote {
        url: format!("file://{}", f.repo.bare().display()),
        username: None,
        password: None,
    };
    let dest = f.dir.path().join("co4");
    let checked = tokio::task::spawn_blocking(move || {
        git::checkout(&r, "refs/heads/main", &dest, &AtomicBool::new(false))
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(checked.commit, head);
}

#[tokio::test]
async fn a_command_build_packs_its_directory_and_logs_each_line() {
    let f = fixture().await;
    let (log, lines) = collecting();
    let job = BuildJob {
        project: "shop".into(),
        version: "1.0.0".into(),
        remote: remote(&f, PASSWORD),
        revision: "refs/tags/release/shop/1.0.0".into(),
        expect_commit: Some(f.repo.head()),
        spec: spec(
            Some("mkdir -p dist && echo \"$SHOP_MODE\" > dist/mode && echo one && echo two >&2"),
            None,
        ),
        work_dir: f.dir.path().join("b1"),
    };
    let built = build::build(job, &Engine::default(), log).await.unwrap();
    assert_eq!(built.commit, f.repo.head());
    let Output::Dir {
        path,
        sha256,
        bytes,
    } = built.output
    else {
        panic!("a command build makes a directory");
    };
    assert_eq!(silk_projects::artifact::sha256_of(&path).unwrap(), sha256);
    assert!(bytes > 0);
    let out = f.dir.path().join("unpacked");
    silk_projects::artifact::unpack(&path, &out).unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join("dist/mode")).unwrap(),
        "release\n"
    );
    assert!(out.join("shop/spider.py").is_file() && !out.join(".git").exists());
    let lines = lines.lock().clone();
    assert!(lines.contains(&(Stream::Stdout, "one".into())), "{lines:?}");
    assert!(lines.contains(&(Stream::Stderr, "two".into())), "{lines:?}");
    assert!(lines.iter().all(|(_, l)| !l.contains(PASSWORD)));
}

#[tokio::test]
async fn a_failing_command_a_moved_tag_and_a_timeout_fail_the_build() {
    let f = fixture().await;
    let job = |name: &str, command: &str, timeout_ms: Option<u64>| BuildJob {
        project: "shop".into(),
        version: "1.0.0".into(),
        remote: remote(&f, PASSWORD),
        revision: "refs/tags/release/shop/1.0.0".into(),
        expect_commit: None,
        spec: spec(Some(command), timeout_ms),
        work_dir: f.dir.path().join(name),
    };
    let (log, _) = collecting();
    let e = build::build(job("b1", "exit 3", None), &Engine::default(), log.clone())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("exited with status 3"), "{e}");

    // The tag moved after the webhook named its commit.
    let announced = f.repo.head();
    f.repo.commit(&[("README.md", "changed\n")], "second");
    f.repo.tag("release/shop/1.0.0");
    f.repo.push();
    let mut moved = job("b2", "true", None);
    moved.expect_commit = Some(announced.clone());
    let e = build::build(moved, &Engine::default(), log.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("the tag moved") && e.contains(&announced), "{e}");

    // A build over its timeout is killed with everything it started.
    let pid_file = f.dir.path().join("bg.pid");
    let command = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
    let e = build::build(job("b3", &command, Some(1000)), &Engine::default(), log)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("timeout (1000 ms)"), "{e}");
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    silk_testkit::eventually(
        std::time::Duration::from_secs(5),
        silk_testkit::POLL_EVERY,
        async || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Gone, or a zombie waiting for its reaper.
            (stat.is_empty() || stat.split_whitespace().nth(2) == Some("Z")).then_some(())
        },
    )
    .await
    .expect("the background sleep was killed with the build's process group");
}

/// The container engine of the tests (podman set up for this sandbox), as a build engine.
fn podman() -> Option<(silk_testkit::containers::TestEngine, Engine)> {
    let test = silk_testkit::containers::TestEngine::podman()?;
    let engine = Engine {
        cli: test.cli.clone(),
        global_args: test.global_args.clone(),
        build_args: test.build_args.clone(),
        registry: None,
    };
    Some((test, engine))
}

#[tokio::test]
async fn a_container_build_makes_an_image_from_the_tag() {
    let Some((test, engine)) = podman() else {
        return;
    };
    let f = fixture().await;
    let base = test.base_image(f.dir.path());
    f.repo.commit(
        &[(
            "Containerfile",
            &format!("FROM {base}\nCOPY shop /app/shop\nARG MODE\nRUN echo \"$MODE\" > /app/mode && echo image-step\n"),
        )],
        "containerfile",
    );
    f.repo.tag("release/shop/2.0.0");
    f.repo.push();
    let (log, lines) = collecting();
    let mut spec = spec(None, None);
    spec.kind = BuildKind::Container;
    spec.env = BTreeMap::from([("MODE".to_owned(), "prod".to_owned())]);
    let version = format!("2.0.0-{}", std::process::id());
    let job = BuildJob {
        project: "shop".into(),
        version: version.clone(),
        remote: remote(&f, PASSWORD),
        revision: "refs/tags/release/shop/2.0.0".into(),
        expect_commit: Some(f.repo.head()),
        spec,
        work_dir: f.dir.path().join("c1"),
    };
    let built = build::build(job, &engine, log).await.unwrap();
    let Output::Image { image, id } = built.output else {
        panic!("a container build makes an image");
    };
    assert_eq!(image, Engine::image_name("shop", &version));
    assert!(!id.is_empty());
    assert!(lines.lock().iter().any(|(_, l)| l.contains("image-step")));
    // The image holds the checkout and what the build made.
    assert_eq!(
        test.run(&image, "cat /app/mode /app/shop/spider.py"),
        "prod\nprint('crawl')\n"
    );
    engine.remove_image(&image).await;
    assert!(!test.has_image(&image), "the image was removed");
}
