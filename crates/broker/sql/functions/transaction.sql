-- transaction: POST /api/v1/transaction (docs/engine.md §6.8): pushes and acks in ONE
-- PostgreSQL transaction, all or nothing. Replayed (CREATE OR REPLACE) when its checksum
-- changes.

-- Input (built by the broker):
--   p = {"pushes":[{"queue","partition","count","verified"?,"encrypted"?}…],
--        "acks":[{"partitionId","group","worker","uptoOff","ok","count","cover"?} -- positional
--               |{"partitionId","group","worker","acks":[{"h":hex32,"status"}…],
--                 "fence"?:[hex32…]}]}                                           -- by hash
--   ("cover": the ack registry proved a full-batch completed ack of this lease; see
--   log_ack_at_v1's p_cover. A refused cover raises like any refused ack.)
--   "tenant": the caller's tenant (default ''): an ack of another tenant's partition fails
--   like one without a consumer row (log_ack_by_hash_v1). A cover is built only for a batch
--   the ack registry saw this tenant's pop deliver (engine/ack/cover.rs), so the positional
--   form carries no tenant check of its own.
--   ("fence": the bundle's signals for that (partition, group) in its other ack groups, see
--   log_ack_by_hash_v1's p_fence)
--   ("span": {"offs":[…],"hashes":[hex32…]}, the leased batch's purged part resolved by
--   position, see log_ack_by_hash_v1's p_span_offs. Without it, a hash-form ack whose leased
--   batch lost its hash rows raises 'QSPAN …' with DETAIL {"partitionId","group","worker",
--   "from","to"}: the broker reads that span from the segments and reruns the bundle.)
--   "kv": the kv rider, checked key-value operations applied first by queen.kv_apply_v1
--   (kv.sql) for the tenant, with "kvReadBudget" bytes for its reads: a lost required precondition raises 'QKV …' and rolls the
--   bundle back before any partition is locked.
--   "timers": the bundle's timer operations (log_timers_apply_v1, timers.sql), applied first:
--   timer rows come before any partition row in the lock order. A fire whose claim was lost
--   raises 'QTIMER …'.
--   "stream": a streams cycle (streams.sql): stream_cycle_begin_v1 runs first (its
--   (query, partition) advisory lock, a remembered cycle raising 'QREPLAY', the state ops),
--   stream_cycle_end_v1 after the acks (completing a full-batch cycle's leased batch).
--   p_hashes[i] / p_blobs[i]: the i-th push's hash sidecar (16 bytes per frame) and segment
--   blob, aligned with p->'pushes' (bytea parameters instead of hex/base64 inside the JSON).
--
-- Lock order, the product's total order: a stream cycle's advisory lock and state rows, the kv rider's keys (kv.sql), provisioning (queues, then partitions, in key
-- order), every pushed partition row ascending by id (FOR NO KEY UPDATE, so pops creating
-- cursor rows never wait on it), the capped queues' max-size locks (push.sql), the appends,
-- then consumer rows in ascending (partition_id, group). Consumer locks come only after all partition locks, so the two lock
-- spaces cannot form a cycle; a queue delete takes the same order (queue, partitions, then
-- cursor rows ascending). A delete that commits while this waits makes the call fail with
-- serialization_failure, which the broker reruns (push.sql, log_lock_partitions_v1).
--
-- Every failure raises and so rolls back everything:
--   a push duplicating stored data: 'QDUP …; transaction rolled back' (unique_violation);
--   a plaintext push to an encrypted queue: 'QENC …' (DETAIL: the queue; the broker seals
--   and reruns the bundle); a push past a queue's maxSize: 'QFULL …';
--   an ack refused (lease, consumer, position) or referencing a hash found nowhere:
--   'QTXN …; transaction rolled back' (raise_exception).
-- Below-cursor acks (noop/stale) are tolerated, so a replayed bundle resolves.
-- Result {"ok":true,"pushes":[push results…],"acks":[ack results…],"kv":[kv verdicts…],
-- "timers":[timer verdicts…]} in input order; an ack
-- result with "dlq":true still needs the broker's DLQ hand-off after the commit.
-- Step 1 of a bundle, its pushes: locks every pushed partition (and the capped queues' size
-- locks) in the product's order, appends each segment with log_push_one_v1, and raises on
-- the first refusal. The results, in input order.
CREATE OR REPLACE FUNCTION queen.log_transaction_pushes_v1(p_pushes jsonb, p_hashes bytea[],
                                                           p_blobs bytea[])
RETURNS jsonb[]
LANGUAGE plpgsql AS $$
DECLARE
    v_results jsonb[] := array_fill(NULL::jsonb, ARRAY[jsonb_array_length(p_pushes)]);
    v_queues text[];
    v_partitions text[];
    v_row record;
    v_r jsonb;
BEGIN
    SELECT array_agg(e->>'queue' ORDER BY o), array_agg(e->>'partition' ORDER BY o)
    INTO v_queues, v_partitions
    FROM jsonb_array_elements(p_pushes) WITH ORDINALITY AS t(e, o);
    PERFORM queen.log_lock_partitions_v1(v_queues, v_partitions);
    PERFORM queen.log_lock_capped_v1(v_queues);

    FOR v_row IN
        SELECT t.o, t.e, lp.id AS pid, q.dedup_window_seconds AS win
        FROM jsonb_array_elements(p_pushes) WITH ORDINALITY AS t(e, o)
        LEFT JOIN queen.queues q ON q.name = t.e->>'queue'
        LEFT JOIN queen.log_partitions lp ON lp.queue_id = q.id AND lp.name = t.e->>'partition'
        ORDER BY t.o
    LOOP
        IF v_row.pid IS NULL THEN
            RAISE EXCEPTION 'log_transaction_wire_v1: partition %/% vanished',
                v_row.e->>'queue', v_row.e->>'partition';
        END IF;
        v_r := queen.log_push_one_v1(
            v_row.e->>'queue', v_row.e->>'partition', (v_row.e->>'count')::int,
            p_hashes[v_row.o], COALESCE((v_row.e->>'verified')::bigint, -1),
            p_blobs[v_row.o], v_row.pid, v_row.win,
            COALESCE((v_row.e->>'encrypted')::bool, false));
        IF v_r->>'status' = 'encrypt' THEN
            RAISE EXCEPTION 'QENC queue % has encryptionEnabled; transaction rolled back',
                v_row.e->>'queue'
                USING DETAIL = v_row.e->>'queue';
        END IF;
        IF v_r->>'status' = 'full' THEN
            RAISE EXCEPTION 'QFULL queue % is full: its maxSize of % unconsumed messages leaves room for % of the % pushed to partition %; transaction rolled back',
                v_row.e->>'queue', v_r->>'maxSize', v_r->>'room', v_row.e->>'count',
                v_row.e->>'partition';
        END IF;
        IF v_r->>'status' = 'duplicate' THEN
            RAISE EXCEPTION 'QDUP duplicate messages in queue % partition %; transaction rolled back',
                v_row.e->>'queue', v_row.e->>'partition'
                USING ERRCODE = 'unique_violation', DETAIL = v_r::text;
        END IF;
        v_results[v_row.o] := v_r;
    END LOOP;
    IF array_position(v_results, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'log_transaction_wire_v1: push % got no result',
            array_position(v_results, NULL);
    END IF;
    RETURN v_results;
END
$$;

-- Step 2 of a bundle, its acks, after every partition lock: consumer rows in ascending
-- (partition_id, group), each ack group by hash (log_ack_by_hash_v1) or positional
-- (log_ack_at_v1) for `p_tenant`, raising on the first refusal, on a purged span ('QSPAN')
-- and on an ack that resolves nowhere. The results, in input order.
CREATE OR REPLACE FUNCTION queen.log_transaction_acks_v1(p_acks jsonb, p_tenant text)
RETURNS jsonb[]
LANGUAGE plpgsql AS $$
DECLARE
    v_results jsonb[] := array_fill(NULL::jsonb, ARRAY[jsonb_array_length(p_acks)]);
    v_row record;
    v_r jsonb;
    v_hashes bytea[];
    v_statuses text[];
    v_fence bytea[];
    v_span_offs bigint[];
    v_span_hashes bytea[];
BEGIN
    FOR v_row IN
        SELECT t.o, t.e, (t.e->>'partitionId')::bigint AS pid,
               COALESCE(t.e->>'group', '__QUEUE_MODE__') AS grp,
               COALESCE(t.e->>'worker', '') AS worker
        FROM jsonb_array_elements(p_acks) WITH ORDINALITY AS t(e, o)
        -- Within one consumer row t.o keeps the broker's group order (leased groups before
        -- lease-less ones, engine::ack::group_by_lease).
        ORDER BY 3, 4, t.o
    LOOP
        IF v_row.e ? 'acks' THEN
            SELECT array_agg(decode(a->>'h', 'hex') ORDER BY i),
                   array_agg(COALESCE(a->>'status', 'completed') ORDER BY i)
            INTO v_hashes, v_statuses
            FROM jsonb_array_elements(v_row.e->'acks') WITH ORDINALITY AS x(a, i);
            SELECT array_agg(decode(f, 'hex')) INTO v_fence
            FROM jsonb_array_elements_text(COALESCE(v_row.e->'fence', '[]'::jsonb)) AS y(f);
            v_span_offs := NULL;
            v_span_hashes := NULL;
            IF v_row.e ? 'span' THEN
                SELECT COALESCE(array_agg(o::bigint ORDER BY i), '{}')
                INTO v_span_offs
                FROM jsonb_array_elements_text(v_row.e->'span'->'offs') WITH ORDINALITY AS so(o, i);
                SELECT COALESCE(array_agg(decode(h, 'hex') ORDER BY i), '{}')
                INTO v_span_hashes
                FROM jsonb_array_elements_text(v_row.e->'span'->'hashes') WITH ORDINALITY AS sh(h, i);
            END IF;
            v_r := queen.log_ack_by_hash_v1(v_row.pid, v_row.grp, v_row.worker,
                                            COALESCE(v_hashes, '{}'), COALESCE(v_statuses, '{}'),
                                            COALESCE(v_fence, '{}'), p_tenant,
                                            v_span_offs, v_span_hashes);
            IF v_r ? 'purgedSpan' THEN
                RAISE EXCEPTION 'QSPAN the leased batch of partition % group "%" lost its hash rows; transaction rolled back',
                    v_row.pid, v_row.grp
                    USING DETAIL = (jsonb_build_object('partitionId', v_row.pid, 'group', v_row.grp,
                                                       'worker', v_row.worker)
                                    || (v_r->'purgedSpan'))::text;
            END IF;
            -- Something rides along on this route, so an ack that resolves nowhere aborts it.
            IF (v_r->>'ok')::bool AND jsonb_array_length(v_r->'unresolvedHashes') > 0 THEN
                RAISE EXCEPTION 'QTXN ack references unknown transactionId; transaction rolled back'
                    USING DETAIL = (v_r->'unresolvedHashes')::text;
            END IF;
        ELSE
            v_r := queen.log_ack_at_v1(v_row.pid, v_row.grp, v_row.worker,
                                       (v_row.e->>'uptoOff')::bigint,
                                       COALESCE((v_row.e->>'ok')::bool, true),
                                       COALESCE((v_row.e->>'count')::int, 0),
                                       COALESCE((v_row.e->>'cover')::bool, false));
        END IF;
        IF NOT (v_r->>'ok')::bool THEN
            RAISE EXCEPTION 'QTXN ack failed for partition % group "%": %; transaction rolled back',
                v_row.pid, v_row.grp, v_r->>'error';
        END IF;
        v_results[v_row.o] := v_r;
    END LOOP;
    RETURN v_results;
END
$$;

-- The bundle: a stream cycle's start, the kv rider, the timers, the pushes (step 1), the acks
-- (step 2), the stream cycle's end, in the lock order above.
CREATE OR REPLACE FUNCTION queen.log_transaction_wire_v1(p jsonb, p_hashes bytea[], p_blobs bytea[])
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_pushes jsonb := COALESCE(p->'pushes', '[]'::jsonb);
    v_acks jsonb := COALESCE(p->'acks', '[]'::jsonb);
    v_np int;
    v_push_results jsonb[] := '{}';
    v_ack_results jsonb[];
    v_kv jsonb := '[]';
    v_timer_results jsonb := '[]'::jsonb;
BEGIN
    IF jsonb_typeof(p->'stream') = 'object' THEN
        PERFORM queen.stream_cycle_begin_v1(
            p->'stream' || jsonb_build_object('tenant', COALESCE(p->>'tenant', '')));
    END IF;
    IF jsonb_array_length(COALESCE(p->'kv', '[]'::jsonb)) > 0 THEN
        v_kv := queen.kv_apply_v1(COALESCE(p->>'tenant', ''), p->'kv',
                                  (p->>'kvReadBudget')::bigint);
    END IF;
    IF jsonb_typeof(v_pushes) <> 'array' OR jsonb_typeof(v_acks) <> 'array' THEN
        RAISE EXCEPTION 'log_transaction_wire_v1: pushes and acks must be arrays';
    END IF;
    v_np := jsonb_array_length(v_pushes);
    IF COALESCE(cardinality(p_hashes), 0) <> v_np OR COALESCE(cardinality(p_blobs), 0) <> v_np THEN
        RAISE EXCEPTION 'log_transaction_wire_v1: % pushes but % hash blobs and % segment blobs',
            v_np, COALESCE(cardinality(p_hashes), 0), COALESCE(cardinality(p_blobs), 0);
    END IF;

    IF p ? 'timers' THEN
        v_timer_results := queen.log_timers_apply_v1(p->'timers', COALESCE(p->>'tenant', ''));
    END IF;
    IF v_np > 0 THEN
        v_push_results := queen.log_transaction_pushes_v1(v_pushes, p_hashes, p_blobs);
    END IF;
    v_ack_results := queen.log_transaction_acks_v1(v_acks, COALESCE(p->>'tenant', ''));

    IF jsonb_typeof(p->'stream') = 'object' THEN
        PERFORM queen.stream_cycle_end_v1(p->'stream');
    END IF;
    RETURN jsonb_build_object('ok', true,
                              'pushes', COALESCE(to_jsonb(v_push_results), '[]'::jsonb),
                              'acks', COALESCE(to_jsonb(v_ack_results), '[]'::jsonb),
                              'kv', v_kv,
                              'timers', v_timer_results);
END
$$;
