-- 0001_baseline: the tables, indexes and triggers of the log engine (docs/engine.md §2) as of
-- the first versioned migration. Applied once (store/migrations.rs, docs/engine.md §1) and
-- never edited after: a change is a new migration file. Idempotent all the same, so that it
-- adopts a database laid out before versioned migrations (every table already there): it
-- creates what is missing and drops or rewrites nothing. Such a database keeps its
-- queen.schema_files, the old checksum record: a broker of the old version restarting during a
-- rolling upgrade then finds its record current and replays none of its functions over ours.
-- Storage parameters are explained next to each table.

CREATE SCHEMA IF NOT EXISTS queen;

-- One row per queue: identity plus every option with its default.
CREATE TABLE IF NOT EXISTS queen.queues (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    namespace TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '',
    priority INT NOT NULL DEFAULT 0,
    lease_time INT NOT NULL DEFAULT 60,
    retry_limit INT NOT NULL DEFAULT 3,
    retry_delay INT NOT NULL DEFAULT 1000,
    ttl INT NOT NULL DEFAULT 3600,
    max_queue_size INT NOT NULL DEFAULT 0,
    dead_letter_queue BOOL NOT NULL DEFAULT TRUE,
    dlq_after_max_retries BOOL NOT NULL DEFAULT TRUE,
    delayed_processing INT NOT NULL DEFAULT 0,
    window_buffer INT NOT NULL DEFAULT 0,
    retention_enabled BOOL NOT NULL DEFAULT FALSE,
    retention_seconds INT NOT NULL DEFAULT 0,
    completed_retention_seconds INT NOT NULL DEFAULT 0,
    max_wait_time_seconds INT NOT NULL DEFAULT 0,
    encryption_enabled BOOL NOT NULL DEFAULT FALSE,
    min_pop_wait_time INT NOT NULL DEFAULT 0,
    dedup_window_seconds INT NOT NULL DEFAULT 3600,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_queues_labels ON queen.queues (namespace, task);

-- One row per partition; its row lock is the push serializer and last_offset the allocator.
CREATE TABLE IF NOT EXISTS queen.log_partitions (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id BIGINT NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    name TEXT NOT NULL DEFAULT 'Default',
    last_offset BIGINT NOT NULL DEFAULT -1,
    log_start BIGINT NOT NULL DEFAULT 0,
    txns_start BIGINT NOT NULL DEFAULT 0,
    last_write_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    oldest_live_at TIMESTAMPTZ,
    oldest_txn_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);
-- Wildcard candidate scans range-scan only recently written partitions.
CREATE INDEX IF NOT EXISTS idx_log_partitions_queue_write
    ON queen.log_partitions (queue_id, last_write_at);
CREATE INDEX IF NOT EXISTS idx_log_partitions_live_due
    ON queen.log_partitions (queue_id, oldest_live_at) WHERE oldest_live_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_log_partitions_txn_due
    ON queen.log_partitions (queue_id, oldest_txn_at) WHERE oldest_txn_at IS NOT NULL;
-- Every push updates its partition row: keep HOT chains on-page (fillfactor), vacuum on
-- absolute churn, and never truncate the heap (truncation takes ACCESS EXCLUSIVE and froze
-- every push and pop for seconds upstream).
ALTER TABLE queen.log_partitions SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = off
);

-- The messages: one row per (partition, flush), K frames in one zstd blob.
CREATE TABLE IF NOT EXISTS queen.log_segments (
    partition_id BIGINT NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    base_offset BIGINT NOT NULL,
    end_offset BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    blob BYTEA NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);
-- Blobs are already zstd: TOAST must store them out of line without recompressing.
ALTER TABLE queen.log_segments ALTER COLUMN blob SET STORAGE EXTERNAL;
ALTER TABLE queen.log_segments SET (
    autovacuum_vacuum_scale_factor = 0.1,
    autovacuum_vacuum_insert_scale_factor = 0.3,
    autovacuum_vacuum_cost_limit = 4000,
    autovacuum_vacuum_cost_delay = 0,
    toast.autovacuum_vacuum_scale_factor = 0.1,
    toast.autovacuum_vacuum_insert_scale_factor = 0.3,
    toast.autovacuum_vacuum_cost_limit = 4000,
    toast.autovacuum_vacuum_cost_delay = 0
);

-- Hash sidecar: xxh3_128 of each transactionId in frame order. No foreign key so the purge
-- never pays FK triggers; partition deletes remove these rows explicitly.
CREATE TABLE IF NOT EXISTS queen.log_txns (
    partition_id BIGINT NOT NULL,
    base_offset BIGINT NOT NULL,
    end_offset BIGINT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    hashes BYTEA NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);
ALTER TABLE queen.log_txns ALTER COLUMN hashes SET STORAGE EXTERNAL;
ALTER TABLE queen.log_txns SET (
    autovacuum_vacuum_scale_factor = 0.1,
    autovacuum_vacuum_insert_scale_factor = 0.3,
    autovacuum_vacuum_cost_delay = 0
);

-- Cursor and lease per (partition, group). Pop/ack updates touch only non-indexed columns
-- (HOT); same churn-oriented storage parameters as log_partitions.
CREATE TABLE IF NOT EXISTS queen.log_consumers (
    partition_id BIGINT NOT NULL REFERENCES queen.log_partitions(id) ON DELETE CASCADE,
    consumer_group TEXT NOT NULL DEFAULT '__QUEUE_MODE__',
    committed BIGINT NOT NULL DEFAULT -1,
    batch_end BIGINT,
    worker_id TEXT,
    lease_expires_at TIMESTAMPTZ,
    lease_acquired_at TIMESTAMPTZ,
    batch_retry_count INT NOT NULL DEFAULT 0,
    attempt_offset BIGINT,
    attempt_count INT NOT NULL DEFAULT 0,
    total_consumed BIGINT NOT NULL DEFAULT 0,
    last_consumed_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
ALTER TABLE queen.log_consumers SET (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = off
);
-- Lease renewal addresses rows by worker id.
CREATE INDEX IF NOT EXISTS idx_log_consumers_worker
    ON queen.log_consumers (worker_id) WHERE worker_id IS NOT NULL;

-- Durable group registration: subscription timestamp and the first-contact seed marker.
CREATE TABLE IF NOT EXISTS queen.consumer_groups_metadata (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer_group TEXT NOT NULL,
    queue_id BIGINT REFERENCES queen.queues(id) ON DELETE CASCADE,
    partition_name TEXT NOT NULL DEFAULT '',
    namespace TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '',
    subscription_mode TEXT NOT NULL,
    subscription_timestamp TIMESTAMPTZ NOT NULL,
    conflation BOOL NOT NULL DEFAULT FALSE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE NULLS NOT DISTINCT (consumer_group, queue_id, partition_name, namespace, task)
);
CREATE INDEX IF NOT EXISTS idx_cgm_queue ON queen.consumer_groups_metadata (queue_id);

-- Empty-scan floor of the SQL wildcard candidate scan.
CREATE TABLE IF NOT EXISTS queen.consumer_watermarks (
    queue_id BIGINT NOT NULL REFERENCES queen.queues(id) ON DELETE CASCADE,
    consumer_group TEXT NOT NULL,
    last_empty_scan_at TIMESTAMPTZ NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);

-- Dead letters keep a payload copy and no foreign key: retention never drops them.
-- The copy is `json` (the document's text), not `jsonb`: a push accepts any JSON document,
-- and jsonb refuses the `\u0000` escape, so a jsonb copy made such a message impossible to
-- dead-letter.
CREATE TABLE IF NOT EXISTS queen.log_dlq (
    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    partition_id BIGINT NOT NULL,
    consumer_group TEXT NOT NULL,
    "offset" BIGINT NOT NULL,
    message_id UUID,
    transaction_id TEXT,
    payload JSON,
    error TEXT,
    retry_count INT DEFAULT 0,
    failed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- Databases created while the copy was jsonb: convert once (every jsonb value is valid json).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = 'queen' AND table_name = 'log_dlq'
                 AND column_name = 'payload' AND data_type = 'jsonb') THEN
        ALTER TABLE queen.log_dlq ALTER COLUMN payload TYPE json USING payload::json;
    END IF;
END
$$;
CREATE INDEX IF NOT EXISTS idx_log_dlq_partition ON queen.log_dlq (partition_id, failed_at DESC);
CREATE INDEX IF NOT EXISTS idx_log_dlq_failed ON queen.log_dlq (failed_at DESC);

-- Key/value flags: maintenance_mode, pop_maintenance_mode. Absent row = off.
CREATE TABLE IF NOT EXISTS queen.system_state (
    key TEXT PRIMARY KEY,
    value JSONB NOT NULL DEFAULT 'false',
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Consume-loop traces (observability only).
CREATE TABLE IF NOT EXISTS queen.message_traces (
    id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    partition_id BIGINT,
    transaction_id TEXT,
    consumer_group TEXT,
    event_type TEXT,
    trace_names TEXT[],
    data JSONB,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_message_traces_txn ON queen.message_traces (partition_id, transaction_id);

-- Queues whose cached dedup knowledge became unsafe: the window was raised (older hashes are
-- back in the window) or the queue was deleted (a re-created one restarts its offsets under
-- new partition ids). Brokers refresh their partition metadata at least every 30 s and a
-- push waits at most the statement timeout (30 s by default) for its partition lock, so for
-- 120 s after such a change log_push_one_v1 ignores p_verified for the queue and probes the
-- whole window. Keyed by name, not id: a deleted queue's name is what a re-created one
-- reuses. No foreign key for the same reason.
CREATE TABLE IF NOT EXISTS queen.log_dedup_resets (
    queue_name TEXT PRIMARY KEY,
    reset_at TIMESTAMPTZ NOT NULL
);

-- The trigger function lives here with its triggers, not among the replayed function files:
-- recreating a trigger takes a lock on queen.queues that deadlocked live traffic when every
-- boot replayed it (RELIABILITY.md F1). A change to it is a new migration.
CREATE OR REPLACE FUNCTION queen.log_dedup_reset_trg()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queen.log_dedup_resets (queue_name, reset_at)
    VALUES (OLD.name, clock_timestamp())
    ON CONFLICT (queue_name) DO UPDATE SET reset_at = EXCLUDED.reset_at;
    -- Old marks protect nothing any more; the table stays as small as the recent changes.
    DELETE FROM queen.log_dedup_resets WHERE reset_at < clock_timestamp() - interval '1 hour';
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS log_dedup_window_raised ON queen.queues;
CREATE TRIGGER log_dedup_window_raised
    AFTER UPDATE OF dedup_window_seconds ON queen.queues
    FOR EACH ROW WHEN (NEW.dedup_window_seconds > OLD.dedup_window_seconds)
    EXECUTE FUNCTION queen.log_dedup_reset_trg();

DROP TRIGGER IF EXISTS log_dedup_queue_deleted ON queen.queues;
CREATE TRIGGER log_dedup_queue_deleted
    AFTER DELETE ON queen.queues
    FOR EACH ROW
    EXECUTE FUNCTION queen.log_dedup_reset_trg();
