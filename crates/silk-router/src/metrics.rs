//! Counters of every routing decision per inbound, outbound and reason, and their
//! Prometheus text form (`GET /metrics`).
//!
//! Counters are plain atomics in flat arrays indexed by rule, so counting costs no lock and
//! no allocation on the hot path. Label values are escaped. This module must not know how
//! tasks are routed; it only counts what it is told.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::Config;
use crate::outcome::{REASONS, Reason};

/// Decision counters. Inbound slot `inbounds.len()` is "no inbound" (`POST /task/` with no
/// HTTP inbound configured); outbound slot `outbounds.len()` is "no outbound".
#[derive(Debug)]
pub(crate) struct Metrics {
    project: String,
    inbounds: Vec<String>,
    outbounds: Vec<String>,
    decisions: Vec<AtomicU64>,
    received: Vec<AtomicU64>,
    bad_input: Vec<AtomicU64>,
    inbound_selector_errors: Vec<AtomicU64>,
    outbound_selector_errors: Vec<AtomicU64>,
    failure_records: AtomicU64,
}

fn zeros(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

/// Gauges and counters of one outbound that its sender owns.
#[derive(Debug, Clone, Default)]
pub(crate) struct OutboundGauges {
    pub pushed: u64,
    pub push_errors: u64,
    pub queued: u64,
    pub holding: bool,
    pub backlog: Option<u64>,
    pub tokens_waits: u64,
}

impl Metrics {
    pub(crate) fn new(config: &Config) -> Metrics {
        let inbounds: Vec<String> = config.inbounds.iter().map(|i| i.name.clone()).collect();
        let outbounds: Vec<String> = config.outbounds.iter().map(|o| o.name.clone()).collect();
        let cells = (inbounds.len() + 1) * (outbounds.len() + 1) * REASONS.len();
        Metrics {
            project: config.project.clone(),
            decisions: zeros(cells),
            received: zeros(inbounds.len() + 1),
            bad_input: zeros(inbounds.len() + 1),
            inbound_selector_errors: zeros(inbounds.len()),
            outbound_selector_errors: zeros(outbounds.len()),
            failure_records: AtomicU64::new(0),
            inbounds,
            outbounds,
        }
    }

    fn in_slot(&self, inbound: Option<usize>) -> usize {
        inbound
            .unwrap_or(self.inbounds.len())
            .min(self.inbounds.len())
    }

    fn cell(&self, inbound: Option<usize>, outbound: Option<usize>, reason: Reason) -> usize {
        let o = outbound
            .unwrap_or(self.outbounds.len())
            .min(self.outbounds.len());
        (self.in_slot(inbound) * (self.outbounds.len() + 1) + o) * REASONS.len() + reason.index()
    }

    /// Counts one decision.
    pub(crate) fn decision(&self, inbound: Option<usize>, outbound: Option<usize>, reason: Reason) {
        if let Some(c) = self.decisions.get(self.cell(inbound, outbound, reason)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The count of one decision cell.
    pub(crate) fn decision_count(
        &self,
        inbound: Option<usize>,
        outbound: Option<usize>,
        reason: Reason,
    ) -> u64 {
        self.decisions
            .get(self.cell(inbound, outbound, reason))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Sums of decisions per reason for one outbound (all inbounds).
    pub(crate) fn outbound_counts(&self, outbound: usize) -> Vec<(Reason, u64)> {
        REASONS
            .iter()
            .map(|&r| {
                let n = (0..=self.inbounds.len())
                    .map(|i| {
                        let inbound = (i < self.inbounds.len()).then_some(i);
                        self.decision_count(inbound, Some(outbound), r)
                    })
                    .sum();
                (r, n)
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Sums of decisions per reason for one inbound (all outbounds, and none).
    pub(crate) fn inbound_counts(&self, inbound: usize) -> Vec<(Reason, u64)> {
        REASONS
            .iter()
            .map(|&r| {
                let n = (0..=self.outbounds.len())
                    .map(|o| {
                        let outbound = (o < self.outbounds.len()).then_some(o);
                        self.decision_count(Some(inbound), outbound, r)
                    })
                    .sum();
                (r, n)
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }

    /// Tasks received by one inbound.
    pub(crate) fn received_count(&self, inbound: usize) -> u64 {
        self.received
            .get(self.in_slot(Some(inbound)))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    pub(crate) fn received(&self, inbound: Option<usize>) {
        self.received[self.in_slot(inbound)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bad_input(&self, inbound: Option<usize>) {
        self.bad_input[self.in_slot(inbound)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn selector_error(&self, inbound_rule: bool, index: usize) {
        let list = if inbound_rule {
            &self.inbound_selector_errors
        } else {
            &self.outbound_selector_errors
        };
        if let Some(c) = list.get(index) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn failure_record(&self) {
        self.failure_records.fetch_add(1, Ordering::Relaxed);
    }

    fn inbound_label(&self, slot: usize) -> &str {
        self.inbounds.get(slot).map_or("", String::as_str)
    }

    /// The Prometheus text exposition of every counter and of the outbounds' gauges.
    pub(crate) fn render(&self, gauges: &[OutboundGauges]) -> String {
        let mut out = String::with_capacity(4096);
        let project = escape(&self.project);
        let header = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        header(
            &mut out,
            "silk_router_decisions_total",
            "counter",
            "Routing decisions by inbound, outbound, decision and reason.",
        );
        for i in 0..=self.inbounds.len() {
            for o in 0..=self.outbounds.len() {
                for (r, reason) in REASONS.iter().enumerate() {
                    let cell = (i * (self.outbounds.len() + 1) + o) * REASONS.len() + r;
                    let n = self.decisions[cell].load(Ordering::Relaxed);
                    if n == 0 {
                        continue;
                    }
                    let _ = writeln!(
                        out,
                        "silk_router_decisions_total{{project=\"{project}\",inbound=\"{}\",outbound=\"{}\",decision=\"{}\",reason=\"{}\"}} {n}",
                        escape(self.inbound_label(i)),
                        escape(self.outbounds.get(o).map_or("", String::as_str)),
                        reason.decision().as_str(),
                        reason.as_str()
                    );
                }
            }
        }
        let per_inbound = |out: &mut String, name: &str, help: &str, values: &[AtomicU64]| {
            header(out, name, "counter", help);
            for (i, v) in values.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{name}{{project=\"{project}\",inbound=\"{}\"}} {}",
                    escape(self.inbound_label(i)),
                    v.load(Ordering::Relaxed)
                );
            }
        };
        per_inbound(
            &mut out,
            "silk_router_inbound_received_total",
            "Tasks received per inbound (\"\" = no inbound).",
            &self.received,
        );
        per_inbound(
            &mut out,
            "silk_router_inbound_bad_input_total",
            "Messages that were not a JSON object.",
            &self.bad_input,
        );
        header(
            &mut out,
            "silk_router_selector_errors_total",
            "counter",
            "Selector evaluations that failed (type errors, int('x')).",
        );
        for (i, v) in self.inbound_selector_errors.iter().enumerate() {
            let _ = writeln!(
                out,
                "silk_router_selector_errors_total{{project=\"{project}\",rule=\"inbound\",name=\"{}\"}} {}",
                escape(&self.inbounds[i]),
                v.load(Ordering::Relaxed)
            );
        }
        for (i, v) in self.outbound_selector_errors.iter().enumerate() {
            let _ = writeln!(
                out,
                "silk_router_selector_errors_total{{project=\"{project}\",rule=\"outbound\",name=\"{}\"}} {}",
                escape(&self.outbounds[i]),
                v.load(Ordering::Relaxed)
            );
        }
        header(
            &mut out,
            "silk_router_failure_records_total",
            "counter",
            "Failed tasks written to the failure record.",
        );
        let _ = writeln!(
            out,
            "silk_router_failure_records_total{{project=\"{project}\"}} {}",
            self.failure_records.load(Ordering::Relaxed)
        );
        type Pick = fn(&OutboundGauges) -> Option<u64>;
        let series: [(&str, &str, &str, Pick); 6] = [
            (
                "silk_router_outbound_pushed_total",
                "counter",
                "Tasks pushed to the target.",
                |g| Some(g.pushed),
            ),
            (
                "silk_router_outbound_push_errors_total",
                "counter",
                "Tasks whose push failed.",
                |g| Some(g.push_errors),
            ),
            (
                "silk_router_outbound_token_waits_total",
                "counter",
                "Times the sender waited for a token.",
                |g| Some(g.tokens_waits),
            ),
            (
                "silk_router_outbound_queued",
                "gauge",
                "Tasks held in memory for the outbound.",
                |g| Some(g.queued),
            ),
            (
                "silk_router_outbound_holding",
                "gauge",
                "1 while max_lag holds the outbound.",
                |g| Some(u64::from(g.holding)),
            ),
            (
                "silk_router_outbound_backlog",
                "gauge",
                "Tasks waiting at the target when last read.",
                |g| g.backlog,
            ),
        ];
        for (name, kind, help, pick) in series {
            header(&mut out, name, kind, help);
            for (o, g) in gauges.iter().enumerate() {
                if let Some(v) = pick(g) {
                    let _ = writeln!(
                        out,
                        "{name}{{project=\"{project}\",outbound=\"{}\"}} {v}",
                        escape(self.outbounds.get(o).map_or("", String::as_str))
                    );
                }
            }
        }
        out
    }
}

/// Escapes a Prometheus label value.
/// The Python converts' counters (`plugins::PluginHost::counters`), in Prometheus text.
pub(crate) fn render_converts(out: &mut String, project: &str, counters: &[(String, [u64; 4])]) {
    const FAMILIES: [(&str, &str); 4] = [
        (
            "silk_router_convert_tasks_total",
            "Tasks a Python convert class converted.",
        ),
        (
            "silk_router_convert_raised_total",
            "Tasks failed because a Python convert raised.",
        ),
        (
            "silk_router_convert_worker_restarts_total",
            "Python convert workers killed and restarted (died or hung) while running a class.",
        ),
        (
            "silk_router_convert_crashed_total",
            "Tasks failed because every worker that tried them died or hung.",
        ),
    ];
    for (i, (name, help)) in FAMILIES.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (class, values) in counters {
            let _ = writeln!(
                out,
                "{name}{{project=\"{}\",class=\"{}\"}} {}",
                escape(project),
                escape(class),
                values[i]
            );
        }
    }
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
