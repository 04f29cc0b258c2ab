//! The one name/id/text rule and the timestamp parser every route validates with
//! (`queen_proto::name`, `queen_proto::time`), checked against their specification: a name
//! is accepted exactly when it is non-empty, at most `MAX_NAME_BYTES`, free of control
//! characters and of edge whitespace, and then kept verbatim; an id when it is short enough
//! and NUL-free; an accepted timestamp lies in the range PostgreSQL represents and survives
//! a render/parse round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use queen_proto::name::{check_id, check_text};
use queen_proto::scalar::Scalar;
use queen_proto::time::{accepted_range, iso_micros, parse_iso};
use queen_proto::wire::MAX_NAME_BYTES;
use queen_proto::Name;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        check_rules(text);
    }
    // Any JSON document in a name field: a string goes through the rule, null is absent,
    // anything else is refused.
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        let got = Name::from_json("consumerGroup", &Scalar::from(&v));
        match &v {
            Value::Null => assert_eq!(got, Ok(None)),
            Value::String(s) => assert_eq!(got, Name::optional("consumerGroup", Some(s))),
            _ => assert!(got.is_err()),
        }
    }
});

fn check_rules(text: &str) {
    let valid = !text.is_empty()
        && text.len() <= MAX_NAME_BYTES
        && !text.chars().any(char::is_control)
        && !text.starts_with(char::is_whitespace)
        && !text.ends_with(char::is_whitespace);
    match Name::parse("queue", text) {
        Ok(n) => {
            assert!(valid, "accepted {text:?}");
            assert_eq!(n.as_str(), text, "a name is kept verbatim");
        }
        Err(_) => assert!(!valid, "refused {text:?}"),
    }
    let id_ok = text.len() <= MAX_NAME_BYTES && !text.contains('\0');
    assert_eq!(check_id("transactionId", text).is_ok(), id_ok, "{text:?}");
    assert_eq!(check_text("error", text).is_ok(), !text.contains('\0'));
    if let Some(t) = parse_iso(text) {
        let (first, last) = accepted_range();
        assert!(first <= t && t <= last, "{text:?} → {t} out of range");
        let micros = t.timestamp_micros();
        let again = parse_iso(&iso_micros(micros)).expect("a rendered timestamp parses");
        assert_eq!(again.timestamp_micros(), micros, "{text:?} round trip");
    }
}
