-- push_vouched: a bundle of segments appended by partition id in one plain statement
-- (docs/engine.md §4.4), sent by the broker as a prepared statement instead of calling
-- queen.log_push_multi_v1. It exists for speed alone: PostgreSQL spends about a third less
-- on it than on the function, whose argument checks, name joins and several statements
-- cost more than the writes of a small bundle.
--
-- It writes only when every segment needs none of the function's other work: the arrays
-- align, each segment has messages and 16 hash bytes per message, its partition id still
-- exists and no other segment's shares it, its queue is uncapped, it is sealed if the queue
-- encrypts, and no dedup probe is due (window 0, nothing stored since the purge, or the
-- caller vouches for exactly last_offset and no window raise or queue deletion happened in
-- the last 120 s: the function's p_verified rule). Otherwise it writes nothing and returns
-- no rows, and the broker sends the bundle to log_push_multi_v1.
--
-- $1 partition ids, $2 message counts, $3 vouched offsets, $4 sealed flags, $5 hashes (16
-- bytes per message), $6 blobs: aligned arrays, one element per segment. Result: one row
-- per segment, (ord 1-based, partition id, base offset, createdAt as the function renders it).
--
-- Locks: every partition row FOR NO KEY UPDATE in ascending id (LockRows above the ordered
-- scan), the global partition lock order, before anything is written; created_at is read
-- after the last lock, so it is monotone in base_offset per partition.
WITH locked AS (
    SELECT lp.id, lp.queue_id, lp.last_offset, lp.txns_start
    FROM queen.log_partitions lp
    WHERE lp.id = ANY ($1::int8[])
    ORDER BY lp.id
    FOR NO KEY UPDATE
),
seg AS (
    SELECT s.ord, s.pid, s.cnt,
           COALESCE(s.cnt >= 1 AND octet_length(s.hashes) = 16 * s.cnt
           AND l.id IS NOT NULL AND q.max_queue_size = 0
           AND NOT (q.encryption_enabled AND NOT s.sealed)
           AND (q.dedup_window_seconds = 0
                OR l.last_offset < l.txns_start
                OR (s.verified = l.last_offset AND NOT EXISTS (
                        SELECT 1 FROM queen.log_dedup_resets r
                        WHERE r.queue_name = q.name
                          AND r.reset_at > clock_timestamp() - interval '120 seconds'))),
               false) AS ok
    FROM unnest($1::int8[], $2::int4[], $3::int8[], $4::bool[], $5::bytea[])
         WITH ORDINALITY AS s(pid, cnt, verified, sealed, hashes, ord)
    LEFT JOIN locked l ON l.id = s.pid
    LEFT JOIN queen.queues q ON q.id = l.queue_id
),
verdict AS (
    SELECT COALESCE(bool_and(ok), false) AND count(DISTINCT pid) = count(*)
               AND count(*) = cardinality($6::bytea[]) AS ok,
           clock_timestamp() AS now
    FROM seg
),
-- The allocator, as in log_push_one_v1: last_write_at moves once a second (HOT updates).
alloc AS (
    UPDATE queen.log_partitions lp
    SET last_offset = lp.last_offset + s.cnt,
        oldest_live_at = COALESCE(lp.oldest_live_at, v.now),
        oldest_txn_at = COALESCE(lp.oldest_txn_at, v.now),
        last_write_at = CASE WHEN v.now - lp.last_write_at > interval '1 second'
                             THEN v.now ELSE lp.last_write_at END
    FROM seg s, verdict v
    WHERE v.ok AND lp.id = s.pid
    RETURNING s.ord, lp.id, lp.last_offset - s.cnt + 1 AS base_offset,
              lp.last_offset AS end_offset, v.now
),
segments AS (
    INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
    SELECT a.id, a.base_offset, a.end_offset, a.now, ($6::bytea[])[a.ord] FROM alloc a
),
sidecar AS (
    INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
    SELECT a.id, a.base_offset, a.end_offset, a.now, ($5::bytea[])[a.ord] FROM alloc a
)
SELECT a.ord, a.id, a.base_offset, queen.log_iso_micros(a.now)
FROM alloc a
