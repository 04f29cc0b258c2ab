//! The broker's log output (docs/wire.md §15, "Logs"): `LOG_FORMAT=json` writes one JSON
//! object per line, text is the default, and neither carries ANSI escapes when stdout is not a
//! terminal; each request is logged at debug level with method, route, status and duration.
//! The formatter is checked directly, then through `queen serve` children (on databases of the
//! harness's cluster) whose stdout is a pipe.

use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use queen_broker::config::LogFormat;
use queen_broker::logging;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio_postgres::config::Host;
use tracing_subscriber::EnvFilter;

use crate::common;
use crate::common::free_port;

const ESC: u8 = 0x1b;

/// A `MakeWriter` appending to a shared buffer.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'w> tracing_subscriber::fmt::MakeWriter<'w> for Captured {
    type Writer = Captured;
    fn make_writer(&'w self) -> Captured {
        self.clone()
    }
}

/// What `format` writes for one info and one debug event (the filter lets both through).
fn written(format: LogFormat) -> String {
    let out = Captured::default();
    let subscriber = logging::subscriber(format, EnvFilter::new("debug"), false, out.clone());
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(queue = "orders", "config: listen=x");
        tracing::debug!(
            method = "GET",
            route = "/health",
            status = 200u16,
            "request"
        );
    });
    let bytes = out.0.lock().unwrap().clone();
    String::from_utf8(bytes).expect("utf-8 log")
}

#[test]
fn json_format_writes_one_object_per_line() {
    let text = written(LogFormat::Json);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["level"], "INFO");
    assert_eq!(lines[0]["message"], "config: listen=x");
    assert_eq!(lines[0]["queue"], "orders");
    assert_eq!(lines[1]["level"], "DEBUG");
    assert_eq!(lines[1]["route"], "/health");
    assert_eq!(lines[1]["status"], 200);
    assert!(lines[0]["timestamp"].is_string());
}

#[test]
fn text_format_has_no_escapes_without_a_terminal() {
    let text = written(LogFormat::Text);
    assert!(!text.as_bytes().contains(&ESC), "{text:?}");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("request") && text.contains("route=\"/health\""),
        "{text}"
    );
}

/// Runs `queen serve` on a fresh database with `log_format` (None: the default), makes a few
/// requests, stops it with SIGTERM and returns its whole stdout.
async fn serve_and_capture(log_format: Option<&str>) -> Vec<u8> {
    let pg = common::fresh_database().await;
    let Host::Unix(socket_dir) = &pg.get_hosts()[0] else {
        panic!("the harness cluster listens on a Unix socket");
    };
    let port = free_port();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_queen"));
    cmd.arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PG_HOST", socket_dir)
        .env("PG_PORT", pg.get_ports()[0].to_string())
        .env("PG_USER", pg.get_user().expect("user"))
        .env("PG_DB", pg.get_dbname().expect("database"))
        .env("HOST", "127.0.0.1")
        .env("PORT", port.to_string())
        .env("LOG_LEVEL", "info,queen_broker=debug")
        .env("FILE_BUFFER_DIR", common::scratch_spool_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if let Some(format) = log_format {
        cmd.env("LOG_FORMAT", format);
    }
    let mut child = cmd.spawn().expect("spawn queen serve");
    // Read stdout as it comes: a full pipe would stall the broker.
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).await.expect("read stdout");
        out
    });
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let up = http.get(format!("{base}/health")).send().await;
        if up.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queen serve never became healthy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let missing = http
        .get(format!("{base}/api/v1/resources/queues/no-such-queue"))
        .send()
        .await
        .expect("GET a missing queue");
    assert_eq!(missing.status(), 404);
    let pid = child.id().expect("pid") as libc::pid_t;
    // SAFETY: signalling our own child, which is still running (not yet waited for).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("queen serve stopped within 30 s of SIGTERM")
        .expect("wait");
    assert!(status.success(), "queen serve exited with {status}");
    reader.await.expect("stdout reader")
}

/// The request line of `route` among JSON lines.
fn request_line<'a>(lines: &'a [Value], route: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["message"] == "request" && l["route"] == route)
        .unwrap_or_else(|| panic!("no request line for {route}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queen_serve_logs_json_lines_and_no_escapes_into_a_pipe() {
    let (json, text) = tokio::join!(serve_and_capture(Some("json")), serve_and_capture(None));

    assert!(!json.contains(&ESC), "an escape byte in the JSON log");
    let json = String::from_utf8(json).expect("utf-8 log");
    let lines: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let config = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("config:"))
        })
        .expect("the configuration is echoed");
    assert!(config["message"]
        .as_str()
        .unwrap()
        .contains("log_format=json"));
    let health = request_line(&lines, "/health");
    assert_eq!(health["level"], "DEBUG");
    assert_eq!(health["method"], "GET");
    assert_eq!(health["status"], 200);
    assert!(health["duration_ms"].as_f64().is_some_and(|d| d >= 0.0));
    let missing = request_line(&lines, "/api/v1/resources/queues/:queue");
    assert_eq!(missing["status"], 404);

    assert!(!text.contains(&ESC), "an escape byte in the text log");
    let text = String::from_utf8(text).expect("utf-8 log");
    assert!(text.contains("log_format=text"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("request") && l.contains("route=\"/health\"")),
        "{text}"
    );
}
