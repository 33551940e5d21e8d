//! The agent link: the hub's side of talking to agents over the bus — which agents are live
//! now (the registry read at the hub's clock) and commands to one agent. Runs and run starts
//! use it; the presence task feeds the registry behind it.

use crate::registry::{AgentRegistry, LabelFilter};
use parking_lot::Mutex;
use silk_bus::{Bus, BusError, Command, Subject, TtlPolicy};
use silk_core::{AgentId, Clock};
use std::sync::Arc;

/// Live agents and commands to them.
#[derive(Clone)]
pub(crate) struct AgentLink {
    bus: Arc<dyn Bus>,
    ttl: TtlPolicy,
    clock: Arc<dyn Clock>,
    registry: Arc<Mutex<AgentRegistry>>,
}

impl AgentLink {
    pub(crate) fn new(
        bus: Arc<dyn Bus>,
        ttl: TtlPolicy,
        clock: Arc<dyn Clock>,
        registry: Arc<Mutex<AgentRegistry>>,
    ) -> Self {
        Self {
            bus,
            ttl,
            clock,
            registry,
        }
    }

    /// The live agents now.
    pub(crate) fn live_agents(&self) -> Vec<AgentId> {
        let now = self.clock.now_ms();
        self.registry.lock().live_agents(now, &LabelFilter::any())
    }

    /// The live agents of `pools` (any agent when empty) that may take new work now (not
    /// drained).
    pub(crate) fn open_agents(&self, pools: &[String]) -> Vec<AgentId> {
        let now = self.clock.now_ms();
        self.registry.lock().open_agents(now, pools)
    }

    /// The live agents a run of `pools` may send requests to now: every live agent of its
    /// pools that is not drained, and the run's own `allocated` agents even when drained (a
    /// drained agent finishes the runs that hold it).
    pub(crate) fn agents_for_run(&self, allocated: &[AgentId], pools: &[String]) -> Vec<AgentId> {
        let now = self.clock.now_ms();
        let registry = self.registry.lock();
        let mut live = registry.live_agents(now, &LabelFilter::any());
        live.retain(|a| allocated.contains(a) || registry.is_open(a, pools));
        live
    }

    /// The slots of `agents` together (their registered `capacity`).
    pub(crate) fn capacity(&self, agents: &[AgentId]) -> u64 {
        self.registry.lock().capacity(agents)
    }

    /// Sends a command to one agent (the bus retries per its policy).
    pub(crate) async fn send_command(
        &self,
        agent: &AgentId,
        command: Command,
    ) -> Result<(), BusError> {
        let subject = Subject::agent_commands(agent)?;
        let envelope = self.ttl.envelope(command, self.clock.now_ms());
        self.bus.publish(&subject, &envelope).await
    }
}
