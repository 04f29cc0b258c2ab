//! Schema at boot (store/migrations.rs): each versioned migration runs once and a boot that
//! finds everything recorded runs no DDL at all (a sibling joining a live database takes no
//! DDL lock); a changed function file is replayed, alone; an applied migration that changed,
//! or one this binary lacks, refuses the boot by name; brokers booting together on a fresh
//! database all come up; a database laid out before versioned migrations is adopted with its
//! data.

use crate::common;

use queen_broker::server;
use reqwest::StatusCode;

/// A marker body on a procedure of `functions/push.sql`; a replay of that file overwrites it.
const MARK: &str = "CREATE OR REPLACE FUNCTION queen.log_iso_micros(p timestamptz) RETURNS text \
    LANGUAGE sql STABLE AS $$ SELECT 'marked'::text $$";

/// The same on a procedure of `functions/admin.sql`.
const MARK_ADMIN: &str = "CREATE OR REPLACE FUNCTION queen.admin_iso(p timestamptz) RETURNS text \
    LANGUAGE sql STABLE AS $$ SELECT 'marked'::text $$";

/// Records every DDL command run in the database from now on into `public.ddl_log`.
const WATCH_DDL: &str = "CREATE TABLE public.ddl_log (tag text NOT NULL);
CREATE FUNCTION public.log_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.ddl_log (tag) VALUES (tg_tag);
END
$$;
CREATE EVENT TRIGGER ddl_watch ON ddl_command_start EXECUTE FUNCTION public.log_ddl()";

async fn marked(db: &tokio_postgres::Client, function: &str) -> bool {
    let row = db
        .query_one(&format!("SELECT queen.{function}(now()) = 'marked'"), &[])
        .await
        .unwrap();
    row.get(0)
}

/// The `.sql` files of `crates/broker/sql/<dir>`, sorted.
fn sql_files(dir: &str) -> Vec<String> {
    let path = format!("{}/sql/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(path)
        .expect("sql directory")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    names.sort();
    names
}

/// `(version, name)` of the applied migrations, in version order.
async fn migrations(db: &tokio_postgres::Client) -> Vec<(i32, String)> {
    db.query(
        "SELECT version, name FROM queen.schema_migrations ORDER BY version",
        &[],
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Every record row as text, for "nothing was rewritten" checks.
async fn records(db: &tokio_postgres::Client) -> Vec<String> {
    db.query(
        "SELECT format('%s %s %s %s', version, name, checksum, applied_at)
           FROM queen.schema_migrations
         UNION ALL
         SELECT format('%s %s %s', name, checksum, applied_at) FROM queen.schema_functions
         ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| r.get(0))
    .collect()
}

/// What the migration files say must be recorded: (version, name) from `NNNN_name.sql`.
fn expected_migrations() -> Vec<(i32, String)> {
    sql_files("migrations")
        .iter()
        .map(|f| {
            let (v, name) = f.trim_end_matches(".sql").split_once('_').unwrap();
            (v.parse().unwrap(), name.to_string())
        })
        .collect()
}

#[tokio::test]
async fn migrations_run_once_and_a_second_boot_runs_no_ddl() {
    let b = common::broker().await;
    let db = b.sql().await;
    let applied = migrations(&db).await;
    assert_eq!(
        applied,
        expected_migrations(),
        "every migration recorded once"
    );
    assert_eq!(applied[0], (1, "baseline".to_string()));
    assert_eq!(
        common::count(&db, "queen.schema_functions").await,
        sql_files("functions").len() as i64,
        "every function file is recorded"
    );
    let before = records(&db).await;

    db.batch_execute(WATCH_DDL).await.unwrap();
    let sibling = b.sibling(|_| {}).await;
    let ddl: Vec<String> = db
        .query("SELECT tag FROM public.ddl_log", &[])
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        ddl.is_empty(),
        "a boot with everything recorded ran DDL: {ddl:?}"
    );
    assert_eq!(records(&db).await, before, "the records were rewritten");
    sibling.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn an_up_to_date_schema_is_not_replayed_and_a_changed_one_is() {
    let b = common::broker().await;
    let db = b.sql().await;
    let files = common::count(&db, "queen.schema_functions").await;
    assert!(files >= 8, "every function file is recorded, got {files}");

    db.batch_execute(MARK).await.unwrap();
    db.batch_execute(MARK_ADMIN).await.unwrap();
    let sibling = b.sibling(|_| {}).await;
    assert!(
        marked(&db, "log_iso_micros").await,
        "a boot with matching checksums replayed the files"
    );
    sibling.stop().await;

    db.execute(
        "UPDATE queen.schema_functions SET checksum = 'older' WHERE name = 'push.sql'",
        &[],
    )
    .await
    .unwrap();
    let upgraded = b.sibling(|_| {}).await;
    assert!(
        !marked(&db, "log_iso_micros").await,
        "a changed file did not replay the schema"
    );
    assert!(
        marked(&db, "admin_iso").await,
        "an unchanged function file was replayed with the changed one"
    );
    let stale: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.schema_functions WHERE checksum = 'older'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stale, 0, "the replay records the new checksums");
    upgraded.stop().await;
    b.stop().await;
}

/// The error a boot on `pg` fails with, with its causes.
async fn boot_error(pg: &tokio_postgres::Config) -> String {
    match server::start(common::test_config(), pg.clone()).await {
        Ok(running) => {
            running.shutdown().await;
            panic!("the broker booted");
        }
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test]
async fn an_applied_migration_that_changed_or_is_unknown_refuses_the_boot() {
    let b = common::broker().await;
    let db = b.sql().await;
    db.execute(
        "UPDATE queen.schema_migrations SET checksum = 'edited' WHERE version = 1",
        &[],
    )
    .await
    .unwrap();
    let err = boot_error(&b.pg).await;
    assert!(
        err.contains("migration 0001_baseline.sql was changed"),
        "{err}"
    );
    assert!(err.contains("immutable"), "{err}");

    // Without its record the baseline runs again, as on an upgrade, and is recorded afresh.
    db.execute("DELETE FROM queen.schema_migrations WHERE version = 1", &[])
        .await
        .unwrap();
    let healed = b.sibling(|_| {}).await;
    assert_eq!(migrations(&db).await, expected_migrations());
    healed.stop().await;

    db.execute(
        "INSERT INTO queen.schema_migrations (version, name, checksum) VALUES (9999, 'future', 'x')",
        &[],
    )
    .await
    .unwrap();
    let err = boot_error(&b.pg).await;
    assert!(err.contains("9999_future.sql"), "{err}");
    assert!(err.contains("newer broker version"), "{err}");
    b.stop().await;
}

#[tokio::test]
async fn brokers_booting_at_once_on_a_fresh_database_all_come_up() {
    let pg = common::fresh_database().await;
    let boots: Vec<_> = (0..4)
        .map(|_| tokio::spawn(server::start(common::test_config(), pg.clone())))
        .collect();
    let mut running = Vec::new();
    for boot in boots {
        running.push(boot.await.unwrap().expect("a concurrent boot failed"));
    }
    let db = common::connect(&pg).await;
    assert_eq!(migrations(&db).await, expected_migrations());
    assert_eq!(
        common::count(&db, "queen.schema_functions").await,
        sql_files("functions").len() as i64
    );
    for r in running {
        r.shutdown().await;
    }
}

/// The record of the layout before versioned migrations: one checksum per boot file.
const OLD_LAYOUT: &str = "DROP TABLE queen.schema_migrations, queen.schema_functions;
CREATE TABLE queen.schema_files (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO queen.schema_files (name, checksum)
SELECT f, 'old' FROM unnest(ARRAY['001_schema.sql', '002_push.sql', '002_queues.sql',
    '003_pop.sql', '004_ack.sql', '005_transaction.sql', '006_admin.sql',
    '007_dedup_cache.sql']) AS f";

const DATA_TABLES: &[&str] = &[
    "queen.queues",
    "queen.log_partitions",
    "queen.log_segments",
    "queen.log_txns",
    "queen.log_consumers",
    "queen.consumer_groups_metadata",
    "queen.log_dlq",
];

#[tokio::test]
async fn a_database_of_the_old_layout_is_adopted_with_its_data() {
    let b = common::broker().await;
    let db = b.sql().await;
    let payloads: Vec<_> = (0..5).map(|i| serde_json::json!({ "n": i })).collect();
    b.push("upgrade.q", "p", &payloads).await;
    let (status, popped) = b
        .get("/api/v1/pop/queue/upgrade.q/partition/p?batch=2&consumerGroup=g")
        .await;
    assert_eq!(status, StatusCode::OK, "{popped}");
    db.batch_execute(
        "INSERT INTO queen.log_dlq (partition_id, consumer_group, \"offset\", payload)
         VALUES (1, 'g', 0, '{\"kept\": true}')",
    )
    .await
    .unwrap();
    let before = common::counts(&db, DATA_TABLES).await;
    db.batch_execute(OLD_LAYOUT).await.unwrap();
    db.batch_execute(MARK).await.unwrap();

    let upgraded = b.sibling(|_| {}).await;
    assert_eq!(
        migrations(&db).await,
        expected_migrations(),
        "baseline recorded"
    );
    assert!(
        !marked(&db, "log_iso_micros").await,
        "the function files were not replayed"
    );
    assert_eq!(
        common::counts(&db, DATA_TABLES).await,
        before,
        "the upgrade lost or added rows"
    );
    assert_eq!(
        common::count(&db, "queen.schema_files").await,
        8,
        "the old record is left for old brokers"
    );
    let (status, rest) = upgraded
        .get("/api/v1/pop/queue/upgrade.q/partition/p?batch=10")
        .await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    assert_eq!(rest["messages"].as_array().map(Vec::len), Some(5), "{rest}");
    upgraded.stop().await;
    b.stop().await;
}
