//! The scale hook of declared pools (seed 003 F2/F23/F8): a pool that needs more live agents
//! than it has makes the hub run the admin's scale command with the deficit in its
//! environment, again after a back-off while the deficit stays, and not once it has enough;
//! an agent that leaves makes it run again. The deficit is in `GET /api/v1/pools` and
//! `/metrics`. Real agents on the in-process bus, a real process for the command.

use silk_api::agents::PoolView;
use silk_hub::PoolDecl;
use std::collections::BTreeMap;
use std::path::Path;
use tempfile::TempDir;

mod common;
use common::*;

fn pool(agents: u32, command: &[&str], backoff_ms: u64) -> PoolDecl {
    PoolDecl {
        agents,
        scale_command: command.iter().map(|s| (*s).to_owned()).collect(),
        scale_timeout_ms: 10_000,
        scale_backoff_ms: backoff_ms,
        scale_env: BTreeMap::from([("SCALE_LOG".to_owned(), String::new())]),
    }
}

/// The lines the scale command wrote: `pool wanted alive deficit`.
fn calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn pools(admin: &silk_api::client::Client) -> BTreeMap<String, PoolView> {
    let answer = admin
        .request(reqwest::Method::GET, "/api/v1/pools", None)
        .await
        .unwrap();
    serde_json::from_value::<Vec<PoolView>>(answer.value)
        .unwrap()
        .into_iter()
        .map(|p| (p.name.clone(), p))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_short_of_agents_runs_its_scale_command_until_it_has_enough() {
    let dir = TempDir::new().unwrap();
    let bus = bus();
    let log = dir.path().join("scale.log");
    let mut eu = pool(
        2,
        &[
            "sh",
            "-c",
            "echo \"$SILK_POOL $SILK_POOL_AGENTS $SILK_POOL_ALIVE $SILK_POOL_DEFICIT\" >> \"$SCALE_LOG\"; echo asked for $SILK_POOL_DEFICIT",
        ],
        200,
    );
    eu.scale_env
        .insert("SCALE_LOG".into(), log.display().to_string());
    let mut config = hub_config(dir.path());
    config.pools = BTreeMap::from([
        ("eu".to_owned(), eu),
        // A command that fails: reported, and tried again later.
        (
            "spare".to_owned(),
            pool(1, &["sh", "-c", "echo no cloud >&2; exit 3"], 100),
        ),
        // No command: the deficit is only reported.
        ("bare".to_owned(), pool(1, &[], 100)),
    ]);
    let hub = start_hub_with(config, &bus).await;
    let (base, admin) = serve(&hub).await;

    // At start, after the agents had time to register: 2 wanted, 0 alive.
    until("the first scale call", async || {
        calls(&log).first().cloned()
    })
    .await;
    assert_eq!(calls(&log)[0], "eu 2 0 2");
    let view = pools(&admin).await;
    assert_eq!((view["eu"].agents, view["eu"].deficit), (2, 2));
    assert_eq!(view["bare"].deficit, 1);
    assert!(!view["bare"].scale.command && view["bare"].scale.attempts == 0);

    // One agent comes: the next call (after the back-off) asks for one.
    let mut labelled = agent_config(dir.path(), "e1");
    labelled.labels = BTreeMap::from([("pool".to_owned(), "eu".to_owned())]);
    let e1 = start_agent_with(labelled, &bus).await;
    until("a call for one agent", async || {
        calls(&log).iter().any(|l| l == "eu 2 1 1").then_some(())
    })
    .await;
    let view = pools(&admin).await;
    assert_eq!((view["eu"].alive, view["eu"].deficit), (1, 1));
    assert!(view["eu"].scale.attempts >= 2, "{:?}", view["eu"]);
    assert_eq!(view["eu"].scale.last_ok, Some(true));

    // Enough: the attempts start over and nothing is due.
    let mut labelled = agent_config(dir.path(), "e2");
    labelled.labels = BTreeMap::from([("pool".to_owned(), "eu".to_owned())]);
    let e2 = start_agent_with(labelled, &bus).await;
    let enough = until("the pool to have enough agents", async || {
        let v = pools(&admin).await.remove("eu")?;
        (v.deficit == 0 && !v.scale.running).then_some(v)
    })
    .await;
    assert_eq!(enough.alive, 2);
    assert_eq!((enough.scale.attempts, enough.scale.next_ms), (0, None));
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "silk_pool_agents_wanted{pool=\"eu\"} 2",
        "silk_pool_agents_alive{pool=\"eu\"} 2",
        "silk_pool_agents_deficit{pool=\"eu\"} 0",
        "silk_pool_agents_deficit{pool=\"bare\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    let before = calls(&log).len();

    // An agent leaves: the command runs again at once, for one.
    e2.shutdown().await;
    until("a call after the agent left", async || {
        let all = calls(&log);
        (all.len() > before).then_some(())
    })
    .await;
    assert_eq!(calls(&log)[before], "eu 2 1 1");
    assert!(
        calls(&log)[..before].iter().all(|l| !l.ends_with(" 0")),
        "the command never runs without a deficit: {:?}",
        calls(&log)
    );

    // The failing command: its error is reported, and it is tried again later.
    let spare = until("the spare pool's command to fail twice", async || {
        let v = pools(&admin).await.remove("spare")?;
        (v.scale.attempts >= 2).then_some(v)
    })
    .await;
    assert_eq!(spare.scale.last_ok, Some(false));
    let message = spare.scale.last_message.clone().unwrap_or_default();
    assert!(message.contains("no cloud"), "{message}");
    assert!(
        spare.scale.next_ms > spare.scale.last_ms,
        "{:?}",
        spare.scale
    );
    // The command's output is the admin's: other tokens see the deficit, not the output.
    let member = member(&admin, &base).await;
    let seen = pools(&member).await;
    assert_eq!(seen["spare"].scale.last_message, None);
    assert_eq!(seen["spare"].deficit, 1);
    e1.shutdown().await;
    hub.shutdown().await;
}
