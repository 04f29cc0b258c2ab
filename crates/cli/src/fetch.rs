//! `queen fetch QUEUE PARTITION`: a partition's stored messages from an offset (docs/wire.md
//! §23.1), one JSON line per record, without a lease or a cursor: no consumer group notices.
//! The partition's offsets (next, oldest kept) go to stderr, or into the `--json` answer.

use queen_client::reads::{FetchEntry, FetchError, Record};
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;

use crate::table::printable;
use crate::{print, print_json, CliError, Connection, Result};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  queen fetch orders customer-42 --offset 0\n  \
    queen fetch orders customer-42 --offset 1000 --max-bytes 65536 > page.ndjson"
)]
pub struct FetchArgs {
    pub queue: String,
    pub partition: String,
    /// The first offset to read.
    #[arg(long, default_value_t = 0)]
    pub offset: i64,
    /// Payload bytes to read (the broker's default is 1 MiB, its most 8 MiB); the first
    /// record always comes.
    #[arg(long)]
    pub max_bytes: Option<u64>,
    #[command(flatten)]
    pub conn: Connection,
}

/// One output line; the payload spliced in as stored.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    offset: i64,
    transaction_id: &'a str,
    message_id: &'a str,
    ts: &'a str,
    payload: &'a RawValue,
}

impl<'a> From<&'a Record> for Line<'a> {
    fn from(r: &'a Record) -> Self {
        Self {
            offset: r.offset,
            transaction_id: &r.transaction_id,
            message_id: &r.message_id,
            ts: &r.ts,
            payload: &r.payload,
        }
    }
}

pub async fn run(a: FetchArgs) -> Result<()> {
    let entry = FetchEntry {
        max_bytes: a.max_bytes,
        ..FetchEntry::new(&a.queue, &a.partition, a.offset)
    };
    let mut got = a
        .conn
        .client()
        .fetch(&[entry], None)
        .await
        .map_err(|e| a.conn.fail(e))?;
    let f = got
        .pop()
        .ok_or_else(|| CliError::Refused("an empty fetch answer".into()))?;
    let lines = f
        .records
        .iter()
        .map(|r| serde_json::to_value(Line::from(r)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| CliError::Refused(e.to_string()))?;
    if a.conn.json {
        print_json(&json!({"records": lines, "highWatermark": f.high_watermark,
                           "logStartOffset": f.log_start_offset,
                           "error": f.error.as_ref().map(error_code)}))?;
    } else {
        let mut out = String::new();
        for r in &f.records {
            let text = serde_json::to_string(&Line::from(r))
                .map_err(|e| CliError::Refused(e.to_string()))?;
            out.push_str(&text);
            out.push('\n');
        }
        print(&out)?;
        eprintln!(
            "{} records; next offset {}, oldest kept {}",
            f.records.len(),
            f.high_watermark,
            f.log_start_offset
        );
    }
    match &f.error {
        None => Ok(()),
        Some(FetchError::UnknownTopicOrPartition) => Err(CliError::NotApplied(format!(
            "no partition {} in queue {}",
            printable(&a.partition),
            printable(&a.queue)
        ))),
        Some(FetchError::OffsetOutOfRange) => Err(CliError::NotApplied(format!(
            "offset {} is out of range: the partition holds {} to {}",
            a.offset,
            f.log_start_offset,
            f.high_watermark - 1
        ))),
        Some(FetchError::Other(code)) => Err(CliError::NotApplied(printable(code))),
    }
}

fn error_code(e: &FetchError) -> &str {
    match e {
        FetchError::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
        FetchError::OffsetOutOfRange => "OFFSET_OUT_OF_RANGE",
        FetchError::Other(code) => code,
    }
}
