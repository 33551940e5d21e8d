//! [`HubError`]: everything that can go wrong in the hub's pure modules.

use crate::allocation::Strategy;
use silk_core::AgentId;
use thiserror::Error;

/// An error of the hub. Every message names the input or the agents involved, so it can be
/// shown to a user as is (a run that cannot be allocated fails to start with it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HubError {
    /// An allocation strategy string that does not parse.
    #[error(
        "invalid allocation strategy `{input}`: {reason} (expected `random`, `fixed:N` or `chained:N`)"
    )]
    BadStrategy {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An `on_agent_lost` policy string that does not parse.
    #[error("invalid on_agent_lost policy `{input}` (expected `fail` or `reassign`)")]
    BadPolicy {
        /// The text given.
        input: String,
    },
    /// A label filter string that does not parse.
    #[error("invalid label filter `{input}`: {reason} (expected `key=value[,key=value…]`)")]
    BadLabelFilter {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
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
    /// A configuration value out of range.
    #[error("invalid hub configuration: {0}")]
    BadConfig(String),
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
