-- push: the push path (docs/engine.md §4.4): the per-partition allocator with the
-- authoritative dedup probe, the bundled multi-partition push, the segment lookup
-- that turns an offset back into its covering blob, and the slicing of the hash sidecar the
-- push writes. Replayed (CREATE OR REPLACE) when its checksum changes.

-- Slices a hash blob into its 16-byte members; idx k belongs to offset base_offset + k.
-- Deliberately not STRICT: a STRICT SQL function cannot be inlined into the calling query,
-- which halved the speed of the dedup probe and of ack resolution (a NULL blob yields no rows).
CREATE OR REPLACE FUNCTION queen.log_unnest_hashes(p bytea)
RETURNS TABLE(idx int, h bytea)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT i - 1, substring(p FROM (i - 1) * 16 + 1 FOR 16)
    FROM generate_series(1, octet_length(p) / 16) AS i
$$;

-- Renders a timestamp the way push results and lease expiries travel on the wire: ISO-8601
-- UTC with microseconds. STABLE, as to_char is: an IMMUTABLE label would stop the planner
-- from inlining it, and a call not inlined is planned again in every transaction.
CREATE OR REPLACE FUNCTION queen.log_iso_micros(p timestamptz)
RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- The messages of queue p_qid that some consumer still has to consume, the quantity a
-- queue's max_queue_size (wire maxSize) bounds: per partition, everything after the lowest
-- cursor among the groups that have one there (everything retained when none has), summed.
-- Watermark arithmetic over the queue's partition and cursor rows, no segment reads; it
-- runs only for capped queues.
CREATE OR REPLACE FUNCTION queen.log_queue_unconsumed_v1(p_qid bigint)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(sum(GREATEST(p.last_offset - GREATEST(
               COALESCE((SELECT min(c.committed) FROM queen.log_consumers c
                         WHERE c.partition_id = p.id), -1),
               p.log_start - 1), 0)), 0)::bigint
    FROM queen.log_partitions p
    WHERE p.queue_id = p_qid
$$;

-- Takes the max-size lock of every capped queue (max_queue_size > 0) among p_queues, in
-- queue id order: a transaction-scoped advisory lock (class 1364414808, 'QSMX'), so pushes to
-- one capped queue check its room one at a time. Writers take it after all their partition
-- row locks and before their first append, in this one order, so it cannot close a cycle
-- with the partition locks; nothing else takes it. Uncapped queues never pay for it.
CREATE OR REPLACE FUNCTION queen.log_lock_capped_v1(p_queues text[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_qid bigint;
BEGIN
    FOR v_qid IN
        SELECT id FROM queen.queues
        WHERE name = ANY (p_queues) AND max_queue_size > 0
        ORDER BY id
    LOOP
        PERFORM pg_advisory_xact_lock(1364414808, (v_qid % 2147483647)::int);
    END LOOP;
END
$$;

-- The authoritative dedup probe of a bundle's segments (log_push_multi_v1, and
-- log_push_one_v1 for its one segment): for each segment p_ord[k] (aligned arrays) with a
-- probe bound p_vfrom[k] (NULL: none is due), its incoming hashes p_hashes[ord] (p_counts[ord]
-- frames) joined on equality (a hash join, whatever the sizes) with the hashes partition
-- p_pid[k] stores after vfrom, within its window of p_win[k] seconds before p_now. The caller
-- holds the partition row locks. dup_ord: the segments with duplicates; dup_list, aligned:
-- each one's [{"i":k,"off":O}], k the incoming frame index and O the original's offset (the
-- lowest if several). One statement for the whole bundle, run only when some segment needs
-- it: PostgreSQL initialises every node of a plan on each run.
CREATE OR REPLACE FUNCTION queen.log_push_probe_v1(
    p_ord int[], p_pid int8[], p_txns_start int8[], p_win int[], p_vfrom int8[],
    p_counts int[], p_hashes bytea[], p_now timestamptz,
    OUT dup_ord int[], OUT dup_list jsonb[])
LANGUAGE plpgsql
-- Generic plans, as log_push_multi_v1's: planned afresh for each call, a one-segment probe of
-- log_push_one_v1 cost PostgreSQL more than twice what its run with the generic plan does.
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF array_remove(p_vfrom, NULL) = '{}' THEN
        RETURN;
    END IF;
    SELECT array_agg(d.ord), array_agg(d.dups) INTO dup_ord, dup_list
    FROM (
        SELECT d.ord,
               jsonb_agg(jsonb_build_object('i', d.i, 'off', d.off) ORDER BY d.i) AS dups
        FROM (
            WITH seg AS (
                SELECT s.ord, s.pid, s.win, s.txns_start, s.vfrom,
                       p_counts[s.ord] AS cnt, p_hashes[s.ord] AS hashes
                FROM unnest(p_ord, p_pid, p_txns_start, p_win, p_vfrom)
                     AS s(ord, pid, txns_start, win, vfrom)
                WHERE s.vfrom IS NOT NULL
            )
            SELECT inc.ord, inc.idx AS i, min(st.off) AS off
            FROM (
                SELECT s.ord, u.idx, u.h
                FROM seg s CROSS JOIN LATERAL queen.log_unnest_hashes(s.hashes) AS u
            ) inc
            JOIN (
                SELECT s.ord, t.base_offset + x.idx AS off, x.h
                FROM seg s
                CROSS JOIN LATERAL (
                    SELECT lt.base_offset, lt.hashes FROM queen.log_txns AS lt
                    WHERE lt.partition_id = s.pid
                      -- From the row covering vfrom + 1 on: a primary-key range, so a
                      -- vouched probe reads the tail, not every row of the partition. No row
                      -- lies below txns_start (the purge, retention.sql): the backward step
                      -- stops there instead of walking the purged history's dead index
                      -- entries.
                      AND lt.base_offset >= COALESCE(
                            (SELECT max(f.base_offset) FROM queen.log_txns f
                             WHERE f.partition_id = s.pid AND f.base_offset <= s.vfrom
                               AND f.base_offset >= s.txns_start),
                            s.vfrom + 1)
                      AND lt.end_offset > s.vfrom
                      AND lt.created_at >= p_now - make_interval(secs => s.win)
                      -- A few incoming hashes: a byte search per stored row finds the rows
                      -- worth exploding (about 20x cheaper than exploding every row).
                      AND (s.cnt > 16 OR EXISTS (
                          SELECT 1 FROM queen.log_unnest_hashes(s.hashes) AS q
                          WHERE position(q.h IN lt.hashes) > 0))
                ) t
                CROSS JOIN LATERAL queen.log_unnest_hashes(t.hashes) AS x
                WHERE t.base_offset + x.idx > s.vfrom
            ) st ON st.ord = inc.ord AND st.h = inc.h
            GROUP BY inc.ord, inc.idx
        ) d
        GROUP BY d.ord
    ) d;
END
$$;

-- Appends one segment of p_msg_count frames to (p_queue, p_partition).
--
-- p_hashes: 16 bytes per frame, xxh3_128(transactionId) big-endian, frame order.
-- p_verified: offsets up to which the caller vouches the incoming hashes are absent (-1: none);
--   only the tail (GREATEST(p_verified, txns_start - 1), last_offset] is probed then. A stale
--   (low) value only widens the probe. It is ignored (whole window probed) when it exceeds
--   last_offset, or for 120 s after the queue's window was raised or the queue deleted
--   (queen.log_dedup_resets, migrations/0001_baseline.sql): a broker's cached knowledge may
--   predate that change.
-- p_pid / p_window: pre-resolved partition id and dedup window (NULL: resolve/provision here);
--   p_pid alone: the window is read through the id, and a partition deleted since answers
--   {"status":"gone"} (nothing written; the caller pushes by name).
-- p_encrypted: every payload of p_blob is an encryption envelope (docs/engine.md §3.1).
--
-- Result: {"status":"queued","partitionId":P,"baseOffset":B,"createdAt":"…"} or
-- {"status":"duplicate","partitionId":P,"dups":[{"i":k,"off":O}]} where k is the incoming
-- frame index and O the original's absolute offset (the lowest if several), or
-- {"status":"encrypt","partitionId":P}: the queue has encryption_enabled and the segment is
-- not sealed (the broker seals and resends; no plaintext of such a queue is ever stored), or
-- {"status":"full","partitionId":P,"room":r,"maxSize":m}: the queue's max_queue_size leaves
-- room for only the first r frames (docs/wire.md §3.2, maxSize). Anything but queued writes
-- nothing: no allocator bump, so no offset hole. The checks run in that order, so a
-- duplicate is reported as one even when the queue is full.
--
-- The queue row is read without a lock: a configure committing while this runs may or may
-- not be seen; every push that starts after a configure's answer is checked against it.
-- The room check holds the queue's max-size lock (log_lock_capped_v1), so concurrent pushes
-- to one capped queue count each other's messages.
--
-- created_at is clock_timestamp() taken after the partition row lock, hence monotone in
-- base_offset per partition (retention, seeks and delayedProcessing rely on it).
DROP FUNCTION IF EXISTS queen.log_push_one_v1(text, text, int, bytea, bigint, bytea, bigint, int);
CREATE OR REPLACE FUNCTION queen.log_push_one_v1(
    p_queue text, p_partition text, p_msg_count int, p_hashes bytea, p_verified bigint,
    p_blob bytea, p_pid bigint DEFAULT NULL, p_window int DEFAULT NULL,
    p_encrypted bool DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint := p_pid;
    v_window int := p_window;
    v_qid bigint;
    v_max int;
    v_encrypt bool;
    v_room bigint;
    v_last bigint;
    v_txns_start bigint;
    v_from bigint;
    v_now timestamptz;
    v_probe record;  -- log_push_probe_v1
BEGIN
    IF p_msg_count IS NULL OR p_msg_count < 1 THEN
        RAISE EXCEPTION 'log_push_one_v1: message count must be positive, got %', p_msg_count;
    END IF;
    IF octet_length(p_hashes) IS DISTINCT FROM 16 * p_msg_count THEN
        RAISE EXCEPTION 'log_push_one_v1: % hash bytes for % messages',
            octet_length(p_hashes), p_msg_count;
    END IF;

    IF v_pid IS NOT NULL AND v_window IS NULL THEN
        -- The partition id alone (a broker's lone-segment flush, docs/engine.md §4.4): no
        -- provisioning, and 'gone' when the id no longer names (p_queue, p_partition). The
        -- queue's row is read here, once, with the id's check.
        SELECT q.dedup_window_seconds, q.id, q.max_queue_size, q.encryption_enabled
        INTO v_window, v_qid, v_max, v_encrypt
        FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
        WHERE lp.id = v_pid AND lp.name = p_partition AND q.name = p_queue;
        IF NOT FOUND THEN
            RETURN jsonb_build_object('status', 'gone', 'partitionId', v_pid);
        END IF;
    ELSE
        IF v_pid IS NULL OR v_window IS NULL THEN
            PERFORM queen.log_provision_v1(ARRAY[p_queue], ARRAY[p_partition]);
            SELECT lp.id, q.dedup_window_seconds INTO v_pid, v_window
            FROM queen.queues q
            JOIN queen.log_partitions lp ON lp.queue_id = q.id AND lp.name = p_partition
            WHERE q.name = p_queue;
            IF v_pid IS NULL THEN
                RAISE EXCEPTION 'log_push_one_v1: partition %/% vanished during the push',
                    p_queue, p_partition;
            END IF;
        END IF;
        SELECT id, max_queue_size, encryption_enabled INTO v_qid, v_max, v_encrypt
        FROM queen.queues WHERE name = p_queue;
    END IF;
    IF v_encrypt AND NOT COALESCE(p_encrypted, false) THEN
        RETURN jsonb_build_object('status', 'encrypt', 'partitionId', v_pid);
    END IF;

    IF v_window > 0 THEN
        -- The lock serialises writers of this partition; the probe below is authoritative
        -- because no other writer can append between it and our insert. NO KEY UPDATE is the
        -- allocator's own UPDATE lock: it excludes other writers but not the key-share lock a
        -- pop's new cursor row takes on the partition through its foreign key, so pops never
        -- wait on pushes.
        SELECT last_offset, txns_start INTO v_last, v_txns_start
        FROM queen.log_partitions WHERE id = v_pid FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'log_push_one_v1: partition % vanished during the push', v_pid
                USING ERRCODE = 'serialization_failure';
        END IF;
        v_now := clock_timestamp();
        v_from := COALESCE(p_verified, -1);
        IF v_from >= 0 AND (v_from > v_last OR EXISTS (
                SELECT 1 FROM queen.log_dedup_resets r
                WHERE r.queue_name = p_queue AND r.reset_at > v_now - interval '120 seconds'))
        THEN
            v_from := -1;
        END IF;
        v_from := GREATEST(v_from, v_txns_start - 1);
        IF v_last > v_from THEN
            v_probe := queen.log_push_probe_v1(ARRAY[1], ARRAY[v_pid], ARRAY[v_txns_start],
                                               ARRAY[v_window], ARRAY[v_from],
                                               ARRAY[p_msg_count], ARRAY[p_hashes], v_now);
            IF v_probe.dup_ord IS NOT NULL THEN
                RETURN jsonb_build_object('status', 'duplicate', 'partitionId', v_pid,
                                          'dups', v_probe.dup_list[1]);
            END IF;
        END IF;
    END IF;

    IF v_max > 0 THEN
        -- Re-entrant: a bundle took every capped queue's lock before its first append.
        PERFORM queen.log_lock_capped_v1(ARRAY[p_queue]);
        v_room := v_max - queen.log_queue_unconsumed_v1(v_qid);
        IF v_room < p_msg_count THEN
            RETURN jsonb_build_object('status', 'full', 'partitionId', v_pid,
                                      'room', GREATEST(v_room, 0), 'maxSize', v_max);
        END IF;
    END IF;

    -- The allocator. last_write_at is indexed, so it moves only when a second has passed
    -- (keeps this update HOT); the oldest_* columns change only on empty -> non-empty.
    UPDATE queen.log_partitions
    SET last_offset = last_offset + p_msg_count,
        oldest_live_at = COALESCE(oldest_live_at, clock_timestamp()),
        oldest_txn_at = COALESCE(oldest_txn_at, clock_timestamp()),
        last_write_at = CASE WHEN clock_timestamp() - last_write_at > interval '1 second'
                             THEN clock_timestamp() ELSE last_write_at END
    WHERE id = v_pid
    RETURNING last_offset INTO v_last;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'log_push_one_v1: partition % vanished during the push', v_pid
            USING ERRCODE = 'serialization_failure';
    END IF;
    IF v_now IS NULL THEN
        v_now := clock_timestamp();  -- window 0: the update above took the row lock
    END IF;

    INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
    VALUES (v_pid, v_last - p_msg_count + 1, v_last, v_now, p_blob);
    INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
    VALUES (v_pid, v_last - p_msg_count + 1, v_last, v_now, p_hashes);

    RETURN jsonb_build_object(
        'status', 'queued', 'partitionId', v_pid, 'baseOffset', v_last - p_msg_count + 1,
        'createdAt', queen.log_iso_micros(v_now));
END
$$;

-- Provisions the given (queue, partition) pairs and locks every one of their partition rows
-- in ascending id, the global partition lock order: what a multi-partition writer does
-- before its first append. One set-based statement; the row-lock node sits above the sort,
-- so rows lock in id order. FOR NO KEY UPDATE, the weakest lock that serialises writers:
-- FOR UPDATE would also block the key-share lock of every cursor row a pop creates on these
-- partitions, making pops wait on (and deadlock with) open push transactions.
--
-- A queue delete committing while we wait for a row removes it, and the row is then skipped.
-- Retrying here, holding the other rows, could deadlock with writers provisioning the name
-- afresh; so that is a serialization failure: the whole call rolls back and the broker runs
-- it again (store::retry_conflicts), when the name is free and the partition comes back
-- from scratch, as after any delete.
CREATE OR REPLACE FUNCTION queen.log_lock_partitions_v1(p_queues text[], p_partitions text[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_wanted int;
    v_locked int;
BEGIN
    PERFORM queen.log_provision_v1(p_queues, p_partitions);
    SELECT count(*) INTO v_wanted
    FROM (SELECT DISTINCT qn, pn FROM unnest(p_queues, p_partitions) AS w(qn, pn)) d;
    SELECT count(*) INTO v_locked
    FROM (
        SELECT lp.id
        FROM (SELECT DISTINCT qn, pn FROM unnest(p_queues, p_partitions) AS w(qn, pn)) d
        JOIN queen.queues q ON q.name = d.qn
        CROSS JOIN LATERAL (
            SELECT p.id FROM queen.log_partitions p
            WHERE p.queue_id = q.id AND p.name = d.pn OFFSET 0) k
        JOIN queen.log_partitions lp ON lp.id = k.id
        ORDER BY lp.id
        FOR NO KEY UPDATE OF lp) l;
    IF v_locked <> v_wanted THEN
        RAISE EXCEPTION 'log_lock_partitions_v1: % of % partitions were deleted while locking',
            v_wanted - v_locked, v_wanted
            USING ERRCODE = 'serialization_failure';
    END IF;
END
$$;

-- Appends one segment per element (aligned arrays) in ONE transaction: one commit, one
-- fsync for the whole bundle. Returns the per-segment results of log_push_one_v1 (same
-- shapes, same checks in the same order) in input order; a duplicate (or encrypt, or full)
-- segment writes nothing while the others still commit. p_encrypted[i]: segment i is sealed
-- (NULL: none is).
--
-- Lock order: provisioning (queues, then partitions, each in key order), then every bundle
-- partition row in ascending id, then (serial path only) the capped queues' max-size locks.
--
-- The common bundle — every segment on its own partition, no capped queue — runs set-based:
-- a fixed handful of statements whatever the number of segments (one check of shape, caps
-- and presence; lock and read; the probe bounds; the dedup probe, only when some segment
-- needs one; one allocate-insert statement), so a bundle of 100 one-message segments costs
-- PostgreSQL little more than one segment of 100 messages. The probe is a statement of its
-- own because PostgreSQL initialises every node of a plan on each call, run or not: a
-- vouched one-message push cost ~30 % more while the probe sat inside the append. Two
-- segments of one partition (the second must see the first's hashes and offsets) or a capped
-- queue (room is counted segment by segment) take log_push_multi_serial_v1.
DROP FUNCTION IF EXISTS queen.log_push_multi_v1(text[], text[], int[], bytea[], int8[], bytea[]);
CREATE OR REPLACE FUNCTION queen.log_push_multi_v1(
    p_queues text[], p_partitions text[], p_msg_counts int[], p_hashes bytea[],
    p_verified int8[], p_blobs bytea[], p_encrypted bool[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql
-- Generic plans: with custom ones PostgreSQL planned the append statement again on every
-- call (its estimates differ with each bundle's arrays), 2.7 ms of a 3.8 ms one-segment
-- bundle; its plan does not depend on the values (probes by key, hash join of hashes).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n int := cardinality(p_queues);
    v_ord int[];
    v_pid int8[];
    v_last int8[];
    v_txns_start int8[];
    v_win int[];
    v_refuse bool[];
    v_distinct int;
    v_capped bool;
    v_present int;
    v_now timestamptz;
    v_vfrom int8[];
    v_probe record;  -- log_push_probe_v1
    v_results jsonb;
BEGIN
    IF cardinality(p_partitions) IS DISTINCT FROM v_n
       OR cardinality(p_msg_counts) IS DISTINCT FROM v_n
       OR cardinality(p_hashes) IS DISTINCT FROM v_n
       OR cardinality(p_verified) IS DISTINCT FROM v_n
       OR cardinality(p_blobs) IS DISTINCT FROM v_n
       OR cardinality(COALESCE(p_encrypted, array_fill(false, ARRAY[v_n]))) IS DISTINCT FROM v_n THEN
        RAISE EXCEPTION 'log_push_multi_v1: misaligned arrays';
    END IF;
    IF v_n IS NULL OR v_n = 0 THEN
        RETURN '[]'::jsonb;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_msg_counts, p_hashes) AS c(n, h)
               WHERE n IS NULL OR n < 1 OR octet_length(h) IS DISTINCT FROM 16 * n) THEN
        RAISE EXCEPTION 'log_push_multi_v1: a segment has no messages or not 16 hash bytes each';
    END IF;
    -- Repeated pairs, capped queues and missing partitions, in one statement.
    SELECT count(DISTINCT (w.qn, w.pn)), COALESCE(bool_or(q.max_queue_size > 0), false),
           count(k.id)
    INTO v_distinct, v_capped, v_present
    FROM unnest(p_queues, p_partitions) AS w(qn, pn)
    LEFT JOIN queen.queues q ON q.name = w.qn
    LEFT JOIN LATERAL (
        SELECT p.id FROM queen.log_partitions p
        WHERE p.queue_id = q.id AND p.name = w.pn OFFSET 0) k ON true;
    IF v_distinct < v_n OR v_capped THEN
        RETURN queen.log_push_multi_serial_v1(p_queues, p_partitions, p_msg_counts, p_hashes,
                                              p_verified, p_blobs, p_encrypted);
    END IF;
    IF v_present < v_n THEN
        PERFORM queen.log_provision_v1(p_queues, p_partitions);
    END IF;
    -- Every partition row, locked in ascending id (LockRows sits above the sort), with what
    -- the appends need; a row updated while we waited is re-read in its latest version.
    -- refuse: the queue is encrypted and this segment is not sealed, so it is refused.
    SELECT array_agg(l.ord), array_agg(l.id), array_agg(l.last_offset),
           array_agg(l.txns_start), array_agg(l.win), array_agg(l.refuse)
    INTO v_ord, v_pid, v_last, v_txns_start, v_win, v_refuse
    FROM (
        SELECT r.ord, lp.id, lp.last_offset, lp.txns_start, r.win, r.refuse
        FROM (
            SELECT w.ord::int AS ord, k.id, q.dedup_window_seconds AS win,
                   q.encryption_enabled AND NOT COALESCE(p_encrypted[w.ord], false) AS refuse
            FROM unnest(p_queues, p_partitions) WITH ORDINALITY AS w(qn, pn, ord)
            JOIN queen.queues q ON q.name = w.qn
            CROSS JOIN LATERAL (
                SELECT p.id FROM queen.log_partitions p
                WHERE p.queue_id = q.id AND p.name = w.pn OFFSET 0) k
        ) r
        JOIN queen.log_partitions lp ON lp.id = r.id
        ORDER BY lp.id
        FOR NO KEY UPDATE OF lp) l;
    IF COALESCE(cardinality(v_ord), 0) <> v_n THEN
        -- Deleted between provisioning and locking: rerun when the name is free (see
        -- log_lock_partitions_v1).
        RAISE EXCEPTION 'log_push_multi_v1: % of % partitions were deleted while locking',
            v_n - COALESCE(cardinality(v_ord), 0), v_n
            USING ERRCODE = 'serialization_failure';
    END IF;
    -- After every row lock: created_at is monotone in base_offset per partition.
    v_now := clock_timestamp();

    -- Per segment the lower bound of its dedup probe (as in log_push_one_v1), NULL when it
    -- needs none: no window, refused, or nothing stored after what the caller vouches for.
    SELECT array_agg(CASE WHEN s.win > 0 AND NOT s.refuse AND s.last > b.vfrom
                          THEN b.vfrom END ORDER BY s.i)
    INTO v_vfrom
    FROM unnest(v_ord, v_last, v_txns_start, v_win, v_refuse) WITH ORDINALITY
         AS s(ord, last, txns_start, win, refuse, i)
    CROSS JOIN LATERAL (SELECT GREATEST(
        CASE WHEN p_verified[s.ord] >= 0 AND p_verified[s.ord] <= s.last
                  AND NOT EXISTS (
                      SELECT 1 FROM queen.log_dedup_resets r
                      WHERE r.queue_name = p_queues[s.ord]
                        AND r.reset_at > v_now - interval '120 seconds')
             THEN p_verified[s.ord] ELSE -1 END,
        s.txns_start - 1) AS vfrom) b;

    v_probe := queen.log_push_probe_v1(v_ord, v_pid, v_txns_start, v_win, v_vfrom, p_msg_counts,
                                       p_hashes, v_now);
    v_results := queen.log_push_multi_append_v1(v_ord, v_pid, v_refuse, v_probe.dup_ord,
                                                v_probe.dup_list, p_msg_counts, p_hashes,
                                                p_blobs, v_now);
    IF jsonb_array_length(v_results) <> v_n OR v_results @> '[null]'::jsonb THEN
        RAISE EXCEPTION 'log_push_multi_v1: a segment got no result';
    END IF;
    RETURN v_results;
END
$$;

-- log_push_multi_v1's writes and answer: the allocator (as in log_push_one_v1; last_write_at
-- moves once a second: HOT) and the appends, for every segment (aligned p_ord, p_pid,
-- p_refuse) neither refused nor duplicate (p_dup_ord, p_dup_list of log_push_probe_v1), in
-- one statement; the per-segment results in input order. Its plan is generic:
-- log_push_multi_v1's plan_cache_mode holds while it runs.
CREATE OR REPLACE FUNCTION queen.log_push_multi_append_v1(
    p_ord int[], p_pid int8[], p_refuse bool[], p_dup_ord int[], p_dup_list jsonb[],
    p_msg_counts int[], p_hashes bytea[], p_blobs bytea[], p_now timestamptz)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_results jsonb;
BEGIN
    WITH alloc AS (
        UPDATE queen.log_partitions lp
        SET last_offset = lp.last_offset + p_msg_counts[s.ord],
            oldest_live_at = COALESCE(lp.oldest_live_at, p_now),
            oldest_txn_at = COALESCE(lp.oldest_txn_at, p_now),
            last_write_at = CASE WHEN p_now - lp.last_write_at > interval '1 second'
                                 THEN p_now ELSE lp.last_write_at END
        FROM unnest(p_ord, p_pid, p_refuse) AS s(ord, pid, refuse)
        WHERE lp.id = s.pid AND NOT s.refuse AND NOT (s.ord = ANY (COALESCE(p_dup_ord, '{}')))
        RETURNING s.ord, lp.last_offset - p_msg_counts[s.ord] + 1 AS base_offset,
                  lp.last_offset AS end_offset, lp.id AS pid
    ),
    segments AS (
        INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
        SELECT a.pid, a.base_offset, a.end_offset, p_now, p_blobs[a.ord] FROM alloc a
    ),
    sidecar AS (
        INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
        SELECT a.pid, a.base_offset, a.end_offset, p_now, p_hashes[a.ord] FROM alloc a
    )
    SELECT jsonb_agg(CASE
               WHEN s.refuse THEN
                   jsonb_build_object('status', 'encrypt', 'partitionId', s.pid)
               WHEN a.ord IS NOT NULL THEN
                   jsonb_build_object('status', 'queued', 'partitionId', s.pid,
                                      'baseOffset', a.base_offset,
                                      'createdAt', queen.log_iso_micros(p_now))
               WHEN s.ord = ANY (p_dup_ord) THEN
                   jsonb_build_object('status', 'duplicate', 'partitionId', s.pid,
                                      'dups', p_dup_list[array_position(p_dup_ord, s.ord)])
           END ORDER BY s.ord)
    INTO v_results
    FROM unnest(p_ord, p_pid, p_refuse) AS s(ord, pid, refuse)
    LEFT JOIN alloc a ON a.ord = s.ord;
    RETURN v_results;
END
$$;

-- The bundle one segment at a time through log_push_one_v1, in ascending partition id: for
-- bundles with two segments of one partition or a capped queue (log_push_multi_v1). Takes
-- the capped queues' max-size locks after every partition lock, in queue-id order.
CREATE OR REPLACE FUNCTION queen.log_push_multi_serial_v1(
    p_queues text[], p_partitions text[], p_msg_counts int[], p_hashes bytea[],
    p_verified int8[], p_blobs bytea[], p_encrypted bool[])
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_n int := cardinality(p_queues);
    v_results jsonb[];
    v_seg record;
BEGIN
    PERFORM queen.log_lock_partitions_v1(p_queues, p_partitions);
    PERFORM queen.log_lock_capped_v1(p_queues);

    v_results := array_fill(NULL::jsonb, ARRAY[v_n]);
    FOR v_seg IN
        SELECT w.ord, lp.id AS pid, q.dedup_window_seconds AS win
        FROM unnest(p_queues, p_partitions) WITH ORDINALITY AS w(qn, pn, ord)
        LEFT JOIN queen.queues q ON q.name = w.qn
        LEFT JOIN LATERAL (
            SELECT p.id FROM queen.log_partitions p
            WHERE p.queue_id = q.id AND p.name = w.pn OFFSET 0) lp ON true
        ORDER BY lp.id, w.ord
    LOOP
        IF v_seg.pid IS NULL THEN
            RAISE EXCEPTION 'log_push_multi_v1: partition %/% vanished during the push',
                p_queues[v_seg.ord], p_partitions[v_seg.ord];
        END IF;
        v_results[v_seg.ord] := queen.log_push_one_v1(
            p_queues[v_seg.ord], p_partitions[v_seg.ord], p_msg_counts[v_seg.ord],
            p_hashes[v_seg.ord], p_verified[v_seg.ord], p_blobs[v_seg.ord],
            v_seg.pid, v_seg.win, COALESCE(p_encrypted[v_seg.ord], false));
    END LOOP;

    IF array_position(v_results, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'log_push_multi_v1: segment % got no result',
            array_position(v_results, NULL);
    END IF;
    RETURN to_jsonb(v_results);
END
$$;

-- The segment covering offset p_off of partition p_pid: one backward primary-key step for
-- the greatest base_offset <= p_off, then the covering test (so a miss never walks). No row
-- when the offset was retained away or never written.
CREATE OR REPLACE FUNCTION queen.log_segment_at_v1(p_pid bigint, p_off bigint)
RETURNS TABLE(r_base bigint, r_end bigint, r_created timestamptz, r_blob bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.base_offset, s.end_offset, s.created_at, s.blob
    FROM (
        SELECT base_offset, end_offset, created_at, blob
        FROM queen.log_segments
        WHERE partition_id = p_pid AND base_offset <= p_off
        ORDER BY base_offset DESC
        LIMIT 1
    ) s
    WHERE s.end_offset >= p_off
$$;
