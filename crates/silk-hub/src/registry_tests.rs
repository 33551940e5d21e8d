use super::*;
use silk_bus::{Command, TtlPolicy};
use silk_core::{Clock, ManualClock};

const T0: u64 = 1_700_000_000_000;

fn reg(agent: &str, labels: &[(&str, &str)]) -> Register {
    Register {
        agent: agent.into(),
        host: format!("host-{agent}"),
        version: "0.1.0".into(),
        cores: 8,
        memory_bytes: 1 << 34,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        capacity: 64,
    }
}

fn hb(agent: &str, seq: u64) -> Heartbeat {
    Heartbeat {
        agent: agent.into(),
        cpu_pct: 12.5,
        memory_bytes: 1 << 27,
        active_downloaders: 2,
        in_flight: 17,
        qps: 40.0 + seq as f64,
        seq,
    }
}

fn ids(list: &[&str]) -> Vec<AgentId> {
    list.iter().map(|s| AgentId::from(*s)).collect()
}

/// A registry with agents registered at the clock's time.
fn setup(agents: &[(&str, &[(&str, &str)])]) -> (AgentRegistry, ManualClock) {
    let clock = ManualClock::new(T0);
    let mut r = AgentRegistry::new(PhiConfig::default()).unwrap();
    for (a, labels) in agents {
        assert_eq!(
            r.register(&reg(a, labels), clock.now_ms(), clock.now_ms()),
            RegisterOutcome::New
        );
    }
    (r, clock)
}

/// Advances 1 s at a time for `secs` seconds; the agents in `beating` send a heartbeat each
/// second (sent on the same clock, seq from `seq0`).
fn run(r: &mut AgentRegistry, clock: &ManualClock, beating: &[&str], secs: u64, seq0: u64) {
    for i in 0..secs {
        clock.advance(1_000);
        for a in beating {
            let now = clock.now_ms();
            assert_eq!(
                r.heartbeat(&hb(a, seq0 + i), now, now),
                HeartbeatOutcome::Accepted
            );
        }
    }
}

#[test]
fn register_creates_then_refreshes_the_record() {
    let (mut r, clock) = setup(&[("a1", &[("pool", "cn")])]);
    let now = clock.now_ms();
    let views = r.agents(now);
    assert_eq!(views.len(), 1);
    let v = &views[0];
    assert_eq!(
        (v.id.as_str(), v.state, v.capacity),
        ("a1", AgentState::Alive, 64)
    );
    assert_eq!(
        (v.host.as_str(), v.cores, v.total_memory_bytes),
        ("host-a1", 8, 1 << 34)
    );
    assert_eq!(
        (v.last_heartbeat_ms, v.cpu_pct, v.in_flight),
        (None, 0.0, 0)
    );
    assert_eq!(v.labels.get("pool").map(String::as_str), Some("cn"));

    let mut again = reg("a1", &[("pool", "eu")]);
    again.capacity = 8;
    again.version = "0.2.0".into();
    assert_eq!(
        r.register(&again, now + 5, now + 5),
        RegisterOutcome::Refreshed
    );
    let v = &r.agents(now + 5)[0];
    assert_eq!((v.capacity, v.version.as_str()), (8, "0.2.0"));
    assert_eq!(v.labels.get("pool").map(String::as_str), Some("eu"));

    // An older registration, read late, does not overwrite the newer one.
    assert_eq!(
        r.register(&reg("a1", &[]), now, now + 10),
        RegisterOutcome::Outdated
    );
    assert_eq!(r.agents(now + 10)[0].capacity, 8);
}

#[test]
fn heartbeats_fill_the_view() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    run(&mut r, &clock, &["a1"], 3, 1);
    let now = clock.now_ms();
    let v = &r.agents(now + 200)[0];
    assert_eq!(v.last_heartbeat_ms, Some(now));
    assert_eq!(
        (v.cpu_pct, v.memory_bytes, v.active_downloaders),
        (12.5, 1 << 27, 2)
    );
    assert_eq!((v.in_flight, v.qps), (17, 43.0));
    assert!(v.phi < 1.0, "{}", v.phi);
    assert_eq!(v.state, AgentState::Alive);
}

#[test]
fn heartbeat_of_an_unknown_agent_needs_register() {
    let (mut r, clock) = setup(&[]);
    let now = clock.now_ms();
    assert_eq!(
        r.heartbeat(&hb("ghost", 7), now, now),
        HeartbeatOutcome::NeedsRegister
    );
    assert_eq!(
        r.heartbeat(&hb("ghost", 8), now, now),
        HeartbeatOutcome::NeedsRegister
    );
    assert_eq!(r.needs_register(), ids(&["ghost"]));
    assert!(r.agents(now).is_empty() && !r.contains(&"ghost".into()));
    assert!(r.tick(now).is_empty(), "not an agent yet");
    // Registering clears it.
    r.register(&reg("ghost", &[]), now + 1, now + 1);
    assert!(r.needs_register().is_empty());
    assert!(r.contains(&"ghost".into()));
    // One that never registers is forgotten after dead_after.
    r.heartbeat(&hb("silent", 1), now, now);
    clock.advance(10_999);
    r.tick(clock.now_ms());
    assert_eq!(r.needs_register(), ids(&["silent"]));
    clock.advance(1);
    r.tick(clock.now_ms());
    assert!(r.needs_register().is_empty());
}

#[test]
fn old_and_duplicate_heartbeats_are_ignored() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    let now = clock.now_ms();
    // (sent_ms, seq, expected): ordered by sent_ms, then seq.
    let table: &[(u64, u64, HeartbeatOutcome)] = &[
        (now + 1_000, 5, HeartbeatOutcome::Accepted),
        (now + 1_000, 5, HeartbeatOutcome::Stale), // duplicate delivery
        (now + 500, 6, HeartbeatOutcome::Stale),   // sent earlier, read later
        (now + 1_000, 4, HeartbeatOutcome::Stale), // same time, older seq
        (now + 1_000, 6, HeartbeatOutcome::Accepted), // same time, newer seq
        (now + 2_000, 0, HeartbeatOutcome::Accepted), // restarted process: seq back to 0
        (now + 1_999, 9, HeartbeatOutcome::Stale),
    ];
    for (i, (sent, seq, want)) in table.iter().enumerate() {
        let mut msg = hb("a1", *seq);
        msg.cpu_pct = i as f64;
        assert_eq!(r.heartbeat(&msg, *sent, now + 2_000), *want, "row {i}");
    }
    assert_eq!(
        r.agents(now + 2_000)[0].cpu_pct,
        5.0,
        "the last accepted row"
    );
}

#[test]
fn apply_dispatches_envelopes() {
    let (mut r, clock) = setup(&[]);
    let policy = TtlPolicy::default();
    let now = clock.now_ms();
    let e = policy.envelope(reg("a1", &[]), now);
    assert_eq!(r.apply(&e, now), Applied::Register(RegisterOutcome::New));
    let e = policy.envelope(hb("a1", 1), now + 1);
    assert_eq!(
        r.apply(&e, now + 2),
        Applied::Heartbeat(HeartbeatOutcome::Accepted)
    );
    assert_eq!(
        r.apply(&e, now + 3),
        Applied::Heartbeat(HeartbeatOutcome::Stale)
    );
    let e = policy.envelope(Command::Shutdown, now);
    assert_eq!(r.apply(&e, now), Applied::Ignored);
}

#[test]
fn tick_reports_each_change_once() {
    let (mut r, clock) = setup(&[("a1", &[]), ("a2", &[])]);
    let t = r.tick(clock.now_ms());
    let got: Vec<_> = t.iter().map(|t| (t.agent.as_str(), t.from, t.to)).collect();
    assert_eq!(
        got,
        [
            ("a1", None, AgentState::Alive),
            ("a2", None, AgentState::Alive)
        ]
    );
    assert!(r.tick(clock.now_ms()).is_empty());

    // a2 goes silent: suspect, then dead; a1 keeps beating and is never reported.
    let mut seen = Vec::new();
    for i in 0..15 {
        run(&mut r, &clock, &["a1"], 1, i);
        for t in r.tick(clock.now_ms()) {
            seen.push((t.agent.to_string(), t.from, t.to, t.at_ms - T0));
        }
    }
    assert_eq!(
        seen,
        [
            (
                "a2".into(),
                Some(AgentState::Alive),
                AgentState::Suspect,
                6_000
            ),
            (
                "a2".into(),
                Some(AgentState::Suspect),
                AgentState::Dead,
                7_000
            ),
        ]
    );
    assert_eq!(
        r.live_agents(clock.now_ms(), &LabelFilter::any()),
        ids(&["a1"])
    );
}

#[test]
fn dead_within_dead_after_and_transition_carries_phi() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    run(&mut r, &clock, &["a1"], 20, 0);
    r.tick(clock.now_ms());
    let last = clock.now_ms();
    let mut dead_at = None;
    while dead_at.is_none() {
        clock.advance(100);
        for t in r.tick(clock.now_ms()) {
            if t.to == AgentState::Dead {
                assert!(t.phi >= 8.0, "{}", t.phi);
                dead_at = Some(t.at_ms - last);
            }
        }
    }
    assert!(dead_at.unwrap() <= 11_000, "{dead_at:?}");
    assert_eq!(
        r.state(&"a1".into(), clock.now_ms()),
        Some(AgentState::Dead)
    );
}

#[test]
fn a_resumed_agent_comes_back_alive() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    run(&mut r, &clock, &["a1"], 5, 0);
    r.tick(clock.now_ms());
    clock.advance(20_000);
    let t = r.tick(clock.now_ms());
    assert_eq!(t.last().map(|t| t.to), Some(AgentState::Dead));
    // Heartbeats again (same process: seq goes on).
    run(&mut r, &clock, &["a1"], 1, 5);
    let t = r.tick(clock.now_ms());
    assert_eq!(t.len(), 1);
    assert_eq!(
        (t[0].from, t[0].to),
        (Some(AgentState::Dead), AgentState::Alive)
    );
    assert_eq!(
        r.live_agents(clock.now_ms(), &LabelFilter::any()),
        ids(&["a1"])
    );
}

#[test]
fn a_restarted_agent_re_registers_and_revives() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    run(&mut r, &clock, &["a1"], 5, 100);
    clock.advance(30_000);
    r.tick(clock.now_ms());
    let now = clock.now_ms();
    assert_eq!(
        r.register(&reg("a1", &[]), now, now),
        RegisterOutcome::Revived
    );
    assert_eq!(r.state(&"a1".into(), now), Some(AgentState::Alive));
    // Its heartbeats start again at seq 0 and are accepted (newer sent_ms).
    run(&mut r, &clock, &["a1"], 2, 0);
    let t = r.tick(clock.now_ms());
    assert_eq!(
        (t[0].from, t[0].to),
        (Some(AgentState::Dead), AgentState::Alive)
    );
}

#[test]
fn registering_a_live_agent_does_not_reset_its_detector() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    run(&mut r, &clock, &["a1"], 5, 0);
    clock.advance(6_000);
    let now = clock.now_ms();
    let before = r.state(&"a1".into(), now);
    assert_eq!(before, Some(AgentState::Suspect));
    assert_eq!(
        r.register(&reg("a1", &[]), now, now),
        RegisterOutcome::Refreshed
    );
    assert_eq!(r.state(&"a1".into(), now), before);
}

#[test]
fn live_agents_filter_by_label_and_include_suspects() {
    let (mut r, clock) = setup(&[
        ("a1", &[("pool", "cn"), ("net", "adsl")]),
        ("a2", &[("pool", "cn")]),
        ("a3", &[("pool", "eu")]),
        ("a4", &[("pool", "cn")]),
    ]);
    // a4 never beats (dead); a2 stops 5.9 s before `now` (suspect); a1 and a3 beat.
    run(&mut r, &clock, &["a1", "a2", "a3"], 10, 0);
    run(&mut r, &clock, &["a1", "a3"], 5, 10);
    clock.advance(900);
    let now = clock.now_ms();
    assert_eq!(r.state(&"a2".into(), now), Some(AgentState::Suspect));
    assert_eq!(r.state(&"a4".into(), now), Some(AgentState::Dead));
    let cases: &[(&str, &[&str])] = &[
        ("", &["a1", "a2", "a3"]),
        ("pool=cn", &["a1", "a2"]),
        ("pool=cn,net=adsl", &["a1"]),
        (" net = adsl ", &["a1"]),
        ("pool=us", &[]),
    ];
    for (filter, want) in cases {
        let f: LabelFilter = filter.parse().unwrap();
        assert_eq!(r.live_agents(now, &f), ids(want), "{filter:?}");
    }
}

#[test]
fn label_filter_parse_errors_name_the_input() {
    for (input, want) in [
        ("pool", "`pool` has no `=`"),
        ("=cn", "empty key"),
        ("pool=cn,pool=eu", "`pool` is given twice"),
    ] {
        let err = input.parse::<LabelFilter>().unwrap_err().to_string();
        assert!(err.contains(&format!("`{input}`")), "{err}");
        assert!(err.contains(want), "{err}");
    }
    let f: LabelFilter = "b=2,a=1".parse().unwrap();
    assert_eq!(f.to_string(), "a=1,b=2");
}

#[test]
fn views_serialise_for_the_api() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    run(&mut r, &clock, &["a1"], 1, 0);
    clock.advance(60_000);
    let v = serde_json::to_value(r.agents(clock.now_ms())).unwrap();
    assert_eq!(v[0]["state"], "dead");
    assert!(
        v[0]["phi"].as_f64().unwrap() > 8.0,
        "phi stays a finite number"
    );
    assert_eq!(v[0]["last_heartbeat_ms"], T0 + 1_000);
}

#[test]
fn remove_and_bad_config() {
    let (mut r, clock) = setup(&[("a1", &[])]);
    assert!(r.remove(&"a1".into()) && !r.remove(&"a1".into()));
    assert!(r.agents(clock.now_ms()).is_empty());
    let bad = PhiConfig {
        dead_after_ms: 0,
        ..PhiConfig::default()
    };
    assert!(matches!(
        AgentRegistry::new(bad),
        Err(HubError::BadConfig(_))
    ));
}

#[test]
fn a_transition_says_when_the_agent_was_last_heard_and_a_restored_one_was_not() {
    let (mut r, clock) = setup(&[("live", &[])]);
    let start = clock.now_ms();
    assert_eq!(
        r.restore(&reg("stored", &[]), start - 60_000, start),
        RegisterOutcome::New
    );
    run(&mut r, &clock, &["live"], 3, 0);
    let last = clock.now_ms();
    let mut heard = BTreeMap::new();
    for _ in 0..200 {
        clock.advance(100);
        for t in r.tick(clock.now_ms()) {
            if t.to == AgentState::Dead {
                heard.insert(t.agent.to_string(), t.last_heard_ms);
            }
        }
    }
    assert_eq!(heard.get("live"), Some(&Some(last)), "{heard:?}");
    assert_eq!(heard.get("stored"), Some(&None), "{heard:?}");
    // Once it speaks, a restored agent is heard like any other.
    let now = clock.now_ms();
    r.register(&reg("stored", &[]), now, now);
    clock.advance(100);
    let t: Vec<Transition> = r.tick(clock.now_ms());
    assert!(t.iter().any(|t| t.agent.as_str() == "stored"), "{t:?}");
    clock.advance(20_000);
    let dead: Vec<Transition> = r.tick(clock.now_ms());
    let stored = dead.iter().find(|t| t.agent.as_str() == "stored").unwrap();
    assert_eq!(stored.last_heard_ms, Some(now));
}

#[test]
fn drained_agents_are_closed_and_a_stale_store_read_does_not_undo_a_drain() {
    let (mut r, clock) = setup(&[("a", &[("pool", "eu")]), ("b", &[])]);
    let now = clock.now_ms();
    assert_eq!(r.open_agents(now, &[]), ids(&["a", "b"]));
    assert_eq!(r.open_agents(now, &["eu".into()]), ids(&["a"]));
    // A read of the store begins, then a drain is set here: the read may predate it.
    let before = r.drain_changes();
    assert!(r.set_drained(&AgentId::new("a"), true));
    assert!(!r.replace_drained(Default::default(), before));
    assert_eq!(r.open_agents(now, &[]), ids(&["b"]), "the drain holds");
    // A read begun after it replaces the set (another hub ended the drain, drained b).
    let after = r.drain_changes();
    assert!(r.replace_drained([AgentId::new("b")].into(), after));
    assert_eq!(r.open_agents(now, &[]), ids(&["a"]));
    assert!(!r.is_open(&AgentId::new("b"), &[]));
}
