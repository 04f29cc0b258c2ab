-- ack_at: positional acks (docs/engine.md §6.4–§6.6): the fast paths — the ack registry's
-- covers, ack fusion's commit, the transaction wire's positional form — already know the
-- leased span, so no hash is resolved. The hash path (log_ack_by_hash_v1) is ack.sql's; a
-- cover must commit exactly what it would. Replayed (CREATE OR REPLACE) when its checksum
-- changes.

-- Positional ack by partition id: the fast paths (ack registry, ack fusion, the transaction
-- wire's positional form) already know the leased span, so no hash is resolved.
--
-- With p_ok: the row must hold a batch (the caller's live lease when p_worker is given) and
-- p_upto must lie within it; the cursor advances to p_upto (never backwards), the lease is
-- released and total_consumed grows by p_acked_count. With NOT p_ok: the lease is released
-- without advancing, so the whole batch redelivers. Result {"ok":true,"acked":n} or
-- {"ok":false,"error":…}.
--
-- p_cover (ours; the broker's fast paths always set it): the caller says it holds a full
-- cover, every frame of the batch it was served (p_acked_count of them, ending at p_upto)
-- acked `completed` under its own lease. Committing it must be exactly what the hash path
-- would do with the same acks, so a cover is refused ('batch changed since the pop') unless
-- a lease is named, p_upto is the row's batch_end, the cursor has not entered the batch
-- (committed <= batch_end - p_acked_count: a lease-less ack elsewhere may have acked part of
-- it, which the hash path would answer as noops). A batch whose hash rows were purged is
-- no reason to refuse: the hash path resolves a leased batch by position there (p_span_offs
-- of log_ack_by_hash_v1), so it too would ack the whole batch. A refused cover changes
-- nothing; the broker then takes the hash path. A cover answers like the hash path's
-- release: "leaseReleased":true and "wakeQueue" when data is pending behind the new cursor,
-- and total_consumed grows by the cursor's actual advance.
DROP FUNCTION IF EXISTS queen.log_ack_at_v1(bigint, text, text, bigint, bool, int);
CREATE OR REPLACE FUNCTION queen.log_ack_at_v1(
    p_partition_id bigint, p_group text, p_worker text, p_upto bigint,
    p_ok bool DEFAULT true, p_acked_count int DEFAULT 0, p_cover bool DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_committed bigint;
    v_batch_end bigint;
    v_row_worker text;
    v_expires timestamptz;
    v_new bigint;
    v_consumed bigint;
    v_last_offset bigint;
    v_queue text;
BEGIN
    SELECT committed, batch_end, worker_id, lease_expires_at
    INTO v_committed, v_batch_end, v_row_worker, v_expires
    FROM queen.log_consumers
    WHERE partition_id = p_partition_id AND consumer_group = p_group
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('ok', false, 'acked', 0, 'error', 'consumer not found');
    END IF;
    IF (COALESCE(p_worker, '') <> '' OR p_cover)
       AND (v_row_worker IS DISTINCT FROM p_worker OR v_batch_end IS NULL
            OR v_expires IS NULL OR v_expires <= clock_timestamp()) THEN
        RETURN jsonb_build_object('ok', false, 'acked', 0, 'error', 'invalid or expired lease');
    END IF;

    IF NOT COALESCE(p_ok, true) THEN
        UPDATE queen.log_consumers
        SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_end = NULL
        WHERE partition_id = p_partition_id AND consumer_group = p_group;
        RETURN jsonb_build_object('ok', true, 'acked', 0);
    END IF;
    IF v_batch_end IS NULL THEN
        RETURN jsonb_build_object('ok', false, 'acked', 0, 'error', 'no leased batch');
    END IF;
    IF p_upto > v_batch_end THEN
        RETURN jsonb_build_object('ok', false, 'acked', 0, 'error', 'position beyond leased batch');
    END IF;
    IF p_cover THEN
        SELECT lp.last_offset, q.name INTO v_last_offset, v_queue
        FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
        WHERE lp.id = p_partition_id;
        IF p_upto <> v_batch_end
           OR v_committed > v_batch_end - GREATEST(COALESCE(p_acked_count, 0), 1) THEN
            RETURN jsonb_build_object('ok', false, 'acked', 0, 'error', 'batch changed since the pop');
        END IF;
    END IF;

    v_new := GREATEST(v_committed, p_upto);
    v_consumed := CASE WHEN p_cover THEN v_new - v_committed
                       ELSE GREATEST(COALESCE(p_acked_count, 0), 0) END;
    UPDATE queen.log_consumers
    SET committed = v_new, worker_id = NULL, lease_expires_at = NULL,
        lease_acquired_at = NULL, batch_end = NULL,
        attempt_offset = CASE WHEN v_new >= v_batch_end THEN NULL ELSE attempt_offset END,
        attempt_count = CASE WHEN v_new >= v_batch_end THEN 0 ELSE attempt_count END,
        batch_retry_count = CASE WHEN v_new >= v_batch_end THEN 0 ELSE batch_retry_count END,
        total_consumed = total_consumed + v_consumed,
        last_consumed_at = clock_timestamp()
    WHERE partition_id = p_partition_id AND consumer_group = p_group;
    IF NOT p_cover THEN
        RETURN jsonb_build_object('ok', true, 'acked', v_new - v_committed);
    END IF;
    RETURN jsonb_build_object('ok', true, 'acked', v_new - v_committed, 'off', v_new,
                              'leaseReleased', true)
           || jsonb_strip_nulls(jsonb_build_object(
                  'wakeQueue', CASE WHEN v_last_offset > v_new THEN v_queue END));
END
$$;

-- log_ack_at_v1 addressed by queue and partition name.
CREATE OR REPLACE FUNCTION queen.log_ack_v1(
    p_queue text, p_partition text, p_group text, p_worker text, p_upto bigint,
    p_ok bool DEFAULT true, p_acked_count int DEFAULT 0)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint;
BEGIN
    SELECT lp.id INTO v_pid
    FROM queen.queues q JOIN queen.log_partitions lp ON lp.queue_id = q.id
    WHERE q.name = p_queue AND lp.name = p_partition;
    IF v_pid IS NULL THEN
        RETURN jsonb_build_object('ok', false, 'acked', 0, 'error', 'partition not found');
    END IF;
    RETURN queen.log_ack_at_v1(v_pid, p_group, p_worker, p_upto, p_ok, p_acked_count);
END
$$;

-- Many positional completed acks in ONE transaction (ack fusion's commit). Rows run in
-- ascending (partition_id, consumer_group) order so every flush takes its consumer-row locks
-- in the global order; verdicts come back by input ordinal:
-- {"ok":true,"results":[{"ok","acked","error"}…]}. With p_cover (ours; ack fusion sets it)
-- every row is a cover (see log_ack_at_v1) and its verdict also carries "leaseReleased" and,
-- when data is pending behind the new cursor, "wakeQueue".
--
-- The cover form of more than one row is set-based: one statement locks every row in that
-- order, one decides every verdict with log_ack_at_v1's cover rules and commits the winners (a flush of 500 covers was
-- 500 calls of log_ack_at_v1). Rows naming one cursor are decided in input order as the calls
-- would be: the first that passes commits and releases the lease, so the later ones find no
-- lease.
DROP FUNCTION IF EXISTS queen.log_ack_multi_v1(bigint[], text[], bigint[], text[], int[]);
CREATE OR REPLACE FUNCTION queen.log_ack_multi_v1(
    p_pids bigint[], p_groups text[], p_ends bigint[], p_workers text[], p_counts int[],
    p_cover bool DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql
-- Generic plans and keyed statements only, as log_pop_candidates_v1 (custom plans re-planned
-- the statements on every flush; a small consumer table was scanned whole and locked through
-- the scan).
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_n int := COALESCE(cardinality(p_pids), 0);
    v_results jsonb[];
    v_row record;
    v_r jsonb;
    v_now timestamptz;
    l_pid bigint[]; l_grp text[]; l_committed bigint[]; l_end bigint[]; l_worker text[];
    l_expires timestamptz[];
    v_out jsonb;
BEGIN
    IF COALESCE(cardinality(p_groups), 0) <> v_n OR COALESCE(cardinality(p_ends), 0) <> v_n
       OR COALESCE(cardinality(p_workers), 0) <> v_n OR COALESCE(cardinality(p_counts), 0) <> v_n THEN
        RAISE EXCEPTION 'log_ack_multi_v1: misaligned arrays';
    END IF;
    -- One row (a flush at low load) takes the call: cheaper than the two statements below.
    IF COALESCE(p_cover, false) AND v_n > 1 THEN
        SELECT array_agg(l.partition_id), array_agg(l.consumer_group), array_agg(l.committed),
               array_agg(l.batch_end), array_agg(l.worker_id), array_agg(l.lease_expires_at)
        INTO l_pid, l_grp, l_committed, l_end, l_worker, l_expires
        FROM (SELECT c.partition_id, c.consumer_group, c.committed, c.batch_end, c.worker_id,
                     c.lease_expires_at
              FROM (SELECT DISTINCT u.pid, u.grp FROM unnest(p_pids, p_groups) AS u(pid, grp)) d
              JOIN queen.log_consumers c ON c.partition_id = d.pid AND c.consumer_group = d.grp
              ORDER BY c.partition_id, c.consumer_group
              FOR UPDATE OF c) l;
        v_now := clock_timestamp();
        WITH w AS (
            SELECT u.pid, u.grp, u.upto, u.worker, GREATEST(COALESCE(u.cnt, 0), 1) AS cnt, u.ord
            FROM unnest(p_pids, p_groups, p_ends, p_workers, p_counts)
                 WITH ORDINALITY AS u(pid, grp, upto, worker, cnt, ord)),
        l AS (
            SELECT * FROM unnest(l_pid, l_grp, l_committed, l_end, l_worker, l_expires)
                          AS l(pid, grp, committed, batch_end, worker, expires)),
        judged AS (
            SELECT w.ord, w.pid, w.grp, w.upto, l.committed, k.last_offset, k.queue,
                   CASE WHEN l.pid IS NULL THEN 'consumer not found'
                        WHEN l.worker IS DISTINCT FROM w.worker OR l.batch_end IS NULL
                             OR l.expires IS NULL OR l.expires <= v_now
                             THEN 'invalid or expired lease'
                        WHEN w.upto > l.batch_end THEN 'position beyond leased batch'
                        WHEN w.upto <> l.batch_end OR l.committed > l.batch_end - w.cnt
                             THEN 'batch changed since the pop'
                   END AS error
            FROM w
            LEFT JOIN l ON l.pid = w.pid AND l.grp = w.grp
            LEFT JOIN LATERAL (
                SELECT lp.last_offset, q.name AS queue
                FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
                WHERE lp.id = w.pid OFFSET 0) k ON true),
        decided AS (
            SELECT j.*,
                   CASE WHEN j.ord > min(j.ord) FILTER (WHERE j.error IS NULL)
                                     OVER (PARTITION BY j.pid, j.grp)
                        THEN 'invalid or expired lease' ELSE j.error END AS verdict
            FROM judged j),
        settled AS (
            UPDATE queen.log_consumers c
            SET committed = d.upto, worker_id = NULL, lease_expires_at = NULL,
                lease_acquired_at = NULL, batch_end = NULL, attempt_offset = NULL,
                attempt_count = 0, batch_retry_count = 0,
                total_consumed = c.total_consumed + (d.upto - d.committed),
                last_consumed_at = v_now
            FROM decided d
            WHERE d.verdict IS NULL AND c.partition_id = d.pid AND c.consumer_group = d.grp
            RETURNING d.ord)
        SELECT jsonb_build_object('ok', true, 'results', COALESCE(jsonb_agg(
                   CASE WHEN d.verdict IS NULL
                        THEN jsonb_build_object('ok', true, 'acked', d.upto - d.committed,
                                                'error', NULL, 'leaseReleased', true)
                             || jsonb_strip_nulls(jsonb_build_object(
                                    'wakeQueue', CASE WHEN d.last_offset > d.upto THEN d.queue END))
                        ELSE jsonb_build_object('ok', false, 'acked', 0, 'error', d.verdict)
                   END ORDER BY d.ord), '[]'::jsonb))
        INTO v_out
        FROM decided d
        WHERE d.verdict IS NOT NULL OR d.ord IN (SELECT settled.ord FROM settled);
        RETURN v_out;
    END IF;
    v_results := array_fill(NULL::jsonb, ARRAY[v_n]);
    FOR v_row IN
        SELECT w.pid, w.grp, w.upto, w.worker, w.cnt, w.ord
        FROM unnest(p_pids, p_groups, p_ends, p_workers, p_counts)
             WITH ORDINALITY AS w(pid, grp, upto, worker, cnt, ord)
        ORDER BY w.pid, w.grp, w.ord
    LOOP
        v_r := queen.log_ack_at_v1(v_row.pid, v_row.grp, v_row.worker, v_row.upto, true, v_row.cnt,
                                   COALESCE(p_cover, false));
        v_results[v_row.ord] := jsonb_build_object(
            'ok', v_r->'ok', 'acked', COALESCE(v_r->'acked', '0'::jsonb),
            'error', v_r->'error')
            || jsonb_strip_nulls(jsonb_build_object(
                   'leaseReleased', v_r->'leaseReleased', 'wakeQueue', v_r->'wakeQueue'));
    END LOOP;
    RETURN jsonb_build_object('ok', true, 'results', COALESCE(to_jsonb(v_results), '[]'::jsonb));
END
$$;
