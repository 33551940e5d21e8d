//! Config loading: the seed's include example and its order, includes of files and folders,
//! placeholders, the class registry (seed names, refused classes), and bad configs, each
//! with its error naming file, line and rule — all errors at once.

mod common;

use common::{errors_of, examples, load, load_dir, load_ok, tree, vars};
use serde_json::json;
use silk_router::{Config, Vars, check};

fn names(config: &Config) -> Vec<&str> {
    config.outbounds.iter().map(|o| o.name.as_str()).collect()
}

#[test]
fn seed_include_example_gives_o_a_1_o_b_2_o_b_1() {
    let mut vars = Vars::new().with_env(false);
    vars.load_file(&examples().join("seed/vars.yaml"))
        .expect("vars load");
    let config =
        check(&[examples().join("seed/main.yaml")], &vars).expect("the seed example loads");
    assert_eq!(names(&config), ["o_a_1", "o_b_2", "o_b_1"]);
    assert_eq!(config.project, "seed_example");
    assert_eq!(config.routing.terminal_codes, [1000, 1101]);
    assert_eq!(config.routing.limits, -1);
    let failure = config.routing.failure.as_ref().expect("failure");
    assert_eq!(
        failure.path.to_str(),
        Some("/tmp/silk-router-seed-failure.jsonl")
    );
    assert!(!failure.compress);
    assert_eq!(config.server.port, 8526);
    assert_eq!(config.files.len(), 3, "{:?}", config.files);
}

#[test]
fn every_example_loads() {
    let v = vars(&[
        ("redis_url", "redis://127.0.0.1:6379/0"),
        ("nats_url", "nats://127.0.0.1:4222"),
        ("failure_dir", "/tmp"),
        ("failure_path", "/tmp/x.jsonl.gz"),
        ("kafka_servers", "127.0.0.1:9092"),
    ]);
    for file in ["taskhub_ic.yaml", "full.yaml", "seed/main.yaml"] {
        let config = check(&[examples().join(file)], &v).unwrap_or_else(|e| {
            panic!(
                "{file}:\n{}",
                e.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
        assert!(!config.outbounds.is_empty(), "{file}");
    }
    let ic = check(&[examples().join("taskhub_ic.yaml")], &v).expect("loads");
    let captcha = ic.outbound("zongju_captcha_ts3").expect("outbound");
    // Keys written in `init` beside `url`/`key` (as the seed's table lists them) are read.
    assert_eq!(captcha.settings.priority, Some(1000));
    assert_eq!(captcha.settings.rt_priority, Some(2000));
    assert_eq!(captcha.settings.retry_limits, 5);
    assert_eq!(
        captcha.settings.task_params.as_ref().map(Vec::len),
        Some(11)
    );
    // The seed's extra keys are fixed task parameters.
    assert_eq!(captcha.settings.params.get("task_src"), Some(&json!(3)));
    assert_eq!(
        captcha.settings.params.get("task_type"),
        Some(&json!("破码"))
    );
    assert_eq!(ic.inbound("spider_log").expect("inbound").threads, 8);
}

#[test]
fn includes_merge_in_file_name_order_after_the_files_own_entries() {
    let dir = tree(&[
        (
            "main.yaml",
            "include: [z_last.yaml, conf]\noutbound:\n  - {name: main_1, class: test.MemoryOutbound, init: {sink: s}}\n",
        ),
        (
            "z_last.yaml",
            "outbound:\n  - {name: z_1, class: test.MemoryOutbound, init: {sink: s}}\n",
        ),
        (
            "conf/b.yml",
            "include: [nested]\noutbound:\n  - {name: b_1, class: test.MemoryOutbound, init: {sink: s}}\n",
        ),
        (
            "conf/nested/n.yaml",
            "outbound:\n  - {name: n_1, class: test.MemoryOutbound, init: {sink: s}}\n",
        ),
        (
            "conf/a.yaml",
            "outbound:\n  - {name: a_2, class: test.MemoryOutbound, init: {sink: s}}\n  - {name: a_1, class: test.MemoryOutbound, init: {sink: s}}\n",
        ),
        (
            "conf/.hidden.yaml",
            "outbound: [{name: hidden, class: nope}]\n",
        ),
        ("conf/notes.txt", "not yaml"),
    ]);
    let config = load_dir(dir.path(), &vars(&[])).expect("loads");
    assert_eq!(
        names(&config),
        ["main_1", "a_2", "a_1", "b_1", "n_1", "z_1"]
    );
}

#[test]
fn include_problems_are_errors() {
    let dir = tree(&[
        ("main.yaml", "include: [a.yaml, missing.yaml, sub.yaml]\n"),
        ("a.yaml", "include: [main.yaml]\n"),
        ("sub.yaml", "server: {port: 1}\nproject: x\n"),
    ]);
    let text = errors_of(load_dir(dir.path(), &vars(&[])));
    assert!(text.contains("a.yaml:1:11: include cycle:"), "{text}");
    assert!(
        text.contains("main.yaml:1:19: include `")
            && text.contains("missing.yaml`: no such file or folder"),
        "{text}"
    );
    assert!(
        text.contains("sub.yaml:1:1: `server` is only allowed in the main config file"),
        "{text}"
    );
    assert!(
        text.contains("sub.yaml:2:1: `project` is only allowed"),
        "{text}"
    );
}

#[test]
#[cfg(unix)]
fn an_include_that_is_not_a_regular_file_is_an_error_not_a_hang() {
    let dir = tree(&[("main.yaml", "include: [/dev/zero]\n")]);
    let text = errors_of(load_dir(dir.path(), &vars(&[])));
    assert!(
        text.contains("main.yaml:1:11: `/dev/zero` is not a regular file"),
        "{text}"
    );
}

const PLACEHOLDERS: &str = "\
project: '{project_name}'
server: {port: '{port}'}
routing:
  failure: {path: '{failure_path}', compress: '{compress}'}
outbound:
  - name: out
    selector: [\"key == '{{literal}}'\"]
    class: redis_queue.RedisListOutbound
    init: {url: '{redis_url}', key: 'prefix:{queue}'}
    retry_limits: '{retries}'
";

#[test]
fn placeholders_fill_from_vars_files_and_environment() {
    let dir = tree(&[
        ("main.yaml", PLACEHOLDERS),
        (
            "vars.yaml",
            "port: 9000\nqueue: from_file\nretries: 4\ncompress: yes\n",
        ),
    ]);
    let mut v = Vars::new();
    v.load_file(&dir.path().join("vars.yaml"))
        .expect("var file");
    v.set("queue", "from_arg")
        .set("redis_url", "redis://:secret@127.0.0.1:6379/0")
        .set("project_name", "p");
    v.set("failure_path", "/tmp/{not_again}");
    let config = check(&[dir.path().join("main.yaml")], &v);
    // `{failure_path}` is filled with text that is itself not filled again.
    let config = config.expect("loads");
    assert_eq!(
        config
            .routing
            .failure
            .as_ref()
            .expect("failure")
            .path
            .to_str(),
        Some("/tmp/{not_again}")
    );
    assert_eq!(config.server.port, 9000);
    assert_eq!(config.project, "p");
    let out = config.outbound("out").expect("outbound");
    assert_eq!(out.settings.retry_limits, 4);
    assert!(config.routing.failure.as_ref().expect("failure").compress);
    assert_eq!(out.selector.selectors()[0].source(), "key == '{literal}'");
    // `--var` wins over the var file; the password never shows.
    assert_eq!(
        out.component().target(),
        "redis://:***@127.0.0.1:6379/0 list prefix:from_arg"
    );
}

#[test]
fn every_unfilled_placeholder_is_named() {
    let (_dir, result) = load(PLACEHOLDERS, &vars(&[("port", "1")]));
    let text = errors_of(result);
    for name in [
        "project_name",
        "failure_path",
        "compress",
        "redis_url",
        "queue",
        "retries",
    ] {
        assert!(
            text.contains(&format!("unfilled placeholder `{{{name}}}`")),
            "{name}: {text}"
        );
    }
    assert!(
        !text.contains("`{port}`") && !text.contains("literal"),
        "{text}"
    );
    // No follow-on errors about the values left unfilled.
    assert_eq!(text.lines().count(), 6, "{text}");
    assert!(
        text.contains(
            "main.yaml:9:17: unfilled placeholder `{redis_url}`: pass `--var redis_url=…`"
        ),
        "{text}"
    );
}

#[test]
fn environment_fills_placeholders_by_exact_or_upper_case_name() {
    let v = Vars::new();
    // Variables that the test process certainly has.
    let (_dir, result) = load("project: '{PATH}-{home}'\n", &v);
    let config = result.expect("PATH and HOME are set");
    assert!(config.project.contains('/'), "{}", config.project);
}

#[test]
fn seed_class_names_and_silk_names_are_known() {
    let (_dir, config) = load_ok(
        "\
inbound:
  - {name: h, class: http.HttpInbound}
  - {name: r, class: redis_queue.RedisListInbound, init: {url: 'redis://127.0.0.1:6379', key: k}, threads: 3}
  - {name: n, class: nats.JetStreamInbound, init: {url: 'nats://127.0.0.1:4222', stream: S}}
outbound:
  - {name: a, class: redis_queue.RedisListOutbound, init: {url: 'redis://127.0.0.1:6379', key: k}}
  - {name: b, class: nats.NatsOutbound, init: {url: 'nats://127.0.0.1:4222', subject: s}}
  - {name: c, class: http.HttpOutbound, init: {url: 'http://127.0.0.1:1/x'}}
",
    );
    assert_eq!(config.inbounds.len(), 3);
    assert_eq!(config.default_http_inbound(), Some(0));
    assert_eq!(config.inbound("r").expect("r").threads, 3);
}

#[test]
fn refused_classes_say_why() {
    let (_dir, result) = load(
        "\
inbound:
  - name: 'spider_log'
    class: 'kafka.KafkaInbound'
    init:
      consumer_settings: {bootstrap.servers: 'x', group.id: 'g'}
      topics: ['t']
  - {name: results, class: silk.RunResultsInbound}
outbound:
  - {name: job, class: silk.JobOutbound, init: {job: crawl}}
",
        &vars(&[]),
    );
    let text = errors_of(result);
    assert!(
        !text.contains("spider_log"),
        "kafka.KafkaInbound is a class of this build: {text}"
    );
    assert!(
        text.contains("inbound `results`: class `silk.RunResultsInbound` needs the Silk hub: run the router inside it (`silk up --router` or `silk hub --router`)"),
        "{text}"
    );
    assert!(
        text.contains("outbound `job`: class `silk.JobOutbound` needs the Silk hub: run the router inside it (`silk up --router` or `silk hub --router`)"),
        "{text}"
    );
    assert_eq!(
        text.lines().count(),
        2,
        "no follow-on errors about their init keys: {text}"
    );
}

#[test]
fn the_seed_config_verbatim_lacks_only_its_python_converts() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seed_verbatim.yaml");
    let v = vars(&[
        ("kafka_servers", "k:9092"),
        ("redis_url", "redis://127.0.0.1:6379/0"),
    ]);
    let text = errors_of(Config::load(&[path], &v));
    for convert in [
        "ic.ExtractTaskParams",
        "ic.CaptchaExtraItem",
        "ic.ChangeSearchKey",
        "ic.ParseSearchinfoItems",
        "ic.ParseNoticeItem",
    ] {
        assert!(
            text.contains(&format!("unknown convert class `{convert}`")),
            "{convert}: {text}"
        );
    }
    assert!(
        !text.contains("zongju_captcha_ts3"),
        "the seed's outbound is valid: {text}"
    );
    assert_eq!(text.lines().count(), 5, "{text}");
}

#[tokio::test]
async fn the_seed_config_with_its_python_converts_loads_and_every_class_instantiates() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut registry = silk_router::Registry::standard();
    registry.set_plugins_dir(examples().join("plugins"));
    let v = vars(&[
        ("kafka_servers", "k:9092"),
        ("redis_url", "redis://127.0.0.1:6379/0"),
    ]);
    let config = Config::load_with(&[root.join("seed_verbatim.yaml")], &v, &registry)
        .unwrap_or_else(|e| panic!("{e:?}"));
    config
        .verify_plugins()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(config.inbounds[0].class, "kafka.KafkaInbound");
    assert_eq!(config.inbounds[0].converts.len(), 6);
}

#[test]
fn bad_configs_each_get_a_clear_error_all_at_once() {
    let (_dir, result) = load(
        "\
project: p
inbound:
  - name: in
    class: http.HttpInbound
    selector:
      - \"rt\"
      - \"province in ['JS', 'TJ'\"
outbound:
  - name: a
    class: redis_queue.RedisListOutbund
    init: {url: 'redis://127.0.0.1', key: k}
  - name: dup
    class: test.MemoryOutbound
    init: {sink: s}
  - name: dup
    class: test.MemoryOutbound
    init: {sink: s}
    retry_limit: 3
  - name: c
    class: test.MemoryOutbound
    init: {sink: s}
    failback: nowhere
    selector: [\"a = 1\"]
  - name: d
    class: http.HttpOutbound
    init: {url: 'http://127.0.0.1:1'}
    max_lag: 10
  - name: e
    class: redis_queue.RedisListOutbound
    init: {url: 'redis://127.0.0.1', key: k}
    key: again
routing: {limits: many}
serverr: {}
",
        &vars(&[]),
    );
    let text = errors_of(result);
    let expect = [
        "main.yaml:7:9: inbound `in`: selector 2: column 24: expected `,` or `]`, found end of input",
        "main.yaml:10:12: outbound `a`: unknown outbound class `redis_queue.RedisListOutbund` (did you mean `redis_queue.RedisListOutbound`?)",
        "main.yaml:18:5: outbound `dup`: unknown key `retry_limit` (did you mean `retry_limits`?)",
        "main.yaml:23:16: outbound `c`: selector 1: column 3: assignment `=` is not supported (use `==` to compare)",
        "outbound `d`: `max_lag` needs a target whose backlog can be read",
        "outbound `e`: `key` is given twice",
        "main.yaml:32:19: `routing.limits`: expected an integer, found `many`",
        "main.yaml:33:1: unknown top-level key `serverr` (did you mean `server`?)",
    ];
    for e in expect {
        assert!(text.contains(e), "missing `{e}` in:\n{text}");
    }
    // Cross-rule errors come after the per-rule ones, once the rules are known.
    let text_fb = errors_of(
        load(
            "\
outbound:
  - {name: dup, class: test.MemoryOutbound, init: {sink: s}}
  - {name: dup, class: test.MemoryOutbound, init: {sink: s}, failback: nowhere}
  - {name: self, class: test.MemoryOutbound, init: {sink: s}, failback: self}
inbound:
  - {name: i, class: http.HttpInbound}
  - {name: i, class: http.HttpInbound}
",
            &vars(&[]),
        )
        .1,
    );
    assert!(
        text_fb.contains("main.yaml:3: duplicate outbound name `dup` (first at"),
        "{text_fb}"
    );
    assert!(
        text_fb.contains("main.yaml:7: duplicate inbound name `i` (first at"),
        "{text_fb}"
    );
    assert!(
        text_fb.contains("outbound `dup`: `failback` names no outbound: `nowhere`"),
        "{text_fb}"
    );
    assert!(
        text_fb.contains("outbound `self`: `failback` names the outbound itself"),
        "{text_fb}"
    );
}

#[test]
fn bad_yaml_names_the_line() {
    let (_dir, result) = load(
        "outbound:\n  - name: a\n    selector: [\"x\"\n  - name: b\n",
        &vars(&[]),
    );
    let text = errors_of(result);
    assert!(
        text.contains("main.yaml:") && text.contains("invalid YAML"),
        "{text}"
    );
    let (_dir, result) = load("outbound: {name: a}\n", &vars(&[]));
    assert!(
        errors_of(result).contains("main.yaml:1:11: `outbound`: expected a list, found a mapping")
    );
    let (_dir, result) = load("- just\n- a list\n", &vars(&[]));
    assert!(errors_of(result).contains("main.yaml:1:1: a config file is a mapping, found a list"));
}

#[test]
fn token_scopes_must_agree_and_warnings_are_kept() {
    let (_dir, result) = load(
        "\
outbound:
  - {name: a, class: test.MemoryOutbound, init: {sink: s}, token_scope: site, token_per_second: 5}
  - {name: b, class: test.MemoryOutbound, init: {sink: s}, token_scope: site, token_per_second: 7}
",
        &vars(&[]),
    );
    assert!(errors_of(result).contains("outbound `b`: `token_per_second` 7 differs from 5 of outbound `a`, which shares `token_scope` `site`"));
    let (_dir, config) = load_ok(
        "\
logging: {level: WARNING, handlers: {}}
outbound:
  - name: a
    class: test.MemoryOutbound
    init: {sink: s}
    direct_failback_status: [1]
    retry_limits: 1
    retry_limits: 2
",
    );
    assert_eq!(config.logging.level.as_deref(), Some("warn"));
    assert_eq!(config.outbound("a").expect("a").settings.retry_limits, 2);
    let warnings: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    let text = warnings.join("\n");
    assert!(text.contains("`logging.handlers` is ignored"), "{text}");
    assert!(
        text.contains("duplicate key `retry_limits` (also at line 7); the last one is used"),
        "{text}"
    );
    assert!(
        text.contains("`direct_failback_status` without `failback` has no effect"),
        "{text}"
    );
}
