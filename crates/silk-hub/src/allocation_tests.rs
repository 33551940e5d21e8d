use super::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::collections::BTreeSet;

fn ids(list: &[&str]) -> Vec<AgentId> {
    list.iter().map(|s| AgentId::from(*s)).collect()
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(7)
}

fn req(agent: Option<&str>) -> Request {
    let mut r = Request::from_canonical("https://example.com/a".into());
    r.agent = agent.map(AgentId::from);
    r
}

/// An allocation with exactly these agents (as if allocated when they were the live ones).
fn alloc(strategy: &str, policy: OnAgentLost, agents: &[&str]) -> Allocation {
    let a = allocate(strategy.parse().unwrap(), policy, &ids(agents), &mut rng()).unwrap();
    if strategy != "random" {
        assert_eq!(a.agents(), ids(agents).as_slice());
    }
    a
}

#[test]
fn allocate_picks_distinct_live_agents_or_says_why_not() {
    let live = ids(&["a3", "a1", "a2", "a1"]);
    let cases: &[(&str, &[&str], Result<usize, &str>)] = &[
        ("random", &["a1"], Ok(0)),
        ("random", &[], Err("random needs 1 live agent, 0 are alive")),
        ("fixed:2", &["a3", "a1", "a2"], Ok(2)),
        ("fixed:3", &["a3", "a1", "a2", "a1"], Ok(3)),
        ("chained:1", &["a2"], Ok(1)),
        (
            "fixed:3",
            &["a2", "a1"],
            Err("fixed:3 needs 3 live agents, 2 are alive (a1, a2)"),
        ),
        (
            "fixed:3",
            &["a1", "a1", "a1"],
            Err("fixed:3 needs 3 live agents, 1 is alive (a1)"),
        ),
        (
            "chained:2",
            &[],
            Err("chained:2 needs 2 live agents, 0 are alive"),
        ),
        (
            "chained:4",
            &["a3", "a1", "a2"],
            Err("chained:4 needs 4 live agents, 3 are alive (a1, a2, a3)"),
        ),
    ];
    for (strategy, live_now, want) in cases {
        let got = allocate(
            strategy.parse().unwrap(),
            OnAgentLost::Fail,
            &ids(live_now),
            &mut rng(),
        );
        match (got, want) {
            (Ok(a), Ok(n)) => {
                assert_eq!(a.agents().len(), *n, "{strategy}");
                let set: BTreeSet<_> = a.agents().iter().collect();
                assert_eq!(set.len(), *n, "distinct: {strategy}");
                assert!(a.agents().iter().all(|x| live.contains(x)), "{strategy}");
                assert!(a.agents().is_sorted());
                assert_eq!(a.generation(), 0);
            }
            (Err(e), Err(msg)) => {
                assert!(matches!(e, AllocationError::NotEnoughAgents { .. }));
                assert_eq!(e.to_string(), *msg);
            }
            (got, want) => panic!("{strategy} {live_now:?}: {got:?}, wanted {want:?}"),
        }
    }
}

#[test]
fn allocation_is_random_but_seeded() {
    let live = ids(&["a1", "a2", "a3", "a4", "a5", "a6"]);
    let picks: BTreeSet<Vec<AgentId>> = (0..40)
        .map(|seed| {
            let mut r = StdRng::seed_from_u64(seed);
            allocate(Strategy::Fixed(2), OnAgentLost::Fail, &live, &mut r)
                .unwrap()
                .agents()
                .to_vec()
        })
        .collect();
    assert!(
        picks.len() > 5,
        "different seeds pick different agents: {picks:?}"
    );
    let once = |seed| {
        let mut r = StdRng::seed_from_u64(seed);
        allocate(Strategy::Chained(3), OnAgentLost::Fail, &live, &mut r).unwrap()
    };
    assert_eq!(once(42), once(42), "same seed, same allocation");
}

/// One routing case: allocation (strategy, policy, allocated agents), the request's agent,
/// the agents live now, and the routes allowed (`To` any of these / `Lost(x)` / nothing).
struct Case {
    name: &'static str,
    strategy: &'static str,
    policy: OnAgentLost,
    allocated: &'static [&'static str],
    carries: Option<&'static str>,
    live: &'static [&'static str],
    want: Want,
    reassigned: bool,
}

#[derive(Debug)]
enum Want {
    ToAnyOf(&'static [&'static str]),
    Lost(&'static str),
    Unavailable,
}

use OnAgentLost::{Fail, Reassign};

#[rustfmt::skip]
const CASES: &[Case] = &[
    Case { name: "random: any live agent", strategy: "random", policy: Fail, allocated: &["a1"], carries: None, live: &["a1", "a2", "a3"], want: Want::ToAnyOf(&["a1", "a2", "a3"]), reassigned: false },
    Case { name: "random: ignores the request's agent", strategy: "random", policy: Fail, allocated: &["a1"], carries: Some("a9"), live: &["a2"], want: Want::ToAnyOf(&["a2"]), reassigned: false },
    Case { name: "random: none live", strategy: "random", policy: Reassign, allocated: &["a1"], carries: None, live: &[], want: Want::Unavailable, reassigned: false },
    Case { name: "fixed: a live allocated agent", strategy: "fixed:2", policy: Fail, allocated: &["a1", "a2"], carries: None, live: &["a1", "a2", "a3"], want: Want::ToAnyOf(&["a1", "a2"]), reassigned: false },
    Case { name: "fixed: survivors only", strategy: "fixed:2", policy: Fail, allocated: &["a1", "a2"], carries: None, live: &["a2", "a3"], want: Want::ToAnyOf(&["a2"]), reassigned: false },
    Case { name: "fixed: ignores the request's agent", strategy: "fixed:2", policy: Fail, allocated: &["a1", "a2"], carries: Some("a3"), live: &["a1", "a3"], want: Want::ToAnyOf(&["a1"]), reassigned: false },
    Case { name: "fixed+fail: all dead", strategy: "fixed:2", policy: Fail, allocated: &["a1", "a2"], carries: None, live: &["a3", "a4"], want: Want::Lost("a1"), reassigned: false },
    Case { name: "fixed+reassign: all dead", strategy: "fixed:2", policy: Reassign, allocated: &["a1", "a2"], carries: None, live: &["a3", "a4", "a5"], want: Want::ToAnyOf(&["a3", "a4", "a5"]), reassigned: true },
    Case { name: "fixed+reassign: all dead, fewer live", strategy: "fixed:2", policy: Reassign, allocated: &["a1", "a2"], carries: None, live: &["a5"], want: Want::ToAnyOf(&["a5"]), reassigned: true },
    Case { name: "fixed+reassign: nothing live", strategy: "fixed:2", policy: Reassign, allocated: &["a1", "a2"], carries: None, live: &[], want: Want::Unavailable, reassigned: false },
    Case { name: "chained: carried agent live", strategy: "chained:2", policy: Fail, allocated: &["a1", "a2"], carries: Some("a2"), live: &["a1", "a2"], want: Want::ToAnyOf(&["a2"]), reassigned: false },
    Case { name: "chained: carried agent live, not allocated", strategy: "chained:2", policy: Fail, allocated: &["a1", "a2"], carries: Some("a3"), live: &["a1", "a3"], want: Want::ToAnyOf(&["a3"]), reassigned: false },
    Case { name: "chained+fail: carried agent dead", strategy: "chained:2", policy: Fail, allocated: &["a1", "a2"], carries: Some("a2"), live: &["a1"], want: Want::Lost("a2"), reassigned: false },
    Case { name: "chained+reassign: carried agent dead", strategy: "chained:2", policy: Reassign, allocated: &["a1", "a2"], carries: Some("a2"), live: &["a1", "a3"], want: Want::ToAnyOf(&["a1"]), reassigned: false },
    Case { name: "chained+reassign: carried and allocated dead", strategy: "chained:2", policy: Reassign, allocated: &["a1", "a2"], carries: Some("a2"), live: &["a3", "a4"], want: Want::ToAnyOf(&["a3", "a4"]), reassigned: true },
    Case { name: "chained+reassign: nothing live", strategy: "chained:2", policy: Reassign, allocated: &["a1", "a2"], carries: Some("a2"), live: &[], want: Want::Unavailable, reassigned: false },
    Case { name: "chained: no agent carried", strategy: "chained:2", policy: Fail, allocated: &["a1", "a2"], carries: None, live: &["a1", "a2", "a3"], want: Want::ToAnyOf(&["a1", "a2"]), reassigned: false },
    Case { name: "chained+fail: no agent carried, all dead", strategy: "chained:2", policy: Fail, allocated: &["a1", "a2"], carries: None, live: &["a3"], want: Want::Lost("a1"), reassigned: false },
    Case { name: "chained+reassign: no agent carried, all dead", strategy: "chained:2", policy: Reassign, allocated: &["a1", "a2"], carries: None, live: &["a3"], want: Want::ToAnyOf(&["a3"]), reassigned: true },
];

#[test]
fn route_table() {
    for c in CASES {
        // Several seeds, so "any of" is exercised and never strays.
        for seed in 0..8 {
            let mut a = alloc(c.strategy, c.policy, c.allocated);
            let before = a.agents().to_vec();
            let mut r = StdRng::seed_from_u64(seed);
            let got = a.route(&req(c.carries), &ids(c.live), &mut r);
            let ok = match (&got, &c.want) {
                (Route::To(x), Want::ToAnyOf(set)) => set.contains(&x.as_str()),
                (Route::Lost(x), Want::Lost(y)) => x.as_str() == *y,
                (Route::Unavailable, Want::Unavailable) => true,
                _ => false,
            };
            assert!(ok, "{}: got {got:?}, wanted {:?}", c.name, c.want);
            assert_eq!(a.generation() == 1, c.reassigned, "{}", c.name);
            if c.reassigned {
                let live = ids(c.live);
                let n = a.strategy().agents_needed().min(live.len());
                assert_eq!(a.agents().len(), n, "{}", c.name);
                assert!(a.agents().iter().all(|x| live.contains(x)), "{}", c.name);
                if let Route::To(x) = &got {
                    assert!(a.agents().contains(x), "{}: routed to the new set", c.name);
                }
            } else {
                assert_eq!(a.agents(), before.as_slice(), "{}", c.name);
            }
        }
    }
}

#[test]
fn route_spreads_over_the_candidates() {
    let mut a = alloc("fixed:3", Fail, &["a1", "a2", "a3"]);
    let live = ids(&["a1", "a2", "a3", "a4"]);
    let mut r = rng();
    let seen: BTreeSet<AgentId> = (0..100)
        .filter_map(|_| match a.route(&req(None), &live, &mut r) {
            Route::To(x) => Some(x),
            _ => None,
        })
        .collect();
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ids(&["a1", "a2", "a3"])
    );
}

#[test]
fn a_reassignment_sticks() {
    let mut a = alloc("fixed:2", Reassign, &["a1", "a2"]);
    let live = ids(&["a3", "a4"]);
    let mut r = rng();
    a.route(&req(None), &live, &mut r);
    assert_eq!((a.agents(), a.generation()), (live.as_slice(), 1));
    for _ in 0..10 {
        assert!(matches!(a.route(&req(None), &live, &mut r), Route::To(_)));
    }
    assert_eq!(a.generation(), 1, "no further reassignment while they live");
}

#[test]
fn allocation_round_trips_through_serde() {
    let mut a = alloc("chained:2", Reassign, &["a1", "a2"]);
    a.route(&req(None), &ids(&["a3"]), &mut rng());
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"strategy": "chained:2", "on_agent_lost": "reassign", "agents": ["a3"], "generation": 1})
    );
    let back: Allocation = serde_json::from_value(json).unwrap();
    assert_eq!(back, a);
    let minimal: Allocation = serde_json::from_str(r#"{"strategy":"random"}"#).unwrap();
    assert_eq!(
        (minimal.strategy(), minimal.on_agent_lost()),
        (Strategy::Random, Fail)
    );
    let err = serde_json::from_str::<Allocation>(r#"{"strategy":"fixed:0"}"#).unwrap_err();
    assert!(err.to_string().contains("`fixed:0`"), "{err}");
}

fn host_req(host: &str) -> Request {
    Request::from_canonical(format!("https://{host}/page"))
}

/// Where `hash` routes each of `hosts`.
fn routes(a: &mut Allocation, hosts: &[String], live: &[AgentId]) -> Vec<Route> {
    hosts
        .iter()
        .map(|h| a.route(&host_req(h), live, &mut rng()))
        .collect()
}

#[test]
fn hash_sends_a_hosts_requests_to_one_agent_and_spreads_hosts() {
    let agents = ["a1", "a2", "a3", "a4"];
    let mut a = alloc("hash:4", OnAgentLost::Fail, &agents);
    let live = ids(&agents);
    let hosts: Vec<String> = (0..4000).map(|i| format!("h{i}.example")).collect();
    let first = routes(&mut a, &hosts, &live);
    // The same answer again, whatever the randomness and the order of the live list.
    let mut shuffled = live.clone();
    shuffled.reverse();
    assert_eq!(routes(&mut a, &hosts, &shuffled), first);
    let mut per_agent = std::collections::BTreeMap::<String, usize>::new();
    for r in &first {
        match r {
            Route::To(agent) => *per_agent.entry(agent.to_string()).or_default() += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(per_agent.len(), 4, "{per_agent:?}");
    for (agent, n) in &per_agent {
        assert!((800..=1200).contains(n), "{agent}: {n} of 4000");
    }
    // A request's `meta.hash_key` is hashed instead of its host.
    let mut keyed = host_req("other.example");
    keyed
        .meta
        .insert("hash_key".into(), serde_json::json!("h7.example"));
    assert_eq!(a.route(&keyed, &live, &mut rng()), first[7]);
    assert_eq!("hash:4".parse::<Strategy>().unwrap().to_string(), "hash:4");
    assert!("hash:0".parse::<Strategy>().is_err());
}

#[test]
fn hash_moves_only_the_keys_of_an_agent_that_left() {
    let agents = ["a1", "a2", "a3", "a4", "a5"];
    let hosts: Vec<String> = (0..5000).map(|i| format!("h{i}.example")).collect();
    let live = ids(&agents);
    let mut reassign = alloc("hash:5", OnAgentLost::Reassign, &agents);
    let before = routes(&mut reassign, &hosts, &live);
    let without_a3 = ids(&["a1", "a2", "a4", "a5"]);
    let after = routes(&mut reassign, &hosts, &without_a3);
    let mut moved = 0;
    for (b, a) in before.iter().zip(&after) {
        match b {
            Route::To(agent) if agent.as_str() == "a3" => {
                moved += 1;
                assert!(matches!(a, Route::To(x) if x.as_str() != "a3"), "{a:?}");
            }
            kept => assert_eq!(kept, a),
        }
    }
    assert!((800..=1200).contains(&moved), "{moved} of 5000 moved");
    assert_eq!(
        reassign.generation(),
        0,
        "the allocation itself is unchanged"
    );
    // Under `fail`, a key whose agent left is lost; the others are not.
    let mut fail = alloc("hash:5", OnAgentLost::Fail, &agents);
    for (b, a) in before.iter().zip(routes(&mut fail, &hosts, &without_a3)) {
        match b {
            Route::To(agent) if agent.as_str() == "a3" => assert_eq!(a, Route::Lost(agent.clone())),
            kept => assert_eq!(*kept, a),
        }
    }
    // All allocated agents gone and `reassign`: new ones are allocated.
    let mut all_gone = alloc("hash:2", OnAgentLost::Reassign, &["a1", "a2"]);
    let r = all_gone.route(
        &host_req("x.example"),
        &ids(&["b1", "b2", "b3"]),
        &mut rng(),
    );
    assert!(
        matches!(&r, Route::To(x) if x.as_str().starts_with('b')),
        "{r:?}"
    );
    assert_eq!(all_gone.generation(), 1);
}
