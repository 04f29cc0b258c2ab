//! Every SQLSTATE the broker classifies (docs/engine.md §12.5), one class per test, on a real
//! PostgreSQL: each code is raised by a `DO` block (a real server error with that SQLSTATE),
//! taken into the broker's error type and checked for its class (`is_unavailable`) and its
//! HTTP status (503 with `Retry-After` for unavailable, 500 for a refusal). The table in the
//! docs is read and checked row by row, so the docs and the code cannot drift apart. The
//! failures without a SQLSTATE (a session terminated, a `target_session_attrs` rejection)
//! are produced for real.

use axum::response::IntoResponse;
use queen_broker::error::Error;
use reqwest::StatusCode;

use crate::common;

/// The codes of class 08 PostgreSQL defines (errcodes.txt).
const CLASS_08: &[&str] = &[
    "08000", "08003", "08006", "08001", "08004", "08007", "08P01",
];

/// A real error with SQLSTATE `code`, raised by the server.
async fn raised(db: &tokio_postgres::Client, code: &str) -> Error {
    let sql = format!(
        "DO $$ BEGIN RAISE EXCEPTION 'raised %', '{code}' USING ERRCODE = '{code}'; END $$"
    );
    let e = db
        .batch_execute(&sql)
        .await
        .expect_err("the DO block raises");
    assert_eq!(e.code().map(|c| c.code()), Some(code), "{e:?}");
    Error::from(e)
}

/// `e` is unavailable (503 with `Retry-After`) or a refusal (500), as `unavailable` says.
fn assert_class(e: Error, unavailable: bool, what: &str) {
    assert_eq!(e.is_unavailable(), unavailable, "{what}: {}", e.chain());
    let response = e.into_response();
    match unavailable {
        true => {
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{what}");
            assert!(response.headers().contains_key("retry-after"), "{what}");
        }
        false => assert_eq!(
            response.status(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "{what}"
        ),
    }
}

/// The rows of the SQLSTATE table of docs/engine.md §12.5: (code, class).
fn documented() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/engine.md");
    let text = std::fs::read_to_string(path).expect("read docs/engine.md");
    let section = text
        .split("### 12.5 ")
        .nth(1)
        .expect("docs/engine.md has §12.5");
    section
        .lines()
        .take_while(|l| !l.starts_with("---"))
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[3].to_string())
        })
        .collect()
}

async fn session() -> tokio_postgres::Client {
    common::connect(&common::fresh_database().await).await
}

#[tokio::test]
async fn the_documented_table_is_what_the_broker_does() {
    let db = session().await;
    let rows = documented();
    assert!(rows.len() >= 8, "the table is there: {rows:?}");
    for (code, class) in rows {
        let unavailable = match class.as_str() {
            "unavailable" => true,
            "refused" => false,
            other => panic!("{code}: unknown class {other}"),
        };
        let codes: Vec<String> = match code.as_str() {
            "08xxx" => CLASS_08.iter().map(|c| c.to_string()).collect(),
            _ => vec![code.clone()],
        };
        for code in codes {
            assert_class(raised(&db, &code).await, unavailable, &code);
        }
    }
}

/// Class 08: a connection exception, whatever its code.
#[tokio::test]
async fn connection_exceptions_are_unavailable() {
    let db = session().await;
    for code in CLASS_08 {
        assert_class(raised(&db, code).await, true, code);
    }
}

/// 25006: a read-only transaction (a standby, a demoted primary) is an outage.
#[tokio::test]
async fn a_read_only_transaction_is_unavailable() {
    let db = session().await;
    assert_class(raised(&db, "25006").await, true, "25006 raised");
    // And as PostgreSQL answers a write in a read-only transaction itself.
    db.batch_execute("SET default_transaction_read_only = on")
        .await
        .unwrap();
    let e = db
        .batch_execute("CREATE TABLE nope (x int)")
        .await
        .expect_err("a write in a read-only session");
    assert_eq!(e.code().map(|c| c.code()), Some("25006"), "{e:?}");
    assert_class(Error::from(e), true, "25006 for real");
}

/// 57P01–57P03: the server shutting down, crashing or starting up.
#[tokio::test]
async fn shutdown_crash_and_startup_are_unavailable() {
    let db = session().await;
    for code in ["57P01", "57P02", "57P03"] {
        assert_class(raised(&db, code).await, true, code);
    }
    // 57P01 for real: the session terminated by an administrator.
    let victim = session().await;
    let pid: i32 = victim
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    db.execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    let e = victim
        .batch_execute("SELECT 1")
        .await
        .expect_err("a terminated session");
    assert_class(Error::from(e), true, "a terminated session");
}

/// Refusals: the request reached a writable server that refused it.
#[tokio::test]
async fn refusals_are_failures() {
    let db = session().await;
    for code in ["40001", "23505", "22023", "57014", "42P01"] {
        let e = raised(&db, code).await;
        // The logged chain carries PostgreSQL's own message ("db error" alone says nothing).
        assert!(
            e.chain().contains(&format!("raised {code}")),
            "{}",
            e.chain()
        );
        assert_class(e, false, code);
    }
}

/// `target_session_attrs=read-write` finding only a read-only server: no SQLSTATE, unavailable.
#[tokio::test]
async fn a_target_session_attrs_rejection_is_unavailable() {
    let pg = common::fresh_database().await;
    let admin = common::connect(&pg).await;
    let name = pg.get_dbname().unwrap();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE \"{name}\" SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    let mut rw = pg.clone();
    rw.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
    let e = match rw.connect(tokio_postgres::NoTls).await {
        Ok(_) => panic!("a read-only server is refused by target_session_attrs"),
        Err(e) => e,
    };
    assert_class(Error::from(e), true, "target_session_attrs");
}
