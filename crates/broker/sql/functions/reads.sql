-- reads: the reads by offset (docs/wire.md §23): POST /api/v1/fetch reads segments of named
-- partitions from an offset, POST /api/v1/partitions/changed lists a queue's partitions, all
-- or those written since a time. Neither takes a lease, moves a cursor or writes anything.
-- Replayed (CREATE OR REPLACE) when its checksum changes.

-- For each asked (queue, partition, offset), in ask order (column i, from 1): the partition
-- (NULL columns when the queue or the partition does not exist) and the segments holding
-- p_offsets[i] and the ones after it, at most p_max_segments of them and no more once their
-- stored bytes reach p_max_bytes (the first one always comes). No segment when the offset is
-- below log_start or past last_offset: the broker tells those apart from the partition's
-- columns.
CREATE OR REPLACE FUNCTION queen.log_fetch_v1(p_queues text[], p_partitions text[],
                                              p_offsets bigint[], p_max_bytes bigint,
                                              p_max_segments int)
RETURNS TABLE (i int, partition_id bigint, last_offset bigint, log_start bigint,
               base_offset bigint, created_at text, blob bytea)
LANGUAGE sql STABLE AS $$
    SELECT e.i::int, lp.id, lp.last_offset, lp.log_start, s.base_offset,
           queen.log_iso_micros(s.created_at), s.blob
    FROM unnest(p_queues, p_partitions, p_offsets) WITH ORDINALITY AS e(q, p, o, i)
    LEFT JOIN queen.queues qq ON qq.name = e.q
    LEFT JOIN queen.log_partitions lp ON lp.queue_id = qq.id AND lp.name = e.p
    LEFT JOIN LATERAL (
        SELECT x.base_offset, x.created_at, x.blob
        FROM (SELECT seg.base_offset, seg.created_at, seg.blob,
                     sum(octet_length(seg.blob)) OVER (ORDER BY seg.base_offset)
                         - octet_length(seg.blob) AS before
              FROM (SELECT sg.base_offset, sg.created_at, sg.blob
                    FROM queen.log_segments sg
                    WHERE sg.partition_id = lp.id AND sg.end_offset >= e.o
                      AND e.o >= lp.log_start AND e.o <= lp.last_offset
                    ORDER BY sg.base_offset
                    LIMIT p_max_segments) seg) x
        WHERE x.before < p_max_bytes
    ) s ON true
    ORDER BY e.i, s.base_offset
$$;

-- The partitions of queue p_queue (its stored name): without p_since every one by name after
-- p_after_name; with it those whose last_write_at is at or after p_since, by
-- (last_write_at, name) after (p_after_at, p_after_name). At most p_limit. One row with
-- known = false when the queue does not exist.
CREATE OR REPLACE FUNCTION queen.log_partitions_changed_v1(p_queue text, p_since timestamptz,
                                                           p_after_at timestamptz,
                                                           p_after_name text, p_limit int)
RETURNS TABLE (known bool, name text, id bigint, last_offset bigint, log_start bigint,
               last_write_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_qid bigint;
BEGIN
    SELECT q.id INTO v_qid FROM queen.queues q WHERE q.name = p_queue;
    IF v_qid IS NULL THEN
        RETURN QUERY SELECT false, NULL::text, NULL::bigint, NULL::bigint, NULL::bigint,
                            NULL::timestamptz;
        RETURN;
    END IF;
    IF p_since IS NULL THEN
        RETURN QUERY
        SELECT true, lp.name, lp.id, lp.last_offset, lp.log_start, lp.last_write_at
        FROM queen.log_partitions lp
        WHERE lp.queue_id = v_qid AND (p_after_name IS NULL OR lp.name > p_after_name)
        ORDER BY lp.name
        LIMIT p_limit;
    ELSE
        RETURN QUERY
        SELECT true, lp.name, lp.id, lp.last_offset, lp.log_start, lp.last_write_at
        FROM queen.log_partitions lp
        WHERE lp.queue_id = v_qid AND lp.last_write_at >= p_since
          AND (p_after_at IS NULL OR (lp.last_write_at, lp.name) > (p_after_at, p_after_name))
        ORDER BY lp.last_write_at, lp.name
        LIMIT p_limit;
    END IF;
END
$$;

-- The time up to which every write is in what a read started now sees, for a next
-- `since`: the earlier of now and the start of the oldest open transaction of this database
-- (a push still open may commit a write stamped after its start), less one second, because a
-- push moves last_write_at only once a second has passed since its last value (push.sql).
-- Call it before the read it covers.
CREATE OR REPLACE FUNCTION queen.log_safe_time_v1()
RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT LEAST(clock_timestamp(),
                 COALESCE((SELECT min(a.xact_start) FROM pg_stat_activity a
                           WHERE a.datname = current_database()
                             AND a.backend_type = 'client backend'
                             AND a.pid <> pg_backend_pid()
                             AND a.xact_start IS NOT NULL), 'infinity'))
           - interval '1 second'
$$;
