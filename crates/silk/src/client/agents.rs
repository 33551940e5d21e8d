//! `silk agents [list]`: the agents known to the hub; `silk agents shutdown ID`: stop one;
//! `silk agents drain ID` / `undrain ID`: no new work for one, or again; `silk agents pools`:
//! the pools the hub's config declares and their deficits.

use super::output::{Align, Table, ago, human_bytes, now_ms, print_json};
use super::{Client, Conn, parse};
use clap::{Args, Subcommand};
use silk_api::agents::{AgentView, PoolView};
use std::process::ExitCode;

/// Options of `silk agents`.
#[derive(Debug, Args)]
pub struct AgentsArgs {
    #[command(subcommand)]
    pub command: Option<AgentsCommand>,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk agents …`.
#[derive(Debug, Subcommand)]
pub enum AgentsCommand {
    /// List the agents: state, load, last heartbeat (the default).
    List,
    /// List the pools the hub's config declares (`--pools`): agents wanted and alive, the
    /// deficit, and the scale command's last run.
    Pools,
    /// Tell an agent to stop: it finishes or gives back its work within its grace and exits;
    /// its runs go on as for an agent that died. Admin only.
    Shutdown {
        /// The agent's id (see `silk agents`).
        id: String,
    },
    /// Drain an agent: it takes no new work (not picked for new runs or reassignments, no
    /// requests of `random` runs) and finishes the runs that hold it; every hub of the store
    /// agrees. Admin only.
    Drain {
        /// The agent's id (see `silk agents`).
        id: String,
    },
    /// End an agent's drain: it takes new work again. Admin only.
    Undrain {
        /// The agent's id (see `silk agents`).
        id: String,
    },
}

/// Runs `silk agents`.
pub async fn agents(args: AgentsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    match &args.command {
        Some(AgentsCommand::Shutdown { id }) => {
            let view = client
                .api()
                .shutdown_agent(id)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("shutdown sent to agent {} (it was {})", view.id, view.state);
            return Ok(ExitCode::SUCCESS);
        }
        Some(AgentsCommand::Drain { id }) => {
            let view = client
                .api()
                .drain_agent(id)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!(
                "agent {} is draining: no new work; it finishes the runs that hold it",
                view.id
            );
            return Ok(ExitCode::SUCCESS);
        }
        Some(AgentsCommand::Undrain { id }) => {
            let view = client
                .api()
                .undrain_agent(id)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("agent {} takes new work again", view.id);
            return Ok(ExitCode::SUCCESS);
        }
        Some(AgentsCommand::Pools) => {
            let answer = client.get(&["api", "v1", "pools"]).await?;
            if args.conn.json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let pools: Vec<PoolView> = parse(&answer.value, "a list of pools")?;
            print!("{}", pools_table(&pools, now_ms()).render());
            if pools.is_empty() {
                eprintln!(
                    "the hub at {} declares no pools (silk hub --pools FILE)",
                    client.server()
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        Some(AgentsCommand::List) | None => {}
    }
    let answer = client.get(&["api", "v1", "agents"]).await?;
    if args.conn.json {
        print_json(&answer);
        return Ok(ExitCode::SUCCESS);
    }
    let agents: Vec<AgentView> = parse(&answer.value, "a list of agents")?;
    print!("{}", agents_table(&agents, now_ms()).render());
    if agents.is_empty() {
        eprintln!("no agents registered with the hub at {}", client.server());
    }
    Ok(ExitCode::SUCCESS)
}

fn pools_table(pools: &[PoolView], now_ms: u64) -> Table {
    use Align::{Left, Right};
    let mut table = Table::new(&[
        ("POOL", Left),
        ("WANTED", Right),
        ("ALIVE", Right),
        ("DEFICIT", Right),
        ("SCALE", Left),
    ]);
    for p in pools {
        let s = &p.scale;
        let scale = if !s.command {
            "no command".to_owned()
        } else if s.running {
            "running".to_owned()
        } else {
            match (s.last_ms, s.last_ok) {
                (Some(at), Some(ok)) => format!(
                    "{} {} ({} attempt(s)){}",
                    if ok { "ok" } else { "failed" },
                    ago(at, now_ms),
                    s.attempts,
                    s.last_message
                        .as_deref()
                        .filter(|m| !ok && !m.is_empty())
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ),
                _ => "not run".to_owned(),
            }
        };
        table.row(vec![
            p.name.clone(),
            p.agents.to_string(),
            p.alive.to_string(),
            p.deficit.to_string(),
            scale,
        ]);
    }
    table
}

fn agents_table(agents: &[AgentView], now_ms: u64) -> Table {
    use Align::{Left, Right};
    let mut table = Table::new(&[
        ("ID", Left),
        ("STATE", Left),
        ("CPU%", Right),
        ("MEM", Right),
        ("ACTIVE", Right),
        ("INFLIGHT", Right),
        ("QPS", Right),
        ("LAST-HEARTBEAT", Right),
        ("PHI", Right),
    ]);
    for a in agents {
        table.row(vec![
            a.id.to_string(),
            if a.draining {
                format!("{} (draining)", a.state)
            } else {
                a.state.to_string()
            },
            format!("{:.1}", a.cpu_pct),
            human_bytes(a.memory_bytes),
            a.active_downloaders.to_string(),
            a.in_flight.to_string(),
            format!("{:.1}", a.qps),
            a.last_heartbeat_ms
                .map_or_else(|| "never".to_owned(), |t| ago(t, now_ms)),
            if a.phi.is_finite() {
                format!("{:.2}", a.phi)
            } else {
                "inf".to_owned()
            },
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn agent_views_parse_with_unknown_fields_and_an_infinite_phi() {
        let agents: Vec<AgentView> = parse(
            &json!([{"id": "a1", "state": "alive", "phi": null, "last_heartbeat_ms": 1_000,
                     "memory_bytes": 3_221_225_472u64, "labels": {"pool": "cn"},
                     "cpu_pct": 0.0, "active_downloaders": 0, "in_flight": 0, "qps": 0.0,
                     "capacity": 8, "host": "h", "version": "0.1.0", "cores": 2,
                     "total_memory_bytes": 1, "new_field": true}]),
            "agents",
        )
        .unwrap();
        let out = agents_table(&agents, 2_200).render();
        assert!(
            out.contains("1.2s ago") && out.contains("3.0 GiB") && out.contains("inf"),
            "{out}"
        );
    }

    #[test]
    fn pools_show_their_deficit_and_the_last_scale_run() {
        let pools: Vec<PoolView> = parse(
            &json!([{"name": "eu", "agents": 4, "alive": 3, "deficit": 1,
                     "scale": {"command": true, "running": false, "attempts": 2, "last_ms": 1_000,
                               "last_ok": false, "last_message": "no cloud", "next_ms": 61_000}},
                    {"name": "cn", "agents": 1, "alive": 1, "deficit": 0,
                     "scale": {"command": false, "running": false, "attempts": 0}}]),
            "pools",
        )
        .unwrap();
        let out = pools_table(&pools, 2_000).render();
        assert!(
            out.contains("failed 1.0s ago (2 attempt(s)): no cloud") && out.contains("no command"),
            "{out}"
        );
    }
}
