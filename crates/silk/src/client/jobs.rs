//! `silk jobs list|show|create|update|delete|trigger|runs`: the hub's jobs (a spider with its
//! schedule, arguments and run settings; see [`super::jobfile`] for the file).

use super::jobfile::{Need, Origin, field_line, job_body, parse_arg};
use super::output::{Align, Table, ago, describe, now_ms, print_json};
use super::runs::{allocation_failure_is_one_line, print_runs, started};
use super::{Answer, ApiError, Client, Conn, parse};
use clap::{Args, Subcommand};
use serde_json::Value;
use silk_api::client::ClientError;
use silk_api::jobs::{Job as JobView, TriggerRequest};
use silk_api::runs::RunView;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `silk jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    #[command(subcommand)]
    pub command: JobsCommand,
    #[command(flatten)]
    pub conn: Conn,
}

/// `silk jobs …`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List the jobs: name, id, spider, schedule, next fire, last run.
    List,
    /// Show a job: every setting, its spider, its next fire and last run.
    Show {
        /// The job's id or name.
        #[arg(value_name = "JOB")]
        id: String,
    },
    /// Create a job from a YAML file of its fields (name, spider or spider_file, cron, args,
    /// …); prints its id.
    Create {
        /// The job file (`-` reads stdin).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
    /// Change a job: the fields of a YAML file (null clears one), and/or --enable/--disable.
    Update(UpdateArgs),
    /// Delete a job (its runs stay).
    Delete {
        /// The job's id or name.
        #[arg(value_name = "JOB")]
        id: String,
    },
    /// Start a run of a job now; prints the run's id (--wait follows it to the end).
    Trigger(TriggerArgs),
    /// List a job's runs, newest first.
    Runs {
        /// The job's id or name.
        #[arg(value_name = "JOB")]
        id: String,
        /// At most this many runs.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
    },
}

/// Options of `silk jobs update`.
#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The job's id or name.
    #[arg(value_name = "JOB")]
    pub id: String,
    /// A YAML file with the fields to change (`-` reads stdin).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Enable the job (its cron fires again).
    #[arg(long, conflicts_with = "disable")]
    pub enable: bool,
    /// Disable the job (its cron stops firing; it can still be triggered).
    #[arg(long)]
    pub disable: bool,
}

/// Options of `silk jobs trigger`.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The job's id or name.
    #[arg(value_name = "JOB")]
    pub id: String,
    /// An argument of this run, merged over the job's (`${args.NAME}` in the spider, and
    /// `{arg: NAME}` parameters of its `expand`); repeatable.
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_arg)]
    pub args: Vec<(String, String)>,
    /// Follow the run until it ends. Exit status: 0 succeeded, 1 failed, 3 cancelled, 130
    /// stopped waiting (Ctrl-C; the run goes on on the hub).
    #[arg(long)]
    pub wait: bool,
}

/// A job file, read and converted.
struct Loaded {
    /// The JSON body for the API.
    body: serde_json::Map<String, Value>,
    /// The file's text and name (to point at the line of a field the hub refuses).
    file: Option<(String, String)>,
}

/// Reads and converts a job file (errors with the file and line).
fn load(file: &std::path::Path, need: Need) -> anyhow::Result<Loaded> {
    let origin = Origin::of(file);
    let text = origin.read()?;
    let body = job_body(&text, &origin, need, |p| std::fs::read_to_string(p))
        .map_err(anyhow::Error::msg)?;
    Ok(Loaded {
        body,
        file: Some((text, origin.name())),
    })
}

/// The hub's answer to a job file. Its errors name the file, and a field it refuses is
/// pointed at in the file (`job.yaml:4: invalid job: cron …`).
fn answered(
    answer: Result<Answer, ApiError>,
    file: &Option<(String, String)>,
) -> anyhow::Result<Answer> {
    let e = match answer {
        Ok(answer) => return Ok(answer),
        Err(e) => e,
    };
    let Some((text, name)) = file else {
        return Err(e.into());
    };
    match &e.error {
        ClientError::Api {
            status,
            code,
            message,
        } => match field_line(text, message).filter(|_| *status == 400) {
            Some(line) => anyhow::bail!("{name}:{line}: {message} ({code}, HTTP {status})"),
            None => Err(anyhow::Error::new(e).context(name.clone())),
        },
        _ => Err(e.into()),
    }
}

/// Runs `silk jobs`.
pub async fn jobs(args: JobsArgs) -> anyhow::Result<ExitCode> {
    let json = args.conn.json;
    // A bad file is said before anything goes to the hub.
    let loaded = match &args.command {
        JobsCommand::Create { file } => load(file, Need::Spider)?,
        JobsCommand::Update(u) => {
            let mut loaded = match &u.file {
                Some(file) => load(file, Need::Nothing)?,
                None => Loaded {
                    body: serde_json::Map::new(),
                    file: None,
                },
            };
            if u.enable || u.disable {
                loaded.body.insert("enabled".into(), Value::Bool(u.enable));
            }
            if loaded.body.is_empty() {
                anyhow::bail!(
                    "nothing to change: give -f FILE with the fields, --enable or --disable"
                );
            }
            loaded
        }
        _ => Loaded {
            body: serde_json::Map::new(),
            file: None,
        },
    };
    let client = Client::connect(&args.conn)?;
    match args.command {
        JobsCommand::List => {
            let answer = client.get(&["api", "v1", "jobs"]).await?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let jobs: Vec<JobView> = parse(&answer.value, "a list of jobs")?;
            print!("{}", jobs_table(&jobs, now_ms()).render());
            if jobs.is_empty() {
                eprintln!(
                    "no jobs on the hub at {} (create one: silk jobs create -f JOB.yaml)",
                    client.server()
                );
            }
        }
        JobsCommand::Show { id } => {
            let answer = client.get(&["api", "v1", "jobs", &id]).await?;
            if json {
                print_json(&answer);
            } else {
                // The spider, long, goes last.
                print!("{}", describe(&answer.text, now_ms(), &["spider"]));
                if let Some(spider) = answer.value.get("spider").and_then(Value::as_str) {
                    println!("spider: |");
                    for line in spider.trim_end_matches('\n').lines() {
                        println!("  {line}");
                    }
                }
            }
        }
        JobsCommand::Create { .. } => {
            let answer = client
                .post(&["api", "v1", "jobs"], &Value::Object(loaded.body))
                .await;
            let answer = answered(answer, &loaded.file)?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let job: JobView = parse(&answer.value, "a job")?;
            println!("{}", job.id);
            eprintln!("job {} created{}", job.spec.name, next_fire(&job));
        }
        JobsCommand::Update(u) => {
            let answer = client
                .patch(&["api", "v1", "jobs", &u.id], &Value::Object(loaded.body))
                .await;
            let answer = answered(answer, &loaded.file)?;
            if json {
                print_json(&answer);
                return Ok(ExitCode::SUCCESS);
            }
            let job: JobView = parse(&answer.value, "a job")?;
            eprintln!(
                "job {} updated ({}){}",
                job.spec.name,
                if job.spec.enabled {
                    "enabled"
                } else {
                    "disabled"
                },
                next_fire(&job)
            );
        }
        JobsCommand::Delete { id } => {
            client
                .api()
                .delete_job(&id)
                .await
                .map_err(|e| client.error(e))?;
            eprintln!("job {id} deleted (its runs stay)");
        }
        JobsCommand::Trigger(t) => {
            let body = serde_json::to_value(TriggerRequest {
                args: t.args.iter().cloned().collect(),
            })?;
            let answer = client
                .post(&["api", "v1", "jobs", &t.id, "runs"], &body)
                .await;
            let Some(answer) = allocation_failure_is_one_line(answer)? else {
                return Ok(ExitCode::FAILURE);
            };
            let view: RunView = parse(&answer.value, "a run")?;
            return started(&client, view, answer, t.wait, json).await;
        }
        JobsCommand::Runs { id, limit } => {
            let query: Vec<(&str, String)> = limit
                .map(|l| ("limit", l.to_string()))
                .into_iter()
                .collect();
            let answer = client
                .get_with(&["api", "v1", "jobs", &id, "runs"], &query)
                .await?;
            return print_runs(&client, &answer, json);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `; next run in 3m` when cron fires.
fn next_fire(job: &JobView) -> String {
    job.next_fire_ms
        .map(|t| format!("; next run {}", ago(t, now_ms())))
        .unwrap_or_default()
}

fn jobs_table(jobs: &[JobView], now_ms: u64) -> Table {
    use Align::Left;
    let mut table = Table::new(&[
        ("NAME", Left),
        ("ID", Left),
        ("SPIDER", Left),
        ("ENABLED", Left),
        ("CRON", Left),
        ("NEXT", Left),
        ("LAST-RUN", Left),
    ]);
    for j in jobs {
        let cron = match (&j.spec.cron, &j.spec.timezone) {
            (Some(c), Some(tz)) => format!("{c} ({tz})"),
            (Some(c), None) => c.clone(),
            (None, _) => "-".into(),
        };
        table.row(vec![
            j.spec.name.clone(),
            j.id.clone(),
            j.spider_name.clone(),
            if j.spec.enabled { "yes" } else { "no" }.into(),
            cron,
            j.next_fire_ms
                .map_or_else(|| "-".into(), |t| ago(t, now_ms)),
            j.last_run
                .as_ref()
                .map_or_else(|| "-".into(), |r| format!("{} {}", r.id, r.state)),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_views_parse_with_unknown_fields() {
        let jobs: Vec<JobView> = parse(
            &json!([{"id": "j1", "name": "shop", "spider": "name: shop", "spider_name": "shop",
                     "cron": "*/5 * * * *", "timezone": "Asia/Shanghai", "enabled": true,
                     "next_fire_ms": 61_000, "created_ms": 1, "updated_ms": 1,
                     "schedule_from_ms": 1, "queued": 0,
                     "last_run": {"id": "r9", "state": "succeeded"}, "new": 1},
                    {"id": "j2", "name": "once", "spider": "name: once", "spider_name": "once",
                     "cron": null, "last_run": null, "created_ms": 1, "updated_ms": 1,
                     "schedule_from_ms": 1, "queued": 0}]),
            "jobs",
        )
        .unwrap();
        let out = jobs_table(&jobs, 1_000).render();
        assert!(
            out.contains("*/5 * * * * (Asia/Shanghai)")
                && out.contains("in 1m 0s")
                && out.contains("r9 succeeded"),
            "{out}"
        );
        assert!(out.lines().nth(2).unwrap().starts_with("once"), "{out}");
    }
}
