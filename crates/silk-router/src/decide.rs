//! The routing decision, pure: given a config and a task, which outbound takes it and why,
//! or how it ends. The running router and `check_task` / `silk router explain` share it, so
//! a dry run answers exactly what a real run does.
//!
//! # Semantics (design §7, seed 001)
//!
//! 1. An inbound applies its convert chain, then its selectors: no match → **rejected**
//!    (the task was not for this inbound; it is counted, not recorded).
//! 2. A task with a top-level `outbound` naming an outbound and a non-null `task_result`
//!    is a **returning** task of that outbound:
//!    - `task_result` in `routing.terminal_codes` → **succeeded**;
//!    - in the outbound's `direct_failback_status` (and it has an enabled `failback`) →
//!      pushed to the failback (`direct_failback`);
//!    - in `dont_retry_status` → routed again by the rules, skipping that outbound
//!      (`dont_retry`);
//!    - `retry_times < retry_limits` (or negative limits) → pushed to the same outbound
//!      again (`retry`);
//!    - the outbound has an enabled `failback` → pushed there (`failback`);
//!    - else **failed** (`retries_exhausted`) and recorded.
//!
//!    A returning task whose outbound no longer exists or is disabled is routed by the rules
//!    (`outbound_gone`).
//! 3. Any other task is **new**: the first enabled outbound in merged order with a matching
//!    selector takes it (`matched`); none → **failed** (`no_route`) and recorded.
//! 4. Before any push, `routing.limits` (when > 0) caps `routed_count`: at the cap the task
//!    is **failed** (`limits`).
//! 5. A push the target refuses for good ([`crate::RouterError::Refused`]) **fails** the
//!    task (`refused`) and records it. Only a real run sees this; a dry run answers as if
//!    the push succeeded.
//!
//! This module must not do I/O or block.

use serde::Serialize;
use serde_json::Value;
use silk_selector::{EvalError, Selector};

use crate::config::Config;
use crate::error::RouterError;
use crate::outcome::{Decision, Reason};
use crate::payload::Payload;
use crate::task::{self, Carry};

/// What a rule is, for selector evaluation errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RuleRef {
    Inbound(usize),
    Outbound(usize),
}

/// The outcome of [`decide`].
#[derive(Debug, Clone)]
pub(crate) struct Verdict {
    pub reason: Reason,
    /// The target (routed) or the returning task's outbound (succeeded/failed).
    pub outbound: Option<usize>,
    /// The index of the outbound selector that matched.
    pub selector: Option<usize>,
    /// A sentence for people.
    pub why: String,
    /// For a routed task: whether it is a retry on the same outbound (the payload is
    /// built by [`Payload::new`]).
    pub retry: bool,
}

/// The inbound's convert chain, in order (nothing without an inbound). An error stops the
/// chain: [`RouterError::ConvertFailed`] fails the task, any other leaves it with its
/// inbound.
pub(crate) async fn convert(
    config: &Config,
    inbound: Option<usize>,
    task: &mut Value,
) -> Result<(), RouterError> {
    let (Some(i), Value::Object(map)) = (inbound, task) else {
        return Ok(());
    };
    for step in &config.inbounds[i].converts {
        step.apply(map).await?;
    }
    Ok(())
}

/// The inbound stage after [`convert`]: the inbound's selectors. `Err` is the rejection
/// reason; `Ok` carries the index of the selector that accepted it (`None` when the
/// inbound accepts everything or there is no inbound).
pub(crate) fn accept(
    config: &Config,
    inbound: Option<usize>,
    task: &Value,
    on_error: &mut dyn FnMut(RuleRef, usize, &Selector, &EvalError),
) -> Result<Option<usize>, Reason> {
    if !task.is_object() {
        return Err(Reason::BadTask);
    }
    let Some(i) = inbound else { return Ok(None) };
    let rule = &config.inbounds[i];
    let Some(selectors) = &rule.selector else {
        return Ok(None);
    };
    selectors
        .first_match_reporting(task, |j, s, e| on_error(RuleRef::Inbound(i), j, s, e))
        .map(Some)
        .ok_or(Reason::NotAccepted)
}

/// Decides where an accepted task goes.
pub(crate) fn decide(
    config: &Config,
    view: &Value,
    on_error: &mut dyn FnMut(RuleRef, usize, &Selector, &EvalError),
) -> Verdict {
    let Value::Object(task) = view else {
        return ended(Reason::BadTask, None, "a task is a JSON object".into());
    };
    let carry = Carry::of(task);
    let returning = match (task.get("outbound"), task.get("task_result")) {
        (Some(Value::String(name)), Some(result)) if !result.is_null() => {
            Some((name.as_str(), result))
        }
        _ => None,
    };
    let Some((name, result)) = returning else {
        return route_by_rules(
            config,
            view,
            &carry,
            None,
            Reason::Matched,
            on_error,
            "a new task",
        );
    };
    let code = task::code(result);
    let source = config.outbound_index(name);
    if code.is_some_and(|c| config.routing.terminal_codes.contains(&c)) {
        return ended(
            Reason::TerminalCode,
            source,
            format!("task_result {} is a terminal code", show(result)),
        );
    }
    let usable = |i: usize| !config.outbounds[i].disable;
    let Some(src) = source.filter(|&i| usable(i)) else {
        let what = if source.is_some() {
            "is disabled"
        } else {
            "no longer exists"
        };
        let context = format!("a returning task whose outbound `{name}` {what}");
        return route_by_rules(
            config,
            view,
            &carry,
            None,
            Reason::OutboundGone,
            on_error,
            &context,
        );
    };
    let rule = &config.outbounds[src];
    let s = &rule.settings;
    let failback = rule.failback_index.filter(|&i| usable(i));
    let in_list = |list: &[i64]| code.is_some_and(|c| list.contains(&c));
    if let (true, Some(fb)) = (in_list(&s.direct_failback_status), failback) {
        let why = format!(
            "task_result {} of `{name}` is in direct_failback_status",
            show(result)
        );
        return deliver(config, &carry, fb, Reason::DirectFailback, None, why);
    }
    if in_list(&s.dont_retry_status) {
        let context = format!(
            "task_result {} of `{name}` is in dont_retry_status",
            show(result)
        );
        return route_by_rules(
            config,
            view,
            &carry,
            Some(src),
            Reason::DontRetry,
            on_error,
            &context,
        );
    }
    if s.retry_limits < 0 || carry.retry_times < s.retry_limits as u64 {
        let why = format!(
            "task_result {} of `{name}`: retry {} of {}",
            show(result),
            carry.retry_times + 1,
            if s.retry_limits < 0 {
                "unlimited".to_owned()
            } else {
                s.retry_limits.to_string()
            }
        );
        return deliver(config, &carry, src, Reason::Retry, None, why);
    }
    if let Some(fb) = failback {
        let why = format!(
            "task_result {} of `{name}`: {} retries used; failback",
            show(result),
            carry.retry_times
        );
        return deliver(config, &carry, fb, Reason::Failback, None, why);
    }
    ended(
        Reason::RetriesExhausted,
        Some(src),
        format!(
            "task_result {} of `{name}`: {} of {} retries used and no failback",
            show(result),
            carry.retry_times,
            s.retry_limits
        ),
    )
}

fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn ended(reason: Reason, outbound: Option<usize>, why: String) -> Verdict {
    Verdict {
        reason,
        outbound,
        selector: None,
        why,
        retry: false,
    }
}

#[allow(clippy::too_many_arguments)]
fn route_by_rules(
    config: &Config,
    view: &Value,
    carry: &Carry,
    skip: Option<usize>,
    reason: Reason,
    on_error: &mut dyn FnMut(RuleRef, usize, &Selector, &EvalError),
    context: &str,
) -> Verdict {
    for (i, rule) in config.outbounds.iter().enumerate() {
        if rule.disable || Some(i) == skip || rule.selector.is_empty() {
            continue;
        }
        if let Some(j) = rule
            .selector
            .first_match_reporting(view, |j, s, e| on_error(RuleRef::Outbound(i), j, s, e))
        {
            let why = format!("{context}: selector {} of `{}` matched", j + 1, rule.name);
            return deliver(config, carry, i, reason, Some(j), why);
        }
    }
    let skipped = skip.map_or(String::new(), |i| {
        format!(" (other than `{}`)", config.outbounds[i].name)
    });
    ended(
        Reason::NoRoute,
        None,
        format!("{context}: no outbound{skipped} matched"),
    )
}

#[allow(clippy::too_many_arguments)]
fn deliver(
    config: &Config,
    carry: &Carry,
    target: usize,
    reason: Reason,
    selector: Option<usize>,
    why: String,
) -> Verdict {
    let limits = config.routing.limits;
    if limits > 0 && carry.routed_count >= limits as u64 {
        return ended(
            Reason::Limits,
            Some(target),
            format!(
                "{why}, but routed_count {} reached routing.limits {limits}",
                carry.routed_count
            ),
        );
    }
    Verdict {
        reason,
        outbound: Some(target),
        selector,
        why,
        retry: reason == Reason::Retry,
    }
}

/// What `POST /inbound/{name}/check_task/` and `silk router explain` answer.
#[derive(Debug, Clone, Serialize)]
pub struct CheckTaskAnswer {
    /// The inbound asked.
    pub inbound: String,
    /// Whether the inbound's selectors accepted the task (after convert).
    pub accepted: bool,
    /// The inbound selector that accepted it (`null` when the inbound has none).
    pub inbound_selector: Option<String>,
    /// `rejected`, `routed`, `succeeded` or `failed`.
    pub decision: Decision,
    /// Why, as a counter label (`matched`, `retry`, `no_route`…).
    pub reason: Reason,
    /// Why, for people.
    pub why: String,
    /// The outbound selector that matched (`null` for retries, failbacks and endings).
    pub selector: Option<String>,
    /// The outbound that would take it (`null` when none).
    pub outbound: Option<String>,
    /// The task as it would be pushed (`null` when not routed).
    pub task: Option<Value>,
    /// The task after the convert chain.
    pub converted: Value,
    /// Selectors that failed to evaluate on the way (`outbound `x` selector 2: …`).
    pub selector_errors: Vec<String>,
}

/// Answers what the router would do with `task` arriving at `inbound`, without pushing.
/// The convert chain runs (Python converts too); nothing is pushed or recorded, and no
/// decision is counted.
pub async fn explain(config: &Config, inbound: &str, task: &Value) -> CheckTaskAnswer {
    explain_at(
        config,
        inbound,
        task,
        silk_core::Clock::now_ms(&silk_core::SystemClock),
    )
    .await
}

/// [`explain`] at a given time (for deterministic `submit_time`).
pub async fn explain_at(
    config: &Config,
    inbound: &str,
    task: &Value,
    now_ms: u64,
) -> CheckTaskAnswer {
    let mut errors = Vec::new();
    let mut on_error = |rule: RuleRef, j: usize, _: &Selector, e: &EvalError| {
        let name = match rule {
            RuleRef::Inbound(i) => format!("inbound `{}`", config.inbounds[i].name),
            RuleRef::Outbound(i) => format!("outbound `{}`", config.outbounds[i].name),
        };
        errors.push(format!("{name} selector {}: {e}", j + 1));
    };
    let mut answer = CheckTaskAnswer {
        inbound: inbound.to_owned(),
        accepted: false,
        inbound_selector: None,
        decision: Decision::Rejected,
        reason: Reason::UnknownInbound,
        why: String::new(),
        selector: None,
        outbound: None,
        task: None,
        converted: task.clone(),
        selector_errors: Vec::new(),
    };
    let index = match config.inbound_index(inbound) {
        Some(i) if !config.inbounds[i].disable => i,
        Some(_) => {
            answer.why = format!("inbound `{inbound}` is disabled");
            return answer;
        }
        None => {
            answer.why = format!("no inbound named `{inbound}`");
            return answer;
        }
    };
    if !task.is_object() {
        answer.reason = Reason::BadTask;
        answer.decision = Decision::Failed;
        answer.why = "a task is a JSON object".into();
        return answer;
    }
    let mut map = task.clone();
    let converted = convert(config, Some(index), &mut map).await;
    answer.converted = map.clone();
    if let Err(e) = converted {
        answer.reason = Reason::ConvertFailed;
        answer.decision = Decision::Failed;
        answer.why = match e {
            RouterError::ConvertFailed { .. } => e.to_string(),
            other => format!(
                "the convert chain could not run now (the task would stay with its inbound): {other}"
            ),
        };
        return answer;
    }
    let accepted = accept(config, Some(index), &map, &mut on_error);
    match accepted {
        Err(reason) => {
            answer.reason = reason;
            answer.why = format!("no selector of inbound `{inbound}` matched the converted task");
        }
        Ok(j) => {
            answer.accepted = true;
            answer.inbound_selector = j.and_then(|j| {
                config.inbounds[index]
                    .selector
                    .as_ref()
                    .map(|s| s.selectors()[j].source().to_owned())
            });
            let verdict = decide(config, &map, &mut on_error);
            answer.reason = verdict.reason;
            answer.decision = verdict.reason.decision();
            answer.why = verdict.why;
            answer.outbound = verdict.outbound.map(|i| config.outbounds[i].name.clone());
            answer.selector = match (verdict.outbound, verdict.selector) {
                (Some(i), Some(j)) => Some(
                    config.outbounds[i].selector.selectors()[j]
                        .source()
                        .to_owned(),
                ),
                _ => None,
            };
            if let (Decision::Routed, Some(i), Value::Object(task)) =
                (answer.decision, verdict.outbound, &map)
            {
                answer.task = Some(
                    Payload::new(&config.outbounds[i], task, verdict.retry, now_ms).to_value(),
                );
            }
        }
    }
    answer.selector_errors = errors;
    answer
}
