-- hotlist: the SQL side of the hot-list ring (docs/engine.md §7). The broker keeps, per
-- (queue, group), the partitions it believes have work; the claims on them go through
-- log_pop_list_v1 (pop.sql), which reports a verdict per candidate. This file holds the
-- reseed: the scan that fills a cold ring and refills every ring on a slow floor, the
-- backstop that keeps any partition with work from staying out of the ring.

-- One page of a reseed of (queue, group). First the group-first-contact registration and
-- bulk seed (log_register_group_v1, the same as the SQL wildcard procedure's, so the ring
-- path never creates the cursors of an unregistered group), then the partitions that may
-- have pending data for the group, ascending id after p_after_id, at most p_limit: the write
-- watermark of the candidate scan applies (docs/engine.md §2.7), and a partition leased now
-- comes with its lease's end, so the broker revisits it then rather than claiming it at once.
-- The filter is coarse like the candidate scan's: the claim re-verifies under the row lock.
-- A first page that finds nothing at all maintains the empty-scan watermark.
-- r_registered is false when the queue does not exist (or is being deleted): nothing is
-- registered then, and the broker hands out no candidate until a reseed registers.
CREATE OR REPLACE FUNCTION queen.log_hotlist_reseed_v1(
    p_queue text, p_group text, p_sub_mode text, p_sub_from text, p_after_id bigint, p_limit int,
    OUT r_registered bool, OUT r_ids bigint[], OUT r_names text[], OUT r_until timestamptz[])
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_qid bigint;
    v_mode text;
    v_ts timestamptz;
    v_floor timestamptz;
    v_checked timestamptz;
BEGIN
    r_registered := false;
    r_ids := '{}'; r_names := '{}'; r_until := '{}';
    SELECT q.id INTO v_qid FROM queen.queues q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT i.r_mode, i.r_ts INTO v_mode, v_ts FROM queen.log_sub_intent_v1(p_group, p_sub_mode, p_sub_from) i;
    PERFORM queen.log_register_group_v1(v_qid, p_group, v_mode, v_ts);
    r_registered := EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                            WHERE m.consumer_group = p_group AND m.queue_id = v_qid
                              AND m.partition_name = '' AND m.namespace = '' AND m.task = '');
    IF NOT r_registered THEN
        RETURN;
    END IF;
    SELECT w.last_empty_scan_at, w.updated_at INTO v_floor, v_checked
    FROM queen.consumer_watermarks w WHERE w.queue_id = v_qid AND w.consumer_group = p_group;
    v_floor := COALESCE(v_floor, '-infinity');
    SELECT COALESCE(array_agg(s.id ORDER BY s.id), '{}'),
           COALESCE(array_agg(s.name ORDER BY s.id), '{}'),
           COALESCE(array_agg(s.until ORDER BY s.id), '{}')
    INTO r_ids, r_names, r_until
    FROM (
        SELECT p.id, p.name,
               CASE WHEN c.worker_id IS NOT NULL AND c.lease_expires_at > v_now
                    THEN c.lease_expires_at END AS until
        FROM queen.log_partitions p
        LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
        WHERE p.queue_id = v_qid
          AND p.id > COALESCE(p_after_id, -1)
          AND p.last_write_at >= queen.log_write_horizon(v_floor)
          AND (c.partition_id IS NULL OR p.last_offset > c.committed)
        ORDER BY p.id
        LIMIT GREATEST(p_limit, 1)) s;
    IF p_after_id IS NULL AND cardinality(r_ids) = 0 THEN
        PERFORM queen.log_empty_scan_v1(v_qid, p_group, v_floor, v_checked);
    END IF;
END $$;
