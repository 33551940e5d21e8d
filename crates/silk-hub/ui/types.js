// @ts-check
// JSDoc types of the hub API's JSON, generated from its OpenAPI document
// (`silk_hub::openapi`) by the test `ui::tests::the_ui_types_match_the_openapi_document`.
// Do not edit: `SILK_BLESS=1 cargo test -p silk-hub ui_types` rewrites this file.

/**
 * `POST /api/v1/runs/{id}/ack`.
 * @typedef {object} AckBatch
 * @property {Array<AckItem>} acks At most 10000.
 */

/**
 * One ack.
 * @typedef {object} AckItem
 * @property {string} lease_id The lease.
 * @property {AckOutcome} outcome What became of it.
 * @property {string|null} [reason] Why (for failures; logged).
 * @property {Array<NewRequest>} [requests] New requests it gave, enqueued with the ack in one atomic write.
 */

/**
 * What became of a leased request.
 * @typedef {"done"|"retry"|"failed"|"dropped"|"release"} AckOutcome
 */

/**
 * What an ack call did.
 * @typedef {object} Acked
 * @property {number} acked Acks applied.
 * @property {number} added New requests enqueued.
 * @property {number} duplicates New requests whose key was seen.
 * @property {number} late Acks of leases that had expired or were unknown (their requests were, or will be,
 */

/**
 * The liveness of an agent, as the failure detector sees it.
 * @typedef {"alive"|"suspect"|"dead"} AgentState
 */

/**
 * One agent as `silk agents` shows it.
 * @typedef {object} AgentView
 * @property {number} active_downloaders Downloaders allocated on it (last heartbeat).
 * @property {number} capacity Requests it accepts in flight at once.
 * @property {number} cores CPU cores.
 * @property {number} cpu_pct CPU use, percent (last heartbeat; 0 before any).
 * @property {boolean} [draining] Being drained (`silk agents drain`): it takes no new work (no new runs, no requests
 * @property {string} host Host name.
 * @property {string} id The agent.
 * @property {number} in_flight Requests it is fetching (last heartbeat).
 * @property {Record<string, string>} labels Its labels.
 * @property {number|null} [last_heartbeat_ms] When its last heartbeat was read, hub clock, ms since the epoch; `None` before any.
 * @property {number} memory_bytes Memory in use (last heartbeat; 0 before any).
 * @property {number} phi phi at the time asked (`null` when infinite: JSON has no infinity).
 * @property {number} qps Requests per second (last heartbeat).
 * @property {AgentState} state Its state at the time asked.
 * @property {number} total_memory_bytes Physical memory.
 * @property {string} version Silk version.
 */

/**
 * What happened.
 * @typedef {"run_failed"|"run_recovered"|"run_stalled"|"run_empty"|"agent_dead"|"build_failed"|"test"} AlertEvent
 */

/**
 * A rule to create or to put in place of one (`POST /api/v1/alerts/rules`, `PUT
 * @typedef {object} AlertRuleRequest
 * @property {string|null} [body] The body template; default: the event's facts, one per line.
 * @property {ChannelSpec} channel Where to.
 * @property {boolean|null} [enabled] Default true; a disabled rule matches nothing.
 * @property {Array<AlertEvent>} events What it is sent for (at least one; not `test`).
 * @property {string|null} [job] Only runs of this job: `TENANT/NAME`, or a name of the tenant `default`; none: every
 * @property {string} name A safe identifier: lowercase letters, digits, `-` and `_`, at most 63 characters.
 * @property {string|null} [project] Only builds of this project; none: every project's. A rule with a project matches
 * @property {null|RateLimit} [rate_limit]
 * @property {string|null} [subject] The subject template (email subject; first line of a chat message). Jinja syntax
 */

/**
 * A rule as the API shows it.
 * @typedef {object} AlertRuleView
 * @property {string|null} [body] The body template, if not the default.
 * @property {ChannelView} channel Where to (no secrets).
 * @property {number} created_ms Created, ms since the epoch.
 * @property {boolean} enabled Whether it matches events.
 * @property {Array<AlertEvent>} events What it is sent for.
 * @property {string|null} [job] Only runs of this job.
 * @property {string} name Its name.
 * @property {string|null} [project] Only builds of this project.
 * @property {RateLimit} rate_limit The rate limit.
 * @property {string|null} [subject] The subject template, if not the default.
 * @property {number} updated_ms Last changed.
 */

/**
 * The body of every error answer, `{"code": "...", "message": "..."}`, code first.
 * @typedef {object} ApiError
 * @property {string} code Machine-readable code (`bad_request`, `not_found`, `conflict`, …).
 * @property {string} message For people.
 */

/**
 * One finished request of a run, from the archive.
 * @typedef {object} ArchivedRequestView
 * @property {string|null} [agent] The agent of its last attempt.
 * @property {number} attempts How many times it was tried.
 * @property {number} bytes Bytes of its page.
 * @property {number} depth Links from the start request.
 * @property {string|null} [error_code] Silk's error code, when it did not end done.
 * @property {string} error_msg The error, for people (`""` when done).
 * @property {number} items Items its page gave.
 * @property {string} key Its key within the run (for `requeue`'s `keys`).
 * @property {string} method The HTTP method.
 * @property {RequestOutcome} outcome How it ended.
 * @property {number|null} [requeued_ms] When it was last queued again, if ever.
 * @property {number|null} [status] The HTTP status of its last attempt, when a response arrived.
 * @property {number} time_ms When it finished, ms since the epoch.
 * @property {string} url Its canonical URL.
 */

/**
 * What a build made.
 * @typedef {{bytes: number, kind: "dir", sha256: string}|{id: string, image: string, kind: "image"}} Artifact
 */

/**
 * How a version is built.
 * @typedef {"command"|"container"} BuildKind
 */

/**
 * Lines of a build log (`GET …/versions/{version}/log`).
 * @typedef {object} BuildLog
 * @property {Array<LogLineView>} lines The lines, oldest first.
 * @property {number|null} [next] Pass as `after` for the next page (`None`: nothing more stored yet).
 * @property {VersionState} state The version's state when read.
 */

/**
 * A webhook delivery that queued a build (`202`).
 * @typedef {object} BuildQueued
 * @property {string} build The build id.
 * @property {string} version The version it builds.
 */

/**
 * A build asked for by hand (`POST /api/v1/projects/{name}/builds`).
 * @typedef {object} BuildRequest
 * @property {string} ref A tag (`release/shop/1.4.0`), a branch (`main`), a full ref (`refs/…`) or a commit id.
 * @property {string|null} [version] The version to record; needed when the ref is not a tag matching the pattern.
 */

/**
 * A project's build.
 * @typedef {object} BuildSpec
 * @property {string|null} [command] A shell command line run in the checkout (`sh -c`), for `command` builds; none means
 * @property {string|null} [containerfile] The container file, relative to the checkout (default `Containerfile`, else
 * @property {string|null} [context] The build context, relative to the checkout (default `.`), for `container` builds.
 * @property {Record<string, string>} [env] Environment variables of the build (beside a minimal `PATH`, `HOME`, `LANG`), or build
 * @property {BuildKind} kind `command` or `container`.
 * @property {number|null} [timeout_ms] The build is killed after this long, ms (default 30 minutes).
 */

/**
 * Where a rule's alerts go: `{"webhook": {…}}` or `{"email": {…}}`.
 * @typedef {{webhook: WebhookSpec}|{email: EmailSpec}} ChannelSpec
 */

/**
 * A channel as the API shows it: no secrets.
 * @typedef {{webhook: {format: WebhookFormat, headers: Array<string>, url: string}}|{email: {from: string, has_password: boolean, host: string, port: number, security: SmtpSecurity, to: Array<string>, username?: string|null}}} ChannelView
 */

/**
 * `POST /api/v1/router/check_task`: what the router would do with a task.
 * @typedef {object} CheckTaskRequest
 * @property {string} inbound The inbound that receives it.
 * @property {Record<string, any>} task The task (a JSON object).
 */

/**
 * Where a delivery is.
 * @typedef {"pending"|"sent"|"failed"|"suppressed"|"dropped"} DeliveryState
 */

/**
 * One delivery of one event by one rule.
 * @typedef {object} DeliveryView
 * @property {number} attempts Attempts made.
 * @property {number} created_ms When the event was noticed, ms since the epoch.
 * @property {number} due_ms Pending: when the next attempt is due; otherwise when it got its state.
 * @property {string|null} [error] Why the last attempt failed.
 * @property {AlertEvent} event What happened.
 * @property {Record<string, any>} facts The event's facts (job, run, state, reason, items, agent, project, version, …).
 * @property {string} id Unique (`{rule}/{event key}`); sent as `X-Silk-Alert-Id` and in the Message-ID, so a
 * @property {string} rule The rule.
 * @property {DeliveryState} state Where it is.
 * @property {string} subject The rendered subject.
 */

/**
 * An email channel: SMTP. Its `Debug` shows no password.
 * @typedef {object} EmailSpec
 * @property {string} from The sender, `name@host` or `Name <name@host>`.
 * @property {string} host The SMTP server's host name or address.
 * @property {string|null} [password] Its password (stored sealed, never shown; a replacement that leaves it out keeps it).
 * @property {number|null} [port] Its port (default: 587 for `starttls`, 465 for `tls`, 25 for `none`).
 * @property {SmtpSecurity} [security] `starttls` (default), `tls` or `none`.
 * @property {Array<string>} to The recipients (at least one).
 * @property {string|null} [username] The SMTP user, if the server wants a login.
 */

/**
 * `POST /api/v1/runs/{id}/requests`.
 * @typedef {object} EnqueueBatch
 * @property {Array<NewRequest>} requests At most 10000.
 */

/**
 * What an enqueue did.
 * @typedef {object} Enqueued
 * @property {number} added New requests.
 * @property {number} duplicates Requests whose key the run had seen (dropped).
 */

/**
 * How far a run's expanded start requests have gone into its frontier: they are fed in
 * @typedef {object} ExpandProgress
 * @property {number} fed Requests made from the templates and put into the frontier so far.
 * @property {number} total Requests the templates give in all.
 */

/**
 * When a run that ran to its end counts as failed (the `fail_if` of a job or run request).
 * @typedef {object} FailIf
 * @property {boolean} [all_failed] Fail when every request that finished failed (at least one finished). Default `true`.
 * @property {number|null} [blocked_ratio] Fail when more than this share (0–1) of the pages the agents returned were blocked
 * @property {number|null} [failed_ratio] Fail when more than this share (0–1) of the finished requests failed. Default 0.5.
 * @property {number} [min_items] Fail with fewer items than this. Default 0.
 * @property {number} [min_requests] The ratios are judged once at least this many requests finished (or pages came
 */

/**
 * How a run fed by the router's `silk.JobOutbound` lives: it is not seeded with the
 * @typedef {object} Feed
 * @property {number} idle_ms How long the run waits idle for more tasks before it ends, ms.
 * @property {string} outbound The router outbound that feeds it.
 */

/**
 * `POST /api/v1/runs/{id}/fetch`: fetch one request through the download center — by one of
 * @typedef {object} FetchAsk
 * @property {string|null} [agent] The agent to fetch with, when it is one of the run's (the SDK names its own,
 * @property {string|null} [body] The body, base64.
 * @property {boolean} [follow_redirects] Follow redirects (at most the run's `max_redirects`), each hop fetched the same way;
 * @property {Record<string, string>} [headers] Headers of the request, beside the run's.
 * @property {string|null} [method] `GET` (default), `HEAD` or `POST`.
 * @property {boolean} [trim] Return the body trimmed by the run's trimming rules (UTF-8 text), when the run has
 * @property {string} url An absolute http(s) URL, fetched as given (not canonicalised).
 */

/**
 * Why a fetch through the download center failed (no response, or a response the run's
 * @typedef {object} FetchFailure
 * @property {string} code `timeout`, `connect`, `dns`, `tls`, `proxy`, `proxy_banned`, `robots_disallowed`,
 * @property {string} message For people.
 * @property {boolean} retryable Whether trying again may help.
 */

/**
 * The answer to a fetch: the response as it is.
 * @typedef {object} Fetched
 * @property {string} agent The agent that fetched it.
 * @property {string|null} [body] The body, base64 (the trimmed text in UTF-8 when `trimmed`).
 * @property {number} bytes Body bytes received (decoded).
 * @property {number} elapsed_ms From the hub's ask to the agent's answer, ms (all hops).
 * @property {null|FetchFailure} [error]
 * @property {Array<Array<string>>} [headers] Response headers as received, in order (`Content-Encoding` describes the wire: the
 * @property {string|null} [proxy] The proxy it went through, without credentials; absent = direct.
 * @property {Array<string>} [redirects] The URLs redirected from, in order, when redirects were followed.
 * @property {number|null} [status] HTTP status, when a response arrived.
 * @property {boolean} [trimmed] The body is the run's trimmed text.
 * @property {boolean} [truncated] The body was cut to the run's `max_return_body_bytes`.
 * @property {string} url The URL of this response (the last hop when redirects were followed).
 */

/**
 * One inbound of the router.
 * @typedef {object} InboundView
 * @property {string} class `kafka.KafkaInbound`, `http.HttpInbound`, …
 * @property {Array<string>} converts Its convert chain's steps, described.
 * @property {Record<string, number>} counters The decisions of the tasks it received, by reason.
 * @property {boolean} disabled
 * @property {string} name
 * @property {number} received Tasks received since the router started.
 * @property {string} source Where tasks come from (no credentials).
 * @property {number} threads
 */

/**
 * The answer to a pushed batch of items.
 * @typedef {object} ItemsAdded
 * @property {number} added Items written to the run's item log.
 * @property {number} duplicates Items whose key the run had already.
 * @property {number} [over_limit] Items past the run's `max_items`: not written (the run is ending).
 */

/**
 * Items a program pushes (`POST /api/v1/runs/{id}/items`): JSON objects, each with the
 * @typedef {object} ItemsBatch
 * @property {Array<Record<string, any>>} items The items, at most 10000.
 */

/**
 * A page of items read from a run's JSON Lines file.
 * @typedef {object} ItemsPage
 * @property {boolean} done Whether the file holds nothing more right now.
 * @property {Array<Record<string, any>>} items The items.
 * @property {number} next_cursor The cursor of the next page (a byte offset in the file).
 */

/**
 * A job as the hub keeps it and the API shows it.
 * @typedef {JobSpec & {created_ms: number, id: string, last_fire_ms?: number|null, last_run?: null|LastRun, next_fire_ms?: number|null, queued: number, retry_pending?: null|PendingRetry, schedule_from_ms: number, spider_name: string, tenant: string, updated_ms: number}} Job
 */

/**
 * What a user writes to define a job (`POST /api/v1/jobs`). Only `name` and `spider` are
 * @typedef {object} JobSpec
 * @property {Record<string, string>} [args] Values of the spider's `${args.NAME}` placeholders.
 * @property {string|null} [cron] A cron expression (5 fields, or 6 with seconds, or `@daily` …); none: manual only.
 * @property {Record<string, any>|null} [downloader] Downloader settings of its runs.
 * @property {boolean} [enabled] Whether the schedule fires (manual triggers always work); default true.
 * @property {null|FailIf} [fail_if]
 * @property {string} [frontier] Where its runs keep their frontier: `run` (default: each run a frontier of its own) or
 * @property {number|null} [log_retention_ms] Log lines of its runs older than this are deleted, ms (the hub's `log_retention`
 * @property {number|null} [max_pages_per_day] Most pages its runs fetch per day, together (days in its tenant's time zone); a run
 * @property {number|null} [max_pending] Back-pressure of its runs.
 * @property {string} name Unique name: letters, digits, `.`, `_`, `-`; at most 100 characters.
 * @property {null|OnAgentLost} [on_agent_lost]
 * @property {string} [overlap] What a fire does while a run of the job is active: `skip` (default), `queue`,
 * @property {Array<string>} [pools] Agent pools its runs may use (see `RunRequest::pools`); empty: any agent.
 * @property {null|ProgramSpec} [program]
 * @property {string} [remarks] Free text for people.
 * @property {Record<string, any>} [retry] Retries of failed runs.
 * @property {null|Sinks} [sinks]
 * @property {string} [spider] The declarative spider, as YAML text (may hold `${args.NAME}` placeholders); optional
 * @property {number|null} [stall_timeout_ms] Stall timeout of its runs, ms.
 * @property {null|Strategy} [strategy]
 * @property {number|null} [timeout_ms] A run still active this long after it started is failed ("timed out"), ms.
 * @property {string|null} [timezone] The IANA time zone of `cron`; default `UTC`.
 */

/**
 * A run of a job, as the job remembers it.
 * @typedef {object} LastRun
 * @property {string} id The run.
 * @property {RunState} state Its state when last seen.
 */

/**
 * `POST /api/v1/runs/{id}/lease`: up to `max` requests that may start now (politeness and
 * @typedef {object} LeaseAsk
 * @property {number} [max] Most requests (default 1, at most 10000).
 * @property {number} [wait_ms] Longest wait for a request, ms (default 0, at most 30000).
 */

/**
 * A leased request as a program sees it.
 * @typedef {object} LeasedView
 * @property {string|null} [body] Its body, base64.
 * @property {number} deadline_ms When the lease expires (ms since the epoch): not acked by then, the request is
 * @property {number} depth Its depth.
 * @property {Record<string, string>} [headers] Its headers.
 * @property {string} lease_id Give it back in the ack (16 hex digits).
 * @property {Record<string, any>} [meta] Its meta, as enqueued.
 * @property {string} method `GET`, `HEAD` or `POST`.
 * @property {number} priority Its base priority.
 * @property {number} retries Retryable failures so far.
 * @property {string} url The canonical URL.
 */

/**
 * The answer to a lease call.
 * @typedef {object} Leases
 * @property {boolean} ending The run is ending (cancelled, or past its limits): finish what you hold and exit.
 * @property {Array<LeasedView>} leases The leases (possibly none).
 * @property {number} left Requests in the frontier not finished yet (pending + leased), all workers together.
 * @property {boolean} paused The run is paused: lease nothing until it is resumed.
 */

/**
 * A run's log line.
 * @typedef {object} LogLineView
 * @property {number} id Increasing id: the cursor.
 * @property {string} level `trace`, `debug`, `info`, `warn` or `error`.
 * @property {string} message The text.
 * @property {string} run_id The run.
 * @property {string} source `hub` or `agent:ID`.
 * @property {number} ts_ms When, ms since the epoch.
 */

/**
 * A page of log lines.
 * @typedef {object} LogPage
 * @property {Array<LogLineView>} lines The lines.
 * @property {number|null} [next] The cursor of the next page (`after` when ascending, `before` when descending).
 */

/**
 * A project just created (or whose webhook secret was just replaced): the only time the
 * @typedef {object} NewProject
 * @property {ProjectView} project The project.
 * @property {string} webhook_secret The webhook secret; give it to the git service's webhook: it cannot be shown again.
 */

/**
 * A request a program puts in its run's frontier. It is deduplicated on Silk's canonical
 * @typedef {object} NewRequest
 * @property {string|null} [body] The body, base64.
 * @property {number} [depth] Link distance from a start request (kept for the spider's `max_depth`).
 * @property {boolean} [dont_filter] Enqueue it even when its key was seen (a fresh key of its own).
 * @property {Record<string, string>} [headers] Headers of the request (not part of its key).
 * @property {Record<string, any>} [meta] Anything JSON the program wants back with the lease (Scrapy: callback, errback, meta).
 * @property {string|null} [method] `GET` (default), `HEAD` or `POST`.
 * @property {number} [priority] Higher is leased first (aging raises waiting requests).
 * @property {string|null} [redirect_from] The URL of the request this one is the redirect of. When both have the same key (the
 * @property {string} url An absolute http(s) URL.
 */

/**
 * A token just created: the only time its secret is shown.
 * @typedef {object} NewToken
 * @property {number} created_ms Created, ms since the epoch.
 * @property {string} id The token id.
 * @property {string} name Its name.
 * @property {string} token The bearer token (`silk_<id>_<secret>`); keep it: it cannot be shown again.
 */

/**
 * What happens to a request whose agent died (`chained`), or to any request of a
 * @typedef {"fail"|"reassign"} OnAgentLost
 */

/**
 * One outbound of the router.
 * @typedef {object} OutboundView
 * @property {number|null} [backlog] Tasks waiting at the target (read now), `null` when the target cannot say.
 * @property {string|null} [backlog_error] Why the backlog could not be read.
 * @property {string} class
 * @property {Record<string, number>} counters Decisions that involved it, by reason.
 * @property {boolean} disabled
 * @property {string|null} [failback]
 * @property {boolean} holding Whether `max_lag` holds the outbound now.
 * @property {number} max_lag `max_lag` (`-1`: none).
 * @property {string} name
 * @property {number} push_errors
 * @property {number} pushed
 * @property {number} queued Tasks waiting in the router's memory for it.
 * @property {number} rate_per_second Pushes per second over the last 10 s.
 * @property {number} retry_limits
 * @property {Array<string>} selectors
 * @property {string} target Where tasks go (no credentials).
 * @property {number|null} [token_per_second] `token_per_second` of its bucket.
 * @property {string|null} [token_scope] `token_scope`: the token bucket it shares.
 */

/**
 * A retry the scheduler will start.
 * @typedef {object} PendingRetry
 * @property {number} at_ms When, ms since the epoch.
 * @property {number} attempt The attempt the retry will be (1 = first retry).
 * @property {string} of The failed run.
 */

/**
 * A pool that declares the agents it needs (`silk hub --pools FILE`), as `GET
 * @typedef {object} PoolView
 * @property {number} agents Live agents it needs.
 * @property {number} alive Live agents it has (labelled, not drained).
 * @property {number} deficit `agents - alive` (0 when it has enough).
 * @property {string} name The pool: agents labelled `pool=NAME`.
 * @property {ScaleView} scale Its scale command's state.
 */

/**
 * What a program run runs.
 * @typedef {object} ProgramSpec
 * @property {Array<string>} [command] The program and its arguments (no shell); `${args.NAME}` is filled from the run's
 * @property {Record<string, string>} [env] Environment variables of the workers (`${args.NAME}` filled); names starting with
 * @property {string} project The project whose version runs.
 * @property {Runtime} [runtime] `process` (default) or `container`.
 * @property {number|null} [stop_grace_ms] How long a cancelled worker has between SIGTERM and SIGKILL, ms (default 10000).
 * @property {string} [version] The version (`1.4.0`), or `latest`: the newest `ready` version when the run starts.
 * @property {number} [workers] Worker processes, spread over the run's agents (default 1).
 */

/**
 * What a program run shows of its program.
 * @typedef {object} ProgramView
 * @property {ProgramSpec} spec The program as asked (args filled in).
 * @property {string} version The version it runs (`latest` resolved).
 * @property {Array<WorkerView>} workers Its workers (empty until they are placed).
 */

/**
 * A project to create (`POST /api/v1/projects`).
 * @typedef {object} ProjectRequest
 * @property {string|null} [branch] The branch pushes come from (for people; builds follow tags).
 * @property {BuildSpec} build How versions are built.
 * @property {string} git_url `https://…`, `http://…` or `file://…` (no user or password in it: give them apart).
 * @property {string} name A safe identifier: lowercase letters, digits, `-` and `_`, starting with a letter or
 * @property {string|null} [password] The password or access token (stored encrypted, never shown).
 * @property {string|null} [tag_pattern] Which tags are releases: literal text with `{name}` and `{version}` (default
 * @property {string|null} [username] The git user (HTTP basic auth).
 * @property {string|null} [webhook_secret] The webhook secret (HMAC key or GitLab token); generated when absent.
 */

/**
 * A project as the API shows it: never the password or the webhook secret.
 * @typedef {object} ProjectView
 * @property {string|null} [branch] The branch, if set.
 * @property {BuildSpec} build How versions are built.
 * @property {number} created_ms Created, ms since the epoch.
 * @property {string} git_url The repository.
 * @property {boolean} has_password Whether a password or token is stored.
 * @property {string} name Its name.
 * @property {string} tag_pattern The tag pattern in force.
 * @property {string} tenant The tenant it belongs to.
 * @property {number} updated_ms Last changed, ms since the epoch.
 * @property {string|null} [username] The git user.
 * @property {string} webhook_path Where the git service sends its webhook: `/api/v1/webhooks/{name}`.
 */

/**
 * A tenant's quotas, set by an admin; a field left out is no limit. Days are counted in
 * @typedef {object} Quotas
 * @property {number|null} [agent_slots] Most requests its spider runs have out at agents at once (agent slots), on each hub
 * @property {number|null} [bytes_per_day] Most bytes downloaded per day, over all its runs (checked before each slice of pages
 * @property {number|null} [concurrent_runs] Most of its runs dispatching at once (the others wait, paused).
 * @property {number|null} [pages_per_day] Most pages fetched per day, over all its runs.
 * @property {number|null} [pages_per_run] Most pages of one run (a spider's `max_pages` above it is lowered to it).
 * @property {string|null} [time_zone] The IANA time zone its days are counted in (default `UTC`).
 */

/**
 * At most `max` deliveries are made per `per_ms` (counted when the event happens; tests do
 * @typedef {object} RateLimit
 * @property {number} max Deliveries per window (at least 1).
 * @property {number} per_ms The window, ms (at least 1000).
 */

/**
 * The answer of a replay.
 * @typedef {object} ReplayAnswer
 * @property {Array<ReplayedView>} replayed One per selected record, oldest first.
 */

/**
 * Which records `POST /api/v1/router/failures/replay` submits again: `ids`, or a filter.
 * @typedef {object} ReplayRequest
 * @property {boolean} [again] Also records replayed before (default false: each record is replayed once unless
 * @property {Array<string>|null} [ids] These records (at most 10000; the filter applies besides).
 * @property {string|null} [inbound] Only those that came from this inbound.
 * @property {number|null} [limit] At most this many, oldest first (default: as many as `ids`, else 1000; at most
 * @property {string|null} [outbound] Only those of this outbound.
 * @property {string|null} [reason] Only this reason.
 * @property {number|null} [since] Only those at or after this time, ms since the epoch.
 * @property {number|null} [until] Only those before this time, ms since the epoch.
 */

/**
 * What became of one replayed record.
 * @typedef {object} ReplayedView
 * @property {string|null} [decision] `routed`, `succeeded`, `failed` or `rejected` (as `POST /task/` answers); `null`
 * @property {string} id The record.
 * @property {string|null} [outbound] The outbound that took it.
 * @property {string|null} [reason] The router's reason.
 * @property {string} why Why, for people; or why it was not submitted (a message that was not a task, the
 */

/**
 * How a finished request ended (the archive's `outcome`).
 * @typedef {"done"|"failed"|"dropped"} RequestOutcome
 */

/**
 * A page of a run's archived requests.
 * @typedef {object} RequestsPage
 * @property {Record<string, number>|null} [counts] How many match the query (without `after` and `limit`), per outcome; on the first
 * @property {string|null} [next] The `after` of the next page; `null` on the last.
 * @property {Array<ArchivedRequestView>} requests In the order they finished.
 */

/**
 * Which archived requests to queue again: the body of
 * @typedef {object} RequeueRequest
 * @property {string|null} [error_code] Only those with this error code.
 * @property {Array<string>|null} [keys] Only these (keys from the list; then any outcome unless `outcome` is given). A key
 * @property {number|null} [limit] At most this many, oldest first (default and most: 10000).
 * @property {null|RequestOutcome} [outcome]
 * @property {number|null} [status] Only those whose last response had this HTTP status.
 */

/**
 * What a requeue did.
 * @typedef {object} Requeued
 * @property {Array<string>} refused What could not be queued (a URL the spider no longer allows, a request that is not a
 * @property {number} requeued How many requests were queued again.
 * @property {string|null} [run] The run that takes them: the run itself while it is active, else its job's run
 */

/**
 * How to restart a run (the optional body of `POST /api/v1/runs/{id}/restart`).
 * @typedef {object} RestartRequest
 * @property {boolean} [keep_frontier] The new run takes over the old run's frontier (what was fetched is not fetched
 */

/**
 * What a token may do in its tenant.
 * @typedef {"viewer"|"member"|"owner"|"admin"} Role
 */

/**
 * One task that ended as failed in the router.
 * @typedef {object} RouterFailureView
 * @property {string} id Unique, time-ordered.
 * @property {string|null} [inbound] The inbound it came from (`null`: posted straight to the rules).
 * @property {string|null} [outbound] The outbound it was for, if any.
 * @property {string} project The router config's `project`.
 * @property {string|null} [raw] The message's text, when it was not a JSON object (`bad_task`).
 * @property {string} reason Why, as the router's counter label (`retries_exhausted`, `no_route`, `refused`,
 * @property {number|null} [replayed_ms] When its task was last submitted again, if ever.
 * @property {Record<string, any>|null} [task] The task, when it was a JSON object.
 * @property {number} time_ms When it failed, ms since the epoch.
 * @property {string} why Why, for people.
 */

/**
 * A page of failure records.
 * @typedef {object} RouterFailuresPage
 * @property {Array<RouterFailureView>} failures Newest first.
 * @property {string|null} [next] Pass as `after` for the next page; `null` on the last.
 * @property {number} total How many records match the filter in all.
 */

/**
 * The router the hub runs, as `GET /api/v1/router` shows it (the web UI's Router page).
 * @typedef {object} RouterView
 * @property {number} failures Failure records in the store.
 * @property {Array<InboundView>} inbounds Every inbound, in config order.
 * @property {Array<OutboundView>} outbounds Every outbound, in the order rules are tried.
 * @property {string} project The config's `project`.
 */

/**
 * A run to start: the body of `POST /api/v1/runs`.
 * @typedef {object} RunRequest
 * @property {Record<string, any>|null} [downloader] Downloader settings sent to the agents with the spider (`qps`, `trim`, `return_body`,
 * @property {null|FailIf} [fail_if]
 * @property {number|null} [max_pending] Most requests out at once; default 100.
 * @property {null|OnAgentLost} [on_agent_lost]
 * @property {Array<string>} [pools] Agent pools the run may use: only agents whose `pool` label (`silk agent --labels
 * @property {null|ProgramSpec} [program]
 * @property {null|Sinks} [sinks]
 * @property {string} [spider] The declarative spider, as YAML text. With a `program`, optional: its start URLs
 * @property {number|null} [stall_timeout_ms] How long requests may be out with nothing returning before the run fails, ms;
 * @property {null|Strategy} [strategy]
 */

/**
 * The state of a run (spelled on the wire as below, snake case).
 * @typedef {"pending"|"allocating"|"running"|"paused"|"stopping"|"succeeded"|"failed"|"cancelled"} RunState
 */

/**
 * Counters of a run, read from counters (the frontier's and the hub's), never by scanning.
 * @typedef {object} RunStats
 * @property {number} [affinity_broken] `chained`: results of requests bound to an agent that another agent fetched (0 unless
 * @property {number} [affinity_kept] `chained`: results of requests bound to an agent (discovered on it) that it fetched.
 * @property {number} [blocked] Results whose page was blocked (`proxy_banned`: a ban status or the ban regex), this
 * @property {Record<string, number>} [by_agent] Results matched per agent (this hub session).
 * @property {number} [bytes] Body bytes fetched by the agents.
 * @property {number} [bytes_saved] Bytes the agents' trimming rules cut.
 * @property {number} [dropped] Dropped on purpose (robots.txt, off-domain redirect).
 * @property {number} [duplicate_items] Items not written because their key was already written.
 * @property {number} [duplicates] Duplicate requests rejected by dedup.
 * @property {number} [failed] Failed for good.
 * @property {number} [in_flight] Leased and not yet acked.
 * @property {number} [items] Items written (new keys).
 * @property {number} [late_results] Results for requests no longer out (late after a re-dispatch, or duplicates).
 * @property {number} [left] Not finished yet (`pending + in_flight`).
 * @property {number} [pages_per_s] Successes per second since the run (re)started on this hub.
 * @property {number} [pending] Waiting to be dispatched.
 * @property {number} [poisoned] Requests given up as poison: their agent was lost while fetching them too often
 * @property {number} [reassigned] `chained` + `reassign`: bound requests moved to another agent because theirs was lost.
 * @property {number} [retries] Retryable failures that were re-queued.
 * @property {number} [returned] Results matched to a request out (this hub session).
 * @property {number} [sent] Requests sent to agents (this hub session).
 * @property {number} [success] Fetched (acked done).
 * @property {number} [total] Unique requests ever enqueued.
 */

/**
 * A run as the API shows it.
 * @typedef {object} RunView
 * @property {Array<string>} agents The agents allocated to the run: the fixed/chained agents, or for `random` every
 * @property {Record<string, string>} args The arguments the spider was filled with.
 * @property {number} attempt 0, or the retry number.
 * @property {number} created_ms Submitted, ms since the epoch.
 * @property {null|ExpandProgress} [expand]
 * @property {FailIf} fail_if When the run counts as failed at its end (the thresholds in force, defaults filled).
 * @property {null|Feed} [feed]
 * @property {number|null} [finished_ms] Finished.
 * @property {string} frontier Where the run's frontier is: `embedded` (the data dir of its hub) or `redis` (shared
 * @property {string|null} [hub] The hub that drives (or last drove) the run.
 * @property {string} id The run id.
 * @property {string|null} [items_path] The JSON Lines file of the run's items, its item log; absent for a run with a Redis
 * @property {boolean} [job_frontier] The frontier is its job's (`frontier: job`), shared by the job's runs: `stats.total`,
 * @property {string|null} [job_id] The job it is a run of.
 * @property {string|null} [job_name] The job's name.
 * @property {number} max_pending Back-pressure settings.
 * @property {OnAgentLost} on_agent_lost The agent-lost policy.
 * @property {Array<string>} pools The agent pools it may use (empty: any agent).
 * @property {null|ProgramView} [program]
 * @property {string|null} [reason] Why it failed or was cancelled.
 * @property {string|null} [restart_of] The run this one restarts.
 * @property {Sinks} sinks Item sinks besides the JSON Lines file (header values shown as `***`).
 * @property {string} spider_name The spider's name.
 * @property {number} stall_timeout_ms Stall timeout, ms.
 * @property {number|null} [started_ms] Started.
 * @property {RunState} state The state.
 * @property {RunStats} stats The counters.
 * @property {Strategy} strategy The allocation strategy (`random`, `fixed:N`, `chained:N`, `hash:N`).
 * @property {string} tenant The tenant it belongs to (its job's, or its submitter's).
 * @property {number|null} [timeout_ms] The run timeout, ms.
 */

/**
 * Where a program's workers run.
 * @typedef {"process"|"container"} Runtime
 */

/**
 * What a pool's scale command did last and does next.
 * @typedef {object} ScaleView
 * @property {number} attempts Runs since the pool last had enough agents.
 * @property {boolean} command Whether the pool has a scale command (without one the deficit is only reported).
 * @property {number|null} [last_deficit] The deficit the last run was told.
 * @property {string|null} [last_message] The last run's output (its stdout, or why it failed), at most 500 characters; shown
 * @property {number|null} [last_ms] When the last run ended, ms since the epoch.
 * @property {boolean|null} [last_ok] Whether the last run exited with status 0.
 * @property {number|null} [next_ms] When the deficit is checked again and the command run if it stays, ms since the
 * @property {boolean} running Whether it is running now.
 */

/**
 * Where a run's items go besides its JSON Lines file (`runs/{id}/items.jsonl`, always
 * @typedef {object} Sinks
 * @property {boolean} [sql] Also insert items into the hub store's `items` table (insert-ignore on the run and
 * @property {Array<string>} [targets] Also deliver items to these item sink targets of the hub, by name: a NATS subject, a
 * @property {null|WebhookSink} [webhook]
 */

/**
 * How an SMTP connection is secured.
 * @typedef {"starttls"|"tls"|"none"} SmtpSecurity
 */

/**
 * `random`, `fixed:N`, `chained:N` or `hash:N`
 * @typedef {string} Strategy
 */

/**
 * A tenant to create (admin).
 * @typedef {object} TenantRequest
 * @property {Array<string>} [allow_networks] Private address ranges (CIDR, e.g. `10.1.0.0/16`) its runs may reach: their fetches on
 * @property {string|null} [description] For people.
 * @property {string} name Its name: 1 to 64 letters, digits, `.`, `_` or `-`.
 * @property {Array<string>|null} [pools] The agent pools its runs may use (a run naming no pool uses all of these; one naming
 * @property {null|Quotas} [quotas]
 * @property {Array<string>|null} [sink_targets] The hub's item sink targets (`silk hub --sink-targets`) its runs may name in
 * @property {number|null} [weight] Its weight in the fair share of agents' slots between tenants: 1 to 1000 (default 1).
 */

/**
 * What a tenant used today (`GET /api/v1/tenants/{name}/usage`).
 * @typedef {object} TenantUsage
 * @property {number} bytes Bytes downloaded today.
 * @property {string} day Today in its time zone (`YYYY-MM-DD`).
 * @property {number} overshoot_pages Pages fetched today past what the slices covered.
 * @property {number} pages Pages fetched today.
 * @property {number} quota_paused_runs Its runs paused because a quota is used up.
 * @property {Quotas} quotas Its quotas.
 * @property {number} reserved Pages reserved by its running runs (slices handed out and not used yet).
 * @property {number} resets_ms When the day's counters start again, ms since the epoch.
 * @property {number} running_runs Its runs dispatching now.
 * @property {string} tenant The tenant.
 * @property {string} time_zone Its time zone.
 */

/**
 * A tenant.
 * @typedef {object} TenantView
 * @property {Array<string>} [allow_networks] Private address ranges (CIDR) its runs may reach besides what the agents and hubs
 * @property {number} created_ms Created, ms since the epoch.
 * @property {string|null} [description] For people.
 * @property {string} name Its name (letters, digits, `.`, `_`, `-`).
 * @property {Array<string>|null} [pools] The agent pools (agents labelled `pool=NAME`) its runs may use; absent: every agent.
 * @property {Quotas} [quotas] Its quotas (no field: no limit).
 * @property {Array<string>|null} [sink_targets] The hub's item sink targets its runs may deliver items to; absent: every one.
 * @property {number|null} [weight] Its weight in the fair share of agents' slots between tenants (default 1).
 */

/**
 * A token to create.
 * @typedef {object} TokenRequest
 * @property {boolean} [admin] Before roles: `true` is `role: admin`.
 * @property {string} name For people.
 * @property {null|Role} [role]
 * @property {string|null} [tenant] Its tenant (default: the caller's, or the one an admin acts in with `X-Silk-Tenant`).
 */

/**
 * A token as the API lists it (no secret).
 * @typedef {object} TokenView
 * @property {number} created_ms Created, ms since the epoch.
 * @property {string} id The token id (the part after `silk_`).
 * @property {number|null} [last_used_ms] Last used (to the minute), ms since the epoch.
 * @property {string} name Its name.
 * @property {Role} role Its role.
 * @property {string} tenant The tenant it belongs to.
 */

/**
 * Where a version is in its build.
 * @typedef {"queued"|"building"|"ready"|"failed"} VersionState
 */

/**
 * One version of a project.
 * @typedef {object} VersionView
 * @property {null|Artifact} [artifact]
 * @property {string} build The build's id (its log is kept under it).
 * @property {string|null} [commit] The commit built, once known (the webhook's, else the checkout's).
 * @property {number} created_ms Queued, ms since the epoch.
 * @property {number|null} [finished_ms] Build ended, ms since the epoch.
 * @property {string|null} [hub] The hub that builds or built it.
 * @property {string} project The project.
 * @property {string|null} [reason] Why it failed (or was built again).
 * @property {number|null} [started_ms] Build started, ms since the epoch.
 * @property {VersionState} state Where the build is.
 * @property {string} tag The git ref built (`refs/tags/release/shop/1.4.0`).
 * @property {string} trigger What queued it: `webhook:github`, `api`, ….
 * @property {string} version The version (from the tag: `1.4.0`).
 */

/**
 * The body of a webhook.
 * @typedef {"json"|"slack"} WebhookFormat
 */

/**
 * A webhook delivery that queued nothing (`200`): a branch push, a tag that does not match,
 * @typedef {object} WebhookIgnored
 * @property {string} ignored Why.
 */

/**
 * A webhook item sink: `POST url` with a JSON body `{"run": ID, "items": [{"key": K,
 * @typedef {object} WebhookSink
 * @property {number|null} [batch] Items per POST; default 100.
 * @property {Record<string, string>} [headers] Extra request headers (e.g. `Authorization`); their values are secrets: never shown
 * @property {string} url Where to POST (http or https).
 */

/**
 * A webhook channel (`POST` of the body; a 2xx answer is delivered). Its `Debug` shows no
 * @typedef {object} WebhookSpec
 * @property {WebhookFormat} [format] `json` (default) or `slack`.
 * @property {Record<string, string>|null} [headers] Extra request headers (e.g. `Authorization`); values stored sealed. A replacement
 * @property {string|null} [url] `http://…` or `https://…`. Stored sealed (a Slack URL is its token); required at
 */

/**
 * The state of one worker of a program run.
 * @typedef {"starting"|"running"|"succeeded"|"failed"} WorkerState
 */

/**
 * One worker of a program run.
 * @typedef {object} WorkerView
 * @property {string} agent The agent it runs on.
 * @property {number|null} [exit_code] The exit code, once exited.
 * @property {string|null} [reason] Why it failed, for people (with its last log lines).
 * @property {number|null} [signal] The signal that ended it, if one did.
 * @property {WorkerState} state Its state.
 * @property {number} worker Its index, `0..workers` (its `SILK_WORKER`).
 */

export {};
