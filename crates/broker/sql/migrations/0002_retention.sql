-- 0002_retention: what the retention loop (docs/engine.md §10, sql/functions/retention.sql)
-- needs beyond the baseline. Applied once; a change is a new migration.

-- Partition cleanup looks for idle, empty partitions across every queue. Only empty ones
-- are in this index (a push makes its partition non-empty in the same update that moves
-- last_write_at, so pushes add no entries to it), so the sweep reads the candidates and
-- nothing else, however many partitions hold data.
CREATE INDEX IF NOT EXISTS idx_log_partitions_empty_idle
    ON queen.log_partitions (last_write_at)
    WHERE oldest_live_at IS NULL AND oldest_txn_at IS NULL;
