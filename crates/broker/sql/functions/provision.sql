-- provision: implicit creation of queues and partitions (docs/engine.md §4.4), the one place
-- either happens on the push path (push.sql calls it). Replayed
-- (CREATE OR REPLACE) when its checksum changes.

-- Creates the missing queues among p_queues with defaults: the one place implicit queue
-- creation happens. Implicit labels come from the dotted name: namespace = first part (the
-- whole name without a dot), task = second part ('' without a dot). Inserts run in name
-- order so concurrent creators take their speculative-insert locks in one order instead of
-- convoying.
CREATE OR REPLACE FUNCTION queen.log_create_queues_v1(p_queues text[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO queen.queues (name, namespace, task)
    SELECT q, split_part(q, '.', 1), split_part(q, '.', 2)
    FROM (SELECT DISTINCT q FROM unnest(p_queues) AS w(q)) d
    ORDER BY q
    ON CONFLICT (name) DO NOTHING
$$;

-- Creates whatever is missing among the given (queue, partition) pairs, with defaults.
-- Partition inserts run in unique-key order, like the queue inserts. Cheap when nothing is
-- missing: one existence count, no insert.
CREATE OR REPLACE FUNCTION queen.log_provision_v1(p_queues text[], p_partitions text[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_wanted int;
    v_present int;
BEGIN
    IF cardinality(p_queues) IS DISTINCT FROM cardinality(p_partitions) THEN
        RAISE EXCEPTION 'log_provision_v1: % queues but % partitions',
            cardinality(p_queues), cardinality(p_partitions);
    END IF;

    SELECT count(*) INTO v_wanted
    FROM (SELECT DISTINCT q, p FROM unnest(p_queues, p_partitions) AS w(q, p)) d;
    -- Every lookup of a partition by (queue, name) in these functions is a LATERAL probe with
    -- OFFSET 0, so the unique key (queue_id, name) is the index condition whatever the table
    -- statistics say. A plain join let a fast-growing queue (10 000 partitions created
    -- before autovacuum's next analyze) be probed by queue_id alone: a walk over every
    -- partition of the queue per lookup.
    SELECT count(*) INTO v_present
    FROM (SELECT DISTINCT q, p FROM unnest(p_queues, p_partitions) AS w(q, p)) d
    JOIN queen.queues qu ON qu.name = d.q
    CROSS JOIN LATERAL (
        SELECT 1 FROM queen.log_partitions lp
        WHERE lp.queue_id = qu.id AND lp.name = d.p OFFSET 0) lp;
    IF v_present = v_wanted THEN
        RETURN;
    END IF;

    -- A queue delete can commit between this statement's read of a queue row and the
    -- partition insert's foreign-key check on it: nothing was written, and a new attempt
    -- finds the name free, so that is a serialization failure the broker retries (the
    -- subtransaction costs only this slow path).
    BEGIN
        PERFORM queen.log_create_queues_v1(p_queues);
        INSERT INTO queen.log_partitions (queue_id, name)
        SELECT qu.id, d.p
        FROM (SELECT DISTINCT q, p FROM unnest(p_queues, p_partitions) AS w(q, p)) d
        JOIN queen.queues qu ON qu.name = d.q
        ORDER BY qu.id, d.p
        ON CONFLICT (queue_id, name) DO NOTHING;
    EXCEPTION WHEN foreign_key_violation THEN
        RAISE EXCEPTION 'log_provision_v1: a queue was deleted while provisioning it'
            USING ERRCODE = 'serialization_failure';
    END;
END
$$;
