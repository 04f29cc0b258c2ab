//! The broker's log output (docs/wire.md §15, "Logs"): `LOG_FORMAT=text` (human-readable
//! lines) or `json` (one JSON object per line, its fields at the top level), filtered by
//! `LOG_LEVEL` (or `RUST_LOG`, which wins), on stdout. Colours only when stdout is a terminal:
//! a log redirected to a file or a collector carries no escape sequences.

use std::io::IsTerminal;

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the process's subscriber: `format` on stdout, colours if stdout is a terminal.
/// A filter that does not parse falls back to `info` (and says so).
pub fn init(format: LogFormat, level: &str) {
    let wanted = std::env::var("RUST_LOG").unwrap_or_else(|_| level.to_string());
    let (filter, bad) = match EnvFilter::try_new(&wanted) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let ansi = std::io::stdout().is_terminal();
    tracing::subscriber::set_global_default(subscriber(format, filter, ansi, std::io::stdout))
        .expect("the log subscriber is installed once, at boot");
    if let Some(e) = bad {
        tracing::warn!(filter = %wanted, error = %e, "log filter not understood; using info");
    }
}

/// A subscriber writing `format` lines through `writer`, with ANSI colours only if `ansi`.
pub fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    ansi: bool,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(lines.finish()),
        LogFormat::Json => Box::new(lines.json().flatten_event(true).finish()),
    }
}
