-- dedup_cache: what the broker's dedup cache (docs/engine.md §4.2, accel/dedup_cache.rs) needs
-- from PostgreSQL: the hydration read. The record of queues whose dedup horizon moved under
-- the brokers' feet (queen.log_dedup_resets and its triggers, which log_push_one_v1 in push.sql
-- consults before trusting p_verified) is table DDL: migrations/0001_baseline.sql.
-- Replayed (CREATE OR REPLACE) when its checksum changes.

-- Hydrates (or catches up) the broker's dedup cache for the given partitions: per existing
-- (queue, partition), one row per hash row read, or a single row with NULL r_base when none
-- is; nothing for a missing partition. r_ord is the input ordinal; rows come in (r_ord,
-- r_base) order, one sidecar row each, so no message of the answer is larger than one
-- segment's hashes (the broker reads the answer as a stream).
--
-- Returns the hash rows committed after offset p_after[i] (-1: all) that the push probe
-- could still consider: not purged (end_offset >= txns_start) and created at or after
-- r_since = now() - window - 5 s (5 s of clock-skew slack). A row straddling p_after comes
-- whole; r_base tells the caller which of its hashes it already holds. r_last is the
-- partition's last offset in the same snapshot, so the rows are exactly those committed in
-- (p_after, r_last]. r_now is the database clock the cache expires blocks against.
-- r_running counts the hashes of the partition's rows up to this one: at most
-- p_max_hashes + 1 rows are read per partition, so a partition with more than p_max_hashes
-- in its range shows a running count above it, and the broker leaves it uncached.
-- Timestamps travel as µs since the epoch. One statement, one snapshot: STABLE SQL.
-- The same read, with p_after -1 and no practical hash limit, is the broker's scan of a
-- partition too large to cache: it looks for a push's hashes in the rows and keeps none.
DROP FUNCTION IF EXISTS queen.log_dedup_hydrate_v1(text[], text[], int8[]);
CREATE OR REPLACE FUNCTION queen.log_dedup_hydrate_v1(
    p_queues text[], p_partitions text[], p_after int8[], p_max_hashes int8)
RETURNS TABLE(r_ord int, r_pid bigint, r_window int, r_last bigint, r_since bigint,
              r_now bigint, r_base int8, r_created int8, r_hashes bytea, r_running int8)
LANGUAGE sql STABLE AS $$
    SELECT w.ord::int, lp.id, q.dedup_window_seconds, lp.last_offset,
           (extract(epoch FROM f.since) * 1000000)::bigint,
           (extract(epoch FROM now()) * 1000000)::bigint,
           t.base_offset, t.created, t.hashes, t.running
    FROM unnest(p_queues, p_partitions, p_after) WITH ORDINALITY AS w(qn, pn, after, ord)
    JOIN queen.queues q ON q.name = w.qn
    -- One unique-key probe per element (OFFSET 0 keeps it a probe: see log_provision_v1).
    CROSS JOIN LATERAL (
        SELECT p.id, p.last_offset, p.txns_start FROM queen.log_partitions p
        WHERE p.queue_id = q.id AND p.name = w.pn OFFSET 0) lp
    CROSS JOIN LATERAL (
        SELECT GREATEST(w.after, lp.txns_start - 1) AS v_from,
               now() - make_interval(secs => q.dedup_window_seconds + 5) AS since
    ) f
    LEFT JOIN LATERAL (
        SELECT r.base_offset, r.created, r.hashes,
               (sum(r.n) OVER (ORDER BY r.base_offset))::int8 AS running
        FROM (
            SELECT lt.base_offset,
                   (extract(epoch FROM lt.created_at) * 1000000)::bigint AS created,
                   lt.hashes, lt.end_offset - lt.base_offset + 1 AS n
            FROM queen.log_txns lt
            WHERE lt.partition_id = lp.id
              -- From the row covering v_from + 1 on: a primary-key range, not the partition.
              AND lt.base_offset >= COALESCE(
                    (SELECT max(s.base_offset) FROM queen.log_txns s
                     WHERE s.partition_id = lp.id AND s.base_offset <= f.v_from
                       AND s.base_offset >= lp.txns_start),
                    f.v_from + 1)
              AND lt.end_offset > f.v_from
              AND lt.end_offset <= lp.last_offset
              AND q.dedup_window_seconds > 0
              AND lt.created_at >= f.since
            ORDER BY lt.base_offset
            LIMIT p_max_hashes + 1
        ) r
    ) t ON true
    ORDER BY w.ord, t.base_offset
$$;
