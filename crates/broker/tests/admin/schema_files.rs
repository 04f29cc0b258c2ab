//! Schema files at boot: a broker whose files match `queen.schema_files` replays nothing (a
//! sibling joining a live database takes no DDL lock), and a changed file replays them all.

use crate::common;

/// A marker body on a procedure the boot files define; a replay would overwrite it.
const MARK: &str = "CREATE OR REPLACE FUNCTION queen.log_iso_micros(p timestamptz) RETURNS text \
    LANGUAGE sql STABLE AS $$ SELECT 'marked'::text $$";

async fn marked(db: &tokio_postgres::Client) -> bool {
    let row = db
        .query_one("SELECT queen.log_iso_micros(now()) = 'marked'", &[])
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test]
async fn an_up_to_date_schema_is_not_replayed_and_a_changed_one_is() {
    let b = common::broker().await;
    let db = b.sql().await;
    let files = common::count(&db, "queen.schema_files").await;
    assert!(files >= 8, "every boot file is recorded, got {files}");

    db.batch_execute(MARK).await.unwrap();
    let sibling = b.sibling(|_| {}).await;
    assert!(
        marked(&db).await,
        "a boot with matching checksums replayed the files"
    );
    sibling.stop().await;

    db.execute(
        "UPDATE queen.schema_files SET checksum = 'older' WHERE name = '002_push.sql'",
        &[],
    )
    .await
    .unwrap();
    let upgraded = b.sibling(|_| {}).await;
    assert!(
        !marked(&db).await,
        "a changed file did not replay the schema"
    );
    let stale: i64 = db
        .query_one(
            "SELECT count(*) FROM queen.schema_files WHERE checksum = 'older'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stale, 0, "the replay records the new checksums");
    upgraded.stop().await;
    b.stop().await;
}
