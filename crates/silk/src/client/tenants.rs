//! `silk tenants list|create NAME|pools NAME|sink-targets NAME|quotas NAME|weight NAME|
//! networks NAME|usage NAME|delete NAME`: the platform's tenants, the agent pools, item sink
//! targets, private networks and quotas granted to them (an admin's; any other token lists only its own and reads its own usage).

use super::output::{Align, Table, ago, now_ms, print_json};
use super::{Client, Conn, parse};
use clap::{Args, Subcommand};
use silk_api::tenants::{Quotas, TenantRequest, TenantUsage, TenantView};
use std::process::ExitCode;

/// Options of `silk tenants`.
#[derive(Debug, Args)]
pub struct TenantsArgs {
    #[command(subcommand)]
    pub command: TenantsCommand,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk tenants …`.
#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// List the tenants (an admin sees every one, any other token its own).
    List,
    /// Create a tenant (admin); then make its owner's token with
    /// `silk --tenant NAME tokens create NAME-owner --role owner`.
    Create {
        /// Its name: letters, digits, `.`, `_`, `-`.
        name: String,
        /// For people.
        #[arg(long)]
        description: Option<String>,
        /// Grant this agent pool (agents labelled pool=NAME); repeat for more. Without any,
        /// the tenant's runs may use every agent.
        #[arg(long = "pool", value_name = "POOL")]
        pools: Vec<String>,
        /// Its weight in the fair share of agents' slots between tenants (1 to 1000; default 1).
        #[arg(long, value_name = "N")]
        weight: Option<u32>,
        /// Let its runs reach this private address range (CIDR such as 10.1.0.0/16, or an
        /// address); repeat for more.
        #[arg(long = "allow-network", value_name = "CIDR")]
        allow_networks: Vec<String>,
        /// Grant this item sink target of the hub (`silk hub --sink-targets`); repeat for
        /// more. Without any, the tenant's runs may use every target.
        #[arg(long = "sink-target", value_name = "TARGET")]
        sink_targets: Vec<String>,
    },
    /// Set the private address ranges a tenant's runs may reach (admin), besides those the
    /// agents and hubs allow themselves: their fetches and their webhook sinks. The whole
    /// list; none given: no private range. Runs started afterwards get it.
    Networks {
        /// The tenant's name.
        name: String,
        /// CIDRs (10.1.0.0/16, fd00::/8) or addresses.
        #[arg(value_name = "CIDR")]
        ranges: Vec<String>,
    },
    /// Set a tenant's weight in the fair share of agents' slots (admin): tenants weighted
    /// 1 and 3 that saturate the same agents get 25 % and 75 % of the fetches.
    Weight {
        /// The tenant's name.
        name: String,
        /// 1 to 1000.
        weight: u32,
    },
    /// Set the agent pools a tenant's runs may use (admin): `--any` for every agent.
    Pools {
        /// The tenant's name.
        name: String,
        /// The pools granted (agents labelled pool=NAME); none given with no `--any`: no
        /// agent at all.
        pools: Vec<String>,
        /// Every agent (no grant).
        #[arg(long, conflicts_with = "pools")]
        any: bool,
    },
    /// Set the item sink targets (`silk hub --sink-targets`) a tenant's runs may deliver
    /// items to (admin): `--any` for every one.
    SinkTargets {
        /// The tenant's name.
        name: String,
        /// The targets granted; none given with no `--any`: no target at all.
        targets: Vec<String>,
        /// Every target (no grant).
        #[arg(long, conflicts_with = "targets")]
        any: bool,
    },
    /// Set a tenant's quotas (admin): the whole set, a quota left out is no limit
    /// (`--none`: no quota at all).
    Quotas {
        /// The tenant's name.
        name: String,
        /// Most of its runs dispatching at once.
        #[arg(long, value_name = "N")]
        concurrent_runs: Option<u32>,
        /// Most pages fetched per day over all its runs.
        #[arg(long, value_name = "N")]
        pages_per_day: Option<u64>,
        /// Most bytes downloaded per day over all its runs.
        #[arg(long, value_name = "N")]
        bytes_per_day: Option<u64>,
        /// Most pages of one run.
        #[arg(long, value_name = "N")]
        pages_per_run: Option<u64>,
        /// Most requests its spider runs have out at agents at once (on each hub).
        #[arg(long, value_name = "N")]
        agent_slots: Option<u32>,
        /// The IANA time zone its days are counted in (default UTC).
        #[arg(long, value_name = "ZONE")]
        time_zone: Option<String>,
        /// No quota.
        #[arg(long, conflicts_with_all = ["concurrent_runs", "pages_per_day", "bytes_per_day", "pages_per_run", "agent_slots", "time_zone"])]
        none: bool,
    },
    /// What a tenant used today (in its time zone) against its quotas.
    Usage {
        /// The tenant's name.
        name: String,
    },
    /// Delete a tenant that owns nothing any more (admin).
    Delete {
        /// The tenant's name.
        name: String,
    },
}

/// Runs `silk tenants`.
pub async fn tenants(args: TenantsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.conn)?;
    let json = args.conn.json;
    match args.command {
        TenantsCommand::List => {
            let answer = client.get(&["api", "v1", "tenants"]).await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let tenants: Vec<TenantView> = parse(&answer.value, "a list of tenants")?;
            print!("{}", tenants_table(&tenants, now_ms()).render());
        }
        TenantsCommand::Create {
            name,
            description,
            pools,
            weight,
            allow_networks,
            sink_targets,
        } => {
            let answer = client
                .post(
                    &["api", "v1", "tenants"],
                    &serde_json::to_value(TenantRequest {
                        name: name.clone(),
                        description,
                        pools: (!pools.is_empty()).then_some(pools),
                        quotas: None,
                        weight,
                        allow_networks,
                        sink_targets: (!sink_targets.is_empty()).then_some(sink_targets),
                    })?,
                )
                .await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!("tenant {name} created");
        }
        TenantsCommand::Pools { name, pools, any } => {
            let patch = if any {
                serde_json::json!({ "pools": null })
            } else {
                serde_json::json!({ "pools": pools })
            };
            let Some(tenant) = patch_tenant(&client, &name, &patch, json).await? else {
                return Ok(ExitCode::SUCCESS);
            };
            eprintln!("tenant {name}: {}", pools_text(tenant.pools.as_deref()));
        }
        TenantsCommand::SinkTargets { name, targets, any } => {
            let patch = if any {
                serde_json::json!({ "sink_targets": null })
            } else {
                serde_json::json!({ "sink_targets": targets })
            };
            let Some(tenant) = patch_tenant(&client, &name, &patch, json).await? else {
                return Ok(ExitCode::SUCCESS);
            };
            let granted = match tenant.sink_targets.as_deref() {
                None => "every item sink target".to_owned(),
                Some([]) => "no item sink target".to_owned(),
                Some(t) => format!("item sink targets {}", t.join(",")),
            };
            eprintln!("tenant {name}: {granted}");
        }
        TenantsCommand::Quotas {
            name,
            concurrent_runs,
            pages_per_day,
            bytes_per_day,
            pages_per_run,
            agent_slots,
            time_zone,
            none,
        } => {
            let quotas = Quotas {
                concurrent_runs,
                pages_per_day,
                bytes_per_day,
                pages_per_run,
                agent_slots,
                time_zone,
            };
            let patch = if none || quotas.is_empty() {
                serde_json::json!({ "quotas": null })
            } else {
                serde_json::json!({ "quotas": quotas })
            };
            let Some(tenant) = patch_tenant(&client, &name, &patch, json).await? else {
                return Ok(ExitCode::SUCCESS);
            };
            eprintln!("tenant {name}: {}", quotas_text(&tenant.quotas));
        }
        TenantsCommand::Weight { name, weight } => {
            let patch = serde_json::json!({ "weight": weight });
            let Some(tenant) = patch_tenant(&client, &name, &patch, json).await? else {
                return Ok(ExitCode::SUCCESS);
            };
            eprintln!("tenant {name}: weight {}", tenant.weight.unwrap_or(1));
        }
        TenantsCommand::Networks { name, ranges } => {
            let patch = serde_json::json!({ "allow_networks": ranges });
            let Some(tenant) = patch_tenant(&client, &name, &patch, json).await? else {
                return Ok(ExitCode::SUCCESS);
            };
            eprintln!("tenant {name}: {}", networks_text(&tenant.allow_networks));
        }
        TenantsCommand::Usage { name } => {
            let usage = client
                .api()
                .tenant_usage(&name)
                .await
                .map_err(|e| client.error(e))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&usage)?);
                return Ok(ExitCode::SUCCESS);
            }
            print!("{}", usage_text(&usage));
        }
        TenantsCommand::Delete { name } => {
            client
                .api()
                .delete_tenant(&name)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("tenant {name} deleted");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Sends a merge patch of tenant `name`; with `json`, prints the answer and gives `None`.
async fn patch_tenant(
    client: &Client,
    name: &str,
    patch: &serde_json::Value,
    json: bool,
) -> anyhow::Result<Option<TenantView>> {
    let tenant = client
        .api()
        .update_tenant(name, patch)
        .await
        .map_err(|e| client.error(e))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&tenant)?);
        return Ok(None);
    }
    Ok(Some(tenant))
}

/// The private ranges a tenant's runs may reach, for people.
fn networks_text(ranges: &[String]) -> String {
    if ranges.is_empty() {
        "no private network".to_owned()
    } else {
        ranges.join(",")
    }
}

fn tenants_table(tenants: &[TenantView], now_ms: u64) -> Table {
    use Align::Left;
    let mut table = Table::new(&[
        ("NAME", Left),
        ("POOLS", Left),
        ("NETWORKS", Left),
        ("CREATED", Left),
        ("DESCRIPTION", Left),
    ]);
    for t in tenants {
        table.row(vec![
            t.name.clone(),
            pools_text(t.pools.as_deref()),
            networks_text(&t.allow_networks),
            ago(t.created_ms, now_ms),
            t.description.clone().unwrap_or_default(),
        ]);
    }
    table
}

/// A tenant's quotas for people.
fn quotas_text(q: &Quotas) -> String {
    let mut parts = Vec::new();
    let mut add = |what: &str, v: Option<String>| {
        if let Some(v) = v {
            parts.push(format!("{what} {v}"));
        }
    };
    add("concurrent runs", q.concurrent_runs.map(|n| n.to_string()));
    add("pages/day", q.pages_per_day.map(|n| n.to_string()));
    add("bytes/day", q.bytes_per_day.map(|n| n.to_string()));
    add("pages/run", q.pages_per_run.map(|n| n.to_string()));
    add("agent slots", q.agent_slots.map(|n| n.to_string()));
    add("time zone", q.time_zone.clone());
    if parts.is_empty() {
        "no quota".into()
    } else {
        parts.join(", ")
    }
}

/// A tenant's usage for people: one line per counter, with its limit.
fn usage_text(u: &TenantUsage) -> String {
    let limit = |v: Option<u64>| v.map_or("no limit".to_owned(), |v| v.to_string());
    let mut out = format!("tenant {} on {} ({})\n", u.tenant, u.day, u.time_zone);
    out.push_str(&format!(
        "  pages          {} of {} ({} held by running runs, {} past a slice)\n",
        u.pages,
        limit(u.quotas.pages_per_day),
        u.reserved,
        u.overshoot_pages
    ));
    out.push_str(&format!(
        "  bytes          {} of {}\n",
        u.bytes,
        limit(u.quotas.bytes_per_day)
    ));
    out.push_str(&format!(
        "  running runs   {} of {} ({} paused by a quota)\n",
        u.running_runs,
        limit(u.quotas.concurrent_runs.map(u64::from)),
        u.quota_paused_runs
    ));
    out.push_str(&format!(
        "  pages per run  {}\n",
        limit(u.quotas.pages_per_run)
    ));
    out.push_str(&format!(
        "  agent slots    {}\n",
        limit(u.quotas.agent_slots.map(u64::from))
    ));
    out
}

/// The pools of a tenant for people.
fn pools_text(pools: Option<&[String]>) -> String {
    match pools {
        None => "any agent".into(),
        Some([]) => "none".into(),
        Some(pools) => pools.join(", "),
    }
}
