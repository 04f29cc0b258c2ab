-- queues: queue configuration (create / merge / reset / replace) and queue deletion
-- (docs/wire.md §3, §4). Replayed (CREATE OR REPLACE) when its checksum changes.

-- Creates or reconfigures p_queue and returns the effective row.
--
-- p_defaults holds the /configure default of every option, keyed by column: the broker sends
-- its table of options (src/queue_options.rs), the one place the options and their defaults
-- are listed, and its keys are the columns this function writes. (The /configure default of
-- lease_time, 300, differs from its column default, 60, what implicit creation gets.)
-- p_opts is keyed by column name and already validated by the broker: a present value sets
-- the column, a present JSON null resets it to its default, an absent key keeps the stored
-- value. A freshly created queue, or p_replace, starts from the defaults instead of the
-- stored row. Keys of p_opts missing from p_defaults are ignored (the broker refuses unknown
-- options before calling).
DROP FUNCTION IF EXISTS queen.configure_queue_v1(text, jsonb, bool);
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(p_queue text, p_opts jsonb, p_replace bool,
                                                    p_defaults jsonb)
RETURNS SETOF queen.queues
LANGUAGE plpgsql AS $$
DECLARE
    v_created bool;
    v_row queen.queues;
    v_eff jsonb;
    v_set text;
BEGIN
    SELECT string_agg(format('%I = r.%I', k, k), ', ') INTO v_set
    FROM jsonb_object_keys(p_defaults) AS k;
    IF v_set IS NULL THEN
        RAISE EXCEPTION 'configure_queue_v1: no option defaults given';
    END IF;

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
                  THEN to_jsonb(v_row) || p_defaults
                  ELSE to_jsonb(v_row) END;
    v_eff := v_eff || COALESCE((
        SELECT jsonb_object_agg(k, CASE WHEN jsonb_typeof(v) = 'null' THEN p_defaults -> k
                                        ELSE v END)
        FROM jsonb_each(COALESCE(p_opts, '{}'::jsonb)) AS e(k, v)
        WHERE p_defaults ? k), '{}'::jsonb);

    -- Every option column from the effective values, typed by the row type.
    RETURN QUERY EXECUTE format(
        'UPDATE queen.queues q SET %s FROM jsonb_populate_record(NULL::queen.queues, $1) r
         WHERE q.id = $2 RETURNING q.*', v_set)
    USING v_eff, v_row.id;
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
