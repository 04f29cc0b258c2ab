-- streams: the streams runtime (docs/wire.md §24, tables in migrations/0009_streams.sql):
-- query registration, state reads, and the two halves of a cycle commit that
-- log_transaction_wire_v1 (transaction.sql) runs around its pushes and acks, so a cycle's
-- state writes, sink pushes and source ack are ONE PostgreSQL transaction. Replayed (CREATE OR
-- REPLACE) when its checksum changes.

-- Registers (or finds) the query named p_name for p_tenant. A new query is "fresh"; an
-- existing one with another config hash is a conflict unless p_reset, which wipes its state
-- and its cycle memory and adopts the new hash (the id, and so the client's query id, stays).
-- Result {"query_id","name","fresh","reset"} or {"conflict":true,"config_hash":stored}.
CREATE OR REPLACE FUNCTION queen.stream_register_v1(p_tenant text, p_name text, p_source text,
                                                    p_sink text, p_hash text, p_reset boolean)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_row queen.stream_queries;
    v_fresh boolean := false;
BEGIN
    INSERT INTO queen.stream_queries (id, tenant_id, name, source_queue, sink_queue,
                                      config_hash, created_at, updated_at)
    VALUES (gen_random_uuid(), p_tenant, p_name, p_source, p_sink, p_hash, v_now, v_now)
    ON CONFLICT (tenant_id, name) DO NOTHING
    RETURNING * INTO v_row;
    IF FOUND THEN
        v_fresh := true;
    ELSE
        SELECT * INTO v_row FROM queen.stream_queries
        WHERE tenant_id = p_tenant AND name = p_name
        FOR UPDATE;
        IF v_row.config_hash <> p_hash AND NOT p_reset THEN
            RETURN jsonb_build_object('conflict', true, 'config_hash', v_row.config_hash);
        END IF;
    END IF;
    IF p_reset AND NOT v_fresh THEN
        DELETE FROM queen.stream_state WHERE query_id = v_row.id;
        DELETE FROM queen.stream_cycles WHERE query_id = v_row.id;
    END IF;
    IF NOT v_fresh THEN
        UPDATE queen.stream_queries
        SET config_hash = p_hash, source_queue = p_source, sink_queue = p_sink,
            updated_at = v_now
        WHERE id = v_row.id;
    END IF;
    RETURN jsonb_build_object('query_id', v_row.id, 'name', v_row.name, 'fresh', v_fresh,
                              'reset', p_reset AND NOT v_fresh);
END
$$;

-- The source queue of p_query when it is a query of p_tenant, else NULL.
CREATE OR REPLACE FUNCTION queen.stream_source_v1(p_tenant text, p_query uuid)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT source_queue FROM queen.stream_queries WHERE id = p_query AND tenant_id = p_tenant
$$;

-- The state rows of (p_query, p_partition) in key byte order: all of them, or those named in
-- p_keys (when not empty), starting with p_prefix (a literal prefix, when not NULL), and whose
-- value's numeric windowEnd is at or before p_ripe (when not NULL). Result [{"key","value"}…].
CREATE OR REPLACE FUNCTION queen.stream_state_get_v1(p_query uuid, p_partition text,
                                                     p_keys text[], p_prefix text, p_ripe bigint)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT COALESCE(jsonb_agg(jsonb_build_object('key', s.key, 'value', s.value) ORDER BY s.key),
                    '[]'::jsonb)
    FROM queen.stream_state s
    WHERE s.query_id = p_query AND s.partition_id = p_partition
      AND (cardinality(p_keys) = 0 OR s.key = ANY (p_keys))
      AND (p_prefix IS NULL OR starts_with(s.key, p_prefix))
      AND (p_ripe IS NULL OR (jsonb_typeof(s.value->'windowEnd') = 'number'
                              AND (s.value->>'windowEnd')::numeric <= p_ripe))
$$;

-- The first half of a cycle, run by log_transaction_wire_v1 before anything else it locks:
--   s = {"tenant","query","partition","cycle":hex32,"answer":{…},"memorySecs":n,
--        "stateOps":[{"type":"upsert","key","value"}|{"type":"delete","key"}…],
--        "release":bool,"ack":{"partitionId","group","worker"}|null}
-- Takes the (query, partition) advisory lock (seed 44), so cycles of one query partition
-- commit one at a time, then: a cycle whose identity is remembered raises 'QREPLAY' with the
-- answer it was given as DETAIL (nothing is applied; the broker answers that); otherwise its
-- state ops are applied in order and its identity and answer remembered. Records of this
-- (query, partition) older than memorySecs are pruned on the way. A query not of the tenant
-- raises 'QSTREAM' (the broker checked it before; this is the guard against a race).
CREATE OR REPLACE FUNCTION queen.stream_cycle_begin_v1(s jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_query uuid := (s->>'query')::uuid;
    v_partition text := s->>'partition';
    v_cycle bytea := decode(s->>'cycle', 'hex');
    v_answer jsonb;
    v_op jsonb;
BEGIN
    IF queen.stream_source_v1(COALESCE(s->>'tenant', ''), v_query) IS NULL THEN
        RAISE EXCEPTION 'QSTREAM no stream query %', v_query;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(v_query::text || '/' || v_partition, 44));
    SELECT c.answer INTO v_answer FROM queen.stream_cycles c
    WHERE c.query_id = v_query AND c.partition_id = v_partition AND c.cycle = v_cycle;
    IF FOUND THEN
        RAISE EXCEPTION 'QREPLAY cycle already committed' USING DETAIL = v_answer::text;
    END IF;
    DELETE FROM queen.stream_cycles c
    WHERE c.query_id = v_query AND c.partition_id = v_partition
      AND c.committed_at < v_now - make_interval(secs => (s->>'memorySecs')::double precision);
    FOR v_op IN SELECT * FROM jsonb_array_elements(COALESCE(s->'stateOps', '[]'::jsonb)) LOOP
        IF v_op->>'type' = 'upsert' THEN
            INSERT INTO queen.stream_state (query_id, partition_id, key, value, updated_at)
            VALUES (v_query, v_partition, v_op->>'key', v_op->'value', v_now)
            ON CONFLICT (query_id, partition_id, key)
                DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
        ELSE
            DELETE FROM queen.stream_state
            WHERE query_id = v_query AND partition_id = v_partition AND key = v_op->>'key';
        END IF;
    END LOOP;
    INSERT INTO queen.stream_cycles (query_id, partition_id, cycle, answer, committed_at)
    VALUES (v_query, v_partition, v_cycle, s->'answer', v_now);
END
$$;

-- The second half, after the cycle's ack. "release" (the client's release_lease, true by
-- default: "the atomic full-batch cycle") with a completed ack means the cycle consumed its
-- whole leased batch of that partition: when the ack (cumulative up to its transactionId)
-- stopped short of the batch's end, the rest of the batch is acked too, through
-- log_ack_at_v1 (ack_at.sql) up to batch_end, which releases the lease. The client orders a
-- batch by (createdAt, id), which is not always the log's order (ids minted by a binary push
-- share a millisecond), so its "last" message need not be the batch's last offset. Without
-- "release" (a gate's partial ack) the tail stays leased and is redelivered, in order, when
-- the lease ends. Locks only the one consumer row (the ack path's order). Result: whether
-- the batch was completed here.
CREATE OR REPLACE FUNCTION queen.stream_cycle_end_v1(s jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint;
    v_batch_end bigint;
    v_r jsonb;
BEGIN
    IF NOT COALESCE((s->>'release')::boolean, true) OR jsonb_typeof(s->'ack') <> 'object' THEN
        RETURN false;
    END IF;
    v_pid := (s->'ack'->>'partitionId')::bigint;
    SELECT c.batch_end INTO v_batch_end FROM queen.log_consumers c
    WHERE c.partition_id = v_pid AND c.consumer_group = s->'ack'->>'group'
      AND c.worker_id = s->'ack'->>'worker'
    FOR UPDATE;
    IF v_batch_end IS NULL THEN
        RETURN false;
    END IF;
    v_r := queen.log_ack_at_v1(v_pid, s->'ack'->>'group', s->'ack'->>'worker', v_batch_end,
                               true, 0, false);
    IF NOT (v_r->>'ok')::bool THEN
        RAISE EXCEPTION 'QTXN completing the leased batch of partition % failed: %; transaction rolled back',
            v_pid, v_r->>'error';
    END IF;
    RETURN true;
END
$$;
