-- pop_steps: the named steps of pop_claim.sql's log_pop_claim_v1, called by it only. Each is
-- PL/pgSQL and VOLATILE like its caller, so every statement still takes its own snapshot and
-- keeps its cached plan; none takes a lock its caller's statement did not take.
-- Each returns one value: a PL/pgSQL call that returns a row costs ~4x one that returns a
-- value (callgrind: ~13 000 against ~3 000 instructions), and in a pop's own transaction
-- even a value costs ~9 000, ~1% of a 100-message claim; so Step 4's lock and Step 5's take
-- (whose arrays are the answer) stay in log_pop_claim_v1: a claim that takes calls one step,
-- Step 6's.

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
