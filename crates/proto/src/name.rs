//! The one rule for the strings a client names things with, applied at the edge of every
//! route (paths, query strings, JSON and binary bodies) so that what is accepted is exactly
//! what is stored, looked up and answered back.
//!
//! - A [`Name`] (queue, partition, consumer group, namespace, task) is non-empty, at most
//!   [`MAX_NAME_BYTES`] UTF-8 bytes, has no control character (NUL included: PostgreSQL text
//!   cannot hold it, and control characters are key separators internally) and no leading or
//!   trailing whitespace (a name is never trimmed anywhere, so `" g"` and `"g"` would be two
//!   groups that look alike; refusing it keeps every route agreeing on the name).
//! - An [`check_id`] identifier (transactionId, leaseId, trace name) is opaque: any text of at
//!   most [`MAX_NAME_BYTES`] bytes without NUL.
//! - Free text (a nack reason) only has to be storable: no NUL ([`check_text`]).

use std::fmt;
use std::ops::Deref;

use thiserror::Error;

use crate::scalar::Scalar;
use crate::wire::MAX_NAME_BYTES;

/// Why a client string was refused; `field` is the request field it came from.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NameError {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is {len} bytes long; the limit is {MAX_NAME_BYTES}")]
    TooLong { field: &'static str, len: usize },
    #[error("{field} contains control characters")]
    Control { field: &'static str },
    #[error("{field} contains a NUL character")]
    Nul { field: &'static str },
    #[error("{field} must not start or end with whitespace")]
    EdgeSpace { field: &'static str },
    #[error("{field} must not contain whitespace")]
    Whitespace { field: &'static str },
    #[error("{field} must be a string")]
    NotAString { field: &'static str },
}

/// A validated name; derefs to `str`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name(String);

impl Name {
    /// Checks `text` against the name rule, naming `field` in the refusal.
    pub fn parse(field: &'static str, text: &str) -> Result<Name, NameError> {
        if text.is_empty() {
            return Err(NameError::Empty { field });
        }
        check_len(field, text)?;
        if text.chars().any(char::is_control) {
            return Err(NameError::Control { field });
        }
        if text.starts_with(char::is_whitespace) || text.ends_with(char::is_whitespace) {
            return Err(NameError::EdgeSpace { field });
        }
        Ok(Name(text.to_string()))
    }

    /// An optional name: absent or empty is `None` (the route's default applies).
    pub fn optional(field: &'static str, text: Option<&str>) -> Result<Option<Name>, NameError> {
        match text {
            None | Some("") => Ok(None),
            Some(t) => Name::parse(field, t).map(Some),
        }
    }

    /// An optional name from a JSON value: absent, `null` or `""` is `None`; any other
    /// non-string is refused rather than read as absent.
    pub fn from_json(field: &'static str, value: &Scalar<'_>) -> Result<Option<Name>, NameError> {
        match value {
            Scalar::Null => Ok(None),
            Scalar::Str(s) => Name::optional(field, Some(s)),
            Scalar::Bool(_) | Scalar::Int(_) | Scalar::Other => {
                Err(NameError::NotAString { field })
            }
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An opaque identifier (transactionId, leaseId, trace name): at most [`MAX_NAME_BYTES`]
/// bytes, no NUL.
pub fn check_id(field: &'static str, text: &str) -> Result<(), NameError> {
    check_len(field, text)?;
    check_text(field, text)
}

/// Free text that is stored (a nack reason): no NUL.
pub fn check_text(field: &'static str, text: &str) -> Result<(), NameError> {
    if text.contains('\0') {
        return Err(NameError::Nul { field });
    }
    Ok(())
}

fn check_len(field: &'static str, text: &str) -> Result<(), NameError> {
    if text.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong {
            field,
            len: text.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        assert_eq!(
            Name::parse("queue", "billing.v2").map(|n| n.into_string()),
            Ok("billing.v2".into())
        );
        assert_eq!(
            Name::parse("queue", "with inner space").map(|n| n.len()),
            Ok(16)
        );
        let max = "é".repeat(MAX_NAME_BYTES / 2);
        assert!(Name::parse("queue", &max).is_ok());
        for (text, err) in [
            ("", NameError::Empty { field: "f" }),
            ("a\0b", NameError::Control { field: "f" }),
            ("a\nb", NameError::Control { field: "f" }),
            (" g", NameError::EdgeSpace { field: "f" }),
            ("g\u{a0}", NameError::EdgeSpace { field: "f" }),
        ] {
            assert_eq!(Name::parse("f", text), Err(err), "{text:?}");
        }
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        assert!(
            matches!(Name::parse("f", &long), Err(NameError::TooLong { len, .. }) if len == long.len())
        );
    }

    #[test]
    fn json_names() {
        let from = |v: serde_json::Value| Name::from_json("g", &Scalar::from(&v));
        assert_eq!(Name::from_json("g", &Scalar::Null), Ok(None));
        assert_eq!(from(json!(null)), Ok(None));
        assert_eq!(from(json!("")), Ok(None));
        assert_eq!(
            from(json!("x")).map(|n| n.map(Name::into_string)),
            Ok(Some("x".into()))
        );
        for bad in [
            json!(1),
            json!(1.5),
            json!(true),
            json!(["g"]),
            json!({"g": 1}),
        ] {
            assert_eq!(from(bad), Err(NameError::NotAString { field: "g" }));
        }
        assert!(from(json!(" g")).is_err());
    }

    #[test]
    fn ids_and_text() {
        assert!(check_id("transactionId", " any\ttext ").is_ok());
        assert_eq!(
            check_id("transactionId", "a\0"),
            Err(NameError::Nul {
                field: "transactionId"
            })
        );
        assert!(check_id("leaseId", &"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(check_text("error", &"x".repeat(MAX_NAME_BYTES + 1)).is_ok());
        assert!(check_text("error", "\0").is_err());
    }
}
