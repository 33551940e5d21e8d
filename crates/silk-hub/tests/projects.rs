//! Projects from git over real HTTP on loopback: a real git server (git's `http-backend`
//! behind basic auth), signed webhooks, builds into versions, artifacts, and what must not
//! happen — unsigned deliveries queueing builds, passwords in answers or logs, a version
//! stuck in `building` after a hub stops.

mod common;

use common::*;
use silk_api::ErrorCode;
use silk_api::client::Client;
use silk_api::projects::{
    Artifact, BuildKind, BuildLogParams, BuildRequest, BuildSpec, ProjectRequest, VersionState,
    VersionView,
};
use silk_hub::{Hub, HubHandle};
use silk_testkit::{GitServer, WorkRepo};
use std::collections::BTreeMap;
use std::time::Duration;
use tempfile::TempDir;

const USER: &str = "ci-bot";
const PASSWORD: &str = "git-pw-7f3a9c";

struct World {
    dir: TempDir,
    git: GitServer,
    repo: WorkRepo,
    hub: HubHandle,
    base: String,
    admin: Client,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("git");
    let repo = WorkRepo::init(&dir.path().join("work"), &root, "shop");
    repo.commit(&[("spider.py", "print('shop')\n")], "first");
    repo.push();
    let git = GitServer::start(&root, USER, PASSWORD).await.unwrap();
    let hub = start_hub(dir.path(), &bus()).await;
    let (base, admin) = serve(&hub).await;
    World {
        dir,
        git,
        repo,
        hub,
        base,
        admin,
    }
}

fn request(w: &World, name: &str, password: &str, command: &str) -> ProjectRequest {
    ProjectRequest {
        name: name.into(),
        git_url: w.git.url("shop"),
        username: Some(USER.into()),
        password: Some(password.into()),
        branch: Some("main".into()),
        tag_pattern: None,
        build: BuildSpec {
            kind: BuildKind::Command,
            command: Some(command.into()),
            containerfile: None,
            context: None,
            timeout_ms: Some(60_000),
            env: BTreeMap::new(),
        },
        webhook_secret: None,
    }
}

/// Sends a GitHub-style delivery signed with `secret`.
async fn github(
    w: &World,
    project: &str,
    secret: &str,
    event: &str,
    delivery: &str,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    let body = serde_json::to_vec(body).unwrap();
    let sig = format!("sha256={}", silk_projects::webhook::sign(secret, &body));
    let answer = reqwest::Client::new()
        .post(format!("{}/api/v1/webhooks/{project}", w.base))
        .header("X-GitHub-Event", event)
        .header("X-GitHub-Delivery", delivery)
        .header("X-Hub-Signature-256", sig)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let bytes = answer.bytes().await.unwrap_or_default();
    (status, serde_json::from_slice(&bytes).unwrap_or_default())
}

fn tag_push(tag: &str, commit: &str) -> serde_json::Value {
    serde_json::json!({"ref": format!("refs/tags/{tag}"), "after": commit, "deleted": false,
        "repository": {"full_name": "team/shop"}})
}

/// The build log once it holds its last line (lines are stored in batches, within a
/// fraction of a second of the version's end).
async fn final_log(client: &Client, project: &str, version: &str) -> Vec<String> {
    within("the build log's last line", 10, async {
        loop {
            let log = client
                .build_log(project, version, &BuildLogParams::default())
                .await
                .unwrap();
            let lines: Vec<String> = log.lines.into_iter().map(|l| l.message).collect();
            if lines
                .iter()
                .any(|l| l.starts_with("version ") || l.starts_with("build failed"))
            {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

async fn until_final(client: &Client, project: &str, version: &str) -> VersionView {
    within("the version's build ends", 60, async {
        loop {
            let v = client.version(project, version).await.unwrap();
            if v.state.is_final() {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_tag_webhook_builds_a_ready_version_and_nothing_else_does() {
    let w = world().await;
    // Only an admin may create a project (its command runs on the hub).
    let member = member(&w.admin, &w.base).await;
    let req = request(
        &w,
        "shop",
        PASSWORD,
        "mkdir -p dist && git rev-parse HEAD > dist/commit 2>/dev/null; echo building; echo ok > dist/ok",
    );
    let e = member.create_project(&req).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Forbidden));

    let created = w.admin.create_project(&req).await.unwrap();
    let secret = created.webhook_secret.clone();
    assert!(created.project.has_password && secret.len() >= 32);
    let e = w.admin.create_project(&req).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Conflict));

    w.repo.tag("release/shop/1.4.0");
    w.repo.push();
    let commit = w.repo.head();

    // Unsigned, wrongly signed: 401, nothing queued.
    let (status, _) = github(
        &w,
        "shop",
        "not-the-secret-at-all",
        "push",
        "d-0",
        &tag_push("release/shop/1.4.0", &commit),
    )
    .await;
    assert_eq!(status, 401);
    let unsigned = reqwest::Client::new()
        .post(format!("{}/api/v1/webhooks/shop", w.base))
        .header("X-GitHub-Event", "push")
        .body(serde_json::to_vec(&tag_push("release/shop/1.4.0", &commit)).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);
    // A body over the webhook limit is refused unread; an unknown project is 404.
    let huge = reqwest::Client::new()
        .post(format!("{}/api/v1/webhooks/shop", w.base))
        .header("X-GitHub-Event", "push")
        .body(vec![b' '; 2 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(huge.status().as_u16(), 413);
    let (status, _) = github(
        &w,
        "nope",
        &secret,
        "push",
        "d-x",
        &tag_push("release/nope/1", &commit),
    )
    .await;
    assert_eq!(status, 404);
    assert!(w.admin.versions("shop").await.unwrap().is_empty());

    // A branch push and a tag that does not match: ignored, with the reason.
    let (status, body) = github(
        &w,
        "shop",
        &secret,
        "push",
        "d-1",
        &serde_json::json!({"ref": "refs/heads/main", "after": commit}),
    )
    .await;
    assert_eq!(
        (status, body["ignored"].as_str().is_some()),
        (200, true),
        "{body}"
    );
    let (status, body) = github(
        &w,
        "shop",
        &secret,
        "push",
        "d-2",
        &tag_push("v9.9", &commit),
    )
    .await;
    assert_eq!(status, 200);
    assert!(
        body["ignored"].as_str().unwrap().contains("does not match"),
        "{body}"
    );

    // The release tag: 202, one build.
    let (status, body) = github(
        &w,
        "shop",
        &secret,
        "push",
        "d-3",
        &tag_push("release/shop/1.4.0", &commit),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["version"], "1.4.0");
    let build = body["build"].as_str().unwrap().to_owned();
    // The same delivery again, and the same tag from another delivery (GitHub's `create`):
    // no second build.
    let (status, body) = github(
        &w,
        "shop",
        &secret,
        "push",
        "d-3",
        &tag_push("release/shop/1.4.0", &commit),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = github(
        &w,
        "shop",
        &secret,
        "create",
        "d-4",
        &serde_json::json!({"ref": "release/shop/1.4.0", "ref_type": "tag"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["ignored"].as_str().unwrap().contains("exists"),
        "{body}"
    );

    let v = until_final(&w.admin, "shop", "1.4.0").await;
    assert_eq!(v.state, VersionState::Ready, "{v:?}");
    assert_eq!(
        (v.build.as_str(), v.commit.as_deref()),
        (build.as_str(), Some(commit.as_str()))
    );
    assert_eq!(v.trigger, "webhook:github");
    let Some(Artifact::Dir { sha256, bytes }) = v.artifact.clone() else {
        panic!("a command build has a packed directory: {v:?}");
    };
    assert_eq!(w.admin.versions("shop").await.unwrap().len(), 1);

    // The artifact downloads with its checksum and unpacks to the built directory.
    let answer = member.artifact("shop", "1.4.0").await.unwrap();
    assert_eq!(answer.headers()["x-silk-sha256"].to_str().unwrap(), sha256);
    let packed = answer.bytes().await.unwrap();
    assert_eq!(packed.len() as u64, bytes);
    let file = w.dir.path().join("a.tar.zst");
    std::fs::write(&file, &packed).unwrap();
    assert_eq!(silk_projects::artifact::sha256_of(&file).unwrap(), sha256);
    let out = w.dir.path().join("unpacked");
    silk_projects::artifact::unpack(&file, &out).unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join("dist/ok")).unwrap(),
        "ok\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("spider.py")).unwrap(),
        "print('shop')\n"
    );

    // The log has the build's output, line by line; no answer holds the password or secret.
    let text = final_log(&w.admin, "shop", "1.4.0").await;
    assert!(text.contains(&"building".to_owned()), "{text:?}");
    let log = w
        .admin
        .build_log("shop", "1.4.0", &BuildLogParams::default())
        .await
        .unwrap();
    assert!(
        text.iter().any(|l| l.starts_with("version 1.4.0 ready")),
        "{text:?}"
    );
    let everything = serde_json::json!([
        w.admin.projects().await.unwrap(),
        w.admin.project("shop").await.unwrap(),
        w.admin.versions("shop").await.unwrap(),
        log,
    ])
    .to_string();
    assert!(
        !everything.contains(PASSWORD) && !everything.contains(&secret),
        "{everything}"
    );
    w.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_the_build_naming_the_project_and_never_the_password() {
    let w = world().await;
    // A rule on the project's failed builds, to a local receiver.
    let receiver = silk_testkit::Receiver::start().await.unwrap();
    let rule: silk_api::alerts::AlertRuleRequest = serde_json::from_value(serde_json::json!({
        "name": "builds", "events": ["build_failed"], "project": "shop",
        "channel": {"webhook": {"url": receiver.url("/hook")}}
    }))
    .unwrap();
    w.admin.create_alert_rule(&rule).await.unwrap();
    let wrong = "wrong-pw-c0ffee";
    w.admin
        .create_project(&request(&w, "shop", wrong, "true"))
        .await
        .unwrap();
    w.repo.tag("release/shop/2.0");
    w.repo.push();
    let queued = w
        .admin
        .build_project(
            "shop",
            &BuildRequest {
                git_ref: "release/shop/2.0".into(),
                version: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (queued.version.as_str(), queued.state),
        ("2.0", VersionState::Queued)
    );
    let v = until_final(&w.admin, "shop", "2.0").await;
    assert_eq!(v.state, VersionState::Failed);
    let reason = v.reason.clone().unwrap();
    assert!(
        reason.contains("project shop") && reason.contains(&w.git.url("shop")),
        "{reason}"
    );
    assert!(!reason.contains(wrong), "{reason}");
    assert!(w.git.refused() > 0);
    let log = final_log(&w.admin, "shop", "2.0").await;
    assert!(!log.iter().any(|l| l.contains(wrong)), "{log:?}");
    // The failed build alerted, once, naming the project and version, never the password.
    let alert = until("the build_failed alert", async || {
        receiver.received().first().map(|r| r.json())
    })
    .await;
    assert_eq!(alert["event"], "build_failed", "{alert}");
    assert_eq!(
        (&alert["facts"]["project"], &alert["facts"]["version"]),
        (&serde_json::json!("shop"), &serde_json::json!("2.0")),
        "{alert}"
    );
    assert!(!alert.to_string().contains(wrong), "{alert}");

    // Fixing the password (PATCH) and building again makes it ready; the password is
    // still never shown.
    let view = w
        .admin
        .patch_project("shop", &serde_json::json!({"password": PASSWORD}))
        .await
        .unwrap();
    assert!(view.has_password);
    let again = w
        .admin
        .build_project(
            "shop",
            &BuildRequest {
                git_ref: "release/shop/2.0".into(),
                version: None,
            },
        )
        .await
        .unwrap();
    assert_ne!(again.build, queued.build);
    assert_eq!(
        until_final(&w.admin, "shop", "2.0").await.state,
        VersionState::Ready
    );
    // A ready version is not built twice by hand.
    let e = w
        .admin
        .build_project(
            "shop",
            &BuildRequest {
                git_ref: "release/shop/2.0".into(),
                version: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Conflict));

    // Bad input names what is wrong.
    for (body, want) in [
        (serde_json::json!({"ref": "main"}), "give the version"),
        (
            serde_json::json!({"ref": "main", "version": "../x"}),
            "version",
        ),
        (serde_json::json!({"reff": "main"}), "reff"),
    ] {
        let e = w
            .admin
            .post(&["api", "v1", "projects", "shop", "builds"], &body)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::BadRequest), "{body}");
        assert!(e.message().unwrap().contains(want), "{body}: {e}");
    }
    let mut bad = request(&w, "Bad Name", PASSWORD, "true");
    let e = w.admin.create_project(&bad).await.unwrap_err();
    assert!(e.message().unwrap().contains("name"), "{e}");
    bad.name = "ok".into();
    bad.tag_pattern = Some("{Release}:{Name}:{Version}".into());
    let e = w.admin.create_project(&bad).await.unwrap_err();
    assert!(
        e.message()
            .unwrap()
            .contains("`:` cannot appear in a git ref"),
        "{e}"
    );
    bad.tag_pattern = None;
    bad.git_url = format!("http://{USER}:{PASSWORD}@127.0.0.1:1/x.git");
    let e = w.admin.create_project(&bad).await.unwrap_err();
    assert!(!e.message().unwrap().contains(PASSWORD), "{e}");
    w.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_stopped_mid_build_leaves_no_version_building_and_the_next_one_builds_it() {
    let w = world().await;
    // The first attempt hangs; the second (after the restart) finishes.
    let marker = w.dir.path().join("attempted");
    let command = format!(
        "if [ -f {m} ]; then echo second; else touch {m}; echo first; sleep 120; fi",
        m = marker.display()
    );
    w.admin
        .create_project(&request(&w, "shop", PASSWORD, &command))
        .await
        .unwrap();
    w.admin
        .build_project(
            "shop",
            &BuildRequest {
                git_ref: "main".into(),
                version: Some("0.1-main".into()),
            },
        )
        .await
        .unwrap();
    // The command's first line in the build log: the build is under way (the marker file
    // exists before that line has been read from the pipe, so it is not the event to await).
    within("the build's first line", 30, async {
        loop {
            let log = w
                .admin
                .build_log("shop", "0.1-main", &BuildLogParams::default())
                .await
                .unwrap();
            if log.lines.iter().any(|l| l.message == "first") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(
        w.admin.version("shop", "0.1-main").await.unwrap().state,
        VersionState::Building
    );
    w.hub.shutdown().await;

    let hub = Hub::start(
        hub_config(w.dir.path()),
        std::sync::Arc::new(bus()),
        std::sync::Arc::new(silk_core::SystemClock),
    )
    .await
    .unwrap();
    let (_, admin) = serve(&hub).await;
    let v = until_final(&admin, "shop", "0.1-main").await;
    assert_eq!(v.state, VersionState::Ready, "{v:?}");
    let text = final_log(&admin, "shop", "0.1-main").await;
    assert!(
        text.contains(&"first".to_owned()) && text.contains(&"second".to_owned()),
        "{text:?}"
    );
    assert!(
        text.iter().any(|l| l.contains("stopped during the build")),
        "{text:?}"
    );

    // Deleting the project removes its versions and artifact.
    let Some(Artifact::Dir { sha256, .. }) = v.artifact else {
        panic!("{v:?}")
    };
    admin.delete_project("shop").await.unwrap();
    assert_eq!(
        admin.project("shop").await.unwrap_err().code(),
        Some(ErrorCode::NotFound)
    );
    assert_eq!(hub.store().count_artifact_chunks(&sha256).await.unwrap(), 0);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_left_building_by_a_dead_hub_is_built_again_and_given_up_after_three_tries() {
    let w = world().await;
    w.admin
        .create_project(&request(&w, "shop", PASSWORD, "echo rebuilt"))
        .await
        .unwrap();
    let store = w.hub.store();
    // As a hub killed mid-build leaves them: `building`, by a hub that holds no lease.
    for (version, attempts) in [("1.0", 1), ("2.0", 3)] {
        let row = silk_store::VersionRow {
            project: "shop".into(),
            version: version.into(),
            build_id: format!("dead-{version}"),
            state: "building".into(),
            created_ms: 1,
            artifact: None,
            doc: serde_json::json!({"revision": "refs/heads/main", "hub": "gone-hub",
                "trigger": "api", "attempts": attempts, "started_ms": 1}),
        };
        store.put_version(&row).await.unwrap();
    }
    let ready = until_final(&w.admin, "shop", "1.0").await;
    assert_eq!(ready.state, VersionState::Ready, "{ready:?}");
    let given_up = until_final(&w.admin, "shop", "2.0").await;
    assert_eq!(given_up.state, VersionState::Failed);
    assert!(given_up.reason.unwrap().contains("interrupted 3 times"));
    let text = final_log(&w.admin, "shop", "1.0").await;
    assert!(
        text.iter()
            .any(|l| l.contains("hub gone-hub stopped during the build")),
        "{text:?}"
    );
    w.hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_with_another_secret_key_than_its_store_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = hub_config(dir.path());
    config.secret_key = Some("11".repeat(32));
    let hub = Hub::start(
        config.clone(),
        std::sync::Arc::new(bus()),
        std::sync::Arc::new(silk_core::SystemClock),
    )
    .await
    .unwrap();
    hub.shutdown().await;
    config.secret_key = Some("22".repeat(32));
    let e = Hub::start(
        config.clone(),
        std::sync::Arc::new(bus()),
        std::sync::Arc::new(silk_core::SystemClock),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("SILK_SECRET_KEY") && e.contains("not the key"),
        "{e}"
    );
    assert!(
        !e.contains(&"22".repeat(32)),
        "the key is not in the error: {e}"
    );
    // The right key starts it again.
    config.secret_key = Some("11".repeat(32));
    let hub = Hub::start(
        config,
        std::sync::Arc::new(bus()),
        std::sync::Arc::new(silk_core::SystemClock),
    )
    .await
    .unwrap();
    hub.shutdown().await;
}

/// Two hubs on one PostgreSQL store (one key): every queued version is built exactly once,
/// and never two builds of one project at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hubs_sharing_a_store_build_each_version_once_one_project_build_at_a_time() {
    let Some(pg) = silk_store::testing::PgTestSchema::from_env() else {
        return;
    };
    pg.create().await.expect("test schema");
    let w = world().await;
    let start = |name: &'static str| {
        let mut config = hub_config(&w.dir.path().join(name));
        config.store_url = Some(pg.url.clone());
        config.secret_key = Some("5a".repeat(32));
        config.hub_id = Some(name.into());
        config.builds.poll_ms = 50;
        async move {
            Hub::start(
                config,
                std::sync::Arc::new(bus()),
                std::sync::Arc::new(silk_core::SystemClock),
            )
            .await
            .expect("hub starts on postgres")
        }
    };
    let a = start("hub-a").await;
    let b = start("hub-b").await;
    let (_, admin) = serve(&a).await;
    for name in ["shop", "blog"] {
        admin
            .create_project(&request(&w, name, PASSWORD, "sleep 0.3; echo built"))
            .await
            .unwrap();
    }
    let mut queued = Vec::new();
    for (project, n) in [("shop", 4), ("blog", 2)] {
        for i in 0..n {
            let version = format!("0.{i}");
            admin
                .build_project(
                    project,
                    &BuildRequest {
                        git_ref: "main".into(),
                        version: Some(version.clone()),
                    },
                )
                .await
                .unwrap();
            queued.push((project, version));
        }
    }
    let mut hubs = std::collections::BTreeSet::new();
    for (project, version) in &queued {
        let v = until_final(&admin, project, version).await;
        assert_eq!(v.state, VersionState::Ready, "{v:?}");
        let log = final_log(&admin, project, version).await;
        assert_eq!(
            log.iter().filter(|l| l.starts_with("checked out")).count(),
            1,
            "{log:?}"
        );
        hubs.insert(v.hub.clone().unwrap());
    }
    // One project's builds never overlap.
    let mut spans: Vec<(u64, u64)> = admin
        .versions("shop")
        .await
        .unwrap()
        .iter()
        .map(|v| (v.started_ms.unwrap(), v.finished_ms.unwrap()))
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "overlapping builds of one project: {spans:?}"
        );
    }
    println!("built by {hubs:?}");
    a.shutdown().await;
    b.shutdown().await;
    pg.drop_schema().await;
}

/// A container project: a release tag becomes a `ready` version whose artifact is the image
/// (`silk/{project}:{version}`) built from the tag's commit; deleting the project removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_project_builds_its_tag_into_an_image_and_deleting_it_removes_the_image() {
    let Some(test) = silk_testkit::containers::TestEngine::podman() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = test.base_image(dir.path());
    let root = dir.path().join("git");
    let repo = WorkRepo::init(&dir.path().join("work"), &root, "img");
    repo.commit(
        &[
            ("crawl.sh", "echo crawl\n"),
            (
                "Containerfile",
                &format!("FROM {base}\nCOPY crawl.sh /app/crawl.sh\nRUN echo layer-built\n"),
            ),
        ],
        "image",
    );
    let tag = format!("release/img/1.{}", std::process::id());
    repo.tag(&tag);
    repo.push();
    let git = GitServer::start(&root, USER, PASSWORD).await.unwrap();
    let mut config = hub_config(dir.path());
    config.builds.engine = silk_projects::build::Engine {
        cli: test.cli.clone(),
        global_args: test.global_args.clone(),
        build_args: test.build_args.clone(),
        registry: None,
    };
    let hub = Hub::start(
        config,
        std::sync::Arc::new(bus()),
        std::sync::Arc::new(silk_core::SystemClock),
    )
    .await
    .unwrap();
    let (_, admin) = serve(&hub).await;
    let mut req = ProjectRequest {
        name: "img".into(),
        git_url: git.url("img"),
        username: Some(USER.into()),
        password: Some(PASSWORD.into()),
        branch: None,
        tag_pattern: None,
        build: BuildSpec {
            kind: BuildKind::Container,
            command: None,
            containerfile: None,
            context: None,
            timeout_ms: None,
            env: BTreeMap::new(),
        },
        webhook_secret: None,
    };
    req.build.containerfile = Some("Containerfile".into());
    admin.create_project(&req).await.unwrap();
    let queued = admin
        .build_project(
            "img",
            &BuildRequest {
                git_ref: tag.clone(),
                version: None,
            },
        )
        .await
        .unwrap();
    let v = until_final(&admin, "img", &queued.version).await;
    assert_eq!(v.state, VersionState::Ready, "{v:?}");
    assert_eq!(v.commit.as_deref(), Some(repo.head().as_str()));
    let Some(Artifact::Image { image, id }) = v.artifact.clone() else {
        panic!("a container build's artifact is its image: {v:?}");
    };
    assert_eq!(image, format!("silk/img:{}", queued.version));
    assert!(!id.is_empty());
    assert_eq!(test.run(&image, "cat /app/crawl.sh"), "echo crawl\n");
    let log = final_log(&admin, "img", &queued.version).await;
    assert!(log.iter().any(|l| l.contains("layer-built")), "{log:?}");
    let e = admin.artifact("img", &queued.version).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotFound));
    admin.delete_project("img").await.unwrap();
    assert!(
        !test.has_image(&image),
        "deleting the project removes its image"
    );
    hub.shutdown().await;
}
