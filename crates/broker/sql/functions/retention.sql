-- retention: what the broker's retention loop (docs/engine.md §10, engine/retention/) runs:
-- the work list of due partitions, the step functions of the three deletion phases
-- (retention rules 1 and 2, hash-sidecar purge, max-wait eviction), partition cleanup and the
-- watermark safety walk. Replayed (CREATE OR REPLACE) when its checksum changes.
--
-- Every step is one short autocommitted transaction over one partition: it takes that
-- partition's row lock with SKIP LOCKED (a push holding it means "come back later"; nothing
-- ever waits behind a retention step that is itself waiting), deletes at most p_max_rows
-- rows, and moves the partition's watermarks in the same transaction. The lock is the
-- allocator's own (FOR NO KEY UPDATE), so while a step runs the partition's pushes wait for
-- it, never longer than one bounded step; pops and acks never wait: they read the partition
-- row without locking it and the segments and sidecar rows by snapshot. Consumer rows are
-- read, never locked. Only whole segments and whole sidecar rows are deleted.

-- The lowest cursor position any consumer still needs on p_pid: the minimum committed offset
-- over its cursor rows, and, for a group registered on the queue (or on labels the queue
-- matches) that has no cursor row here yet, the position its first contact would seed (its
-- subscription instant through queen.log_seed_cursor_v1, pop.sql). NULL: nobody consumes the
-- partition, and rule 2 deletes nothing.
CREATE OR REPLACE FUNCTION queen.log_slowest_cursor_v1(p_pid bigint)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT min(x.pos) FROM (
        SELECT c.committed AS pos
        FROM queen.log_consumers c
        WHERE c.partition_id = p_pid
        UNION ALL
        SELECT queen.log_seed_cursor_v1(p.id, p.last_offset, p.log_start, m.subscription_timestamp)
        FROM queen.log_partitions p
        JOIN queen.queues q ON q.id = p.queue_id
        JOIN queen.consumer_groups_metadata m
          ON m.partition_name = ''
         AND ((m.queue_id = q.id AND m.namespace = '' AND m.task = '')
              OR (m.queue_id IS NULL
                  AND (m.namespace = '' OR m.namespace = q.namespace)
                  AND (m.task = '' OR m.task = q.task)))
        WHERE p.id = p_pid
          AND NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                          WHERE c.partition_id = p.id AND c.consumer_group = m.consumer_group)
    ) x
$$;

-- The partitions due for each deletion phase, from one clock reading: per queue the cutoffs
-- of its options, per phase only partitions whose oldest live segment (or oldest sidecar row)
-- is older than the phase's cutoff, found through the oldest_* partial indexes, oldest first,
-- at most p_cap per phase. p_skip: partitions the broker is backing off from in the
-- retention phase (rule 2 held them back repeatedly); they do not take places in the list.
--
--   'retention' (retention_enabled): all_cutoff = now − retention_seconds (rule 1),
--               completed_cutoff = now − completed_retention_seconds (rule 2); 0 = rule off.
--   'sidecar'   (every queue): all_cutoff = now − GREATEST(dedup window, completed
--               retention, p_floor_seconds).
--   'evict'     (max_wait_time_seconds > 0, no enable flag): all_cutoff = now − max wait.
CREATE OR REPLACE FUNCTION queen.log_retention_due_v1(p_floor_seconds int, p_cap int, p_skip bigint[])
RETURNS TABLE(r_phase text, r_pid bigint, r_all_cutoff timestamptz, r_completed_cutoff timestamptz)
LANGUAGE sql STABLE AS $$
    WITH cfg AS (
        SELECT q.id,
               CASE WHEN q.retention_enabled AND q.retention_seconds > 0
                    THEN now() - make_interval(secs => q.retention_seconds) END AS all_cut,
               CASE WHEN q.retention_enabled AND q.completed_retention_seconds > 0
                    THEN now() - make_interval(secs => q.completed_retention_seconds) END AS done_cut,
               CASE WHEN q.max_wait_time_seconds > 0
                    THEN now() - make_interval(secs => q.max_wait_time_seconds) END AS wait_cut,
               now() - make_interval(secs => GREATEST(q.dedup_window_seconds,
                                                      q.completed_retention_seconds,
                                                      p_floor_seconds)) AS txn_cut
        FROM queen.queues q
    )
    (SELECT 'retention', p.id, c.all_cut, c.done_cut
     FROM cfg c
     CROSS JOIN LATERAL (
         SELECT lp.id, lp.oldest_live_at FROM queen.log_partitions lp
         WHERE lp.queue_id = c.id AND lp.oldest_live_at < GREATEST(c.all_cut, c.done_cut)
           AND lp.id <> ALL (p_skip)
         ORDER BY lp.oldest_live_at LIMIT p_cap) p
     WHERE c.all_cut IS NOT NULL OR c.done_cut IS NOT NULL
     ORDER BY p.oldest_live_at LIMIT p_cap)
    UNION ALL
    (SELECT 'sidecar', p.id, c.txn_cut, NULL::timestamptz
     FROM cfg c
     CROSS JOIN LATERAL (
         SELECT lp.id, lp.oldest_txn_at FROM queen.log_partitions lp
         WHERE lp.queue_id = c.id AND lp.oldest_txn_at < c.txn_cut
         ORDER BY lp.oldest_txn_at LIMIT p_cap) p
     ORDER BY p.oldest_txn_at LIMIT p_cap)
    UNION ALL
    (SELECT 'evict', p.id, c.wait_cut, NULL::timestamptz
     FROM cfg c
     CROSS JOIN LATERAL (
         SELECT lp.id, lp.oldest_live_at FROM queen.log_partitions lp
         WHERE lp.queue_id = c.id AND lp.oldest_live_at < c.wait_cut
         ORDER BY lp.oldest_live_at LIMIT p_cap) p
     WHERE c.wait_cut IS NOT NULL
     ORDER BY p.oldest_live_at LIMIT p_cap)
$$;

-- One retention (or eviction) step on p_pid: deletes, from the lowest live segment up, at most
-- p_max_rows whole segments that are older than p_all_cutoff (rule 1, max-wait eviction:
-- consumed or not), or older than p_completed_cutoff and entirely at or below the slowest
-- cursor (rule 2). A NULL cutoff turns its rule off. created_at and end_offset both grow with
-- base_offset, so the deletable segments are a prefix of the partition: one ranged DELETE.
-- Then log_start moves to the first segment left (last_offset + 1 when none is) and
-- oldest_live_at to its created_at (NULL when none).
--
-- Result {"deleted": segments, "messages": n, "logStart": new log_start, "done": bool,
-- "skipped": bool}: done is false when the batch was full (call again); skipped is true when
-- a writer held the partition row (nothing was done; try later).
CREATE OR REPLACE FUNCTION queen.log_retention_step_v1(
    p_pid bigint, p_all_cutoff timestamptz, p_completed_cutoff timestamptz, p_max_rows int)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_log_start bigint;
    v_last bigint;
    v_oldest timestamptz;
    v_slowest bigint;
    v_keep bigint;
    v_upto bigint;
    v_deleted int := 0;
    v_messages bigint := 0;
    v_next_base bigint;
    v_next_created timestamptz;
BEGIN
    SELECT p.log_start, p.last_offset, p.oldest_live_at INTO v_log_start, v_last, v_oldest
    FROM queen.log_partitions p WHERE p.id = p_pid
    FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('deleted', 0, 'messages', 0, 'done', true,
            'skipped', EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = p_pid));
    END IF;
    IF p_completed_cutoff IS NOT NULL THEN
        v_slowest := queen.log_slowest_cursor_v1(p_pid);
    END IF;

    -- The batch and, in it, the first segment that must stay (v_keep).
    SELECT min(b.base_offset) FILTER (WHERE NOT (
               COALESCE(b.created_at < p_all_cutoff, false)
               OR COALESCE(b.created_at < p_completed_cutoff AND b.end_offset <= v_slowest, false))),
           max(b.base_offset)
    INTO v_keep, v_upto
    FROM (SELECT s.base_offset, s.end_offset, s.created_at
          FROM queen.log_segments s
          WHERE s.partition_id = p_pid AND s.base_offset >= v_log_start
          ORDER BY s.base_offset
          LIMIT GREATEST(p_max_rows, 1)) b;
    v_upto := COALESCE(v_keep - 1, v_upto);

    IF v_upto >= v_log_start THEN
        WITH gone AS (
            DELETE FROM queen.log_segments s
            WHERE s.partition_id = p_pid AND s.base_offset BETWEEN v_log_start AND v_upto
            RETURNING s.end_offset - s.base_offset + 1 AS n)
        SELECT count(*), COALESCE(sum(n), 0) INTO v_deleted, v_messages FROM gone;
    END IF;

    SELECT s.base_offset, s.created_at INTO v_next_base, v_next_created
    FROM queen.log_segments s
    WHERE s.partition_id = p_pid AND s.base_offset >= v_log_start
    ORDER BY s.base_offset LIMIT 1;
    v_next_base := COALESCE(v_next_base, v_last + 1);
    IF v_next_base IS DISTINCT FROM v_log_start OR v_next_created IS DISTINCT FROM v_oldest THEN
        UPDATE queen.log_partitions
        SET log_start = v_next_base, oldest_live_at = v_next_created
        WHERE id = p_pid;
    END IF;
    RETURN jsonb_build_object(
        'deleted', v_deleted, 'messages', v_messages, 'logStart', v_next_base,
        'done', v_deleted < GREATEST(p_max_rows, 1), 'skipped', false);
END
$$;

-- One hash-sidecar purge step on p_pid: deletes, from the lowest up, at most p_max_rows
-- log_txns rows created before p_cutoff (a prefix: created_at grows with base_offset), then
-- moves txns_start to the first row left (last_offset + 1 when none is) and oldest_txn_at to
-- its created_at (NULL when none). Acks and dedup probes start their scans at txns_start, so
-- what a partition's history costs them is bounded by the purge horizon. A purged hash can no
-- longer be resolved by hash: an ack under the lease of its batch resolves it by position
-- (log_ack_by_hash_v1's purged span, ack.sql); a lease-less one is reported unresolved.
-- Result {"deleted": rows, "txnsStart": new txns_start, "done": bool, "skipped": bool}.
CREATE OR REPLACE FUNCTION queen.log_txns_purge_step_v1(p_pid bigint, p_cutoff timestamptz, p_max_rows int)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_txns_start bigint;
    v_last bigint;
    v_oldest timestamptz;
    v_upto bigint;
    v_deleted int := 0;
    v_next_base bigint;
    v_next_created timestamptz;
BEGIN
    SELECT p.txns_start, p.last_offset, p.oldest_txn_at INTO v_txns_start, v_last, v_oldest
    FROM queen.log_partitions p WHERE p.id = p_pid
    FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('deleted', 0, 'done', true,
            'skipped', EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = p_pid));
    END IF;

    SELECT max(b.base_offset) INTO v_upto
    FROM (SELECT t.base_offset
          FROM queen.log_txns t
          WHERE t.partition_id = p_pid AND t.base_offset >= v_txns_start
            AND t.created_at < p_cutoff
          ORDER BY t.base_offset
          LIMIT GREATEST(p_max_rows, 1)) b;
    IF v_upto IS NOT NULL THEN
        DELETE FROM queen.log_txns t
        WHERE t.partition_id = p_pid AND t.base_offset BETWEEN v_txns_start AND v_upto;
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
    END IF;

    SELECT t.base_offset, t.created_at INTO v_next_base, v_next_created
    FROM queen.log_txns t
    WHERE t.partition_id = p_pid AND t.base_offset >= v_txns_start
    ORDER BY t.base_offset LIMIT 1;
    v_next_base := COALESCE(v_next_base, v_last + 1);
    IF v_next_base IS DISTINCT FROM v_txns_start OR v_next_created IS DISTINCT FROM v_oldest THEN
        UPDATE queen.log_partitions
        SET txns_start = v_next_base, oldest_txn_at = v_next_created
        WHERE id = p_pid;
    END IF;
    RETURN jsonb_build_object('deleted', v_deleted, 'txnsStart', v_next_base,
                              'done', v_deleted < GREATEST(p_max_rows, 1), 'skipped', false);
END
$$;

-- Deletes up to p_max_rows partitions that are idle (no write since p_cutoff) and empty (no
-- segment and no sidecar row left: retention and the sidecar purge took everything, so no
-- message and no dedup memory is lost), unless a dead letter of theirs is kept (the DLQ
-- browser and replay address it by partition id) or a cursor on them holds a live lease.
-- Ascending id with SKIP LOCKED (a partition a push or a pop's row creation holds is left for
-- the next sweep), then their cursor rows in the consumer-row order, then the rows: cursors go
-- by cascade, the sidecar (no foreign key) and traces explicitly. A push to the name later
-- creates the partition afresh with a new id, offsets from 0; its queue is marked in
-- queen.log_dedup_resets so no broker's dedup cache vouches for the old partition's offsets.
-- Returns the number of partitions deleted.
CREATE OR REPLACE FUNCTION queen.log_partition_cleanup_step_v1(p_cutoff timestamptz, p_max_rows int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_pids bigint[];
    v_queues text[];
BEGIN
    SELECT COALESCE(array_agg(d.id ORDER BY d.id), '{}'), COALESCE(array_agg(DISTINCT d.queue), '{}')
    INTO v_pids, v_queues
    FROM (
        SELECT p.id, q.name AS queue
        FROM queen.log_partitions p
        JOIN queen.queues q ON q.id = p.queue_id
        WHERE p.oldest_live_at IS NULL AND p.oldest_txn_at IS NULL
          AND p.last_write_at < p_cutoff
          AND p.log_start > p.last_offset
          AND NOT EXISTS (SELECT 1 FROM queen.log_segments s WHERE s.partition_id = p.id)
          AND NOT EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.partition_id = p.id)
          AND NOT EXISTS (SELECT 1 FROM queen.log_dlq d WHERE d.partition_id = p.id)
          AND NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                          WHERE c.partition_id = p.id AND c.worker_id IS NOT NULL
                            AND c.lease_expires_at > clock_timestamp())
        ORDER BY p.id
        LIMIT GREATEST(p_max_rows, 1)
        FOR UPDATE OF p SKIP LOCKED
    ) d;
    IF cardinality(v_pids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM queen.log_consumers c
    WHERE c.partition_id = ANY (v_pids)
    ORDER BY c.partition_id, c.consumer_group
    FOR UPDATE;
    -- Segments too (no foreign key cascades them, migrations/0006): none is expected, the
    -- partition was chosen empty, but a partition row never outlives its rows.
    DELETE FROM queen.log_segments WHERE partition_id = ANY (v_pids);
    DELETE FROM queen.log_txns WHERE partition_id = ANY (v_pids);
    DELETE FROM queen.message_traces WHERE partition_id = ANY (v_pids);
    DELETE FROM queen.log_partitions WHERE id = ANY (v_pids);
    INSERT INTO queen.log_dedup_resets (queue_name, reset_at)
    SELECT n, clock_timestamp() FROM unnest(v_queues) AS n
    ON CONFLICT (queue_name) DO UPDATE SET reset_at = EXCLUDED.reset_at;
    RETURN cardinality(v_pids);
END
$$;

-- The watermark safety walk: re-derives oldest_live_at / oldest_txn_at where they are NULL
-- although the partition holds segments / sidecar rows (a layout that predates them, or a
-- hand edit), so such a partition becomes due again. Visits the p_limit partitions after
-- p_after_id (ascending id); rows a writer holds are skipped (a push sets both itself).
-- Returns the last id visited (NULL when the walk is complete) and how many rows it fixed.
CREATE OR REPLACE FUNCTION queen.log_watermark_walk_step_v1(p_after_id bigint, p_limit int,
    OUT r_last_id bigint, OUT r_fixed int)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT max(w.id) INTO r_last_id
    FROM (SELECT p.id FROM queen.log_partitions p WHERE p.id > p_after_id
          ORDER BY p.id LIMIT GREATEST(p_limit, 1)) w;
    IF r_last_id IS NULL THEN
        r_fixed := 0;
        RETURN;
    END IF;
    WITH stale AS (
        SELECT p.id FROM queen.log_partitions p
        WHERE p.id > p_after_id AND p.id <= r_last_id
          AND ((p.oldest_live_at IS NULL
                AND EXISTS (SELECT 1 FROM queen.log_segments s WHERE s.partition_id = p.id))
               OR (p.oldest_txn_at IS NULL
                   AND EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.partition_id = p.id)))
        ORDER BY p.id
        FOR NO KEY UPDATE SKIP LOCKED
    ), fixed AS (
        UPDATE queen.log_partitions p SET
            oldest_live_at = COALESCE(p.oldest_live_at,
                (SELECT s.created_at FROM queen.log_segments s
                 WHERE s.partition_id = p.id ORDER BY s.base_offset LIMIT 1)),
            oldest_txn_at = COALESCE(p.oldest_txn_at,
                (SELECT t.created_at FROM queen.log_txns t
                 WHERE t.partition_id = p.id ORDER BY t.base_offset LIMIT 1))
        FROM stale WHERE p.id = stale.id
        RETURNING p.id)
    SELECT count(*) INTO r_fixed FROM fixed;
END
$$;
