//! The routing semantics of design §7 / seed 001, table-driven through the dry run
//! (`explain_at`, which `check_task` and the running router share): new tasks, returning
//! tasks (terminal, retry, failback, direct failback, dont-retry, exhausted), limits,
//! built-in keys, converts, and selectors that fail to evaluate.

mod common;

use serde_json::{Value, json};
use silk_router::{Decision, Reason, explain_at};

const CONFIG: &str = r#"
project: t
routing:
  limits: 5
  terminal_codes: [1000, 1101]
inbound:
  - name: api
    class: http.HttpInbound
  - name: spider_log
    class: http.HttpInbound
    selector:
      - "submitter == 'taskhub' and task_result is not None"
    convert:
      - class: logstash.RemoveBuildinKeys
      - class: common.ExtractTaskParams
  - name: gravel_inbound
    class: http.HttpInbound
    selector: ["data_type == 'task_distribution' and task_type == 'task'"]
    convert:
      - common.ExtractTaskParams
      - common.ExtractMetadata
      - set: {seen_by: router}
      - rename: {spider_ip: ip}
      - remove: [log_date]
  - name: closed
    disable: true
    class: http.HttpInbound
outbound:
  - name: broken
    selector: ["int(task_src) == 99"]
    class: test.MemoryOutbound
    init: {sink: routing}
  - name: captcha
    selector: ["task_src in [3] and not detail_url"]
    retry_limits: 2
    failback: captcha_slow
    direct_failback_status: [1403]
    dont_retry_status: [1404]
    class: test.MemoryOutbound
    init: {sink: routing}
    task_params: [company_name, credit_no, task_src]
    priority: 1000
    rt_priority: 2000
    token_scope: '*'
    task_type: 破码
  - name: captcha_slow
    class: test.MemoryOutbound
    init: {sink: routing}
    retry_limits: 1
    reset_retry_times: true
  - name: by_url
    selector: ["detail_url", "task_result == 1404 and credit_no"]
    class: test.MemoryOutbound
    init: {sink: routing}
    task_params_wrapped: true
    task_params: [detail_url, credit_no]
  - name: tax
    selector: ["type == 'tax_arrears_announcement' and city == 'guangxi'"]
    class: test.MemoryOutbound
    init: {sink: routing}
  - name: off
    disable: true
    selector: ["True"]
    class: test.MemoryOutbound
    init: {sink: routing}
"#;

const NOW_MS: u64 = 1_634_915_522_145;

struct Case {
    name: &'static str,
    inbound: &'static str,
    task: Value,
    decision: Decision,
    reason: Reason,
    outbound: Option<&'static str>,
    check: fn(&silk_router::CheckTaskAnswer),
}

fn returning(outbound: &str, code: Value, extra: Value) -> Value {
    let mut params = json!({"outbound": outbound, "company_name": "A", "credit_no": "C", "task_src": 3,
        "task_uuid": "u-1", "routed_count": 1, "retry_times": 0, "group_retry_times": 0});
    if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
        p.extend(e);
    }
    json!({"submitter": "taskhub", "task_result": code, "@timestamp": "x", "@version": "1", "host": "h",
           "spider_name": "s", "task_params": params})
}

fn pushed(answer: &silk_router::CheckTaskAnswer) -> &serde_json::Map<String, Value> {
    answer
        .task
        .as_ref()
        .and_then(Value::as_object)
        .expect("a pushed task")
}

fn no_check(_: &silk_router::CheckTaskAnswer) {}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "new task: first matching outbound, task_params plus built-ins and fixed params",
            inbound: "api",
            task: json!({"task_src": 3, "company_name": "A", "credit_no": "C", "extra": 1}),
            decision: Decision::Routed,
            reason: Reason::Matched,
            outbound: Some("captcha"),
            check: |a| {
                let t = pushed(a);
                assert_eq!(
                    a.selector.as_deref(),
                    Some("task_src in [3] and not detail_url")
                );
                assert!(a.accepted);
                let mut keys: Vec<&str> = t.keys().map(String::as_str).collect();
                keys.sort_unstable();
                let mut expected = vec!["company_name", "credit_no", "task_src", "task_type"];
                expected.extend(silk_router::BUILTIN_KEYS);
                expected.sort_unstable();
                assert_eq!(keys, expected);
                assert_eq!(t["outbound"], "captcha");
                assert_eq!(t["routed_count"], 1);
                assert_eq!(t["retry_times"], 0);
                assert_eq!(t["group_retry_times"], 0);
                assert_eq!(t["submitter"], "taskhub");
                assert_eq!(t["submit_time"], "2021-10-22 15:12:02.145");
                assert_eq!(t["retry_limits"], 2);
                assert_eq!(t["rt"], false);
                assert_eq!(t["priority"], 1000);
                assert_eq!(t["token_scope"], "*");
                assert_eq!(t["task_type"], "破码");
                assert_eq!(t["task_uuid"].as_str().map(str::len), Some(36));
            },
        },
        Case {
            name: "real-time task takes rt_priority",
            inbound: "api",
            task: json!({"task_src": 3, "rt": "yes"}),
            decision: Decision::Routed,
            reason: Reason::Matched,
            outbound: Some("captcha"),
            check: |a| {
                assert_eq!(pushed(a)["rt"], true);
                assert_eq!(pushed(a)["priority"], 2000);
            },
        },
        Case {
            name: "second selector of a later outbound; wrapped task_params",
            inbound: "api",
            task: json!({"detail_url": "http://x/1", "credit_no": "C", "task_src": 3, "priority": 7}),
            decision: Decision::Routed,
            reason: Reason::Matched,
            outbound: Some("by_url"),
            check: |a| {
                let t = pushed(a);
                assert_eq!(t.len(), 1);
                let p = t["task_params"].as_object().expect("wrapped");
                assert_eq!(p["detail_url"], "http://x/1");
                assert_eq!(p["outbound"], "by_url");
                assert_eq!(
                    p["priority"], 7,
                    "the task's own priority when the outbound sets none"
                );
                assert!(!p.contains_key("task_src"));
            },
        },
        Case {
            name: "no outbound matches: failed",
            inbound: "api",
            task: json!({"nothing": 1}),
            decision: Decision::Failed,
            reason: Reason::NoRoute,
            outbound: None,
            check: |a| assert!(a.task.is_none() && a.selector.is_none()),
        },
        Case {
            name: "a selector that fails to evaluate does not match and is reported",
            inbound: "api",
            task: json!({"task_src": "x"}),
            decision: Decision::Failed,
            reason: Reason::NoRoute,
            outbound: None,
            check: |a| {
                assert_eq!(a.selector_errors.len(), 1, "{:?}", a.selector_errors);
                assert!(
                    a.selector_errors[0].starts_with("outbound `broken` selector 1:"),
                    "{:?}",
                    a.selector_errors
                );
            },
        },
        Case {
            name: "inbound selectors do not accept: rejected",
            inbound: "spider_log",
            task: json!({"foo": 1}),
            decision: Decision::Rejected,
            reason: Reason::NotAccepted,
            outbound: None,
            check: |a| assert!(!a.accepted && a.outbound.is_none()),
        },
        Case {
            name: "returning task with a terminal code: succeeded",
            inbound: "spider_log",
            task: returning("captcha", json!(1000), json!({})),
            decision: Decision::Succeeded,
            reason: Reason::TerminalCode,
            outbound: Some("captcha"),
            check: |a| {
                let c = a.converted.as_object().expect("object");
                assert!(
                    !c.contains_key("@timestamp")
                        && !c.contains_key("host")
                        && !c.contains_key("task_params")
                );
                assert_eq!(c["outbound"], "captcha");
                assert_eq!(
                    a.inbound_selector.as_deref(),
                    Some("submitter == 'taskhub' and task_result is not None")
                );
            },
        },
        Case {
            name: "terminal code given as text",
            inbound: "spider_log",
            task: returning("captcha", json!("1101"), json!({})),
            decision: Decision::Succeeded,
            reason: Reason::TerminalCode,
            outbound: Some("captcha"),
            check: no_check,
        },
        Case {
            name: "failed under retry_limits: retried on its outbound",
            inbound: "spider_log",
            task: returning(
                "captcha",
                json!(1500),
                json!({"retry_times": 1, "group_retry_times": 4}),
            ),
            decision: Decision::Routed,
            reason: Reason::Retry,
            outbound: Some("captcha"),
            check: |a| {
                let t = pushed(a);
                assert_eq!(t["retry_times"], 2);
                assert_eq!(t["group_retry_times"], 5);
                assert_eq!(t["routed_count"], 2);
                assert_eq!(t["task_uuid"], "u-1");
                assert!(a.selector.is_none());
            },
        },
        Case {
            name: "retries exhausted: failback, with retry_times reset there",
            inbound: "spider_log",
            task: returning(
                "captcha",
                json!(1500),
                json!({"retry_times": 2, "group_retry_times": 2}),
            ),
            decision: Decision::Routed,
            reason: Reason::Failback,
            outbound: Some("captcha_slow"),
            check: |a| {
                let t = pushed(a);
                assert_eq!(t["retry_times"], 0);
                assert_eq!(t["group_retry_times"], 2);
                assert_eq!(t["outbound"], "captcha_slow");
                assert_eq!(t["retry_limits"], 1);
            },
        },
        Case {
            name: "retries exhausted without failback: failed",
            inbound: "spider_log",
            task: returning("captcha_slow", json!(1500), json!({"retry_times": 1})),
            decision: Decision::Failed,
            reason: Reason::RetriesExhausted,
            outbound: Some("captcha_slow"),
            check: no_check,
        },
        Case {
            name: "direct_failback_status goes straight to failback",
            inbound: "spider_log",
            task: returning("captcha", json!(1403), json!({})),
            decision: Decision::Routed,
            reason: Reason::DirectFailback,
            outbound: Some("captcha_slow"),
            check: no_check,
        },
        Case {
            name: "dont_retry_status: routed again by the rules, never to the same outbound",
            inbound: "spider_log",
            task: returning("captcha", json!(1404), json!({})),
            decision: Decision::Routed,
            reason: Reason::DontRetry,
            outbound: Some("by_url"),
            check: |a| {
                assert_eq!(
                    a.selector.as_deref(),
                    Some("task_result == 1404 and credit_no")
                );
                let p = pushed(a)["task_params"].as_object().expect("wrapped");
                assert_eq!(p["routed_count"], 2);
            },
        },
        Case {
            name: "dont_retry_status with no other rule: failed",
            inbound: "spider_log",
            task: returning("captcha", json!(1404), json!({"credit_no": null})),
            decision: Decision::Failed,
            reason: Reason::NoRoute,
            outbound: None,
            check: |a| assert!(a.why.contains("other than `captcha`"), "{}", a.why),
        },
        Case {
            name: "routing.limits caps routed_count",
            inbound: "spider_log",
            task: returning("captcha", json!(1500), json!({"routed_count": 5})),
            decision: Decision::Failed,
            reason: Reason::Limits,
            outbound: Some("captcha"),
            check: no_check,
        },
        Case {
            name: "returning task of an outbound that is gone: routed by the rules",
            inbound: "spider_log",
            task: returning("vanished", json!(1500), json!({})),
            decision: Decision::Routed,
            reason: Reason::OutboundGone,
            outbound: Some("captcha"),
            check: no_check,
        },
        Case {
            name: "returning task of a disabled outbound: routed by the rules",
            inbound: "spider_log",
            task: returning("off", json!(1500), json!({})),
            decision: Decision::Routed,
            reason: Reason::OutboundGone,
            outbound: Some("captcha"),
            check: no_check,
        },
        Case {
            name: "the seed's check_task example, with converts",
            inbound: "gravel_inbound",
            task: json!({
                "task_result": 1001, "spider_start_time": "2021-10-22 15:12:02.145",
                "type": "tax_arrears_announcement", "spider_end_time": "2021-10-22 15:12:03",
                "spider_ip": "10.8.6.51", "metadata": {"period": "2020年第2期"}, "http_code": 200,
                "log_date": "2021.10.22", "spider_name": "tax_arrears_announcement",
                "data_type": "task_distribution", "error_msg": "",
                "task_params": {"city": "guangxi", "operate": "all", "task_type": "task"}
            }),
            decision: Decision::Routed,
            reason: Reason::Matched,
            outbound: Some("tax"),
            check: |a| {
                let t = pushed(a);
                assert_eq!(t["period"], "2020年第2期");
                assert_eq!(t["city"], "guangxi");
                assert_eq!(t["seen_by"], "router");
                assert_eq!(t["ip"], "10.8.6.51");
                assert!(
                    !t.contains_key("log_date")
                        && !t.contains_key("task_result")
                        && !t.contains_key("metadata")
                );
                assert_eq!(
                    a.inbound_selector.as_deref(),
                    Some("data_type == 'task_distribution' and task_type == 'task'")
                );
            },
        },
        Case {
            name: "not an object: bad task",
            inbound: "api",
            task: json!([1, 2]),
            decision: Decision::Failed,
            reason: Reason::BadTask,
            outbound: None,
            check: no_check,
        },
        Case {
            name: "unknown inbound",
            inbound: "nope",
            task: json!({}),
            decision: Decision::Rejected,
            reason: Reason::UnknownInbound,
            outbound: None,
            check: no_check,
        },
        Case {
            name: "disabled inbound",
            inbound: "closed",
            task: json!({}),
            decision: Decision::Rejected,
            reason: Reason::UnknownInbound,
            outbound: None,
            check: |a| assert!(a.why.contains("disabled")),
        },
    ]
}

#[test]
fn routing_table() {
    let (_dir, config) = common::load_ok(CONFIG);
    let mut failures = Vec::new();
    for case in cases() {
        let answer =
            futures::executor::block_on(explain_at(&config, case.inbound, &case.task, NOW_MS));
        let got = (answer.decision, answer.reason, answer.outbound.as_deref());
        if got != (case.decision, case.reason, case.outbound) {
            failures.push(format!(
                "{}: expected {:?}, got {got:?} ({})",
                case.name,
                (case.decision, case.reason, case.outbound),
                answer.why
            ));
            continue;
        }
        let check = case.check;
        if let Err(panic) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&answer)))
        {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!(
                "{}: {message}\n{}",
                case.name,
                serde_json::to_string_pretty(&answer).unwrap_or_default()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn check_task_answer_serializes_with_the_documented_fields() {
    let (_dir, config) = common::load_ok(CONFIG);
    let answer =
        futures::executor::block_on(explain_at(&config, "api", &json!({"task_src": 3}), NOW_MS));
    let json = serde_json::to_value(&answer).expect("serializes");
    for key in [
        "accepted",
        "selector",
        "outbound",
        "task",
        "inbound",
        "decision",
        "reason",
        "why",
        "converted",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    assert_eq!(json["decision"], "routed");
    assert_eq!(json["reason"], "matched");
}
