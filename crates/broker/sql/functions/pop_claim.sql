-- pop_claim: the claim itself, for one partition (log_pop_claim_v1, docs/spec/life-of-a-pop.md
-- Steps 2-6) and set-based over an ordered candidate list (log_pop_candidates_v1, which every
-- multi-partition shape of pop.sql calls). The locking rules and the result shape are pop.sql's
-- (its header): a claim never waits, it skips what is locked.

-- The claim core for one partition (docs/spec/life-of-a-pop.md Steps 2-6). Returns one row: the verdict
-- r_state ('took' | 'empty' | 'leased'; deferral by windowBuffer/delayedProcessing and
-- lock-skips report 'leased' with the horizon in r_until), the delivery attempt, the
-- partition's last_offset as read, and the delivered segments as aligned arrays.
-- p_lease_seconds NULL or <= 0 means the queue's lease_time (60 without one). The steps are
-- in pop_steps.sql; taking the segments stays here because they are the answer.
CREATE OR REPLACE FUNCTION queen.log_pop_claim_v1(
    p_pid bigint, p_group text, p_budget int, p_lease_seconds int, p_worker text,
    p_auto_ack bool, p_sub_mode text, p_sub_from text, p_skip_window bool)
RETURNS TABLE(r_state text, r_until timestamptz, r_attempt int, r_last_off bigint,
              r_partition text, r_queue text, r_taken int,
              r_bases bigint[], r_starts int[], r_takes int[], r_counts int[],
              r_created timestamptz[], r_blobs bytea[])
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    -- Step 1's reading of the partition and its queue.
    v_qid bigint; v_log_start bigint; v_delay int; v_window int; v_ttl int; v_lease int;
    v_committed bigint; v_created bool := false;
    -- Step 5: the first offset wanted, the delayedProcessing cut, the budget left, the span
    -- taken, where a too-young segment deferred it, the head segment, a segment's take.
    v_wanted bigint; v_cut timestamptz; v_left int := GREATEST(p_budget, 0);
    v_first bigint; v_last_taken bigint; v_deferred_at timestamptz;
    h_base bigint; h_end bigint; h_created timestamptz; seg record; v_take int;
BEGIN
    r_state := 'empty'; r_taken := 0;
    r_bases := '{}'; r_starts := '{}'; r_takes := '{}'; r_counts := '{}';
    r_created := '{}'; r_blobs := '{}';

    -- Step 1: the partition and its queue's visibility and lease configuration.
    SELECT p.last_offset, p.log_start, p.name, q.id, q.name, q.delayed_processing, q.window_buffer,
           q.ttl, COALESCE(NULLIF(GREATEST(p_lease_seconds, 0), 0), NULLIF(q.lease_time, 0), 60)
    INTO r_last_off, v_log_start, r_partition, v_qid, r_queue, v_delay, v_window, v_ttl, v_lease
    FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_pid;
    IF NOT FOUND THEN
        RETURN NEXT; RETURN;
    END IF;

    -- Step 2: windowBuffer defers the whole partition while its newest segment is young.
    IF v_window > 0 AND NOT p_skip_window THEN
        r_until := queen.log_pop_window_until_v1(p_pid, v_window, v_now);
        IF r_until IS NOT NULL THEN
            r_state := 'leased';
            RETURN NEXT; RETURN;
        END IF;
    END IF;

    -- Step 4: claim first. A live lease or another pop mid-flight on the row skips it: present
    -- (leased or locked) means skip this cycle, without waiting. A missing row Step 3 creates
    -- (log_pop_create_cursor_v1), and the claim runs once more.
    LOOP
        SELECT c.committed INTO v_committed
        FROM queen.log_consumers c
        WHERE c.partition_id = p_pid AND c.consumer_group = p_group
          AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < v_now)
        FOR UPDATE SKIP LOCKED;
        EXIT WHEN FOUND;
        IF NOT v_created THEN
            SELECT c.lease_expires_at INTO r_until
            FROM queen.log_consumers c
            WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
            IF FOUND THEN
                r_state := 'leased';
                r_until := GREATEST(r_until, v_now);
                RETURN NEXT; RETURN;
            END IF;
            v_created := queen.log_pop_create_cursor_v1(p_pid, p_group, v_qid, r_last_off,
                                                        v_log_start, p_sub_mode, p_sub_from);
            CONTINUE WHEN v_created;
        END IF;
        r_state := 'leased';
        r_until := v_now;
        RETURN NEXT; RETURN;
    END LOOP;

    IF v_ttl > 0 THEN -- expired messages are skipped, not delivered
        v_committed := queen.log_pop_skip_expired_v1(p_pid, p_group, v_committed, v_ttl, v_now);
    END IF;

    -- Step 5: head probe (one backward step, covering test applied afterwards so a miss
    -- never walks the head), then the forward scan until the budget is spent. Step 2's
    -- delayedProcessing cuts a contiguous suffix: the first too-young segment ends the scan.
    v_wanted := v_committed + 1;
    v_cut := CASE WHEN v_delay > 0 THEN v_now - make_interval(secs => v_delay) ELSE 'infinity' END;
    SELECT s.base_offset, s.end_offset, s.created_at INTO h_base, h_end, h_created
    FROM queen.log_segments s
    WHERE s.partition_id = p_pid AND s.base_offset <= v_wanted
    ORDER BY s.base_offset DESC LIMIT 1;
    IF FOUND AND h_end >= v_wanted AND v_left > 0 THEN
        IF h_created > v_cut THEN
            v_deferred_at := h_created;
        ELSE
            v_take := LEAST(h_end - v_wanted + 1, v_left)::int;
            r_bases := r_bases || h_base;
            r_starts := r_starts || (v_wanted - h_base)::int;
            r_takes := r_takes || v_take;
            r_counts := r_counts || (h_end - h_base + 1)::int;
            r_created := r_created || h_created;
            r_blobs := r_blobs || (SELECT s.blob FROM queen.log_segments s
                                   WHERE s.partition_id = p_pid AND s.base_offset = h_base);
            v_first := v_wanted;
            v_last_taken := v_wanted + v_take - 1;
            v_left := v_left - v_take;
            r_taken := v_take;
        END IF;
    END IF;
    -- The LIMIT (a segment holds a message at least) keeps the plan an ordered primary-key walk
    -- that stops at the budget; without it a deep backlog interleaved with other partitions' went
    -- to a bitmap scan and a sort (20 messages of 10 000 segments: 9 136 buffers, 32 ms; 22, 0.05).
    IF v_left > 0 AND v_deferred_at IS NULL THEN
        FOR seg IN
            SELECT s.base_offset, s.end_offset, s.created_at, s.blob
            FROM queen.log_segments s
            WHERE s.partition_id = p_pid AND s.base_offset > v_wanted
            ORDER BY s.base_offset
            LIMIT v_left
        LOOP
            IF seg.created_at > v_cut THEN
                v_deferred_at := seg.created_at;
                EXIT;
            END IF;
            v_take := LEAST(seg.end_offset - seg.base_offset + 1, v_left)::int;
            r_bases := r_bases || seg.base_offset;
            r_starts := r_starts || 0;
            r_takes := r_takes || v_take;
            r_counts := r_counts || (seg.end_offset - seg.base_offset + 1)::int;
            r_created := r_created || seg.created_at;
            r_blobs := r_blobs || seg.blob;
            v_first := COALESCE(v_first, seg.base_offset);
            v_last_taken := seg.base_offset + v_take - 1;
            v_left := v_left - v_take;
            r_taken := r_taken + v_take;
            EXIT WHEN v_left <= 0;
        END LOOP;
    END IF;

    IF r_taken = 0 THEN
        IF v_deferred_at IS NOT NULL THEN
            r_state := 'leased';
            r_until := v_deferred_at + make_interval(secs => v_delay);
        ELSIF r_last_off > v_committed THEN
            PERFORM queen.log_pop_seal_empty_v1(p_pid, p_group, r_last_off);
        END IF;
        RETURN NEXT; RETURN;
    END IF;

    -- Step 6: lease what was taken (autoAck: commit it, no lease horizon).
    IF NOT p_auto_ack THEN
        r_until := v_now + make_interval(secs => v_lease);
    END IF;
    r_attempt := queen.log_pop_write_lease_v1(p_pid, p_group, p_auto_ack, p_worker, r_until,
                                              v_first, v_last_taken, r_taken, v_now);
    r_state := 'took';
    RETURN NEXT;
END $$;

-- The per-partition entry point of docs/spec/life-of-a-pop.md by names (docs/engine.md §5.3): raw segment rows.
CREATE OR REPLACE FUNCTION queen.log_pop_v1(
    p_queue text, p_partition text, p_group text, p_budget int, p_lease_seconds int, p_worker text,
    p_auto_ack bool DEFAULT false, p_sub_mode text DEFAULT 'all', p_sub_from text DEFAULT '',
    p_skip_window_debounce bool DEFAULT false)
RETURNS TABLE(r_base bigint, r_start_idx int, r_take int, r_msg_count int, r_created_at timestamptz, r_blob bytea)
LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint;
BEGIN
    SELECT p.id INTO v_pid
    FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = p_partition
    WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT u.b, u.s, u.t, u.m, u.c, u.blob
    FROM queen.log_pop_claim_v1(v_pid, p_group, p_budget, p_lease_seconds, p_worker, p_auto_ack,
                                p_sub_mode, p_sub_from, p_skip_window_debounce) r,
         unnest(r.r_bases, r.r_starts, r.r_takes, r.r_counts, r.r_created, r.r_blobs) AS u(b, s, t, m, c, blob);
END $$;

-- Segment descriptors of one claim as the meta JSON array (createdAt in µs since epoch).
-- PL/pgSQL, not SQL: a SQL function with a FROM clause is parsed and planned again in every
-- transaction that calls it (~120 µs per pop); PL/pgSQL keeps the plan for the session.
CREATE OR REPLACE FUNCTION queen.log_pop_segments_json_v1(p_bases bigint[], p_starts int[], p_takes int[],
    p_counts int[], p_created timestamptz[])
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN (SELECT COALESCE(jsonb_agg(jsonb_build_object(
               'base', u.b, 'startIdx', u.s, 'take', u.t, 'msgCount', u.m,
               'createdAt', (extract(epoch FROM u.c) * 1000000)::bigint) ORDER BY u.o), '[]'::jsonb)
            FROM unnest(p_bases, p_starts, p_takes, p_counts, p_created) WITH ORDINALITY AS u(b, s, t, m, c, o));
END $$;

-- Claims from candidate partitions in the given order until the budget is spent or
-- p_max_partitions partitions delivered; one worker id for all. `states` holds one verdict
-- per evaluated candidate ({"p","s","until"?,"lastOff"}); the unevaluated tail is omitted.
--
-- Set-based (docs/engine.md §5.4): a round reads every remaining candidate without a lock,
-- reports the ones that are leased or have nothing pending, and picks, in candidate order, the
-- claimable prefix whose pending messages cover the budget; it locks that prefix in one
-- statement (SKIP LOCKED), reads and splits the budget over its segments in one, and leases
-- (or, autoAck, commits) it in one. A statement per round instead of a claim per partition:
-- the per-partition loop spent ~0.5 ms of PostgreSQL CPU per claimed partition. First
-- contacts (no cursor row) are seeded set-based too: a run of them, at most as many as the pop
-- could still claim, gets its cursor rows in one statement with log_pop_claim_v1's Step 3
-- rules (the same try-lock, subscription and partition lock), and the next round reads them
-- as ordinary candidates; one that got no row (try-lock or partition lock lost) takes the full
-- procedure. Candidates that need it go through log_pop_claim_v1, in their turn: a queue with
-- windowBuffer or delayedProcessing, an expired head (ttl), a row that showed pending but
-- holds no segment (the empty-partition seal). So does every candidate of a pop that may claim
-- one partition.
--
-- Its SET clauses: generic plans, since custom ones re-planned the claim statement on every
-- call (~1.5 ms of a one-partition pop); and no sequential scans: every statement addresses
-- rows by key, but on a small consumer table the planner priced a scan of all of it below a
-- few hundred index probes and then locked and updated through it (~3 ms per statement at
-- 12 000 rows). The steps (pop_steps.sql) run under both settings too.
CREATE OR REPLACE FUNCTION queen.log_pop_candidates_v1(
    p_pids bigint[], p_group text, p_budget int, p_lease_seconds int, p_worker text, p_auto_ack bool,
    p_max_partitions int, p_sub_mode text, p_sub_from text, p_skip_window bool)
RETURNS TABLE(meta jsonb, blobs bytea[], states jsonb, claimed int)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $$
DECLARE
    v_n int := COALESCE(cardinality(p_pids), 0);
    v_max int := GREATEST(p_max_partitions, 1);
    v_left int := GREATEST(p_budget, 0);
    v_i int := 1; v_slow_at int := 0; v_now timestamptz;
    -- A round's read of candidates v_i.., its walk (candidate indexes count from v_i), what
    -- its claim locked and took, and the candidate the full procedure takes next (v_slow).
    e_pid bigint[]; e_name text[]; e_queue text[]; e_last bigint[]; e_class text[];
    e_until timestamptz[]; e_lease int[]; e_ttl int[]; e_pending bigint[];
    c_idx int[]; c_plan int[]; c_pid bigint[]; w_idx int[]; v_walked int; v_fresh bigint[];
    v_walk_slow int; v_locked bigint[]; v_committed bigint[]; v_slow int;
    t_idx int[]; t_first bigint[]; t_last bigint[]; t_taken int[]; t_segs jsonb[];
    t_attempt int[]; t_until timestamptz[]; t_blobs bytea[];
    -- First contacts already seeded, and the pop's subscription intent (read once).
    v_seeded bigint[] := '{}'; v_intent timestamptz; v_intent_read bool := false;
    j int; r record; w record; v_blob bytea;
    -- Built with array_append, which PL/pgSQL does in place: concatenating jsonb or arrays
    -- copies the whole accumulator on every claim, quadratic in a wide (autopilot) pop.
    v_meta jsonb[] := '{}'; v_states jsonb[] := '{}'; v_blobs bytea[] := '{}';
BEGIN
    claimed := 0;
    WHILE v_i <= v_n AND v_left > 0 AND claimed < v_max LOOP
        -- A pop of one partition claims it the direct way: for a single claim the round's
        -- four statements cost more than log_pop_claim_v1 (measured: ~1.5x the backend time).
        IF v_i = v_slow_at OR v_max = 1 THEN
            SELECT * INTO r
            FROM queen.log_pop_claim_v1(p_pids[v_i], p_group, v_left, p_lease_seconds, p_worker,
                                        p_auto_ack, p_sub_mode, p_sub_from, p_skip_window);
            v_i := v_i + 1;
            CONTINUE WHEN r.r_partition IS NULL;
            v_states := array_append(v_states, jsonb_strip_nulls(jsonb_build_object(
                'p', r.r_partition, 's', r.r_state, 'until', r.r_until, 'lastOff', r.r_last_off)));
            IF r.r_state = 'took' THEN
                claimed := claimed + 1;
                v_left := v_left - r.r_taken;
                v_meta := array_append(v_meta, jsonb_build_object(
                    'partition', r.r_partition, 'partitionId', p_pids[v_i - 1], 'queue', r.r_queue,
                    'deliveryAttempt', r.r_attempt,
                    'leaseExpiresAt', CASE WHEN NOT p_auto_ack
                                           THEN (extract(epoch FROM r.r_until) * 1000000)::bigint END,
                    'segments', queen.log_pop_segments_json_v1(r.r_bases, r.r_starts, r.r_takes,
                                                                r.r_counts, r.r_created)));
                FOREACH v_blob IN ARRAY COALESCE(r.r_blobs, '{}') LOOP
                    v_blobs := array_append(v_blobs, v_blob);
                END LOOP;
            END IF;
            CONTINUE;
        END IF;

        v_now := clock_timestamp();
        SELECT * INTO e_pid, e_name, e_queue, e_last, e_class, e_until, e_lease, e_ttl, e_pending
        FROM queen.log_pop_read_round_v1(p_pids[v_i:v_n], p_group, p_lease_seconds, p_skip_window,
                                         v_now);
        -- Assigned, not selected from: a SELECT costs an executor run per call and round.
        w := queen.log_pop_walk_round_v1(e_pid, e_class, e_pending, v_seeded, v_left, v_max - claimed);
        c_idx := w.c_idx; c_plan := w.c_plan; c_pid := w.c_pid; w_idx := w.w_idx;
        v_walked := w.walked; v_fresh := w.fresh; v_walk_slow := w.slow_at;
        IF v_walk_slow IS NOT NULL THEN
            v_slow_at := v_i + v_walk_slow - 1;
        END IF;
        IF v_fresh IS NOT NULL THEN
            IF NOT v_intent_read AND p_group <> '__QUEUE_MODE__' THEN
                SELECT i.r_ts INTO v_intent
                FROM queen.log_sub_intent_v1(p_group, p_sub_mode, p_sub_from) i;
                v_intent_read := true;
            END IF;
            v_seeded := v_seeded || queen.log_pop_seed_run_v1(v_fresh, p_group, v_intent);
        END IF;

        v_slow := NULL;
        IF cardinality(c_idx) > 0 THEN
            -- The claim: lock the prefix (a row leased or mid-claim since the read is skipped),
            -- split the budget over its segments, lease what was taken.
            SELECT array_agg(l.partition_id), array_agg(l.committed) INTO v_locked, v_committed
            FROM (SELECT c.partition_id, c.committed
                  FROM queen.log_consumers c
                  WHERE c.partition_id = ANY (c_pid)
                    AND c.consumer_group = p_group
                    AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < v_now)
                  FOR UPDATE SKIP LOCKED) l;
            SELECT * INTO t_idx, t_first, t_last, t_taken, t_segs, v_slow, t_blobs
            FROM queen.log_pop_split_prefix_v1(c_idx, c_plan, v_locked, v_committed, e_pid, e_ttl,
                                               v_left, v_now);
            IF cardinality(t_idx) > 0 THEN
                w := queen.log_pop_lease_prefix_v1(t_idx, t_first, t_last, t_taken, e_pid, e_lease,
                                                   c_pid, p_group, p_worker, p_auto_ack, v_now);
                t_attempt := w.t_attempt; t_until := w.t_until;
                FOR k IN 1 .. cardinality(t_idx) LOOP
                    j := t_idx[k];
                    claimed := claimed + 1;
                    v_left := v_left - t_taken[k];
                    v_states := array_append(v_states, jsonb_strip_nulls(jsonb_build_object(
                        'p', e_name[j], 's', 'took', 'until', t_until[k], 'lastOff', e_last[j])));
                    v_meta := array_append(v_meta, jsonb_build_object(
                        'partition', e_name[j], 'partitionId', e_pid[j], 'queue', e_queue[j],
                        'deliveryAttempt', t_attempt[k],
                        'leaseExpiresAt', (extract(epoch FROM t_until[k]) * 1000000)::bigint,
                        'segments', t_segs[k]));
                END LOOP;
                FOREACH v_blob IN ARRAY t_blobs LOOP
                    v_blobs := array_append(v_blobs, v_blob);
                END LOOP;
            END IF;
            -- A prefix row another pop leased or locked since the read: skipped this cycle.
            FOR k IN 1 .. cardinality(c_idx) LOOP
                j := c_idx[k];
                EXIT WHEN j >= v_slow;
                CONTINUE WHEN e_pid[j] = ANY (COALESCE(v_locked, '{}'));
                v_states := array_append(v_states, jsonb_build_object(
                    'p', e_name[j], 's', 'leased', 'until', GREATEST(e_until[j], v_now),
                    'lastOff', e_last[j]));
            END LOOP;
        END IF;
        -- The walk's verdicts, up to a candidate the full procedure takes next (the next
        -- round walks the rest again).
        FOR k IN 1 .. cardinality(w_idx) LOOP
            j := w_idx[k];
            CONTINUE WHEN j >= v_slow;
            v_states := array_append(v_states, CASE e_class[j]
                WHEN 'leased' THEN jsonb_build_object('p', e_name[j], 's', 'leased',
                                                      'until', GREATEST(e_until[j], v_now),
                                                      'lastOff', e_last[j])
                ELSE jsonb_build_object('p', e_name[j], 's', 'empty', 'lastOff', e_last[j]) END);
        END LOOP;
        IF v_slow IS NOT NULL THEN
            v_slow_at := v_i + v_slow - 1;
            v_i := v_slow_at;
            CONTINUE;
        END IF;
        v_i := v_i + v_walked;
        CONTINUE WHEN v_fresh IS NOT NULL; -- seeded: the next round reads them
        IF v_walked = 0 AND v_slow_at <> v_i THEN
            EXIT;
        END IF;
    END LOOP;
    meta := jsonb_build_object('partitions', to_jsonb(v_meta));
    states := to_jsonb(v_states);
    blobs := v_blobs;
    RETURN NEXT;
END $$;
