//! Read-only views: `queues`, `queue`, `stats` (`dlq` has its own module). Each prints the
//! broker's JSON with `--json`, else a table of the fields an operator looks at first.

use serde_json::Value;

use crate::table::{cell, render};
use crate::{print, print_json, Connection, Result};

#[derive(Debug, clap::Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    pub conn: Connection,
}

#[derive(Debug, clap::Args)]
pub struct QueueArgs {
    pub queue: String,
    /// Partitions shown in the table, those with the most pending messages first.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    #[command(flatten)]
    pub conn: Connection,
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub conn: Connection,
}

pub async fn queues(a: QueuesArgs) -> Result<()> {
    let v = a.conn.client().queues().await.map_err(|e| a.conn.fail(e))?;
    if a.conn.json {
        return print_json(&v);
    }
    let list = v.get("queues").unwrap_or(&v);
    let rows: Vec<Vec<String>> = as_list(list)
        .iter()
        .map(|q| {
            let m = &q["messages"];
            vec![
                cell(&q["name"]),
                cell(&q["partitions"]),
                cell(&m["total"]),
                cell(&m["pending"]),
                cell(&m["processing"]),
                cell(&m["deadLetter"]),
                cell(&q["namespace"]),
                cell(&q["task"]),
            ]
        })
        .collect();
    let header = [
        "QUEUE",
        "PARTITIONS",
        "TOTAL",
        "PENDING",
        "PROCESSING",
        "DLQ",
        "NAMESPACE",
        "TASK",
    ];
    print(&render(&header, &rows))
}

pub async fn queue(a: QueueArgs) -> Result<()> {
    let info = a
        .conn
        .client()
        .queue_info(&a.queue)
        .await
        .map_err(|e| a.conn.fail(e))?;
    if a.conn.json {
        return print_json(&info);
    }
    let m = &info["messages"];
    // The detail answer lists the partitions where the listing counts them.
    let partitions = as_list(&info["partitions"]).len();
    let mut out = format!(
        "queue {}  partitions {partitions}  total {}  pending {}  processing {}  dlq {}\n",
        cell(&info["name"]),
        cell(&m["total"]),
        cell(&m["pending"]),
        cell(&m["processing"]),
        cell(&m["deadLetter"]),
    );
    if let Some(config) = info["config"].as_object() {
        let pairs: Vec<String> = config.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!("options  {}\n", pairs.join(" ")));
    }
    out.push('\n');
    out.push_str(&partitions_table(&info["partitions"], a.top));
    out.push('\n');
    let groups: Vec<Vec<String>> = as_list(&info["consumerGroups"])
        .iter()
        .map(|g| {
            vec![
                cell(&g["name"]),
                cell(&g["pending"]),
                cell(&g["activeLeases"]),
            ]
        })
        .collect();
    out.push_str(&render(&["GROUP", "PENDING", "LEASES"], &groups));
    print(&out)
}

/// The `top` partitions with the most pending messages, and how many were left out.
fn partitions_table(partitions: &Value, top: usize) -> String {
    let mut list: Vec<&Value> = as_list(partitions).iter().collect();
    let pending = |p: &Value| p["messages"]["pending"].as_i64().unwrap_or(0);
    list.sort_by_key(|p| std::cmp::Reverse(pending(p)));
    let rows: Vec<Vec<String>> = list
        .iter()
        .take(top)
        .map(|p| {
            let m = &p["messages"];
            vec![
                cell(&p["name"]),
                cell(&p["id"]),
                cell(&m["pending"]),
                cell(&m["processing"]),
                cell(&p["lastOffset"]),
                cell(&p["lastActivity"]),
            ]
        })
        .collect();
    let header = [
        "PARTITION",
        "ID",
        "PENDING",
        "PROCESSING",
        "LAST OFFSET",
        "LAST ACTIVITY",
    ];
    let mut out = render(&header, &rows);
    if list.len() > top {
        out.push_str(&format!(
            "… {} more partitions (--top N, or --json)\n",
            list.len() - top
        ));
    }
    out
}

pub async fn stats(a: StatsArgs) -> Result<()> {
    let client = a.conn.client();
    let overview = client.overview().await.map_err(|e| a.conn.fail(e))?;
    let metrics = client.metrics().await.map_err(|e| a.conn.fail(e))?;
    if a.conn.json {
        return print_json(&serde_json::json!({ "overview": overview, "metrics": metrics }));
    }
    let m = &overview["messages"];
    let rows = vec![
        vec!["queues".into(), cell(&overview["queues"])],
        vec!["partitions".into(), cell(&overview["partitions"])],
        vec!["consumer groups".into(), cell(&overview["consumerGroups"])],
        vec!["messages".into(), cell(&m["total"])],
        vec!["pending".into(), cell(&m["pending"])],
        vec!["processing".into(), cell(&m["processing"])],
        vec!["dead letters".into(), cell(&m["deadLetter"])],
        vec!["uptime (s)".into(), cell(&metrics["uptime"])],
        vec!["requests".into(), cell(&metrics["requests"]["total"])],
        vec!["request rate".into(), cell(&metrics["requests"]["rate"])],
        vec!["pool size".into(), cell(&metrics["database"]["poolSize"])],
        vec![
            "pool waiting".into(),
            cell(&metrics["database"]["waitingRequests"]),
        ],
    ];
    print(&render(&["", ""], &rows))
}

/// A JSON array's elements (an absent or non-array value is an empty list).
pub(crate) fn as_list(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}
