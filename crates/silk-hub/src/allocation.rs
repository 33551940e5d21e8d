//! Allocation strategies: which agents a run's requests go to (design §4).
//!
//! - `random` — each request to a random live agent.
//! - `fixed:N` — N distinct live agents picked at random when the run starts, then only
//!   those.
//! - `chained:N` — as `fixed:N`, and a request that carries an agent
//!   ([`Request::agent`], set on links discovered from a page that agent fetched) must be
//!   fetched by that agent.
//! - `hash:N` — as `fixed:N`, and each request goes to the allocated agent its key ranks
//!   first by rendezvous (highest random weight) hashing: the key is the request's host, or
//!   its `meta.hash_key` when it has one. A host's requests all go to one agent (its
//!   cookies, connections and politeness stay there), and when an agent leaves only the keys
//!   it had move (about 1/N), each to the agent it ranks next.
//!
//! [`allocate`] decides synchronously at run start (a run that cannot be allocated fails to
//! start with the [`AllocationError`]); the [`Allocation`] is serialisable so it can be stored with
//! the run. [`Allocation::route`] then picks the agent of each request against the live
//! agents of the moment, following the run's [`OnAgentLost`] policy when agents died:
//!
//! | strategy | request | situation | `fail` | `reassign` |
//! |---|---|---|---|---|
//! | random | any | some agent live | `To(random live)` | same |
//! | random | any | none live | `Unavailable` | same |
//! | fixed, chained | no agent | an allocated agent live | `To(random live allocated)` | same |
//! | fixed, chained | no agent | all allocated dead | `Lost(first allocated)` | new agents allocated, `To(one)`; `Unavailable` if none live |
//! | chained | carries m | m live | `To(m)` | same |
//! | chained | carries m | m dead | `Lost(m)` | as "no agent" |
//! | hash | key k | k's agent (over the allocated) live | `To(it)` | same |
//! | hash | key k | k's agent dead | `Lost(it)` | `To(k's agent over the live allocated)`; all dead: new agents allocated |
//!
//! A reassignment replaces the allocated agents with up to N live ones picked at random
//! (fewer if fewer are live) and bumps [`Allocation::generation`], so the caller knows to
//! store the allocation again. Pure: randomness comes in as a `rand::Rng`.

use rand::Rng;
use rand::seq::IndexedRandom;
use serde::{Deserialize, Serialize};
pub use silk_api::runs::{OnAgentLost, Strategy};
use silk_core::{AgentId, Request};
use thiserror::Error;

/// A run that cannot be allocated. The message names the agents involved, so it can be shown
/// to a user as is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AllocationError {
    /// Fewer live agents than the strategy needs: the run cannot start.
    #[error("{}", not_enough(strategy, *needed, alive))]
    NotEnoughAgents {
        /// The strategy asked for.
        strategy: Strategy,
        /// How many distinct live agents it needs.
        needed: usize,
        /// The agents that are alive (sorted).
        alive: Vec<AgentId>,
    },
}

fn not_enough(strategy: &Strategy, needed: usize, alive: &[AgentId]) -> String {
    let noun = if needed == 1 { "agent" } else { "agents" };
    let verb = if alive.len() == 1 { "is" } else { "are" };
    let mut text = format!(
        "{strategy} needs {needed} live {noun}, {} {verb} alive",
        alive.len()
    );
    if !alive.is_empty() {
        let names: Vec<&str> = alive.iter().map(AgentId::as_str).collect();
        text.push_str(&format!(" ({})", names.join(", ")));
    }
    text
}

/// Where one request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Send it to this agent.
    To(AgentId),
    /// Its agent is dead and the policy is `fail`: the request fails with `agent_lost`.
    Lost(AgentId),
    /// No live agent can take it now: hold it (back-pressure decides how long).
    Unavailable,
}

/// The agents of a run, decided at run start; store it with the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allocation {
    strategy: Strategy,
    #[serde(default)]
    on_agent_lost: OnAgentLost,
    /// Sorted; empty for `random`.
    #[serde(default)]
    agents: Vec<AgentId>,
    /// 0 at run start, +1 per reassignment.
    #[serde(default)]
    generation: u32,
}

/// Decides the allocation of a run at its start, from the agents live now: `fixed:N` and
/// `chained:N` pick N distinct ones at random, `random` only checks that one is live.
/// Fails with [`AllocationError::NotEnoughAgents`] naming the live agents when there are too few.
pub fn allocate<R: Rng + ?Sized>(
    strategy: Strategy,
    on_agent_lost: OnAgentLost,
    live_agents: &[AgentId],
    rng: &mut R,
) -> Result<Allocation, AllocationError> {
    let mut live = live_agents.to_vec();
    live.sort();
    live.dedup();
    let needed = strategy.agents_needed();
    if live.len() < needed {
        return Err(AllocationError::NotEnoughAgents {
            strategy,
            needed,
            alive: live,
        });
    }
    let agents = match strategy {
        Strategy::Random => Vec::new(),
        Strategy::Fixed(_) | Strategy::Chained(_) | Strategy::Hashed(_) => pick(&live, needed, rng),
    };
    Ok(Allocation {
        strategy,
        on_agent_lost,
        agents,
        generation: 0,
    })
}

/// `n` distinct agents of `candidates` (sorted, distinct) at random, sorted.
fn pick<R: Rng + ?Sized>(candidates: &[AgentId], n: usize, rng: &mut R) -> Vec<AgentId> {
    let mut out: Vec<AgentId> = candidates.choose_multiple(rng, n).cloned().collect();
    out.sort();
    out
}

impl Allocation {
    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The `on_agent_lost` policy.
    pub fn on_agent_lost(&self) -> OnAgentLost {
        self.on_agent_lost
    }

    /// The allocated agents, sorted (empty for `random`): what `silk runs` shows.
    pub fn agents(&self) -> &[AgentId] {
        &self.agents
    }

    /// How many times the agents were reassigned; store the allocation again when it grows.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Where `request` goes, given the agents live now (see the module docs' table).
    /// Under `reassign`, may replace the allocated agents (bumping [`Self::generation`]).
    pub fn route<R: Rng + ?Sized>(
        &mut self,
        request: &Request,
        live_now: &[AgentId],
        rng: &mut R,
    ) -> Route {
        match self.strategy {
            Strategy::Random => live_now
                .choose(rng)
                .map_or(Route::Unavailable, |a| Route::To(a.clone())),
            Strategy::Fixed(_) => self.route_allocated(live_now, rng),
            Strategy::Chained(_) => match &request.agent {
                Some(m) if live_now.contains(m) => Route::To(m.clone()),
                Some(m) if self.on_agent_lost == OnAgentLost::Fail => Route::Lost(m.clone()),
                _ => self.route_allocated(live_now, rng),
            },
            Strategy::Hashed(_) => self.route_hashed(request, live_now, rng),
        }
    }

    fn route_hashed<R: Rng + ?Sized>(
        &mut self,
        request: &Request,
        live_now: &[AgentId],
        rng: &mut R,
    ) -> Route {
        let key = hash_key(request);
        let Some(first) = rendezvous(&key, self.agents.iter()) else {
            return Route::Unavailable;
        };
        if live_now.contains(first) {
            return Route::To(first.clone());
        }
        if self.on_agent_lost == OnAgentLost::Fail {
            return Route::Lost(first.clone());
        }
        let live = self.agents.iter().filter(|a| live_now.contains(a));
        if let Some(next) = rendezvous(&key, live) {
            return Route::To(next.clone());
        }
        if !self.reassign(live_now, rng) {
            return Route::Unavailable;
        }
        rendezvous(&key, self.agents.iter()).map_or(Route::Unavailable, |a| Route::To(a.clone()))
    }

    fn route_allocated<R: Rng + ?Sized>(&mut self, live_now: &[AgentId], rng: &mut R) -> Route {
        let alive: Vec<&AgentId> = self
            .agents
            .iter()
            .filter(|a| live_now.contains(a))
            .collect();
        if let Some(a) = alive.choose(rng) {
            return Route::To((*a).clone());
        }
        match self.on_agent_lost {
            OnAgentLost::Fail => self
                .agents
                .first()
                .map_or(Route::Unavailable, |a| Route::Lost(a.clone())),
            OnAgentLost::Reassign => {
                if !self.reassign(live_now, rng) {
                    return Route::Unavailable;
                }
                self.agents
                    .choose(rng)
                    .map_or(Route::Unavailable, |a| Route::To(a.clone()))
            }
        }
    }

    /// Replaces the allocated agents with up to N of `live_now` picked at random; false if
    /// none is live.
    fn reassign<R: Rng + ?Sized>(&mut self, live_now: &[AgentId], rng: &mut R) -> bool {
        let mut live = live_now.to_vec();
        live.sort();
        live.dedup();
        if live.is_empty() {
            return false;
        }
        let n = self.strategy.agents_needed().min(live.len());
        self.agents = pick(&live, n, rng);
        self.generation += 1;
        true
    }
}

/// What `hash:N` hashes of a request: its `meta.hash_key` (a string or a number), else its
/// host.
fn hash_key(request: &Request) -> String {
    match request.meta.get("hash_key") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v @ serde_json::Value::Number(_)) => v.to_string(),
        _ => request.host_key(),
    }
}

/// The agent `key` ranks first among `agents` by rendezvous hashing (the highest
/// `xxh3(key, agent)`; ties by id), if there is any.
fn rendezvous<'a>(key: &str, agents: impl Iterator<Item = &'a AgentId>) -> Option<&'a AgentId> {
    agents.max_by_key(|agent| {
        let mut bytes = Vec::with_capacity(key.len() + agent.as_str().len() + 1);
        bytes.extend_from_slice(key.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(agent.as_str().as_bytes());
        (xxhash_rust::xxh3::xxh3_64(&bytes), *agent)
    })
}

#[cfg(test)]
#[path = "allocation_tests.rs"]
mod tests;
