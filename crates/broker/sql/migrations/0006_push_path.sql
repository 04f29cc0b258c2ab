-- 0006_push_path: two changes for the bundled push (docs/engine.md §4.4). Applied once;
-- idempotent all the same.
--
-- 1. log_segments loses its foreign key to log_partitions, like log_txns never had one. Its
--    check cost a row lock and an SPI lookup per inserted segment (about 18 of 26 µs per row
--    of a 100-row insert), for a partition row the push already holds FOR NO KEY UPDATE.
--    Every writer of a segment holds its partition row's lock (push.sql), so no segment can
--    be written for a partition that is gone; the two deleters of partitions (queue delete in
--    queues.sql, partition cleanup in retention.sql) delete its segments themselves, as they
--    already did its sidecar rows.
ALTER TABLE queen.log_segments DROP CONSTRAINT IF EXISTS log_segments_partition_id_fkey;

-- 2. The recent-write index becomes partial (its predicate holds for every row:
--    last_write_at is NOT NULL). The scans it serves all bound last_write_at, which implies
--    the predicate; a lookup by (queue_id, name) does not, so it can no longer pick this
--    index for its queue_id prefix and walk every partition of the queue, which is what
--    the planner did while a queue grew by thousands of partitions between two analyzes.
DROP INDEX IF EXISTS queen.idx_log_partitions_queue_write;
CREATE INDEX IF NOT EXISTS idx_log_partitions_queue_write
    ON queen.log_partitions (queue_id, last_write_at) WHERE last_write_at IS NOT NULL;
