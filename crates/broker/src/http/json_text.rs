//! JSON written by hand into one buffer, for the answers with an element per message (pop,
//! push, ack): keys are literals, strings are escaped by serde_json, integers by itoa. serde's
//! derive escapes every key of every element again, which was most of what a push or ack
//! answer of 100 elements cost the broker.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// `s` as a JSON string.
pub fn str(out: &mut Vec<u8>, s: &str) {
    value(out, s);
}

/// `v` as JSON, through serde.
pub fn value<T: Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    serde_json::to_writer(out, v).expect("writing JSON to a Vec cannot fail");
}

pub fn int<I: itoa::Integer>(out: &mut Vec<u8>, n: I) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

pub fn bool(out: &mut Vec<u8>, b: bool) {
    out.extend_from_slice(if b { b"true" } else { b"false" });
}

/// `s` as a JSON string, or `null`.
pub fn opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// A JSON array of `items`, each written by `write`.
pub fn array<T>(items: &[T], per_item: usize, write: impl Fn(&mut Vec<u8>, &T)) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + items.len() * per_item);
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write(&mut out, item);
    }
    out.push(b']');
    out
}

/// A response with a JSON body written here.
pub fn response(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
