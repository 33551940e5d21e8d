//! Property tests of URL canonicalisation: idempotence, and variants collapsing to one key.

use proptest::prelude::*;
use silk_core::canon::{CanonRules, canonicalize_str};

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_~.-]{0,8}",
        Just("..".to_string()),
        Just(".".to_string()),
        "%[0-9a-fA-F]{2}",
        "[a-z]{1,4}%[0-9a-fA-F]{2}[a-z]{0,3}",
        "[a-z]{1,4};jsessionid=[A-Z0-9]{3}",
        "[a-z]{1,3};v=[0-9]",
        "[a-zé€ ]{1,4}",
    ]
}

fn param() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,4}=[a-zA-Z0-9%]{0,5}",
        "utm_[a-z]{1,6}=[a-z]{1,3}",
        Just("fbclid=x".to_string()),
        Just("_=123".to_string()),
        "[a-z]{1,3}",
        Just(String::new()),
    ]
}

fn url() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("http"), Just("HTTP"), Just("https"), Just("HtTpS")],
        "[a-zA-Z]{1,6}(\\.[a-zA-Z]{1,4}){0,2}\\.?",
        prop_oneof![
            Just(String::new()),
            Just(":80".to_string()),
            Just(":443".to_string()),
            "(:[0-9]{2,5})"
        ],
        prop::collection::vec(segment(), 0..6),
        prop::option::of(prop::collection::vec(param(), 0..6)),
        prop::option::of("[a-z0-9]{0,5}"),
    )
        .prop_map(|(scheme, host, port, segs, query, frag)| {
            let mut s = format!("{scheme}://{host}{port}/{}", segs.join("/"));
            if let Some(q) = query {
                s.push('?');
                s.push_str(&q.join("&"));
            }
            if let Some(f) = frag {
                s.push('#');
                s.push_str(&f);
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn canonicalisation_is_idempotent(raw in url()) {
        let rules = CanonRules::default();
        if let Ok(once) = canonicalize_str(&raw, None, &rules) {
            let twice = canonicalize_str(once.as_str(), None, &rules).expect("a canonical url parses");
            prop_assert_eq!(once.as_str(), twice.as_str(), "input {}", raw);
        }
    }

    #[test]
    fn tracking_and_fragment_variants_collapse(path in "[a-z0-9]{1,8}", id in 0u32..1000, tag in "[a-z]{1,6}") {
        let rules = CanonRules::default();
        let plain = canonicalize_str(&format!("http://h.test/{path}?id={id}"), None, &rules).unwrap();
        let variants = [
            format!("HTTP://H.TEST:80/{path}?id={id}#{tag}"),
            format!("http://h.test/{path}?utm_source={tag}&id={id}&utm_medium=x"),
            format!("http://h.test/./{path};jsessionid={tag}?fbclid={tag}&id={id}"),
            format!("http://h.test/x/../{path}?gclid=1&_={id}&id={id}&callback={tag}"),
        ];
        for v in variants {
            let c = canonicalize_str(&v, None, &rules).unwrap();
            prop_assert_eq!(c.as_str(), plain.as_str(), "variant {}", v);
        }
    }
}
