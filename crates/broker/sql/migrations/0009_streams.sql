-- 0009_streams: the streams runtime's tables (docs/wire.md §24): the
-- registered queries, their per-partition state, and the memory of committed cycles that
-- makes a retried cycle answer instead of applying twice. Applied once; idempotent all the
-- same.
--
-- A query belongs to one tenant and is named per tenant; state and cycles hang off the query
-- id, so every read and write checks the tenant through one primary-key probe of
-- stream_queries. partition_id is the source partition's id as text (the key the client
-- shards its state by). key compares by bytes (COLLATE "C") like the key-value store's keys.
CREATE TABLE IF NOT EXISTS queen.stream_queries (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    name         text NOT NULL,
    source_queue text NOT NULL,
    sink_queue   text,
    config_hash  text NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE IF NOT EXISTS queen.stream_state (
    query_id     uuid NOT NULL REFERENCES queen.stream_queries (id) ON DELETE CASCADE,
    partition_id text NOT NULL,
    key          text COLLATE "C" NOT NULL,
    value        jsonb NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (query_id, partition_id, key)
);

-- One row per committed cycle: its identity (xxh3_128 of the canonical request, computed by
-- the broker) and the answer it was given. Rows older than the broker's memory horizon are
-- pruned by the next cycle of the same (query, partition).
CREATE TABLE IF NOT EXISTS queen.stream_cycles (
    query_id     uuid NOT NULL REFERENCES queen.stream_queries (id) ON DELETE CASCADE,
    partition_id text NOT NULL,
    cycle        bytea NOT NULL,
    answer       jsonb NOT NULL,
    committed_at timestamptz NOT NULL,
    PRIMARY KEY (query_id, partition_id, cycle)
);

CREATE INDEX IF NOT EXISTS idx_stream_cycles_age
    ON queen.stream_cycles (query_id, partition_id, committed_at);
