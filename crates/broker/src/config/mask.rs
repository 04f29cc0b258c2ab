//! Secrets of the configuration kept out of what the broker prints: [`mask_dsn`] hides the
//! passwords of a PostgreSQL connection string in every form `DATABASE_URL` accepts (URL
//! userinfo, a `password` query parameter, `key=value` pairs) for the boot log, and
//! [`KeyParser`] reads `QUEEN_ENCRYPTION_KEY` so that a malformed key is refused without
//! being echoed (clap's own parsers repeat the value in their error).

use std::ffi::OsStr;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

use super::EncryptionKey;

/// What replaces a password.
const MASK: &str = "****";

/// Connection-string keys whose values are secrets (libpq's names).
fn secret_key(key: &str) -> bool {
    matches!(
        key.trim().to_ascii_lowercase().as_str(),
        "password" | "sslpassword"
    )
}

/// `dsn` with every password replaced by `****`: a URL's `user:password@`, its `password=` /
/// `sslpassword=` query parameters, or the values of those keys in the `key=value` form
/// (quoted values included). Text that is none of these is returned unchanged.
pub fn mask_dsn(dsn: &str) -> String {
    match dsn.find("://") {
        Some(scheme_end) => mask_url(dsn, scheme_end),
        None => mask_pairs(dsn),
    }
}

fn mask_url(url: &str, scheme_end: usize) -> String {
    let (head, rest) = url.split_at(scheme_end + 3);
    let (rest, query) = match rest.find('?') {
        Some(q) => (&rest[..q], Some(&rest[q + 1..])),
        None => (rest, None),
    };
    let mut out = head.to_string();
    // The userinfo ends at the last `@` of the authority (a password may contain `@`).
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push(':');
                    out.push_str(MASK);
                }
                None => out.push_str(userinfo),
            }
            out.push_str(&rest[at..]);
        }
        None => out.push_str(rest),
    }
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((k, _)) if secret_key(k) => format!("{k}={MASK}"),
                _ => param.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

/// The `key=value key='quoted value'` form: secret values are masked, the rest kept as is.
fn mask_pairs(dsn: &str) -> String {
    let mut out = String::with_capacity(dsn.len());
    let mut chars = dsn.char_indices().peekable();
    let mut key_start = 0;
    while let Some((i, c)) = chars.next() {
        if c != '=' {
            continue;
        }
        let key = dsn[key_start..i]
            .trim_end()
            .rsplit(char::is_whitespace)
            .next()
            .unwrap_or("");
        out.push_str(&dsn[key_start..=i]);
        // Skip spaces after `=`, then read the value (quoted with `\` escapes, or bare).
        while let Some(&(_, ' ')) = chars.peek() {
            out.push(' ');
            chars.next();
        }
        let mut value = String::new();
        let mut end = dsn.len();
        if let Some(&(_, '\'')) = chars.peek() {
            chars.next();
            value.push('\'');
            let mut escaped = false;
            for (j, c) in chars.by_ref() {
                value.push(c);
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '\'' {
                    end = j + 1;
                    break;
                }
            }
        } else {
            while let Some(&(j, c)) = chars.peek() {
                if c.is_whitespace() {
                    end = j;
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push_str(if secret_key(key) { MASK } else { &value });
        key_start = end;
    }
    out.push_str(&dsn[key_start.min(dsn.len())..]);
    out
}

/// Reads `QUEEN_ENCRYPTION_KEY` / `--encryption-key`. Its refusal names the setting and what
/// it needs, never the value given (which may be a real key with a typo).
#[derive(Clone, Copy, Debug)]
pub struct KeyParser;

impl TypedValueParser for KeyParser {
    type Value = EncryptionKey;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<EncryptionKey, clap::Error> {
        let parsed = match value.to_str() {
            Some(text) => EncryptionKey::from_hex(text),
            None => Err("QUEEN_ENCRYPTION_KEY must be 64 hex digits: not UTF-8".to_string()),
        };
        parsed.map_err(|e| {
            clap::Error::raw(
                ErrorKind::ValueValidation,
                format!("{e} (the value given is not shown)\n"),
            )
            .with_cmd(cmd)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_passwords_are_masked() {
        for (dsn, shown) in [
            (
                "postgresql://u:secret@h:5432/db",
                "postgresql://u:****@h:5432/db",
            ),
            ("postgresql://u@h/db", "postgresql://u@h/db"),
            ("postgres://u:p@ss@h/db", "postgres://u:****@h/db"),
            (
                "postgresql://h/db?user=u&password=secret&sslmode=require",
                "postgresql://h/db?user=u&password=****&sslmode=require",
            ),
            (
                "postgresql://u:a@h/db?sslpassword=b",
                "postgresql://u:****@h/db?sslpassword=****",
            ),
            (
                "postgresql://h/db?application_name=x@y",
                "postgresql://h/db?application_name=x@y",
            ),
        ] {
            assert_eq!(mask_dsn(dsn), shown, "{dsn}");
        }
    }

    #[test]
    fn key_value_passwords_are_masked() {
        for (dsn, shown) in [
            (
                "host=h user=u password=secret dbname=d",
                "host=h user=u password=**** dbname=d",
            ),
            ("password=secret", "password=****"),
            (
                "host=h password = 'se cret\\' x' dbname=d",
                "host=h password = **** dbname=d",
            ),
            (
                "host=h PASSWORD='s' sslpassword=t",
                "host=h PASSWORD=**** sslpassword=****",
            ),
            ("host=h user=u", "host=h user=u"),
        ] {
            let masked = mask_dsn(dsn);
            assert_eq!(masked, shown, "{dsn}");
            assert!(!masked.contains("secret") && !masked.contains("cret"));
        }
    }
}
