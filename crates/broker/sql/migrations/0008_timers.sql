-- 0008_timers: the pending timers (docs/engine.md §16). Applied once; idempotent all the same.
--
-- One row per pending timer, keyed by the caller's tenant, the queue as the client names it
-- and the timer key: a schedule on the same key is an upsert. A timer names its queue by name
-- and is not tied to a queue row: the queue may not exist until the fire creates it. The fire
-- (timers.sql, engine/timer_wheel/) pushes the message and deletes the row in ONE transaction, so
-- a delivered timer has no row (no tombstone) and a timer is delivered at most once.
--
-- visible_at is when the wheel may next take the row: deliver_at at first, then the end of a
-- fire's claim or of a back-off. It is the wheel's only index, so the next due time is one
-- index probe and a claim walks only due rows.
CREATE TABLE IF NOT EXISTS queen.log_timers (
    tenant_id TEXT NOT NULL,
    queue TEXT COLLATE "C" NOT NULL,
    timer_key TEXT COLLATE "C" NOT NULL,
    partition TEXT NOT NULL,
    payload BYTEA NOT NULL,
    txn TEXT NOT NULL,
    message_id UUID NOT NULL,
    deliver_at TIMESTAMPTZ NOT NULL,
    visible_at TIMESTAMPTZ NOT NULL,
    claim_token UUID,
    attempts INT NOT NULL DEFAULT 0,
    last_error TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue, timer_key)
);
CREATE INDEX IF NOT EXISTS idx_log_timers_visible ON queen.log_timers (visible_at);
ALTER TABLE queen.log_timers SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500,
    vacuum_truncate = off
);
