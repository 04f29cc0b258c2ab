//! Commands that change broker state: `configure` and `seek`.

use queen_client::SeekTarget;
use serde_json::{Map, Value};

use crate::table::cell;
use crate::{print, print_json, CliError, Connection, Result};

#[derive(Debug, clap::Args)]
pub struct ConfigureArgs {
    pub queue: String,
    /// Options as key=value (camelCase keys as in the HTTP API, e.g. leaseTime=60).
    #[arg(value_name = "KEY=VALUE")]
    pub options: Vec<String>,
    #[command(flatten)]
    pub conn: Connection,
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("target").required(true))]
pub struct SeekArgs {
    pub group: String,
    pub queue: String,
    /// Seek only this partition.
    #[arg(long)]
    pub partition: Option<String>,
    /// Skip everything stored now.
    #[arg(long, group = "target")]
    pub to_end: bool,
    /// Deliver again from the first message stored at or after this ISO-8601 instant.
    #[arg(long, group = "target", value_name = "ISO")]
    pub timestamp: Option<String>,
    #[command(flatten)]
    pub conn: Connection,
}

pub async fn configure(a: ConfigureArgs) -> Result<()> {
    let options = parse_options(&a.options)?;
    let echo = a
        .conn
        .client()
        .queue(&a.queue)
        .configure(Value::Object(options))
        .await
        .map_err(|e| a.conn.fail(e))?;
    if a.conn.json {
        return print_json(&echo);
    }
    let applied = echo
        .get("options")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k}={}", cell(v)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    print(&format!("configured {}  {applied}\n", a.queue))
}

/// `key=value` pairs; a value is JSON when it parses as JSON, else text.
fn parse_options(pairs: &[String]) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    for pair in pairs {
        let Some((key, raw)) = pair.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(CliError::Usage(format!(
                "option {pair:?} is not KEY=VALUE (e.g. leaseTime=60)"
            )));
        };
        let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.into()));
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

pub async fn seek(a: SeekArgs) -> Result<()> {
    let target = match &a.timestamp {
        Some(ts) => SeekTarget::Timestamp(ts.clone()),
        None => SeekTarget::End,
    };
    let answer = a
        .conn
        .client()
        .seek(&a.group, &a.queue, a.partition.as_deref(), &target)
        .await
        .map_err(|e| a.conn.fail(e))?;
    if a.conn.json {
        return print_json(&answer);
    }
    print(&format!(
        "group {} on {}: {} partitions moved\n",
        a.group,
        a.queue,
        cell(&answer["partitionsUpdated"])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn option_values_are_json_when_they_parse() {
        let pairs = [
            "leaseTime=60",
            "dlqAfterMaxRetries=true",
            "namespace=billing",
        ];
        let pairs: Vec<String> = pairs.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            Value::Object(parse_options(&pairs).unwrap()),
            json!({"leaseTime": 60, "dlqAfterMaxRetries": true, "namespace": "billing"})
        );
    }

    #[test]
    fn an_option_without_a_key_is_a_usage_error() {
        for bad in ["leaseTime", "=5"] {
            let err = parse_options(&[bad.to_string()]).unwrap_err();
            assert!(matches!(err, CliError::Usage(_)), "{bad}: {err}");
        }
    }
}
