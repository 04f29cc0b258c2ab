-- pop_steps: the named steps of pop_claim.sql's two claims, called by those only. A step never
-- takes a lock its caller's statement did not take, and sees what that statement saw:
-- PL/pgSQL steps are VOLATILE like their callers, so each statement takes its own snapshot and
-- keeps its cached plan; SQL steps are single read-only SELECTs marked STABLE so that the
-- planner inlines them into the calling statement (one statement, as if written there).
-- log_pop_candidates_v1's steps run under its SET clauses (generic plans, no sequential scans).
--
-- A call costs (callgrind, in the pop's own transaction): ~9 000 instructions for a PL/pgSQL
-- step that returns a value, ~4x as many for one that returns a row, more when selected from;
-- a 100-message claim costs ~950 000. So log_pop_claim_v1 keeps Step 4's lock and Step 5's
-- take (whose arrays are the answer) and calls one step when it takes (Step 6's), and
-- log_pop_candidates_v1 calls one PL/pgSQL step per round plus one per lease or seeding.

-- log_pop_claim_v1 Step 2: windowBuffer, a quiet-period debounce on the newest segment
-- (created_at is monotone in base_offset, so one backward primary-key step finds it). The end
-- of the quiet period while it lasts, else NULL.
CREATE OR REPLACE FUNCTION queen.log_pop_window_until_v1(p_pid bigint, p_window int, p_now timestamptz)
RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
    v_newest timestamptz;
BEGIN
    SELECT s.created_at INTO v_newest
    FROM queen.log_segments s WHERE s.partition_id = p_pid
    ORDER BY s.base_offset DESC LIMIT 1;
    IF v_newest > p_now - make_interval(secs => p_window) THEN
        RETURN v_newest + make_interval(secs => p_window);
    END IF;
    RETURN NULL;
END $$;

-- log_pop_claim_v1 Step 3, for a missing cursor row: exactly one pop creates it. False when
-- this one may not (skip this cycle); true when the row exists now, for Step 4 to claim.
CREATE OR REPLACE FUNCTION queen.log_pop_create_cursor_v1(
    p_pid bigint, p_group text, p_qid bigint, p_last_off bigint, p_log_start bigint,
    p_sub_mode text, p_sub_from text)
RETURNS bool LANGUAGE plpgsql AS $$
DECLARE
    v_ts timestamptz;
    v_seed bigint;
BEGIN
    -- Try, never take: a wildcard pop's transaction lives across its whole candidate loop,
    -- so waiting here would chain pops together.
    IF NOT pg_try_advisory_xact_lock(hashtextextended(p_pid::text || '/' || p_group, 42)) THEN
        RETURN false;
    END IF;
    -- Seed on first contact only: the durable subscription record, else the pop's own
    -- intent, else everything retained; '__QUEUE_MODE__' never skips backlog.
    IF p_group <> '__QUEUE_MODE__' THEN
        SELECT m.subscription_timestamp INTO v_ts
        FROM queen.consumer_groups_metadata m
        WHERE m.consumer_group = p_group AND m.queue_id = p_qid
          AND m.partition_name = '' AND m.namespace = '' AND m.task = '';
        IF NOT FOUND THEN
            SELECT i.r_ts INTO v_ts
            FROM queen.log_sub_intent_v1(p_group, p_sub_mode, p_sub_from) i;
        END IF;
    END IF;
    -- A partition being deleted gets no cursor row (see pop.sql's header).
    PERFORM 1 FROM queen.log_partitions p WHERE p.id = p_pid FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    v_seed := CASE WHEN v_ts IS NULL THEN -1
                   ELSE queen.log_seed_cursor_v1(p_pid, p_last_off, p_log_start, v_ts) END;
    INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
    VALUES (p_pid, p_group, v_seed)
    ON CONFLICT DO NOTHING;
    RETURN true;
END $$;

-- log_pop_claim_v1's ttl (docs/wire.md §3.2): a message older than ttl seconds is not
-- delivered. created_at is monotone in base_offset, so the expired part of what the group
-- still wants is a prefix: walk it forward from the segment covering the cursor (at most 1000
-- segments per claim; the next claim goes on) and move the cursor past it, a skip like the
-- empty-partition seal: no lease, no attempt, not counted as consumed. The cursor after it.
CREATE OR REPLACE FUNCTION queen.log_pop_skip_expired_v1(
    p_pid bigint, p_group text, p_committed bigint, p_ttl int, p_now timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_expired bigint;
    seg record;
BEGIN
    FOR seg IN
        SELECT s.end_offset, s.created_at
        FROM queen.log_segments s
        WHERE s.partition_id = p_pid
          AND s.base_offset >= COALESCE(
                (SELECT max(h.base_offset) FROM queen.log_segments h
                 WHERE h.partition_id = p_pid AND h.base_offset <= p_committed + 1),
                p_committed + 1)
        ORDER BY s.base_offset
        LIMIT 1000
    LOOP
        EXIT WHEN seg.created_at >= p_now - make_interval(secs => p_ttl);
        v_expired := seg.end_offset;
    END LOOP;
    IF v_expired > p_committed THEN
        UPDATE queen.log_consumers c
        SET committed = v_expired, attempt_offset = NULL, attempt_count = 0,
            batch_retry_count = 0
        WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
        RETURN v_expired;
    END IF;
    RETURN p_committed;
END $$;

-- log_pop_claim_v1's empty-partition cursor seal, for a claim that took nothing below a
-- last_offset above the cursor: if retention removed every segment, seal to the last_offset
-- the claim read (a concurrent push lands above it and stays pending). A seal, not a claim: no
-- lease or attempt field is touched.
CREATE OR REPLACE FUNCTION queen.log_pop_seal_empty_v1(p_pid bigint, p_group text, p_last_off bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM queen.log_segments s WHERE s.partition_id = p_pid) THEN
        UPDATE queen.log_consumers c SET committed = p_last_off
        WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
    END IF;
END $$;

-- log_pop_claim_v1 Step 6: autoAck commits inside the pop (at-most-once); otherwise lease
-- (committed, p_last] until p_until without moving the cursor. attempt_count is redelivery
-- telemetry: the same start offset as the previous delivery means nack or lease expiry.
-- The delivery attempt.
CREATE OR REPLACE FUNCTION queen.log_pop_write_lease_v1(
    p_pid bigint, p_group text, p_auto_ack bool, p_worker text, p_until timestamptz,
    p_first bigint, p_last bigint, p_taken int, p_now timestamptz)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_attempt int;
BEGIN
    IF p_auto_ack THEN
        UPDATE queen.log_consumers c SET
            committed = p_last, worker_id = NULL, lease_expires_at = NULL,
            lease_acquired_at = NULL, batch_end = NULL,
            total_consumed = c.total_consumed + p_taken, last_consumed_at = p_now
        WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
        RETURN 1;
    END IF;
    UPDATE queen.log_consumers c SET
        worker_id = p_worker,
        lease_expires_at = p_until,
        lease_acquired_at = p_now,
        batch_end = p_last,
        attempt_count = CASE WHEN c.attempt_offset IS NOT DISTINCT FROM p_first
                             THEN c.attempt_count + 1 ELSE 1 END,
        attempt_offset = p_first
    WHERE c.partition_id = p_pid AND c.consumer_group = p_group
    RETURNING c.attempt_count INTO v_attempt;
    RETURN v_attempt;
END $$;

-- log_pop_candidates_v1's lock-free read of a round: what each candidate looks like right now,
-- as arrays aligned in candidate order. A class: 'slow' (windowBuffer or delayedProcessing: the
-- full procedure), 'fresh' (no cursor row), 'leased', 'empty' (nothing pending) or 'claim'.
-- SQL and STABLE so that the planner inlines it into the caller's statement: one statement,
-- one snapshot, as if written there, and no call.
CREATE OR REPLACE FUNCTION queen.log_pop_read_round_v1(
    p_pids bigint[], p_group text, p_lease_seconds int, p_skip_window bool, p_now timestamptz)
RETURNS TABLE(e_pid bigint[], e_name text[], e_queue text[], e_last bigint[], e_class text[],
              e_until timestamptz[], e_lease int[], e_ttl int[], e_pending bigint[])
LANGUAGE sql STABLE AS $$
    SELECT array_agg(u.pid ORDER BY u.ord), array_agg(x.name ORDER BY u.ord),
           array_agg(x.qname ORDER BY u.ord), array_agg(x.last_offset ORDER BY u.ord),
           array_agg(x.class ORDER BY u.ord), array_agg(x.lease_until ORDER BY u.ord),
           array_agg(x.lease ORDER BY u.ord), array_agg(x.ttl ORDER BY u.ord),
           array_agg(x.pending ORDER BY u.ord)
    FROM unnest(p_pids) WITH ORDINALITY AS u(pid, ord)
    LEFT JOIN LATERAL (
        SELECT p.name, q.name AS qname, p.last_offset, c.lease_expires_at AS lease_until, q.ttl,
               COALESCE(NULLIF(GREATEST(p_lease_seconds, 0), 0), NULLIF(q.lease_time, 0), 60) AS lease,
               p.last_offset - c.committed AS pending,
               CASE WHEN (q.window_buffer > 0 AND NOT p_skip_window)
                         OR q.delayed_processing > 0 THEN 'slow'
                    WHEN c.partition_id IS NULL THEN 'fresh'
                    WHEN c.worker_id IS NOT NULL AND c.lease_expires_at >= p_now THEN 'leased'
                    WHEN p.last_offset <= c.committed THEN 'empty'
                    ELSE 'claim' END AS class
        FROM queen.log_partitions p
        JOIN queen.queues q ON q.id = p.queue_id
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE p.id = u.pid
        OFFSET 0) x ON true
$$;

-- log_pop_candidates_v1's walk of a round's read, in order: the candidates passed that are
-- leased or empty (w_idx, for their verdicts), the claimable prefix that covers p_left
-- messages in at most p_room partitions (c_*: candidate index, expected take, partition), up
-- to the first candidate that needs the full procedure (slow_at: windowBuffer,
-- delayedProcessing, or a first contact seeded before) or a run of first contacts ahead of any
-- prefix (the prefix is claimed first): fresh, at most p_room and p_left of them, none in
-- p_seeded. walked: how many candidates it passed. A candidate without a class is gone.
CREATE OR REPLACE FUNCTION queen.log_pop_walk_round_v1(
    e_pid bigint[], e_class text[], e_pending bigint[], p_seeded bigint[], p_left int, p_room int,
    OUT c_idx int[], OUT c_plan int[], OUT c_pid bigint[], OUT w_idx int[], OUT walked int,
    OUT fresh bigint[], OUT slow_at int)
LANGUAGE plpgsql AS $$
DECLARE
    v_plan_left int := p_left;
BEGIN
    c_idx := '{}'; c_plan := '{}'; c_pid := '{}'; w_idx := '{}';
    walked := 0;
    FOR j IN 1 .. COALESCE(cardinality(e_pid), 0) LOOP
        EXIT WHEN v_plan_left <= 0 OR cardinality(c_idx) >= p_room;
        IF e_class[j] = 'slow' OR (e_class[j] = 'fresh' AND e_pid[j] = ANY (p_seeded)) THEN
            slow_at := j;
            EXIT;
        END IF;
        IF e_class[j] = 'fresh' THEN
            IF cardinality(c_idx) = 0 THEN
                fresh := '{}';
                FOR f IN j .. cardinality(e_pid) LOOP
                    EXIT WHEN e_class[f] IS DISTINCT FROM 'fresh' OR e_pid[f] = ANY (p_seeded)
                              OR cardinality(fresh) >= LEAST(p_room, p_left);
                    fresh := array_append(fresh, e_pid[f]);
                END LOOP;
            END IF;
            EXIT;
        END IF;
        walked := j;
        CONTINUE WHEN e_class[j] IS NULL OR e_pid[j] = ANY (c_pid);
        IF e_class[j] IN ('leased', 'empty') THEN
            w_idx := array_append(w_idx, j);
        ELSE
            c_idx := array_append(c_idx, j);
            c_pid := array_append(c_pid, e_pid[j]);
            c_plan := array_append(c_plan, LEAST(e_pending[j], v_plan_left)::int);
            v_plan_left := v_plan_left - LEAST(e_pending[j], v_plan_left)::int;
        END IF;
    END LOOP;
END $$;

-- log_pop_candidates_v1's seeding of a run of first contacts (p_run): log_pop_claim_v1's
-- Step 3 for the run in one statement, with the same try-lock (exactly one pop creates a
-- row), the durable subscription record else the pop's intent ('__QUEUE_MODE__' never skips
-- backlog), no row for a partition being deleted. One that got no row the next round hands
-- to the full procedure. Returns p_run, for the caller to count as seeded (a value, so that
-- the call is an expression, cheaper than a PERFORM).
CREATE OR REPLACE FUNCTION queen.log_pop_seed_run_v1(p_run bigint[], p_group text, p_intent timestamptz)
RETURNS bigint[] LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
    SELECT f.id, p_group,
           CASE WHEN f.ts IS NULL THEN -1
                ELSE queen.log_seed_cursor_v1(f.id, f.last_offset, f.log_start, f.ts) END
    FROM (
        SELECT p.id, p.last_offset, p.log_start,
               CASE WHEN p_group = '__QUEUE_MODE__' THEN NULL
                    ELSE COALESCE(m.subscription_timestamp, p_intent) END AS ts
        FROM (SELECT p.id, p.last_offset, p.log_start, p.queue_id
              FROM queen.log_partitions p
              WHERE p.id = ANY (p_run)
              ORDER BY p.id
              FOR KEY SHARE SKIP LOCKED) p
        LEFT JOIN queen.consumer_groups_metadata m
               ON m.consumer_group = p_group AND m.queue_id = p.queue_id
              AND m.partition_name = '' AND m.namespace = '' AND m.task = ''
        WHERE pg_try_advisory_xact_lock(hashtextextended(p.id::text || '/' || p_group, 42))
        OFFSET 0) f
    ORDER BY f.id
    ON CONFLICT DO NOTHING;
    RETURN p_run;
END $$;

-- log_pop_candidates_v1's split of a round's locked prefix (p_idx, p_plan: candidate indexes
-- into p_pid and p_ttl, expected takes; p_locked, p_committed: the cursor rows locked): the
-- segments from each locked cursor on, the p_left budget split over them in candidate order,
-- the first candidate the full procedure must decide (t_slow: nothing there, or an expired
-- head), and the blobs of what was taken (t_*: one element per partition taken, in candidate
-- order; t_blobs in segment order). SQL and STABLE so that it inlines: one statement, as if
-- written in the caller.
CREATE OR REPLACE FUNCTION queen.log_pop_split_prefix_v1(
    p_idx int[], p_plan int[], p_locked bigint[], p_committed bigint[], p_pid bigint[],
    p_ttl int[], p_left int, p_now timestamptz)
RETURNS TABLE(t_idx int[], t_first bigint[], t_last bigint[], t_taken int[], t_segs jsonb[],
              t_slow int, t_blobs bytea[])
LANGUAGE sql STABLE AS $$
    WITH l AS (
        SELECT w.ord, w.pid, w.wanted, w.plan, p_ttl[w.idx] AS ttl
        FROM unnest(p_idx, p_plan) WITH ORDINALITY AS a(idx, plan, ord)
        CROSS JOIN LATERAL (
            SELECT a.ord, a.idx, p_pid[a.idx] AS pid, a.plan,
                   p_committed[array_position(p_locked, p_pid[a.idx])] + 1 AS wanted) w
        WHERE w.wanted IS NOT NULL),
    segs AS (
        SELECT l.ord, l.pid, l.wanted, l.ttl, s.base_offset AS base, s.end_offset AS last,
               s.created_at, s.end_offset - GREATEST(s.base_offset, l.wanted) + 1 AS avail,
               row_number() OVER (PARTITION BY l.ord ORDER BY s.base_offset) AS rn
        FROM l CROSS JOIN LATERAL (
            SELECT s.base_offset, s.end_offset, s.created_at
            FROM queen.log_segments s
            WHERE s.partition_id = l.pid
              AND s.base_offset >= COALESCE(
                    (SELECT max(h.base_offset) FROM queen.log_segments h
                     WHERE h.partition_id = l.pid AND h.base_offset <= l.wanted),
                    l.wanted)
            ORDER BY s.base_offset
            LIMIT l.plan + 1) s
        WHERE s.end_offset >= l.wanted),
    slow AS (
        SELECT min(l.ord) AS ord
        FROM l LEFT JOIN (
            SELECT segs.ord,
                   bool_or(segs.rn = 1 AND segs.ttl > 0
                           AND segs.created_at < p_now - make_interval(secs => segs.ttl)) AS expired
            FROM segs GROUP BY segs.ord) g ON g.ord = l.ord
        WHERE g.ord IS NULL OR g.expired),
    run AS (
        SELECT segs.*, sum(segs.avail) OVER (ORDER BY segs.ord, segs.base
                                              ROWS UNBOUNDED PRECEDING) - segs.avail AS before
        FROM segs
        WHERE segs.ord < COALESCE((SELECT slow.ord FROM slow), 2147483647)),
    took AS (
        SELECT run.*, GREATEST(run.base, run.wanted) AS first,
               LEAST(run.avail, p_left - run.before)::int AS take
        FROM run WHERE run.before < p_left),
    part AS (
        SELECT took.ord, min(took.first) AS first, max(took.first + took.take - 1) AS last,
               sum(took.take)::int AS taken,
               jsonb_agg(jsonb_build_object(
                   'base', took.base, 'startIdx', took.first - took.base, 'take', took.take,
                   'msgCount', took.last - took.base + 1,
                   'createdAt', (extract(epoch FROM took.created_at) * 1000000)::bigint)
                   ORDER BY took.base) AS segs
        FROM took GROUP BY took.ord)
    SELECT (SELECT array_agg(p_idx[part.ord] ORDER BY part.ord) FROM part),
           (SELECT array_agg(part.first ORDER BY part.ord) FROM part),
           (SELECT array_agg(part.last ORDER BY part.ord) FROM part),
           (SELECT array_agg(part.taken ORDER BY part.ord) FROM part),
           (SELECT array_agg(part.segs ORDER BY part.ord) FROM part),
           (SELECT p_idx[slow.ord] FROM slow),
           (SELECT array_agg(b.blob ORDER BY took.ord, took.base)
            FROM took CROSS JOIN LATERAL (
                SELECT s.blob FROM queen.log_segments s
                WHERE s.partition_id = took.pid AND s.base_offset = took.base OFFSET 0) b)
$$;

-- log_pop_candidates_v1's lease of what a round took (t_*), in one statement; autoAck
-- commits it instead (attempt 1, no lease). The attempts and lease horizons, aligned with t_idx.
CREATE OR REPLACE FUNCTION queen.log_pop_lease_prefix_v1(
    t_idx int[], t_first bigint[], t_last bigint[], t_taken int[], e_pid bigint[], e_lease int[],
    c_pid bigint[], p_group text, p_worker text, p_auto_ack bool, p_now timestamptz,
    OUT t_attempt int[], OUT t_until timestamptz[])
LANGUAGE plpgsql AS $$
BEGIN
    IF p_auto_ack THEN
        UPDATE queen.log_consumers c SET
            committed = t.last, worker_id = NULL, lease_expires_at = NULL,
            lease_acquired_at = NULL, batch_end = NULL,
            total_consumed = c.total_consumed + t.taken, last_consumed_at = p_now
        FROM unnest(t_idx, t_last, t_taken) AS t(idx, last, taken)
        WHERE c.partition_id = ANY (c_pid) AND c.partition_id = e_pid[t.idx]
          AND c.consumer_group = p_group;
        t_attempt := array_fill(1, ARRAY[cardinality(t_idx)]);
        t_until := array_fill(NULL::timestamptz, ARRAY[cardinality(t_idx)]);
        RETURN;
    END IF;
    WITH leased AS (
        UPDATE queen.log_consumers c SET
            worker_id = p_worker,
            lease_expires_at = p_now + make_interval(secs => e_lease[t.idx]),
            lease_acquired_at = p_now,
            batch_end = t.last,
            attempt_count = CASE WHEN c.attempt_offset IS NOT DISTINCT FROM t.first
                                 THEN c.attempt_count + 1 ELSE 1 END,
            attempt_offset = t.first
        FROM unnest(t_idx, t_first, t_last) WITH ORDINALITY AS t(idx, first, last, ord)
        WHERE c.partition_id = ANY (c_pid) AND c.partition_id = e_pid[t.idx]
          AND c.consumer_group = p_group
        RETURNING t.ord, c.attempt_count, c.lease_expires_at)
    SELECT array_agg(leased.attempt_count ORDER BY leased.ord),
           array_agg(leased.lease_expires_at ORDER BY leased.ord)
    INTO t_attempt, t_until
    FROM leased;
END $$;
