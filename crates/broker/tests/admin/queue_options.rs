//! The table of queue options (`src/queue_options.rs`) is the one list of them: the parser,
//! the echo and the `/configure` defaults are driven from it, and these tests hold the two
//! things it cannot drive to it. The applied schema: every column of `queen.queues` but the
//! queue's identity is an option of the table, with the table's type and column default, and
//! every option of the table is a column. docs/wire.md §3.2: its table of options names
//! exactly the table's options, each with its column and its `/configure` default. An option
//! added, renamed or re-defaulted on one side only fails here.

use std::collections::{BTreeMap, BTreeSet};

use queen_broker::queue_options::OPTIONS;
use serde_json::Value;

use crate::common;

/// The columns of `queen.queues` that are not options: the queue's identity.
const IDENTITY: &[&str] = &["id", "name", "tenant_id", "created_at"];

#[tokio::test]
async fn every_option_column_is_in_the_table_with_its_type_and_default() {
    let b = common::broker().await;
    let db = b.sql().await;
    let columns: BTreeMap<String, String> = db
        .query(
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_schema = 'queen' AND table_name = 'queues'",
            &[],
        )
        .await
        .expect("columns")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .filter(|(name, _): &(String, String)| !IDENTITY.contains(&name.as_str()))
        .collect();
    let listed: BTreeMap<String, String> = OPTIONS
        .iter()
        .map(|o| (o.column.to_string(), o.sql_type().to_string()))
        .collect();
    assert_eq!(
        columns, listed,
        "the option columns of queen.queues (left) and the table of src/queue_options.rs \
         (right) differ: a column needs its row in the table, a row its migration"
    );

    // What implicit creation gets: the column defaults.
    let row: Value = db
        .query_one(
            "INSERT INTO queen.queues (name) VALUES ('implicit') RETURNING to_jsonb(queues.*)",
            &[],
        )
        .await
        .expect("insert")
        .get(0);
    for o in OPTIONS {
        assert_eq!(
            row[o.column],
            o.implicit.to_json(),
            "column default of {} differs from the table's",
            o.column
        );
    }
}

#[tokio::test]
async fn configure_defaults_come_from_the_table() {
    let b = common::broker().await;
    let (status, out) = b
        .post(
            "/api/v1/configure",
            &serde_json::json!({"queue": "fresh", "options": {"priority": 4}}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{out}");
    let (status, reset) = b
        .post(
            "/api/v1/configure",
            &serde_json::json!({"queue": "fresh", "replace": true}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::OK, "{reset}");
    for o in OPTIONS {
        let echoed = if o.echoed() {
            &reset["options"][o.wire]
        } else {
            &reset[o.wire]
        };
        assert_eq!(*echoed, o.default.to_json(), "{}", o.wire);
        if o.wire != "priority" {
            let first = if o.echoed() {
                &out["options"][o.wire]
            } else {
                &out[o.wire]
            };
            assert_eq!(*first, o.default.to_json(), "created: {}", o.wire);
        }
    }
    assert_eq!(out["options"]["priority"], 4);
    let echoed: BTreeSet<&str> = reset["options"]
        .as_object()
        .expect("options")
        .keys()
        .map(String::as_str)
        .collect();
    let listed: BTreeSet<&str> = OPTIONS
        .iter()
        .filter(|o| o.echoed())
        .map(|o| o.wire)
        .collect();
    assert_eq!(echoed, listed, "the echo is the table's");
}

/// The rows of docs/wire.md §3.2's table: `(wire names, columns, default cell)`.
fn documented() -> Vec<(Vec<String>, Vec<String>, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/wire.md");
    let text = std::fs::read_to_string(path).expect("docs/wire.md");
    let section = text
        .split("\n### 3.2 Options\n")
        .nth(1)
        .expect("wire.md has §3.2 Options");
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (ticked(cells[1]), ticked(cells[2]), cells[3].to_string())
        })
        .collect()
}

#[test]
fn wire_md_documents_every_option_with_its_column_and_default() {
    let mut seen = BTreeSet::new();
    for (wires, columns, default) in documented() {
        assert_eq!(wires.len(), columns.len(), "row of {wires:?}");
        // The cell opens with the default, perhaps in bold or backticks.
        let first = default.replace(['*', '`'], "");
        let first = first.split_whitespace().next().unwrap_or_default();
        for (wire, column) in wires.iter().zip(&columns) {
            let option = OPTIONS
                .iter()
                .find(|o| o.wire == wire.as_str())
                .unwrap_or_else(|| panic!("wire.md §3.2 documents {wire}, the table lacks it"));
            assert_eq!(option.column, column, "column of {wire}");
            assert_eq!(
                first,
                option.default.to_json().to_string(),
                "default of {wire}"
            );
            seen.insert(option.wire);
        }
    }
    let listed: BTreeSet<&str> = OPTIONS.iter().map(|o| o.wire).collect();
    assert_eq!(seen, listed, "wire.md §3.2 must document every option");
}
