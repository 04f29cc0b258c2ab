//! What can end a command, and the exit code each means: 1 the broker refused (or answered a
//! verdict that did not apply), 2 the command line or its input is wrong, 3 the broker could
//! not be reached.

use std::process::ExitCode;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The broker answered, with a refusal or an answer we cannot read.
    #[error("the broker refused: {0}")]
    Refused(String),
    /// The broker answered a verdict that did not apply: a miss, a lost precondition, a
    /// lock held by another, a timer already gone.
    #[error("{0}")]
    NotApplied(String),
    /// The arguments or the input are wrong; nothing (more) was sent.
    #[error("{0}")]
    Usage(String),
    /// No answer from the broker at all.
    #[error("cannot reach the broker at {url}: {cause} (is `queen serve` running there? set --url or QUEEN_URL)")]
    Unreachable { url: String, cause: String },
    /// Writing our own output failed (a closed pipe ends the command quietly).
    #[error("output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// Classifies an SDK error: transport failures mean unreachable, the rest refusals; an
    /// auth refusal says how to send a (better) token.
    pub fn from_client(url: &str, e: queen_client::Error) -> Self {
        match e {
            queen_client::Error::Transport(t) => Self::Unreachable {
                url: url.to_string(),
                cause: t.to_string(),
            },
            queen_client::Error::Api {
                status, message, ..
            } if status.as_u16() == 401 => Self::Refused(format!(
                "HTTP {status}: {message} (the broker has auth on: pass a JWT it accepts \
                     with --token or QUEEN_TOKEN)"
            )),
            queen_client::Error::Api {
                status, message, ..
            } if status.as_u16() == 403 => Self::Refused(format!(
                "HTTP {status}: {message} (pass a token of that role with --token or \
                     QUEEN_TOKEN)"
            )),
            other => Self::Refused(other.to_string()),
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        match self {
            Self::Refused(_) | Self::NotApplied(_) => ExitCode::from(1),
            Self::Usage(_) => ExitCode::from(2),
            Self::Unreachable { .. } => ExitCode::from(3),
            Self::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Self::Output(_) => ExitCode::from(1),
        }
    }
}

pub type Result<T, E = CliError> = std::result::Result<T, E>;
