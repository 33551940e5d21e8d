//! Evaluations per second of the seed's inbound rule against a typical task, which the
//! router runs for every task on every rule. Target: at least 1,000,000/s on one core.
//!
//! `cargo bench -p silk-selector --bench eval`; criterion reports `thrpt` in
//! evaluations/s (one element = one evaluation).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::{Value, json};
use silk_selector::{Selector, SelectorList};

const RULE: &str = "task_type == '找新' and province in ['JS', 'TJ', 'ZJ'] and task_result == 1000 and task_src == 0";

/// A task as it reaches the router: about ten top-level keys.
fn task(province: &str) -> Value {
    json!({
        "task_type": "找新",
        "province": province,
        "task_result": 1000,
        "task_src": 0,
        "company_name": "浙江温州龙湾农村商业银行股份有限公司",
        "credit_no": "913303007772078015",
        "search_key": "913303007772078015",
        "data_type": "employee",
        "rt": true,
        "submitter": "taskhub",
        "spider_start_time": "2021-10-22 15:12:02.145",
    })
}

fn bench_eval(c: &mut Criterion) {
    let selector = Selector::parse(RULE).expect("rule parses");
    let matching = task("JS");
    let not_matching = task("GD");
    assert!(selector.matches(&matching));
    assert!(!selector.matches(&not_matching));

    let mut group = c.benchmark_group("selector");
    group.throughput(Throughput::Elements(1));
    group.bench_function("eval_seed_rule_match", |b| {
        b.iter(|| selector.matches(black_box(&matching)))
    });
    group.bench_function("eval_seed_rule_no_match", |b| {
        b.iter(|| selector.matches(black_box(&not_matching)))
    });

    // The whole inbound rule of seed 001: four selectors, the third one matches.
    let list = SelectorList::parse_all([
        "submitter == 'taskhub' and (company_name or credit_no or company_code) and int(task_src) in [1, 11, 5, 3, 22, 21, 7]",
        "task_type == '找新' and detail_url and province != 'AH' and task_src == 0",
        RULE,
        "task_type == '小微企业补充行业'",
    ])
    .expect("seed selectors parse");
    assert_eq!(list.first_match(&matching), Some(2));
    group.bench_function("eval_seed_inbound_list", |b| {
        b.iter(|| list.first_match(black_box(&matching)))
    });

    group.bench_function("parse_seed_rule", |b| {
        b.iter(|| Selector::parse(black_box(RULE)))
    });
    group.finish();
}

criterion_group!(benches, bench_eval);
criterion_main!(benches);
