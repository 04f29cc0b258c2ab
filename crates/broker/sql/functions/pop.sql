-- pop: the pop path (docs/spec/life-of-a-pop.md and docs/spec/consuming.md, docs/engine.md §5). PostgreSQL
-- decides every claim under the consumer row's lock, and a pop never waits on a claim:
-- claims use FOR UPDATE SKIP LOCKED, cursor-row creation and the watermark use try-advisory
-- locks. The remaining waits are on first-contact inserts: a registration insert waits for a
-- concurrent seeder's commit before its transaction holds anything, and a lazily created
-- cursor row may wait for a seeder's bulk insert of that row. A seeder in turn can only wait
-- on a targeted pop's one new row (wildcard and discovery pops create rows lazily only after
-- the registration committed), and a targeted pop waits on nothing after creating it, so no
-- wait closes a cycle.
--
-- Every row a pop creates references a queue or partition row, whose foreign-key check takes
-- a key-share lock on it. Writers only take NO KEY UPDATE there, which does not conflict;
-- only a queue delete (FOR UPDATE, then a cascade over cursor rows) does. A pop holding a
-- cursor row must not wait for that delete, so before each such insert it takes the
-- key-share lock itself with SKIP LOCKED and, when the row is being deleted, creates nothing.
--
-- Result shape shared by the broker-facing functions (docs/engine.md §5.4): `meta` is
-- {"partitions":[{partition, partitionId, queue, deliveryAttempt, leaseExpiresAt (µs since
-- epoch; null for autoAck), segments:[{base, startIdx, take, msgCount, createdAt (µs since
-- epoch)}]}], "minPopWaitMs"?} and `blobs` holds the
-- segment blobs in the order the segments appear. The broker decompresses each blob and
-- slices frames [startIdx, startIdx + take).

-- The write watermark a candidate scan applies (docs/spec/life-of-a-pop.md): a partition is worth
-- a look only if last_write_at >= the floor minus two minutes. The slack absorbs the
-- one-second quantization of last_write_at on the push side; no floor means no filter.
CREATE OR REPLACE FUNCTION queen.log_write_horizon(p_floor timestamptz)
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT COALESCE(p_floor, '-infinity') - interval '2 minutes'
$$;

-- The cursor of a fresh (partition, group) for a subscription instant: just before the first
-- retained segment created at or after p_ts (a forward walk from log_start, never from
-- offset 0), or last_offset (future only) when nothing is that recent. One backward step on
-- the newest segment answers the common "subscribed now" case without a walk.
CREATE OR REPLACE FUNCTION queen.log_seed_cursor_v1(p_pid bigint, p_last bigint, p_log_start bigint, p_ts timestamptz)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_newest timestamptz;
    v_base bigint;
BEGIN
    SELECT s.created_at INTO v_newest
    FROM queen.log_segments s
    WHERE s.partition_id = p_pid
    ORDER BY s.base_offset DESC LIMIT 1;
    IF v_newest IS NULL OR v_newest < p_ts THEN
        RETURN p_last;
    END IF;
    SELECT s.base_offset INTO v_base
    FROM queen.log_segments s
    WHERE s.partition_id = p_pid AND s.base_offset >= p_log_start AND s.created_at >= p_ts
    ORDER BY s.base_offset LIMIT 1;
    RETURN COALESCE(v_base - 1, p_last);
END $$;

-- The subscription a pop's own parameters ask for: (mode, instant). '__QUEUE_MODE__' never
-- skips backlog; `new` (or subscriptionFrom=now) means future only, counted from p_sub_from
-- when that carries an instant (the broker sends the request's arrival, so a first contact
-- delayed by a long-poll on a queue that did not exist yet still counts from the request),
-- else from now(); otherwise subscriptionFrom=<timestamp> is a timestamp subscription;
-- anything else means everything retained.
CREATE OR REPLACE FUNCTION queen.log_sub_intent_v1(p_group text, p_sub_mode text, p_sub_from text,
    OUT r_mode text, OUT r_ts timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_group = '__QUEUE_MODE__' THEN
        r_mode := 'all';
    ELSIF lower(COALESCE(p_sub_mode, '')) IN ('new', 'new-only', 'newonly')
          OR lower(COALESCE(p_sub_from, '')) = 'now' THEN
        r_mode := 'new';
        r_ts := CASE WHEN COALESCE(p_sub_from, '') IN ('', 'now') THEN now()
                     ELSE LEAST(p_sub_from::timestamptz, now()) END;
    ELSIF COALESCE(p_sub_from, '') <> '' THEN
        r_mode := 'timestamp';
        r_ts := p_sub_from::timestamptz;
    ELSE
        r_mode := 'all';
    END IF;
    IF r_mode = 'all' THEN
        r_ts := 'epoch';
    END IF;
END $$;

-- Group-first-contact registration of (queue, group): the durable subscription record plus
-- the bulk seed (every named-group cursor from the stored instant; queue mode from -1). The one insert that returns a row elects the single seeder, which seeds
-- every partition's cursor in one set-based statement (ascending id: the consumer-row lock
-- order). Concurrent first pops wait here on the seeder's commit, holding nothing yet;
-- without this, per-partition lazy creation convoys into chains the deadlock detector
-- never breaks.
CREATE OR REPLACE FUNCTION queen.log_register_group_v1(p_qid bigint, p_group text, p_mode text, p_ts timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_rows int;
BEGIN
    IF EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
               WHERE m.consumer_group = p_group AND m.queue_id = p_qid
                 AND m.partition_name = '' AND m.namespace = '' AND m.task = '') THEN
        RETURN;
    END IF;
    -- A queue being deleted gets no registration (see the header); holding the queue's
    -- key-share lock also keeps the delete from taking any of its partitions meanwhile.
    PERFORM 1 FROM queen.queues q WHERE q.id = p_qid FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id, subscription_mode, subscription_timestamp)
    VALUES (p_group, p_qid, p_mode, p_ts)
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows = 1 THEN
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
        SELECT p.id, p_group,
               CASE WHEN p_group = '__QUEUE_MODE__' THEN -1
                    ELSE queen.log_seed_cursor_v1(p.id, p.last_offset, p.log_start, p_ts) END
        FROM queen.log_partitions p
        WHERE p.queue_id = p_qid
        ORDER BY p.id
        ON CONFLICT DO NOTHING;
    END IF;
END $$;

-- The empty-scan watermark (docs/engine.md §2.7): after a scan that claimed nothing, at most once
-- per 30 s per (queue, group), re-check pending data ignoring leases; advance the floor only
-- when the queue is genuinely empty, else just record the check so a lease-held backlog is
-- never stranded. Partitions below the floor were empty when it advanced and only a write
-- (which moves last_write_at) or a seek (which clears the floor) makes them pending again,
-- so the re-check stays inside the window. Try-locked: a busy peer simply skips it.
CREATE OR REPLACE FUNCTION queen.log_empty_scan_v1(p_qid bigint, p_group text, p_floor timestamptz, p_checked timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_pending bool;
BEGIN
    IF p_checked > now() - interval '30 seconds' THEN
        RETURN;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended(p_qid::text || '/' || p_group, 43)) THEN
        RETURN;
    END IF;
    -- A queue being deleted gets no watermark (see the header).
    PERFORM 1 FROM queen.queues q WHERE q.id = p_qid FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT EXISTS (
        SELECT 1 FROM queen.log_partitions p
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE p.queue_id = p_qid
          AND p.last_write_at >= queen.log_write_horizon(p_floor)
          AND p.last_offset > COALESCE(c.committed, -1))
    INTO v_pending;
    INSERT INTO queen.consumer_watermarks AS w (queue_id, consumer_group, last_empty_scan_at, updated_at)
    VALUES (p_qid, p_group, CASE WHEN v_pending THEN '-infinity'::timestamptz ELSE now() END, now())
    ON CONFLICT (queue_id, consumer_group) DO UPDATE SET
        last_empty_scan_at = CASE WHEN v_pending THEN w.last_empty_scan_at ELSE now() END,
        updated_at = now();
END $$;

-- Candidate cap of the SQL scan: more candidates than wanted, because some will be claimed
-- by concurrent pops or turn out empty.
CREATE OR REPLACE FUNCTION queen.log_pop_candidate_cap_v1(p_max_partitions int)
RETURNS int LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_max_partitions >= 128 THEN 512
                ELSE LEAST(GREATEST(p_max_partitions * 4, 64), 512) END
$$;

-- The SQL wildcard procedure (docs/engine.md §5.2): first-contact
-- registration and bulk seed, then a coarse candidate scan (write watermark, unleased,
-- maybe pending; random order spreads consumers; log_pop_claim_v1 re-verifies each under
-- the row lock), then claims until budget or partition cap. A missing queue answers empty
-- and creates nothing: a pop never makes durable state out of a name nobody configured or
-- pushed to (a `new` subscription still counts from the request's arrival, see
-- log_sub_intent_v1, so a long-poll that outlives the queue's creation misses nothing).
CREATE OR REPLACE FUNCTION queen.log_pop_wildcard_bin_v1(
    p_queue text, p_group text, p_budget int, p_lease_seconds int, p_worker text, p_auto_ack bool,
    p_max_partitions int, p_sub_mode text DEFAULT 'all', p_sub_from text DEFAULT '')
RETURNS TABLE(meta jsonb, blobs bytea[])
LANGUAGE plpgsql AS $$
DECLARE
    v_qid bigint;
    v_min_wait int;
    v_floor timestamptz;
    v_checked timestamptz;
    v_mode text;
    v_ts timestamptz;
    v_cands bigint[];
    r record;
BEGIN
    SELECT q.id, q.min_pop_wait_time INTO v_qid, v_min_wait FROM queen.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        meta := '{"partitions":[]}'; blobs := '{}';
        RETURN NEXT;
        RETURN;
    END IF;

    SELECT i.r_mode, i.r_ts INTO v_mode, v_ts FROM queen.log_sub_intent_v1(p_group, p_sub_mode, p_sub_from) i;
    PERFORM queen.log_register_group_v1(v_qid, p_group, v_mode, v_ts);

    SELECT w.last_empty_scan_at, w.updated_at INTO v_floor, v_checked
    FROM queen.consumer_watermarks w WHERE w.queue_id = v_qid AND w.consumer_group = p_group;
    v_floor := COALESCE(v_floor, '-infinity');

    v_cands := ARRAY(
        SELECT p.id
        FROM queen.log_partitions p
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE p.queue_id = v_qid
          AND p.last_write_at >= queen.log_write_horizon(v_floor)
          AND (c.partition_id IS NULL OR p.last_offset > c.committed)
          AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < clock_timestamp())
        ORDER BY random()
        LIMIT queen.log_pop_candidate_cap_v1(p_max_partitions));

    SELECT * INTO r
    FROM queen.log_pop_candidates_v1(v_cands, p_group, p_budget, p_lease_seconds, p_worker, p_auto_ack,
                                     p_max_partitions, p_sub_mode, p_sub_from, false);
    IF r.claimed = 0 THEN
        PERFORM queen.log_empty_scan_v1(v_qid, p_group, v_floor, v_checked);
    END IF;
    meta := r.meta || jsonb_build_object('minPopWaitMs', v_min_wait);
    blobs := r.blobs;
    RETURN NEXT;
END $$;

-- Claims from named partitions of one queue, in the given order (the hot-list serve path,
-- and the long-poll's pushed-partition hints). Names that do not exist are skipped.
CREATE OR REPLACE FUNCTION queen.log_pop_list_v1(
    p_queue text, p_group text, p_partitions text[], p_budget int, p_lease_seconds int, p_worker text,
    p_auto_ack bool, p_max_partitions int, p_sub_mode text DEFAULT 'all', p_sub_from text DEFAULT '',
    p_skip_window bool DEFAULT false)
RETURNS TABLE(meta jsonb, blobs bytea[], states jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    v_pids bigint[];
    v_qid bigint;
    v_min_wait int;
    r record;
BEGIN
    SELECT q.id, q.min_pop_wait_time INTO v_qid, v_min_wait FROM queen.queues q WHERE q.name = p_queue;
    -- One (queue_id, name) index probe per name, whatever the statistics say (a join let the
    -- planner hash all 10 000 partitions of a queue: 3.9 ms per pop of 200 names).
    v_pids := ARRAY(
        SELECT k.id
        FROM unnest(p_partitions) WITH ORDINALITY AS n(name, ord)
        CROSS JOIN LATERAL (
            SELECT p.id FROM queen.log_partitions p
            WHERE p.queue_id = v_qid AND p.name = n.name OFFSET 0) k
        ORDER BY n.ord);
    SELECT * INTO r
    FROM queen.log_pop_candidates_v1(v_pids, p_group, p_budget, p_lease_seconds, p_worker, p_auto_ack,
                                     p_max_partitions, p_sub_mode, p_sub_from, p_skip_window);
    meta := r.meta || jsonb_strip_nulls(jsonb_build_object('minPopWaitMs', v_min_wait));
    blobs := r.blobs;
    states := r.states;
    RETURN NEXT;
END $$;

-- The long-poll's pushed-partition hints (docs/engine.md §5.2, §8.1): a woken wildcard pop claims
-- from the partitions pushed since the last drain, like log_pop_list_v1 (hinted order, one
-- worker id, the global budget and the partition cap, the queue's lease time and visibility
-- gates), before it pays for a candidate scan. Only once the (queue, group) registration
-- exists: a first contact must reach the wildcard procedure, whose registration stores the
-- subscription and bulk-seeds every cursor, so a hint never creates the cursor of a group
-- that has not registered. An unregistered group gets an empty answer and falls through.
CREATE OR REPLACE FUNCTION queen.log_pop_hinted_v1(
    p_queue text, p_group text, p_partitions text[], p_budget int, p_lease_seconds int, p_worker text,
    p_auto_ack bool, p_max_partitions int, p_sub_mode text DEFAULT 'all', p_sub_from text DEFAULT '')
RETURNS TABLE(meta jsonb, blobs bytea[])
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM queen.queues q
                   JOIN queen.consumer_groups_metadata m ON m.queue_id = q.id
                   WHERE q.name = p_queue AND m.consumer_group = p_group
                     AND m.partition_name = '' AND m.namespace = '' AND m.task = '') THEN
        meta := '{"partitions":[]}';
        blobs := '{}';
        RETURN NEXT;
        RETURN;
    END IF;
    SELECT l.meta, l.blobs INTO meta, blobs
    FROM queen.log_pop_list_v1(p_queue, p_group, p_partitions, p_budget, p_lease_seconds, p_worker,
                               p_auto_ack, p_max_partitions, p_sub_mode, p_sub_from) l;
    RETURN NEXT;
END $$;

-- The targeted pop. The claim runs first; the reported partitionId and delivery attempt are
-- resolved by a later statement of this VOLATILE function, whose snapshot is at least as new
-- as anything the claim saw, so a pop racing the partition-creating push can never deliver
-- a leased batch with an empty partitionId.
CREATE OR REPLACE FUNCTION queen.log_pop_specific_v1(
    p_queue text, p_partition text, p_group text, p_budget int, p_lease_seconds int, p_worker text,
    p_auto_ack bool, p_sub_mode text DEFAULT 'all', p_sub_from text DEFAULT '')
RETURNS TABLE(meta jsonb, blobs bytea[])
LANGUAGE plpgsql AS $$
DECLARE
    v_segs jsonb;
    v_pid bigint;
    v_attempt int;
    v_min_wait int;
    v_lease_until bigint;
BEGIN
    SELECT queen.log_pop_segments_json_v1(array_agg(r.r_base ORDER BY r.r_base), array_agg(r.r_start_idx ORDER BY r.r_base),
                                          array_agg(r.r_take ORDER BY r.r_base), array_agg(r.r_msg_count ORDER BY r.r_base),
                                          array_agg(r.r_created_at ORDER BY r.r_base)),
           COALESCE(array_agg(r.r_blob ORDER BY r.r_base), '{}')
    INTO v_segs, blobs
    FROM queen.log_pop_v1(p_queue, p_partition, p_group, p_budget, p_lease_seconds, p_worker,
                          p_auto_ack, p_sub_mode, p_sub_from) r;

    SELECT p.id, CASE WHEN p_auto_ack THEN 1 ELSE c.attempt_count END, q.min_pop_wait_time,
           CASE WHEN NOT p_auto_ack
                THEN (extract(epoch FROM c.lease_expires_at) * 1000000)::bigint END
    INTO v_pid, v_attempt, v_min_wait, v_lease_until
    FROM queen.queues q
    LEFT JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = p_partition
    LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
    WHERE q.name = p_queue;

    IF jsonb_array_length(v_segs) = 0 THEN
        meta := jsonb_strip_nulls(jsonb_build_object('partitions', '[]'::jsonb, 'minPopWaitMs', v_min_wait));
    ELSE
        meta := jsonb_build_object(
            'partitions', jsonb_build_array(jsonb_build_object(
                'partition', p_partition, 'partitionId', v_pid, 'queue', p_queue,
                'deliveryAttempt', v_attempt, 'leaseExpiresAt', v_lease_until,
                'segments', v_segs)),
            'minPopWaitMs', v_min_wait);
    END IF;
    RETURN NEXT;
END $$;

-- Discovery across the queues whose labels match (either label may be ''). A named group's
-- first discovery contact stores a label-wide subscription record, so a queue that appears
-- later is seeded from that instant instead of skipping its backlog; every matching queue
-- is registered (ascending id, the queue lock order) before any claim. Each queue's own
-- lease time applies unless the pop overrides it.
CREATE OR REPLACE FUNCTION queen.log_pop_discover_wire_v1(
    p_namespace text, p_task text, p_group text, p_budget int, p_worker text, p_auto_ack bool,
    p_max_partitions int, p_sub_mode text DEFAULT 'all', p_sub_from text DEFAULT '',
    p_lease_seconds int DEFAULT NULL)
RETURNS TABLE(meta jsonb, blobs bytea[])
LANGUAGE plpgsql AS $$
DECLARE
    v_mode text;
    v_ts timestamptz;
    v_qid bigint;
    v_cands bigint[];
    r record;
BEGIN
    v_mode := 'all';
    v_ts := 'epoch';
    IF p_group <> '__QUEUE_MODE__' THEN
        FOR v_round IN 1..2 LOOP
            SELECT m.subscription_mode, m.subscription_timestamp INTO v_mode, v_ts
            FROM queen.consumer_groups_metadata m
            WHERE m.consumer_group = p_group AND m.queue_id IS NULL AND m.partition_name = ''
              AND m.namespace = p_namespace AND m.task = p_task;
            EXIT WHEN FOUND;
            INSERT INTO queen.consumer_groups_metadata (consumer_group, queue_id, namespace, task, subscription_mode, subscription_timestamp)
            SELECT p_group, NULL, p_namespace, p_task, s.r_mode, s.r_ts
            FROM queen.log_sub_intent_v1(p_group, p_sub_mode, p_sub_from) s
            ON CONFLICT DO NOTHING;
        END LOOP;
        -- A later-registered queue starts from the label record's instant, not from "now".
        IF v_mode = 'new' THEN
            v_mode := 'timestamp';
        END IF;
    END IF;
    FOR v_qid IN
        SELECT q.id FROM queen.queues q
        WHERE (p_namespace = '' OR q.namespace = p_namespace) AND (p_task = '' OR q.task = p_task)
          AND NOT EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                          WHERE m.consumer_group = p_group AND m.queue_id = q.id AND m.partition_name = ''
                            AND m.namespace = '' AND m.task = '')
        ORDER BY q.id
    LOOP
        PERFORM queen.log_register_group_v1(v_qid, p_group, v_mode, v_ts);
    END LOOP;

    v_cands := ARRAY(
        SELECT p.id
        FROM queen.queues q
        JOIN queen.log_partitions p ON p.queue_id = q.id
        LEFT JOIN queen.consumer_watermarks w ON w.queue_id = q.id AND w.consumer_group = p_group
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE (p_namespace = '' OR q.namespace = p_namespace) AND (p_task = '' OR q.task = p_task)
          AND p.last_write_at >= queen.log_write_horizon(w.last_empty_scan_at)
          AND (c.partition_id IS NULL OR p.last_offset > c.committed)
          AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < clock_timestamp())
        ORDER BY q.priority DESC, random()
        LIMIT queen.log_pop_candidate_cap_v1(p_max_partitions));

    SELECT * INTO r
    FROM queen.log_pop_candidates_v1(v_cands, p_group, p_budget, p_lease_seconds, p_worker, p_auto_ack,
                                     p_max_partitions, p_sub_mode, p_sub_from, false);
    meta := r.meta;
    blobs := r.blobs;
    RETURN NEXT;
END $$;

-- The cheap probes a pop runs before taking the connection-heavy path. False means
-- definitively nothing to deliver; true may be stale (leased, deferred), a deliberate
-- superset. Partitions below the empty-scan floor cannot be pending (see log_empty_scan_v1).
-- A named group that has not registered yet on an existing queue always gets true: its
-- first contact must reach the wildcard procedure and store the subscription now, even on an
-- empty queue, or a `new` subscription taken later would skip what is pushed in between. A
-- missing queue has nothing to deliver and nothing to register on.
CREATE OR REPLACE FUNCTION queen.log_has_pending_v1(p_queue text, p_group text)
RETURNS bool LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_qid bigint;
    v_floor timestamptz;
BEGIN
    SELECT q.id INTO v_qid FROM queen.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_group <> '__QUEUE_MODE__' AND NOT EXISTS (
        SELECT 1 FROM queen.consumer_groups_metadata m
        WHERE m.consumer_group = p_group AND m.queue_id = v_qid
          AND m.partition_name = '' AND m.namespace = '' AND m.task = '') THEN
        RETURN true;
    END IF;
    SELECT w.last_empty_scan_at INTO v_floor
    FROM queen.consumer_watermarks w WHERE w.queue_id = v_qid AND w.consumer_group = p_group;
    RETURN EXISTS (
        SELECT 1 FROM queen.log_partitions p
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE p.queue_id = v_qid
          AND p.last_write_at >= queen.log_write_horizon(v_floor)
          AND p.last_offset > COALESCE(c.committed, -1));
END $$;

-- Exact for one partition (log_start counts); a missing partition or cursor row answers true
-- so the targeted pop itself decides.
CREATE OR REPLACE FUNCTION queen.log_partition_has_pending_v1(p_queue text, p_partition text, p_group text)
RETURNS bool LANGUAGE sql STABLE AS $$
    SELECT COALESCE((
        SELECT CASE WHEN c.partition_id IS NULL THEN true
                    ELSE p.last_offset > GREATEST(c.committed, p.log_start - 1) END
        FROM queen.queues q
        JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = p_partition
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE q.name = p_queue), true)
$$;

-- Discovery variant; a named group without its label-wide record is not registered yet.
CREATE OR REPLACE FUNCTION queen.log_discover_has_pending_v1(p_namespace text, p_task text, p_group text)
RETURNS bool LANGUAGE sql STABLE AS $$
    SELECT (p_group <> '__QUEUE_MODE__' AND NOT EXISTS (
               SELECT 1 FROM queen.consumer_groups_metadata m
               WHERE m.consumer_group = p_group AND m.queue_id IS NULL AND m.partition_name = ''
                 AND m.namespace = p_namespace AND m.task = p_task))
        OR EXISTS (
        SELECT 1
        FROM queen.queues q
        JOIN queen.log_partitions p ON p.queue_id = q.id
        LEFT JOIN queen.consumer_watermarks w ON w.queue_id = q.id AND w.consumer_group = p_group
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE (p_namespace = '' OR q.namespace = p_namespace) AND (p_task = '' OR q.task = p_task)
          AND p.last_write_at >= queen.log_write_horizon(w.last_empty_scan_at)
          AND p.last_offset > COALESCE(c.committed, -1))
$$;

-- Pending-message estimate for the minimum pop wait (docs/spec/life-of-a-pop.md: hold an under-full claim in the
-- broker): unleased pending offsets of the queue, or of one partition, counted up to p_cap.
CREATE OR REPLACE FUNCTION queen.log_pending_estimate_v1(p_queue text, p_partition text, p_group text, p_cap bigint)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT LEAST(COALESCE(sum(GREATEST(p.last_offset - GREATEST(COALESCE(c.committed, -1), p.log_start - 1), 0)), 0), p_cap)::bigint
    FROM queen.queues q
    JOIN queen.log_partitions p ON p.queue_id = q.id
    LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
    WHERE q.name = p_queue
      AND (p_partition IS NULL OR p.name = p_partition)
      AND (c.worker_id IS NULL OR c.lease_expires_at IS NULL OR c.lease_expires_at < clock_timestamp())
$$;
