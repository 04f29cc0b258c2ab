-- admin: the admin surface (docs/wire.md §12–15): consumer-group listings, seeks and deletes,
-- resource counts, message detail and traces. Replayed (CREATE OR REPLACE) when its checksum
-- changes.
--
-- Every count here is watermark arithmetic on partition and cursor rows (docs/engine.md §10.4),
-- never a segment scan: pending = GREATEST(last_offset − GREATEST(committed, log_start − 1), 0),
-- and a group without a cursor row on a partition reads committed = −1. Time lag costs at most
-- two primary-key probes per lagging partition. Timestamps render as ISO-8601 UTC with a Z.

-- The one pending formula; inlined by the planner.
CREATE OR REPLACE FUNCTION queen.admin_pending(p_last bigint, p_committed bigint, p_log_start bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT GREATEST(p_last - GREATEST(COALESCE(p_committed, -1), p_log_start - 1), 0)
$$;

-- ISO-8601 UTC, millisecond precision, Z suffix (the wire's timestamp form); NULL stays NULL.
CREATE OR REPLACE FUNCTION queen.admin_iso(p timestamptz)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Which (group, queue) pairs exist: a group is on a queue when it holds a cursor row on one of
-- its partitions, a queue-wide registration, or a namespace/task registration matching the
-- queue's labels. NULL filters mean "all".
CREATE OR REPLACE FUNCTION queen.admin_memberships_v1(p_group text DEFAULT NULL, p_queue_id bigint DEFAULT NULL)
RETURNS TABLE(consumer_group text, queue_id bigint)
LANGUAGE sql STABLE AS $$
    SELECT DISTINCT c.consumer_group, p.queue_id
      FROM queen.log_consumers c
      JOIN queen.log_partitions p ON p.id = c.partition_id
     WHERE (p_group IS NULL OR c.consumer_group = p_group)
       AND (p_queue_id IS NULL OR p.queue_id = p_queue_id)
    UNION
    SELECT m.consumer_group, m.queue_id
      FROM queen.consumer_groups_metadata m
     WHERE m.queue_id IS NOT NULL
       AND (p_group IS NULL OR m.consumer_group = p_group)
       AND (p_queue_id IS NULL OR m.queue_id = p_queue_id)
    UNION
    SELECT m.consumer_group, q.id
      FROM queen.consumer_groups_metadata m
      JOIN queen.queues q
        ON (m.namespace = '' OR q.namespace = m.namespace) AND (m.task = '' OR q.task = m.task)
     WHERE m.queue_id IS NULL AND (m.namespace <> '' OR m.task <> '')
       AND (p_group IS NULL OR m.consumer_group = p_group)
       AND (p_queue_id IS NULL OR q.id = p_queue_id)
$$;

-- One row per (member group, partition of its queue), missing cursor rows included as −1.
-- oldest_unconsumed_at (pending partitions only) is the created_at of the segment holding
-- the next wanted offset, else of the first segment after it (a retention gap): one backward
-- primary-key step, then at most one forward step.
CREATE OR REPLACE FUNCTION queen.admin_group_cursors_v1(p_group text DEFAULT NULL, p_queue_id bigint DEFAULT NULL)
RETURNS TABLE(consumer_group text, queue_id bigint, queue_name text, partition_id bigint,
              partition_name text, committed bigint, worker_id text, lease_live bool,
              total_consumed bigint, last_consumed_at timestamptz, pending bigint,
              oldest_unconsumed_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT g.consumer_group, q.id, q.name, p.id, p.name,
           COALESCE(c.committed, -1),
           c.worker_id,
           COALESCE(c.worker_id IS NOT NULL AND c.lease_expires_at > now(), false),
           COALESCE(c.total_consumed, 0),
           c.last_consumed_at,
           x.pending,
           COALESCE(head.created_at, after_gap.created_at)
      FROM queen.admin_memberships_v1(p_group, p_queue_id) g
      JOIN queen.queues q ON q.id = g.queue_id
      JOIN queen.log_partitions p ON p.queue_id = q.id
      LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
      CROSS JOIN LATERAL (
          SELECT queen.admin_pending(p.last_offset, c.committed, p.log_start) AS pending,
                 GREATEST(COALESCE(c.committed, -1) + 1, p.log_start) AS wanted
      ) x
      LEFT JOIN LATERAL (
          SELECT s.end_offset, s.created_at FROM queen.log_segments s
           WHERE x.pending > 0 AND s.partition_id = p.id AND s.base_offset <= x.wanted
           ORDER BY s.base_offset DESC LIMIT 1
      ) head ON head.end_offset >= x.wanted
      LEFT JOIN LATERAL (
          SELECT s.created_at FROM queen.log_segments s
           WHERE x.pending > 0 AND head.created_at IS NULL
             AND s.partition_id = p.id AND s.base_offset > x.wanted
           ORDER BY s.base_offset LIMIT 1
      ) after_gap ON true
$$;

-- Per-partition counts over every member group of the partition's queue: total = retained
-- messages; pending = what the slowest member group still has to consume; processing = the
-- spans under live leases; deadLetter = DLQ rows.
CREATE OR REPLACE FUNCTION queen.admin_partition_stats_v1(p_queue_id bigint DEFAULT NULL)
RETURNS TABLE(queue_id bigint, partition_id bigint, partition_name text, last_offset bigint,
              log_start bigint, created_at timestamptz, last_write_at timestamptz,
              total bigint, pending bigint, processing bigint, dead_letter bigint)
LANGUAGE sql STABLE AS $$
    WITH groups AS (
        SELECT m.queue_id, count(*) AS n FROM queen.admin_memberships_v1(NULL, p_queue_id) m GROUP BY m.queue_id
    ), dlq AS (
        SELECT d.partition_id, count(*) AS n FROM queen.log_dlq d
         WHERE p_queue_id IS NULL
            OR d.partition_id IN (SELECT id FROM queen.log_partitions WHERE queue_id = p_queue_id)
         GROUP BY d.partition_id
    )
    SELECT p.queue_id, p.id, p.name, p.last_offset, p.log_start, p.created_at, p.last_write_at,
           GREATEST(p.last_offset + 1 - p.log_start, 0),
           queen.admin_pending(p.last_offset,
               CASE WHEN COALESCE(g.n, 0) > COALESCE(cs.rows, 0) THEN -1 ELSE cs.min_committed END,
               p.log_start),
           COALESCE(cs.processing, 0),
           COALESCE(dlq.n, 0)
      FROM queen.log_partitions p
      LEFT JOIN groups g ON g.queue_id = p.queue_id
      LEFT JOIN dlq ON dlq.partition_id = p.id
      LEFT JOIN LATERAL (
          SELECT count(*) AS rows, min(c.committed) AS min_committed,
                 sum(c.batch_end - c.committed) FILTER (
                     WHERE c.worker_id IS NOT NULL AND c.lease_expires_at > now()
                       AND c.batch_end > c.committed) AS processing
            FROM queen.log_consumers c WHERE c.partition_id = p.id
      ) cs ON true
     WHERE p_queue_id IS NULL OR p.queue_id = p_queue_id
$$;

-- The options of a queue row in the wire's names (the /configure echo).
CREATE OR REPLACE FUNCTION queen.admin_queue_config(q queen.queues)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'priority', q.priority, 'leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
        'retryDelay', q.retry_delay, 'maxSize', q.max_queue_size, 'ttl', q.ttl,
        'deadLetterQueue', q.dead_letter_queue, 'dlqAfterMaxRetries', q.dlq_after_max_retries,
        'delayedProcessing', q.delayed_processing, 'windowBuffer', q.window_buffer,
        'retentionSeconds', q.retention_seconds,
        'completedRetentionSeconds', q.completed_retention_seconds,
        'retentionEnabled', q.retention_enabled, 'encryptionEnabled', q.encryption_enabled,
        'maxWaitTimeSeconds', q.max_wait_time_seconds, 'minPopWaitTime', q.min_pop_wait_time,
        'dedupWindowSeconds', q.dedup_window_seconds)
$$;

-- ---------------------------------------------------------------------------------------
-- Consumer groups (docs/wire.md §12)
-- ---------------------------------------------------------------------------------------

-- GET /api/v1/consumer-groups: one element per group, with its queues.
CREATE OR REPLACE FUNCTION queen.admin_groups_v1()
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH cur AS MATERIALIZED (SELECT * FROM queen.admin_group_cursors_v1(NULL, NULL)),
        per_queue AS (
            SELECT c.consumer_group, c.queue_id, c.queue_name,
                   count(*) AS partitions,
                   sum(c.pending) AS pending,
                   count(*) FILTER (WHERE c.lease_live) AS leased,
                   COALESCE(EXTRACT(EPOCH FROM now() - min(c.oldest_unconsumed_at))::bigint, 0) AS time_lag
              FROM cur c GROUP BY c.consumer_group, c.queue_id, c.queue_name
        ), per_group AS (
            SELECT pq.consumer_group,
                   jsonb_agg(jsonb_build_object(
                       'queue', pq.queue_name, 'partitions', pq.partitions, 'pending', pq.pending,
                       'activeLeases', pq.leased, 'timeLagSeconds', pq.time_lag,
                       'subscriptionMode', m.subscription_mode,
                       'subscriptionTimestamp', queen.admin_iso(m.subscription_timestamp))
                       ORDER BY pq.queue_name) AS queues,
                   sum(pq.leased) AS members, sum(pq.pending) AS total_lag, max(pq.time_lag) AS max_lag
              FROM per_queue pq
              LEFT JOIN queen.consumer_groups_metadata m
                ON m.consumer_group = pq.consumer_group AND m.queue_id = pq.queue_id AND m.partition_name = ''
             GROUP BY pq.consumer_group
        )
        SELECT COALESCE(jsonb_agg(jsonb_build_object(
                   'name', g.consumer_group, 'queues', g.queues, 'members', g.members,
                   'totalLag', g.total_lag, 'maxTimeLag', g.max_lag,
                   'state', CASE WHEN g.total_lag = 0 THEN 'idle'
                                 WHEN g.members > 0 THEN 'active' ELSE 'lagging' END)
                   ORDER BY g.consumer_group), '[]'::jsonb)
          FROM per_group g);
END
$$;

-- GET /api/v1/consumer-groups/:group: object keyed by queue name; NULL when the group is
-- on no queue.
CREATE OR REPLACE FUNCTION queen.admin_group_v1(p_group text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH cur AS MATERIALIZED (SELECT * FROM queen.admin_group_cursors_v1(p_group, NULL)),
        per_queue AS (
            SELECT c.queue_id, c.queue_name,
                   jsonb_agg(jsonb_build_object(
                       'partition', c.partition_name, 'partitionId', c.partition_id::text,
                       'workerId', c.worker_id,
                       'lastConsumedAt', queen.admin_iso(c.last_consumed_at),
                       'totalConsumed', c.total_consumed, 'offsetLag', c.pending,
                       'timeLagSeconds', COALESCE(EXTRACT(EPOCH FROM now() - c.oldest_unconsumed_at)::bigint, 0),
                       'leaseActive', c.lease_live)
                       ORDER BY c.partition_name) AS partitions
              FROM cur c GROUP BY c.queue_id, c.queue_name
        )
        SELECT jsonb_object_agg(pq.queue_name, jsonb_build_object(
                   'conflation', COALESCE(m.conflation, false),
                   'subscriptionMode', m.subscription_mode,
                   'subscriptionTimestamp', queen.admin_iso(m.subscription_timestamp),
                   'partitions', pq.partitions))
          FROM per_queue pq
          LEFT JOIN queen.consumer_groups_metadata m
            ON m.consumer_group = p_group AND m.queue_id = pq.queue_id AND m.partition_name = '');
END
$$;

-- GET /api/v1/consumer-groups/lagging: partitions whose oldest unconsumed message is at least
-- p_min_lag_seconds old, most lagging first.
CREATE OR REPLACE FUNCTION queen.admin_lagging_v1(p_min_lag_seconds bigint)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH lag AS MATERIALIZED (
            SELECT c.*, EXTRACT(EPOCH FROM now() - c.oldest_unconsumed_at)::bigint AS time_lag
              FROM queen.admin_group_cursors_v1(NULL, NULL) c
             WHERE c.pending > 0 AND c.oldest_unconsumed_at IS NOT NULL
        )
        SELECT COALESCE(jsonb_agg(jsonb_build_object(
                   'consumer_group', l.consumer_group, 'queue_name', l.queue_name,
                   'partition_name', l.partition_name, 'partition_id', l.partition_id::text,
                   'worker_id', l.worker_id, 'offset_lag', l.pending,
                   'time_lag_seconds', l.time_lag,
                   'lag_hours', round(l.time_lag / 3600.0, 2),
                   'oldest_unconsumed_at', queen.admin_iso(l.oldest_unconsumed_at),
                   'last_consumed_at', queen.admin_iso(l.last_consumed_at))
                   ORDER BY l.time_lag DESC, l.consumer_group, l.partition_id), '[]'::jsonb)
          FROM lag l
         WHERE l.time_lag >= p_min_lag_seconds);
END
$$;

-- Seek a group on a queue (one partition, or all when p_partition is NULL) to the end
-- (p_to_end) or to just before the first segment at or after p_ts (future-only if none;
-- the same rule as timestamp subscriptions: queen.log_seed_cursor_v1 of pop.sql).
-- Releases any lease and resets retry and attempt state. Cursor rows are written in
-- ascending partition order, each under the same per-(partition, group) advisory lock the
-- pop's row-creation path try-locks, so a pop never waits on a seek and a seek never races
-- a pop creating the same row. Partition rows are read, never locked: the push serializer is
-- not touched. Returns {"found":false} when nothing matches; else the count and whether the
-- seek left anything pending (a rewind: the caller must wake and repair its accelerators).
CREATE OR REPLACE FUNCTION queen.admin_seek_v1(p_group text, p_queue text, p_partition text,
                                               p_to_end bool, p_ts timestamptz)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_qid bigint;
    v_n int := 0;
    v_rewound bool := false;
    r record;
BEGIN
    SELECT id INTO v_qid FROM queen.queues WHERE name = p_queue;
    IF v_qid IS NULL THEN
        RETURN jsonb_build_object('found', false);
    END IF;
    FOR r IN
        SELECT p.id AS pid, p.last_offset,
               CASE WHEN p_to_end THEN p.last_offset
                    ELSE queen.log_seed_cursor_v1(p.id, p.last_offset, p.log_start, p_ts)
               END AS target
          FROM queen.log_partitions p
         WHERE p.queue_id = v_qid AND (p_partition IS NULL OR p.name = p_partition)
         ORDER BY p.id
    LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended(r.pid::text || '/' || p_group, 42));
        INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed)
        VALUES (r.pid, p_group, r.target)
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
           SET committed = EXCLUDED.committed, batch_end = NULL, worker_id = NULL,
               lease_expires_at = NULL, lease_acquired_at = NULL, batch_retry_count = 0,
               attempt_offset = NULL, attempt_count = 0;
        v_n := v_n + 1;
        v_rewound := v_rewound OR r.target < r.last_offset;
    END LOOP;
    IF v_n = 0 THEN
        RETURN jsonb_build_object('found', false);
    END IF;
    -- Data is pending again: the empty-scan floor must not hide it from the candidate scan.
    IF v_rewound THEN
        DELETE FROM queen.consumer_watermarks WHERE queue_id = v_qid AND consumer_group = p_group;
    END IF;
    RETURN jsonb_build_object('found', true, 'partitionsUpdated', v_n, 'rewound', v_rewound);
END
$$;

-- Deletes a group's cursor rows (on one queue, or everywhere when p_queue is NULL) and its
-- empty-scan floors; with p_delete_metadata also its registrations, so a group of the same
-- name starts fresh on its next first contact. Cursor rows are locked in ascending order
-- first (the global consumer-row order). Returns {"found":false} for an unknown queue, else
-- the count and the names of the queues touched.
CREATE OR REPLACE FUNCTION queen.admin_delete_group_v1(p_group text, p_queue text, p_delete_metadata bool)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_qid bigint;
    v_queues jsonb;
    v_n int;
BEGIN
    IF p_queue IS NOT NULL THEN
        SELECT id INTO v_qid FROM queen.queues WHERE name = p_queue;
        IF v_qid IS NULL THEN
            RETURN jsonb_build_object('found', false);
        END IF;
    END IF;
    SELECT COALESCE(jsonb_agg(DISTINCT q.name), '[]'::jsonb) INTO v_queues
      FROM queen.admin_memberships_v1(p_group, v_qid) m JOIN queen.queues q ON q.id = m.queue_id;
    PERFORM 1 FROM queen.log_consumers c
      WHERE c.consumer_group = p_group
        AND (v_qid IS NULL OR c.partition_id IN (SELECT id FROM queen.log_partitions WHERE queue_id = v_qid))
      ORDER BY c.partition_id FOR UPDATE;
    DELETE FROM queen.log_consumers c
     WHERE c.consumer_group = p_group
       AND (v_qid IS NULL OR c.partition_id IN (SELECT id FROM queen.log_partitions WHERE queue_id = v_qid));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    -- Cursors vanished, so a recreated cursor may start below the old one: drop the floor.
    DELETE FROM queen.consumer_watermarks
     WHERE consumer_group = p_group AND (v_qid IS NULL OR queue_id = v_qid);
    IF p_delete_metadata THEN
        DELETE FROM queen.consumer_groups_metadata
         WHERE consumer_group = p_group AND (v_qid IS NULL OR queue_id = v_qid);
    END IF;
    RETURN jsonb_build_object('found', true, 'deletedPartitions', v_n, 'queues', v_queues);
END
$$;

-- POST /api/v1/consumer-groups/:group/subscription: the stored subscription timestamp of
-- every registration of the group (it seeds partitions created later). Returns rows updated.
CREATE OR REPLACE FUNCTION queen.admin_set_subscription_v1(p_group text, p_ts timestamptz)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE v_n int;
BEGIN
    UPDATE queen.consumer_groups_metadata SET subscription_timestamp = p_ts WHERE consumer_group = p_group;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Resources (docs/wire.md §14)
-- ---------------------------------------------------------------------------------------

-- Message counts in the wire's shape.
CREATE OR REPLACE FUNCTION queen.admin_counts_json(p_total numeric, p_pending numeric, p_processing numeric, p_dead numeric)
RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_build_object('total', COALESCE(p_total, 0), 'pending', COALESCE(p_pending, 0),
                              'processing', COALESCE(p_processing, 0), 'deadLetter', COALESCE(p_dead, 0))
$$;

-- The list element of one queue, given its partition count and message counts.
CREATE OR REPLACE FUNCTION queen.admin_queue_summary(q queen.queues, p_partitions bigint, p_counts jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', q.id::text, 'name', q.name, 'namespace', q.namespace, 'task', q.task,
        'priority', q.priority, 'partitions', COALESCE(p_partitions, 0),
        'createdAt', queen.admin_iso(q.created_at),
        'messages', COALESCE(p_counts, queen.admin_counts_json(0, 0, 0, 0)))
$$;

-- Entry points are plpgsql so their (large, inlined) plans are cached per connection instead
-- of being planned again on every call.

-- GET /api/v1/resources/queues: one set-based pass over every partition.
CREATE OR REPLACE FUNCTION queen.admin_queues_v1()
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH per_queue AS (
            SELECT s.queue_id, count(*) AS n,
                   queen.admin_counts_json(sum(s.total), sum(s.pending), sum(s.processing), sum(s.dead_letter)) AS counts
              FROM queen.admin_partition_stats_v1(NULL) s
             GROUP BY s.queue_id
        )
        SELECT jsonb_build_object('queues', COALESCE(jsonb_agg(
                   queen.admin_queue_summary(q, pq.n, pq.counts) ORDER BY q.name), '[]'::jsonb))
          FROM queen.queues q
          LEFT JOIN per_queue pq ON pq.queue_id = q.id);
END
$$;

-- GET /api/v1/resources/queues/:queue: the list element plus config, partitions and the
-- member groups' pending counts; NULL for an unknown queue.
CREATE OR REPLACE FUNCTION queen.admin_queue_v1(p_queue text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_q queen.queues;
BEGIN
    SELECT * INTO v_q FROM queen.queues WHERE name = p_queue;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN (
        WITH parts AS MATERIALIZED (SELECT * FROM queen.admin_partition_stats_v1(v_q.id))
        SELECT queen.admin_queue_summary(v_q, (SELECT count(*) FROM parts),
                   (SELECT queen.admin_counts_json(sum(total), sum(pending), sum(processing), sum(dead_letter))
                      FROM parts))
            || jsonb_build_object(
                'config', queen.admin_queue_config(v_q),
                'partitions', (SELECT COALESCE(jsonb_agg(jsonb_build_object(
                        'id', p.partition_id::text, 'name', p.partition_name,
                        'createdAt', queen.admin_iso(p.created_at),
                        'lastActivity', queen.admin_iso(p.last_write_at),
                        'lastOffset', p.last_offset, 'logStart', p.log_start,
                        'messages', queen.admin_counts_json(p.total, p.pending, p.processing, p.dead_letter))
                        ORDER BY p.partition_name), '[]'::jsonb) FROM parts p),
                'consumerGroups', (SELECT COALESCE(jsonb_agg(jsonb_build_object(
                        'name', g.consumer_group, 'pending', g.pending, 'activeLeases', g.leased)
                        ORDER BY g.consumer_group), '[]'::jsonb)
                    FROM (SELECT c.consumer_group, sum(c.pending) AS pending,
                                 count(*) FILTER (WHERE c.lease_live) AS leased
                            FROM queen.admin_group_cursors_v1(NULL, v_q.id) c
                           GROUP BY c.consumer_group) g)));
END
$$;

-- GET /api/v1/resources/queues/:queue/depth?group=: pending of one group; NULL for an
-- unknown queue.
CREATE OR REPLACE FUNCTION queen.admin_queue_depth_v1(p_queue text, p_group text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_qid bigint;
BEGIN
    SELECT id INTO v_qid FROM queen.queues WHERE name = p_queue;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN (
        WITH parts AS MATERIALIZED (
            SELECT p.name, queen.admin_pending(p.last_offset, c.committed, p.log_start) AS pending
              FROM queen.log_partitions p
              LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
             WHERE p.queue_id = v_qid
        )
        SELECT jsonb_build_object(
            'queue', p_queue, 'group', p_group,
            'pending', (SELECT COALESCE(sum(pending), 0) FROM parts),
            'partitionsPending', (SELECT count(*) FROM parts WHERE pending > 0),
            'conflation', COALESCE((SELECT m.conflation FROM queen.consumer_groups_metadata m
                                     WHERE m.consumer_group = p_group AND m.queue_id = v_qid
                                       AND m.partition_name = ''), false),
            'effectivePending', (SELECT COALESCE(sum(pending), 0) FROM parts),
            'partitions', (SELECT COALESCE(jsonb_agg(jsonb_build_object('partition', name, 'pending', pending)
                                                     ORDER BY name), '[]'::jsonb)
                             FROM parts WHERE pending > 0)));
END
$$;

-- GET /api/v1/resources/overview and the answer of POST /api/v1/stats/refresh.
CREATE OR REPLACE FUNCTION queen.admin_overview_v1()
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (
        WITH parts AS MATERIALIZED (SELECT * FROM queen.admin_partition_stats_v1(NULL))
        SELECT jsonb_build_object(
            'queues', (SELECT count(*) FROM queen.queues),
            'partitions', (SELECT count(*) FROM parts),
            'namespaces', (SELECT count(DISTINCT namespace) FROM queen.queues WHERE namespace <> ''),
            'tasks', (SELECT count(DISTINCT task) FROM queen.queues WHERE task <> ''),
            'consumerGroups', (SELECT count(DISTINCT consumer_group) FROM queen.admin_memberships_v1(NULL, NULL)),
            'messages', (SELECT queen.admin_counts_json(sum(total), sum(pending), sum(processing), sum(dead_letter))
                                || jsonb_build_object('completed', COALESCE(sum(total - pending), 0))
                           FROM parts),
            'timestamp', queen.admin_iso(now())));
END
$$;

-- ---------------------------------------------------------------------------------------
-- Message detail (docs/wire.md §13) and traces (§15)
-- ---------------------------------------------------------------------------------------

-- The offset of a transactionId's newest occurrence in a partition, through the hash
-- sidecar walked newest-first (position() is a byte search; the unnest confirms alignment).
CREATE OR REPLACE FUNCTION queen.admin_message_locate_v1(p_pid bigint, p_hash bytea)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
    r record;
    v_idx int;
BEGIN
    FOR r IN SELECT t.base_offset, t.hashes FROM queen.log_txns t
              WHERE t.partition_id = p_pid ORDER BY t.base_offset DESC
    LOOP
        IF position(p_hash IN r.hashes) > 0 THEN
            SELECT max(u.idx) INTO v_idx FROM queen.log_unnest_hashes(r.hashes) u WHERE u.h = p_hash;
            IF v_idx IS NOT NULL THEN
                RETURN r.base_offset + v_idx;
            END IF;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- Segments whose sidecar rows were purged (below txns_start), newest first, at most
-- p_limit: the bounded fallback the broker scans when the sidecar has no match.
CREATE OR REPLACE FUNCTION queen.admin_message_unindexed_v1(p_pid bigint, p_limit int)
RETURNS TABLE(r_base bigint, r_blob bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.base_offset, s.blob
      FROM queen.log_segments s
      JOIN queen.log_partitions p ON p.id = s.partition_id
     WHERE s.partition_id = p_pid AND s.base_offset < p.txns_start
     ORDER BY s.base_offset DESC
     LIMIT p_limit
$$;

-- Everything about offset p_off of partition p_pid except the frame itself: the covering
-- segment (the broker decodes frame r_offset − r_base) and the state as JSON (partition,
-- queue, config, one consumerGroups element per cursor row ordered by name, status, DLQ).
-- With p_off NULL the offset is located through the hash. No row: unknown or retained away.
CREATE OR REPLACE FUNCTION queen.admin_message_v1(p_pid bigint, p_hash bytea, p_off bigint)
RETURNS TABLE(r_offset bigint, r_base bigint, r_blob bytea, r_state jsonb)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_off bigint := COALESCE(p_off, queen.admin_message_locate_v1(p_pid, p_hash));
    v_named int;
    v_queue_mode bool;
    v_all_named bool;
    v_lease timestamptz;
    v_dlq record;
    v_status text;
BEGIN
    IF v_off IS NULL THEN
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE c.consumer_group <> '__QUEUE_MODE__'),
           COALESCE(bool_or(c.consumer_group = '__QUEUE_MODE__' AND c.committed >= v_off), false),
           COALESCE(bool_and(c.committed >= v_off) FILTER (WHERE c.consumer_group <> '__QUEUE_MODE__'), false),
           min(c.lease_expires_at) FILTER (WHERE c.worker_id IS NOT NULL AND c.lease_expires_at > now()
                                             AND c.committed < v_off AND c.batch_end >= v_off)
      INTO v_named, v_queue_mode, v_all_named, v_lease
      FROM queen.log_consumers c WHERE c.partition_id = p_pid;
    SELECT d.error, d.retry_count INTO v_dlq
      FROM queen.log_dlq d WHERE d.partition_id = p_pid AND d."offset" = v_off
     ORDER BY d.failed_at DESC LIMIT 1;
    v_status := CASE
        WHEN FOUND THEN 'dead_letter'
        WHEN (v_named > 0 AND v_all_named) OR (v_named = 0 AND v_queue_mode) THEN 'completed'
        WHEN v_lease IS NOT NULL THEN 'processing'
        ELSE 'pending' END;
    RETURN QUERY
    SELECT v_off, s.r_base, s.r_blob, jsonb_build_object(
        'createdAt', queen.admin_iso(s.r_created),
        'partitionId', p.id::text, 'partition', p.name,
        'queue', q.name, 'queuePath', q.name || '/' || p.name,
        'namespace', q.namespace, 'task', q.task, 'offset', v_off,
        'status', v_status,
        'errorMessage', v_dlq.error,
        'retryCount', COALESCE(v_dlq.retry_count, 0),
        'leaseExpiresAt', queen.admin_iso(v_lease),
        'queueConfig', jsonb_build_object('leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
                                          'retryDelay', q.retry_delay, 'ttl', q.ttl,
                                          'priority', q.priority),
        'mode', jsonb_build_object(
            'hasQueueMode', EXISTS (SELECT 1 FROM queen.log_consumers c
                                     WHERE c.partition_id = p_pid AND c.consumer_group = '__QUEUE_MODE__'),
            'busGroupsCount', v_named,
            'type', CASE WHEN v_named = 0 THEN 'queue'
                         WHEN EXISTS (SELECT 1 FROM queen.log_consumers c
                                       WHERE c.partition_id = p_pid AND c.consumer_group = '__QUEUE_MODE__')
                         THEN 'hybrid' ELSE 'bus' END),
        'consumerGroups', (SELECT COALESCE(jsonb_agg(jsonb_build_object(
                'name', c.consumer_group, 'group', c.consumer_group,
                'consumed', c.committed >= v_off,
                'leaseExpiresAt', CASE WHEN c.worker_id IS NOT NULL THEN queen.admin_iso(c.lease_expires_at) END)
                ORDER BY c.consumer_group), '[]'::jsonb)
            FROM queen.log_consumers c WHERE c.partition_id = p_pid))
      FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id
      CROSS JOIN LATERAL queen.log_segment_at_v1(p.id, v_off) s
     WHERE p.id = p_pid;
END
$$;

-- POST /api/v1/traces: one row per trace event; the id is minted by the broker.
CREATE OR REPLACE FUNCTION queen.admin_trace_v1(p_id uuid, p_pid bigint, p_txn text, p_group text,
                                                p_event text, p_names text[], p_data jsonb)
RETURNS uuid LANGUAGE sql AS $$
    INSERT INTO queen.message_traces (id, partition_id, transaction_id, consumer_group, event_type, trace_names, data)
    VALUES (p_id, p_pid, p_txn, p_group, p_event, p_names, p_data)
    RETURNING id
$$;
