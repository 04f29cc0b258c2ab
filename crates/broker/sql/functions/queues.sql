-- queues: queue configuration (create / merge / reset / replace) and queue deletion
-- (docs/wire.md §3, §4). Replayed (CREATE OR REPLACE) when its checksum changes.

-- Creates or reconfigures p_queue and returns the effective row.
--
-- p_opts is keyed by column name and already validated by the broker: a present value sets
-- the column, a present JSON null resets it to its /configure default, an absent key keeps
-- the stored value. A freshly created queue, or p_replace, starts from the defaults instead
-- of the stored row. The /configure default of lease_time is 300 (the column default, 60, is
-- what implicit creation gets). retry_delay and ttl default to 0, off (migrations/0003).
-- Unknown keys are ignored (the broker refuses unknown options before calling).
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(p_queue text, p_opts jsonb, p_replace bool)
RETURNS SETOF queen.queues
LANGUAGE plpgsql AS $$
DECLARE
    v_defaults CONSTANT jsonb := jsonb_build_object(
        'namespace', '', 'task', '', 'priority', 0, 'lease_time', 300, 'retry_limit', 3,
        'retry_delay', 0, 'ttl', 0, 'max_queue_size', 0, 'dead_letter_queue', true,
        'dlq_after_max_retries', true, 'delayed_processing', 0, 'window_buffer', 0,
        'retention_enabled', false, 'retention_seconds', 0, 'completed_retention_seconds', 0,
        'max_wait_time_seconds', 0, 'encryption_enabled', false, 'min_pop_wait_time', 0,
        'dedup_window_seconds', 3600);
    v_created bool;
    v_row queen.queues;
    v_eff jsonb;
BEGIN
    INSERT INTO queen.queues (name) VALUES (p_queue)
    ON CONFLICT (name) DO NOTHING
    RETURNING true INTO v_created;

    -- NO KEY UPDATE: serialises configures without blocking the key-share locks pops and
    -- partition-creating pushes take on the queue row.
    SELECT * INTO v_row FROM queen.queues WHERE name = p_queue FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'configure_queue_v1: queue % vanished while configuring', p_queue;
    END IF;

    v_eff := CASE WHEN COALESCE(v_created, false) OR p_replace
                  THEN to_jsonb(v_row) || v_defaults
                  ELSE to_jsonb(v_row) END;
    v_eff := v_eff || COALESCE((
        SELECT jsonb_object_agg(k, CASE WHEN jsonb_typeof(v) = 'null' THEN v_defaults -> k
                                        ELSE v END)
        FROM jsonb_each(COALESCE(p_opts, '{}'::jsonb)) AS e(k, v)
        WHERE v_defaults ? k), '{}'::jsonb);

    RETURN QUERY
    UPDATE queen.queues SET
        namespace = v_eff ->> 'namespace',
        task = v_eff ->> 'task',
        priority = (v_eff ->> 'priority')::int,
        lease_time = (v_eff ->> 'lease_time')::int,
        retry_limit = (v_eff ->> 'retry_limit')::int,
        retry_delay = (v_eff ->> 'retry_delay')::int,
        ttl = (v_eff ->> 'ttl')::int,
        max_queue_size = (v_eff ->> 'max_queue_size')::int,
        dead_letter_queue = (v_eff ->> 'dead_letter_queue')::bool,
        dlq_after_max_retries = (v_eff ->> 'dlq_after_max_retries')::bool,
        delayed_processing = (v_eff ->> 'delayed_processing')::int,
        window_buffer = (v_eff ->> 'window_buffer')::int,
        retention_enabled = (v_eff ->> 'retention_enabled')::bool,
        retention_seconds = (v_eff ->> 'retention_seconds')::int,
        completed_retention_seconds = (v_eff ->> 'completed_retention_seconds')::int,
        max_wait_time_seconds = (v_eff ->> 'max_wait_time_seconds')::int,
        encryption_enabled = (v_eff ->> 'encryption_enabled')::bool,
        min_pop_wait_time = (v_eff ->> 'min_pop_wait_time')::int,
        dedup_window_seconds = (v_eff ->> 'dedup_window_seconds')::int
    WHERE id = v_row.id
    RETURNING *;
END
$$;

-- Deletes p_queue and everything it owns; returns the number of partitions deleted, or NULL
-- when the queue does not exist. Lock order: the queue row (which also waits out pushes that
-- are creating partitions of it: their FK check holds a key-share lock on it), then its
-- partition rows ascending (waits out in-flight appends), then its cursor rows ascending.
-- The only FOR UPDATE on queue and partition rows: pops, which hold cursor rows, never wait
-- for these locks (they try their key-share locks with SKIP LOCKED, see pop.sql), so the
-- cascade cannot close a cycle with them. The hash sidecar, dead letters and
-- traces have no foreign key and are deleted explicitly; segments, cursors, group
-- registrations and watermarks go by cascade.
CREATE OR REPLACE FUNCTION queen.delete_queue_v1(p_queue text)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_qid bigint;
    v_pids bigint[];
BEGIN
    SELECT id INTO v_qid FROM queen.queues WHERE name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT COALESCE(array_agg(id ORDER BY id), '{}') INTO v_pids
    FROM (SELECT id FROM queen.log_partitions WHERE queue_id = v_qid ORDER BY id FOR UPDATE) p;
    -- The cursor rows in the product's consumer-row order, before the cascade deletes them in
    -- whatever order it finds them: a transaction acking several of them holds some while
    -- waiting for the next, in that same order. No cursor row can appear meanwhile: creating
    -- one needs a key-share lock on a partition row, and we hold them all.
    PERFORM 1 FROM queen.log_consumers
    WHERE partition_id = ANY (v_pids)
    ORDER BY partition_id, consumer_group
    FOR UPDATE;

    DELETE FROM queen.log_segments WHERE partition_id = ANY (v_pids);
    DELETE FROM queen.log_txns WHERE partition_id = ANY (v_pids);
    DELETE FROM queen.log_dlq WHERE partition_id = ANY (v_pids);
    DELETE FROM queen.message_traces WHERE partition_id = ANY (v_pids);
    DELETE FROM queen.queues WHERE id = v_qid;
    RETURN cardinality(v_pids);
END
$$;
