//! `silk tenants list|create NAME|pools NAME|delete NAME`: the platform's tenants and the
//! agent pools granted to them (an admin's; any other token lists only its own).

use super::output::{Align, Table, ago, now_ms, print_json};
use super::{Client, Conn, parse};
use clap::{Args, Subcommand};
use silk_api::tenants::{TenantRequest, TenantView};
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
        } => {
            let answer = client
                .post(
                    &["api", "v1", "tenants"],
                    &serde_json::to_value(TenantRequest {
                        name: name.clone(),
                        description,
                        pools: (!pools.is_empty()).then_some(pools),
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
            let tenant = client
                .api()
                .update_tenant(&name, &patch)
                .await
                .map_err(|e| client.error(e))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tenant)?);
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!("tenant {name}: {}", pools_text(tenant.pools.as_deref()));
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

fn tenants_table(tenants: &[TenantView], now_ms: u64) -> Table {
    use Align::Left;
    let mut table = Table::new(&[
        ("NAME", Left),
        ("POOLS", Left),
        ("CREATED", Left),
        ("DESCRIPTION", Left),
    ]);
    for t in tenants {
        table.row(vec![
            t.name.clone(),
            pools_text(t.pools.as_deref()),
            ago(t.created_ms, now_ms),
            t.description.clone().unwrap_or_default(),
        ]);
    }
    table
}

/// The pools of a tenant for people.
fn pools_text(pools: Option<&[String]>) -> String {
    match pools {
        None => "any agent".into(),
        Some([]) => "none".into(),
        Some(pools) => pools.join(", "),
    }
}
