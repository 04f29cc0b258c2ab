-- ack: the ack path (docs/engine.md §6; docs/spec/ack-internals.md): the authoritative hash-resolved
-- decision procedure and its steps. The positional variants used by the transaction wire and
-- the accelerators are ack_at.sql; lease renewal is lease.sql, the DLQ hand-off and listing
-- dlq.sql. Replayed (CREATE OR REPLACE) when its checksum changes.
--
-- Every function here, and in ack_at.sql, lease.sql and dlq.sql, locks only queen.log_consumers rows (several: in ascending
-- (partition_id, consumer_group) order), never a partition row, so acks cannot form a lock
-- cycle with the push serializer. Partition and queue rows are read without locks.

-- The whole ack contract for one (partition, group, lease) group of acks.
--
-- p_hashes[k] is xxh3_128 of the k-th acked transactionId (16 bytes, computed by the broker;
-- SQL never hashes), p_statuses[k] its status: completed|success|acked|ok|'' acknowledge,
-- failed|retry|dlq signal, anything else is ignored. p_worker = '' is a lease-less ack: no
-- lease validation, and it still advances the cursor.
--
-- p_fence: the hashes of the signals the same request carries for this (partition, group) in
-- its other groups (another lease, or lease-less). They are resolved like signals, the cursor
-- never reaches the lowest of them, and they never act or appear in the lists: their own
-- group acts on them. An own signal above a fence does not act either, since only the lowest
-- signal of a (partition, group) decides. So however a request's groups are ordered, the
-- cursor never passes a position the request nacked.
--
-- Which occurrence an item means (a transactionId can be stored more than once: dedup window
-- 0, or a re-push after the window): its lowest one in the span. Under a lease the span ends
-- at batch_end and every copy in it was delivered, so an acknowledgement acks all of them;
-- a lease-less span has no end, so only that lowest copy is acknowledged: acking the first
-- copy must not commit the undelivered messages up to a later one.
--
-- Result, always {"ok":…}:
--   {"ok":false,"error":"consumer not found"|"invalid or expired lease"}
--   {"ok":true,"acked":n,"off":committed,"leaseReleased":b, noop/stale/unresolved lists}
--   + "dlq":true,"off":poison,"worker":w,"retryCount":r  -- the broker must file the DLQ row
--     (log_dlq_head_v1); the lease is kept for that hand-off
--   + "dropped":true,"off":poison                        -- exhausted with the DLQ disabled
--   + "retried":true                                     -- a failed ack charged the budget
--   + "wakeQueue":name  -- the lease was released with data pending behind the cursor
--   + "wakeAfterMs":ms  -- ... but a failed/retry signal holds the batch back for the
--     queue's retry_delay: wake the queue when the hold ends
-- A failed (budget left) or retry signal on a queue with retry_delay > 0 does not free the
-- row: it keeps a hold (worker_id '', batch_end NULL, lease_expires_at = now + retry_delay
-- ms), which the claim treats as a live lease, so the batch is redelivered no earlier than
-- the delay. A hold is no lease: nothing can ack (no batch_end), renew ('' is never a lease
-- id) or file under it; a lease-less ack still advances the cursor through it.
-- noopHashes / staleHashes / unresolvedHashes are 32-char lowercase hex tokens in input
-- order: acknowledgements at or below the cursor, signals at or below the cursor, and hashes
-- found nowhere in the ackable span.
-- The form without p_fence, replaced by the DEFAULT below (two would make calls ambiguous).
-- p_tenant: the caller's tenant (queen.queues.tenant_id); a partition of another tenant is
-- answered exactly like one without a consumer row, before its lease is looked at, so the
-- answer never tells a foreign partition from a missing one. The form without it is dropped
-- (a DEFAULT beside it would make calls ambiguous); a call that omits it acts for the
-- default tenant.
--
-- p_span_offs / p_span_hashes (aligned): the leased batch resolved by position, for a batch
-- whose hash-sidecar rows were purged (a group far behind the purge horizon). Under a lease
-- the span [committed + 1, batch_end] may start below txns_start; those offsets have no
-- log_txns row left, but the broker can read their transactionIds from the stored segments
-- (log_ack_span_segments_v1) and hash them. Offsets are immutable, so such a pair is a fact,
-- not a claim: it is used only for offsets of the leased span [committed + 1, batch_end]. With
-- p_span_offs NULL (the default) and such a purged part, nothing changes and the answer is
--   {"ok":false,"purgedSpan":{"from":committed + 1,"to":batch_end},"error":…}
-- asking for the pairs of the rest of the leased batch; the broker reads them and calls
-- again. The whole rest, not only its purged part: a purge that moves txns_start between the
-- two calls then costs nothing. With the pairs given, an offset below txns_start missing
-- from them (its segment was retained away) is simply not found.
-- A lease-less ack uses the row's last delivered batch, [committed + 1, batch_end] (its
-- lease live or expired: batch_end is cleared only by a release), the same way: every
-- message delivered above the cursor since the last release lies in it, so a consumer that
-- acks what it was just served lease-less resolves by position too (before, it was refused
-- and the partition stalled until the lease expired). Past a purged gap above batch_end the
-- sidecar is not consulted (v_hi := batch_end): a copy of the transactionId stored above the
-- gap must not stand in for the delivered one. With no batch on the row the lease-less span
-- starts at txns_start, as before.
DROP FUNCTION IF EXISTS queen.log_ack_by_hash_v1(bigint, text, text, bytea[], text[]);
DROP FUNCTION IF EXISTS queen.log_ack_by_hash_v1(bigint, text, text, bytea[], text[], bytea[]);
DROP FUNCTION IF EXISTS queen.log_ack_by_hash_v1(bigint, text, text, bytea[], text[], bytea[], text);
CREATE OR REPLACE FUNCTION queen.log_ack_by_hash_v1(
    p_partition_id bigint, p_group text, p_worker text, p_hashes bytea[], p_statuses text[],
    p_fence bytea[] DEFAULT '{}', p_tenant text DEFAULT '',
    p_span_offs bigint[] DEFAULT NULL, p_span_hashes bytea[] DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_by_lease bool := COALESCE(p_worker, '') <> '';
    v_c record;      -- the consumer row
    v_q record;      -- its partition and queue
    v_live bool;
    v_r record;      -- the resolution (log_ack_resolve_v1)
BEGIN
    IF cardinality(p_hashes) IS DISTINCT FROM cardinality(p_statuses) THEN
        RAISE EXCEPTION 'log_ack_by_hash_v1: % hashes but % statuses',
            cardinality(p_hashes), cardinality(p_statuses);
    END IF;
    IF cardinality(p_span_offs) IS DISTINCT FROM cardinality(p_span_hashes) THEN
        RAISE EXCEPTION 'log_ack_by_hash_v1: % span offsets but % span hashes',
            cardinality(p_span_offs), cardinality(p_span_hashes);
    END IF;

    -- Lock and read the consumer row, the only lock of the ack path, then its partition and
    -- queue.
    SELECT committed, batch_end, worker_id, lease_expires_at, batch_retry_count
    INTO v_c
    FROM queen.log_consumers
    WHERE partition_id = p_partition_id AND consumer_group = p_group
    FOR UPDATE;
    IF FOUND THEN
        SELECT lp.txns_start, lp.last_offset, q.name AS queue, q.retry_limit, q.retry_delay,
               q.dead_letter_queue OR q.dlq_after_max_retries AS dlq_enabled
        INTO v_q
        FROM queen.log_partitions lp
        JOIN queen.queues q ON q.id = lp.queue_id
        WHERE lp.id = p_partition_id AND q.tenant_id = COALESCE(p_tenant, '');
    END IF;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('ok', false, 'error', 'consumer not found');
    END IF;
    v_live := v_c.worker_id IS NOT NULL AND v_c.batch_end IS NOT NULL
              AND v_c.lease_expires_at IS NOT NULL AND v_c.lease_expires_at > v_now;
    IF v_by_lease AND (v_c.worker_id IS DISTINCT FROM p_worker OR NOT v_live) THEN
        RETURN jsonb_build_object('ok', false, 'error', 'invalid or expired lease');
    END IF;

    -- Resolve the span, then decide what the acks and signals found there do, and do it.
    v_r := queen.log_ack_resolve_v1(p_partition_id, v_by_lease, v_c.committed, v_c.batch_end,
                                    v_q.txns_start, p_hashes, p_statuses, p_fence, p_span_offs,
                                    p_span_hashes);
    IF v_r.purged THEN
        RETURN jsonb_build_object(
            'ok', false, 'error', 'hash rows of the leased batch were purged',
            'purgedSpan', jsonb_build_object('from', v_c.committed + 1, 'to', v_c.batch_end));
    END IF;
    RETURN queen.log_ack_decide_v1(p_partition_id, p_group, v_now, v_live, v_c, v_q, v_r);
END
$$;

-- log_ack_by_hash_v1's resolution: the ackable span, then every occurrence inside it of
-- every input and fence hash. purged: the answer must ask for the pairs (see its header),
-- and the rest is NULL.
--
-- The span: above the cursor and the sidecar purge watermark, and under a lease no further
-- than the leased batch. Under a lease whose batch starts below the watermark, the purged
-- part resolves by position (see the header). Given the pairs, they are used for the whole
-- rest of the batch, [committed + 1, v_purged_to = batch_end]: the purge takes no lock the
-- ack takes, so it may delete the batch's hash rows between the ack's statements, and the
-- pairs (facts) make that harmless. A lease-less ack does the same with the row's last
-- delivered batch (see the header).
CREATE OR REPLACE FUNCTION queen.log_ack_resolve_v1(
    p_partition_id bigint, p_by_lease bool, p_committed bigint, p_batch_end bigint,
    p_txns_start bigint, p_hashes bytea[], p_statuses text[], p_fence bytea[],
    p_span_offs bigint[], p_span_hashes bytea[],
    OUT purged bool, OUT h bytea[], OUT kind text[], OUT eff bigint[], OUT ok_offs bigint[],
    OUT fence bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_txns_start bigint := COALESCE(p_txns_start, 0);
    v_lo bigint := GREATEST(p_committed + 1, v_txns_start);
    v_hi bigint := CASE WHEN p_by_lease THEN p_batch_end END;
    v_purged_to bigint;
    v_lo_base bigint;
BEGIN
    purged := true;
    IF p_batch_end > p_committed AND p_span_offs IS NOT NULL THEN
        v_purged_to := p_batch_end;
        v_lo := p_committed + 1;
        IF NOT p_by_lease AND p_batch_end + 1 < v_txns_start THEN
            v_hi := p_batch_end;
        END IF;
    ELSIF p_batch_end > p_committed AND p_committed + 1 < v_txns_start THEN
        RETURN;
    END IF;

    -- Ranges are disjoint and ascending, so the sidecar rows overlapping the span are the
    -- one covering lo and those based above it: a primary-key range scan. Under a lease the
    -- range ends at batch_end, which is the whole optimisation: an ack at the head of a deep
    -- partition explodes only the batch's hash blobs. No row lies below txns_start (the
    -- purge, retention.sql), so every scan of the sidecar starts there: what a partition's
    -- purged history costs an ack is nothing, not even a walk over its dead index entries.
    v_hi := COALESCE(v_hi, 9223372036854775807);
    SELECT x.base_offset INTO v_lo_base
    FROM queen.log_txns x
    WHERE x.partition_id = p_partition_id AND x.base_offset <= v_lo
      AND x.base_offset >= v_txns_start
    ORDER BY x.base_offset DESC
    LIMIT 1;
    v_lo_base := COALESCE(v_lo_base, v_lo);

    -- The resolution, materialised once. Per input hash (aligned arrays, in input order) its
    -- normalised status and eff, the lowest matching offset inside the span: MIN prefers the
    -- in-span occurrence, so a re-push below the cursor never shadows the copy the client is
    -- actually acking, and a signal on a transactionId delivered twice stops at its first
    -- copy. Under a lease the acknowledged offsets are every in-span occurrence of an
    -- acknowledged hash (acking a transactionId two delivered messages share acks both);
    -- lease-less, only each eff (see the header). fence: the lowest fence occurrence.
    WITH input AS (
        SELECT t.pos, t.h,
               CASE WHEN lower(COALESCE(t.s, '')) IN ('completed', 'success', 'acked', 'ok', '')
                        THEN 'ok'
                    WHEN lower(t.s) IN ('failed', 'retry', 'dlq') THEN lower(t.s)
               END AS kind
        FROM unnest(p_hashes, p_statuses) WITH ORDINALITY AS t(h, s, pos)
        UNION ALL
        SELECT cardinality(p_hashes) + f.pos, f.h, 'fence'
        FROM unnest(COALESCE(p_fence, '{}')) WITH ORDINALITY AS f(h, pos)
    ),
    matched AS MATERIALIZED (
        SELECT i.pos, i.h, i.kind, o.off
        FROM input i
        LEFT JOIN (
            SELECT x.base_offset + u.idx AS off, u.h
            FROM queen.log_txns x
            CROSS JOIN LATERAL queen.log_unnest_hashes(x.hashes) AS u
            WHERE x.partition_id = p_partition_id
              AND x.base_offset BETWEEN v_lo_base AND v_hi
              AND x.base_offset + u.idx BETWEEN v_lo AND v_hi
            UNION ALL
            SELECT s.off, s.h
            FROM unnest(p_span_offs, p_span_hashes) AS s(off, h)
            WHERE s.off BETWEEN v_lo AND v_purged_to
        ) o ON o.h = i.h
        WHERE i.kind IS NOT NULL
    ),
    resolved AS (
        SELECT m.pos, m.h, m.kind, min(m.off) AS eff
        FROM matched m
        WHERE m.kind <> 'fence'
        GROUP BY m.pos, m.h, m.kind
    )
    SELECT array_agg(r.h ORDER BY r.pos), array_agg(r.kind ORDER BY r.pos),
           array_agg(r.eff ORDER BY r.pos),
           CASE WHEN p_by_lease
                THEN (SELECT COALESCE(array_agg(DISTINCT m.off), '{}') FROM matched m
                       WHERE m.kind = 'ok' AND m.off IS NOT NULL)
                ELSE (SELECT COALESCE(array_agg(DISTINCT r2.eff), '{}') FROM resolved r2
                       WHERE r2.kind = 'ok' AND r2.eff IS NOT NULL)
           END,
           (SELECT min(m.off) FROM matched m WHERE m.kind = 'fence')
    INTO h, kind, eff, ok_offs, fence
    FROM resolved r;

    -- The purge may have deleted the batch's hash rows after txns_start was read by the
    -- caller (each statement here takes a new snapshot): an unresolved item of a delivered
    -- batch that now starts below the watermark asks for the pairs, before anything changed.
    purged := p_batch_end > p_committed AND p_span_offs IS NULL
              AND array_position(eff, NULL) IS NOT NULL
              AND (SELECT lp.txns_start FROM queen.log_partitions lp WHERE lp.id = p_partition_id)
                  > p_committed + 1;
END
$$;

-- log_ack_by_hash_v1's decision and its application, for the consumer row p_c and the
-- partition and queue p_q the caller read (the row locked), and the resolution p_r of
-- log_ack_resolve_v1; p_live: the row holds a live lease.
CREATE OR REPLACE FUNCTION queen.log_ack_decide_v1(
    p_partition_id bigint, p_group text, p_now timestamptz, p_live bool, p_c record,
    p_q record, p_r record)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_below bytea[];
    v_d record;
    v_sig bigint;
    v_new bigint;
    v_acked bigint;
    v_result jsonb;
BEGIN
    -- `below` (an occurrence at or below the cursor) only tells a noop or stale item from an
    -- unresolvable one, so it is needed only for hashes the span did not resolve; the
    -- consumed history is exploded only when such a hash exists.
    IF array_position(p_r.eff, NULL) IS NOT NULL THEN
        SELECT COALESCE(array_agg(DISTINCT u.h), '{}')
        INTO v_below
        FROM queen.log_txns x
        CROSS JOIN LATERAL queen.log_unnest_hashes(x.hashes) AS u
        JOIN (SELECT DISTINCT m.h FROM unnest(p_r.h, p_r.eff) AS m(h, eff) WHERE m.eff IS NULL) miss
          ON miss.h = u.h
        WHERE x.partition_id = p_partition_id
          AND x.base_offset BETWEEN COALESCE(p_q.txns_start, 0) AND p_c.committed
          AND x.base_offset + u.idx <= p_c.committed;
    END IF;

    -- Every decision below is a scalar aggregate of the resolution. sig: the lowest eff among
    -- the signals, ties dlq > failed > retry.
    WITH resolved AS (
        SELECT m.pos, m.h, m.kind, m.eff, COALESCE(m.h = ANY (v_below), false) AS below
        FROM unnest(p_r.h, p_r.kind, p_r.eff) WITH ORDINALITY AS m(h, kind, eff, pos)
    ),
    sig AS (
        SELECT r.eff, r.kind
        FROM resolved r
        WHERE r.kind <> 'ok' AND r.eff IS NOT NULL
        ORDER BY r.eff, CASE r.kind WHEN 'dlq' THEN 0 WHEN 'failed' THEN 1 ELSE 2 END
        LIMIT 1
    )
    SELECT s.eff AS sig, s.kind,
           (SELECT max(o.off) FROM unnest(p_r.ok_offs) AS o(off)
             WHERE o.off < LEAST(s.eff, p_r.fence)
                OR (s.eff IS NULL AND p_r.fence IS NULL)) AS max_ok,
           (SELECT COALESCE(array_agg(encode(r.h, 'hex') ORDER BY r.pos), '{}') FROM resolved r
             WHERE r.kind = 'ok' AND r.eff IS NULL AND r.below) AS noop,
           (SELECT COALESCE(array_agg(encode(r.h, 'hex') ORDER BY r.pos), '{}') FROM resolved r
             WHERE r.kind <> 'ok' AND r.eff IS NULL AND r.below) AS stale,
           (SELECT COALESCE(array_agg(encode(r.h, 'hex') ORDER BY r.pos), '{}') FROM resolved r
             WHERE r.eff IS NULL AND NOT r.below) AS unresolved
    INTO v_d
    FROM (SELECT 1) AS one
    LEFT JOIN sig s ON true;

    -- The cursor moves to the highest acknowledged offset strictly below the lowest explicit
    -- signal: a nack is never skipped by a later ack of the same call.
    v_new := COALESCE(v_d.max_ok, p_c.committed);
    -- A fence below the own head signal: that lower nack decides (in its own group), so this
    -- signal only keeps its message ahead of the cursor. At the same position both act (the
    -- second finds the lease already released), so the lowest nack is never left unacted.
    v_sig := CASE WHEN p_r.fence < v_d.sig THEN NULL ELSE v_d.sig END;
    v_acked := v_new - p_c.committed;
    v_result := jsonb_build_object(
        'ok', true, 'acked', v_acked, 'off', v_new, 'leaseReleased', false,
        'noopHashes', to_jsonb(v_d.noop), 'staleHashes', to_jsonb(v_d.stale),
        'unresolvedHashes', to_jsonb(v_d.unresolved));

    -- A signal acts only on a live lease (the caller's, validated by the caller, or, for a
    -- lease-less signal, the row's); without one only the implicit advance applies.
    IF v_sig IS NOT NULL AND p_live THEN
        RETURN queen.log_ack_signal_v1(p_partition_id, p_group, p_now, p_c, p_q, v_result,
                                       v_new, v_sig, v_d.kind);
    END IF;

    -- Acknowledgements only (or a signal without a live lease): advance; the lease ends when
    -- its whole batch is committed.
    IF p_c.batch_end IS NOT NULL AND v_new >= p_c.batch_end THEN
        UPDATE queen.log_consumers
        SET committed = v_new, worker_id = NULL, lease_expires_at = NULL,
            lease_acquired_at = NULL, batch_end = NULL,
            attempt_offset = NULL, attempt_count = 0, batch_retry_count = 0,
            total_consumed = total_consumed + v_acked,
            last_consumed_at = CASE WHEN v_acked > 0 THEN p_now ELSE last_consumed_at END
        WHERE partition_id = p_partition_id AND consumer_group = p_group;
        RETURN v_result || jsonb_build_object(
            'leaseReleased', p_live,
            'wakeQueue', CASE WHEN p_live AND p_q.last_offset > v_new THEN p_q.queue END);
    END IF;
    IF v_acked > 0 THEN
        UPDATE queen.log_consumers
        SET committed = v_new, total_consumed = total_consumed + v_acked,
            last_consumed_at = p_now
        WHERE partition_id = p_partition_id AND consumer_group = p_group;
    END IF;
    RETURN v_result;
END
$$;

-- log_ack_by_hash_v1's head signal p_sig (of kind p_kind) acting on the row's live lease,
-- for log_ack_decide_v1 (its p_c and p_q): the cursor moves to p_new and the answer p_result
-- gains the signal's part.
CREATE OR REPLACE FUNCTION queen.log_ack_signal_v1(
    p_partition_id bigint, p_group text, p_now timestamptz, p_c record, p_q record,
    p_result jsonb, p_new bigint, p_sig bigint, p_kind text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_acked bigint := p_new - p_c.committed;
    v_hold timestamptz;
BEGIN
    -- A redelivery waits for the queue's retryDelay (ms), through the hold (see the header).
    IF COALESCE(p_q.retry_delay, 0) > 0 THEN
        v_hold := p_now + make_interval(secs => p_q.retry_delay / 1000.0);
    END IF;
    IF p_kind = 'failed' AND p_c.batch_retry_count < COALESCE(p_q.retry_limit, 3) THEN
        -- Budget left: charge one unit and redeliver from the cursor (after the delay).
        UPDATE queen.log_consumers
        SET committed = p_new, worker_id = CASE WHEN v_hold IS NOT NULL THEN '' END,
            lease_expires_at = v_hold, lease_acquired_at = NULL, batch_end = NULL,
            batch_retry_count = batch_retry_count + 1,
            total_consumed = total_consumed + v_acked,
            last_consumed_at = CASE WHEN v_acked > 0 THEN p_now ELSE last_consumed_at END
        WHERE partition_id = p_partition_id AND consumer_group = p_group;
        RETURN p_result || jsonb_build_object('leaseReleased', true, 'retried', true,
                                              'wakeQueue', p_q.queue,
                                              'wakeAfterMs', COALESCE(p_q.retry_delay, 0));
    ELSIF p_kind = 'retry' THEN
        -- Redeliver from the cursor (after the delay); the retry budget is untouched.
        UPDATE queen.log_consumers
        SET committed = p_new, worker_id = CASE WHEN v_hold IS NOT NULL THEN '' END,
            lease_expires_at = v_hold, lease_acquired_at = NULL, batch_end = NULL,
            total_consumed = total_consumed + v_acked,
            last_consumed_at = CASE WHEN v_acked > 0 THEN p_now ELSE last_consumed_at END
        WHERE partition_id = p_partition_id AND consumer_group = p_group;
        RETURN p_result || jsonb_build_object('leaseReleased', true, 'wakeQueue', p_q.queue,
                                              'wakeAfterMs', COALESCE(p_q.retry_delay, 0));
    ELSIF p_kind = 'dlq' OR COALESCE(p_q.dlq_enabled, true) THEN
        -- Dead-letter the head signal. Only the broker can decompress the segment, so the
        -- lease is kept for its log_dlq_head_v1 call, which files the row and releases.
        UPDATE queen.log_consumers
        SET committed = p_new,
            total_consumed = total_consumed + v_acked,
            last_consumed_at = CASE WHEN v_acked > 0 THEN p_now ELSE last_consumed_at END
        WHERE partition_id = p_partition_id AND consumer_group = p_group;
        RETURN p_result || jsonb_build_object(
            'dlq', true, 'off', p_sig, 'partitionId', p_partition_id, 'group', p_group,
            'worker', p_c.worker_id, 'retryCount', p_c.batch_retry_count);
    END IF;
    -- Exhausted with the DLQ disabled: skip the poison message.
    UPDATE queen.log_consumers
    SET committed = GREATEST(committed, p_sig), worker_id = NULL,
        lease_expires_at = NULL, lease_acquired_at = NULL, batch_end = NULL,
        batch_retry_count = 0, attempt_offset = NULL, attempt_count = 0,
        total_consumed = total_consumed + v_acked + 1, last_consumed_at = p_now
    WHERE partition_id = p_partition_id AND consumer_group = p_group;
    RETURN p_result || jsonb_build_object(
        'dropped', true, 'off', p_sig, 'leaseReleased', true,
        'wakeQueue', CASE WHEN p_q.last_offset > p_sig THEN p_q.queue END);
END
$$;

-- The stored segments overlapping offsets [p_from, p_to] of partition p_pid, ascending: the
-- frames of a leased batch whose hash-sidecar rows were purged (log_ack_by_hash_v1's
-- "purgedSpan"). The broker decodes them, hashes the transactionIds of [p_from, p_to] and
-- calls log_ack_by_hash_v1 again with those pairs; SQL never hashes. One backward
-- primary-key step finds the segment covering p_from, then a range scan up to p_to (a leased
-- batch's few segments). A segment retained away is missing, and so are its offsets.
CREATE OR REPLACE FUNCTION queen.log_ack_span_segments_v1(p_pid bigint, p_from bigint, p_to bigint)
RETURNS TABLE(r_base bigint, r_end bigint, r_blob bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.base_offset, s.end_offset, s.blob
    FROM queen.log_segments s
    WHERE s.partition_id = p_pid
      AND s.base_offset >= COALESCE(
          (SELECT c.base_offset FROM queen.log_segments c
            WHERE c.partition_id = p_pid AND c.base_offset <= p_from
            ORDER BY c.base_offset DESC LIMIT 1), p_from)
      AND s.base_offset <= p_to
      AND s.end_offset >= p_from
    ORDER BY s.base_offset
$$;
