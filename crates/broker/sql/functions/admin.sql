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

-- The answers below are rows; the broker renders the wire's JSON (docs/architecture.md). Their
-- return types were jsonb before, which CREATE OR REPLACE cannot change: drop those first. The
-- JSON helpers they used are gone with them.
DROP FUNCTION IF EXISTS queen.admin_groups_v1();
DROP FUNCTION IF EXISTS queen.admin_group_v1(text);
DROP FUNCTION IF EXISTS queen.admin_lagging_v1(bigint);
DROP FUNCTION IF EXISTS queen.admin_seek_v1(text, text, text, bool, timestamptz);
DROP FUNCTION IF EXISTS queen.admin_delete_group_v1(text, text, bool);
DROP FUNCTION IF EXISTS queen.admin_queues_v1();
-- These two gained parameters (a partition filter, a page); the old signatures would make
-- calls ambiguous.
DROP FUNCTION IF EXISTS queen.admin_partition_stats_v1(bigint);
DROP FUNCTION IF EXISTS queen.admin_queue_partitions_v1(bigint);
DROP FUNCTION IF EXISTS queen.admin_queues_v1(text);
DROP FUNCTION IF EXISTS queen.admin_queue_v1(text);
DROP FUNCTION IF EXISTS queen.admin_queue_depth_v1(text, text);
DROP FUNCTION IF EXISTS queen.admin_overview_v1();
DROP FUNCTION IF EXISTS queen.admin_message_v1(bigint, bytea, bigint);
DROP FUNCTION IF EXISTS queen.admin_queue_summary(queen.queues, bigint, jsonb);
DROP FUNCTION IF EXISTS queen.admin_queue_config(queen.queues);
DROP FUNCTION IF EXISTS queen.admin_counts_json(numeric, numeric, numeric, numeric);
-- The forms without p_tenant (migrations/0005_tenants.sql): a DEFAULT beside them would make
-- calls ambiguous.
DROP FUNCTION IF EXISTS queen.admin_set_subscription_v1(text, timestamptz);
DROP FUNCTION IF EXISTS queen.admin_trace_v1(uuid, bigint, text, text, text, text[], jsonb);
-- Message detail checks the partition's tenant before anything is read (admin_message_v1's
-- old form is dropped above): the forms without p_tenant would make calls ambiguous.
DROP FUNCTION IF EXISTS queen.admin_message_unindexed_v1(bigint, int);
-- The metrics sample is per tenant (p_tenant); the form without it would make calls ambiguous.
DROP FUNCTION IF EXISTS queen.admin_metrics_v1(int);
-- The group listings filter by tenant in SQL (p_tenant); the form without it would make calls
-- ambiguous.
DROP FUNCTION IF EXISTS queen.admin_group_cursors_v1(text, bigint);

-- Which (group, queue) pairs exist: a group is on a queue when it holds a cursor row on one of
-- its partitions, a queue-wide registration, or a namespace/task registration matching the
-- queue's labels. NULL filters mean "all".
-- The tenant a stored name (of a queue, namespace or task) belongs to: what precedes U+0001,
-- '' (the default tenant) when there is none. The same rule as queen.queues.tenant_id
-- (migrations/0005_tenants.sql) and crates/proto/src/tenant.rs.
CREATE OR REPLACE FUNCTION queen.tenant_of(p_name text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN strpos(p_name, E'\x01') > 0 THEN split_part(p_name, E'\x01', 1) ELSE '' END
$$;

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
-- p_tenant (NULL: every tenant) keeps to the queues of one tenant, before anything is counted.
CREATE OR REPLACE FUNCTION queen.admin_group_cursors_v1(p_group text DEFAULT NULL, p_queue_id bigint DEFAULT NULL,
                                                        p_tenant text DEFAULT NULL)
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
      JOIN queen.queues q ON q.id = g.queue_id AND (p_tenant IS NULL OR q.tenant_id = p_tenant)
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
CREATE OR REPLACE FUNCTION queen.admin_partition_stats_v1(p_queue_id bigint DEFAULT NULL,
                                                           p_ids bigint[] DEFAULT NULL)
RETURNS TABLE(queue_id bigint, partition_id bigint, partition_name text, last_offset bigint,
              log_start bigint, created_at timestamptz, last_write_at timestamptz,
              total bigint, pending bigint, processing bigint, dead_letter bigint)
LANGUAGE sql STABLE AS $$
    WITH parts AS (
        SELECT p.* FROM queen.log_partitions p
         WHERE (p_queue_id IS NULL OR p.queue_id = p_queue_id)
           -- A hashed set: `= ANY (array)` would compare every partition with every id.
           AND (p_ids IS NULL OR p.id IN (SELECT unnest(p_ids)))
    ), groups AS (
        SELECT m.queue_id, count(*) AS n FROM queen.admin_memberships_v1(NULL, p_queue_id) m GROUP BY m.queue_id
    ), cs AS (
        -- The cursor rows of those partitions in one join: a probe per partition costs more
        -- once a queue has thousands of partitions.
        SELECT c.partition_id, count(*) AS rows, min(c.committed) AS min_committed,
               sum(c.batch_end - c.committed) FILTER (
                   WHERE c.worker_id IS NOT NULL AND c.lease_expires_at > now()
                     AND c.batch_end > c.committed) AS processing
          FROM parts JOIN queen.log_consumers c ON c.partition_id = parts.id
         GROUP BY c.partition_id
    ), dlq AS (
        SELECT d.partition_id, count(*) AS n
          FROM parts JOIN queen.log_dlq d ON d.partition_id = parts.id
         GROUP BY d.partition_id
    )
    SELECT p.queue_id, p.id, p.name, p.last_offset, p.log_start, p.created_at, p.last_write_at,
           GREATEST(p.last_offset + 1 - p.log_start, 0),
           queen.admin_pending(p.last_offset,
               CASE WHEN COALESCE(g.n, 0) > COALESCE(cs.rows, 0) THEN -1 ELSE cs.min_committed END,
               p.log_start),
           COALESCE(cs.processing, 0),
           COALESCE(dlq.n, 0)
      FROM parts p
      LEFT JOIN groups g ON g.queue_id = p.queue_id
      LEFT JOIN dlq ON dlq.partition_id = p.id
      LEFT JOIN cs ON cs.partition_id = p.id
$$;

-- ---------------------------------------------------------------------------------------
-- Consumer groups (docs/wire.md §12)
-- ---------------------------------------------------------------------------------------

-- GET /api/v1/consumer-groups: one row per (group, queue) of p_tenant's queues (NULL: all), by
-- group then queue.
CREATE OR REPLACE FUNCTION queen.admin_groups_v1(p_tenant text DEFAULT NULL)
RETURNS TABLE(consumer_group text, queue_name text, partitions bigint, pending bigint,
              active_leases bigint, time_lag_seconds bigint, subscription_mode text,
              subscription_timestamp text)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH cur AS MATERIALIZED (SELECT * FROM queen.admin_group_cursors_v1(NULL, NULL, p_tenant)),
    per_queue AS (
        SELECT c.consumer_group AS grp, c.queue_id AS qid, c.queue_name AS qname,
               count(*) AS n,
               sum(c.pending)::bigint AS pend,
               count(*) FILTER (WHERE c.lease_live) AS leased,
               COALESCE(EXTRACT(EPOCH FROM now() - min(c.oldest_unconsumed_at))::bigint, 0) AS lag
          FROM cur c GROUP BY c.consumer_group, c.queue_id, c.queue_name
    )
    SELECT pq.grp, pq.qname, pq.n, pq.pend, pq.leased, pq.lag,
           m.subscription_mode, queen.admin_iso(m.subscription_timestamp)
      FROM per_queue pq
      LEFT JOIN queen.consumer_groups_metadata m
        ON m.consumer_group = pq.grp AND m.queue_id = pq.qid AND m.partition_name = ''
     ORDER BY pq.grp, pq.qname;
END
$$;

-- GET /api/v1/consumer-groups/:group: one row per partition of every queue of p_tenant (NULL:
-- all) the group is on, by queue then partition; no rows when the group is on no such queue.
CREATE OR REPLACE FUNCTION queen.admin_group_v1(p_group text, p_tenant text DEFAULT NULL)
RETURNS TABLE(queue_name text, conflation bool, subscription_mode text,
              subscription_timestamp text, partition_name text, partition_id text,
              worker_id text, last_consumed_at text, total_consumed bigint, offset_lag bigint,
              time_lag_seconds bigint, lease_active bool)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT c.queue_name, COALESCE(m.conflation, false), m.subscription_mode,
           queen.admin_iso(m.subscription_timestamp),
           c.partition_name, c.partition_id::text, c.worker_id,
           queen.admin_iso(c.last_consumed_at), c.total_consumed, c.pending,
           COALESCE(EXTRACT(EPOCH FROM now() - c.oldest_unconsumed_at)::bigint, 0),
           c.lease_live
      FROM queen.admin_group_cursors_v1(p_group, NULL, p_tenant) c
      LEFT JOIN queen.consumer_groups_metadata m
        ON m.consumer_group = p_group AND m.queue_id = c.queue_id AND m.partition_name = ''
     ORDER BY c.queue_name, c.partition_name;
END
$$;

-- GET /api/v1/consumer-groups/lagging: partitions whose oldest unconsumed message is at least
-- p_min_lag_seconds old, most lagging first; p_tenant's queues only (NULL: all).
CREATE OR REPLACE FUNCTION queen.admin_lagging_v1(p_min_lag_seconds bigint, p_tenant text DEFAULT NULL)
RETURNS TABLE(consumer_group text, queue_name text, partition_name text, partition_id text,
              worker_id text, offset_lag bigint, time_lag_seconds bigint,
              oldest_unconsumed_at text, last_consumed_at text)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH lag AS MATERIALIZED (
        SELECT c.*, EXTRACT(EPOCH FROM now() - c.oldest_unconsumed_at)::bigint AS time_lag
          FROM queen.admin_group_cursors_v1(NULL, NULL, p_tenant) c
         WHERE c.pending > 0 AND c.oldest_unconsumed_at IS NOT NULL
    )
    SELECT l.consumer_group, l.queue_name, l.partition_name, l.partition_id::text, l.worker_id,
           l.pending, l.time_lag, queen.admin_iso(l.oldest_unconsumed_at),
           queen.admin_iso(l.last_consumed_at)
      FROM lag l
     WHERE l.time_lag >= p_min_lag_seconds
     ORDER BY l.time_lag DESC, l.consumer_group, l.partition_id;
END
$$;

-- Seek a group on a queue (one partition, or all when p_partition is NULL) to the end
-- (p_to_end) or to just before the first segment at or after p_ts (future-only if none;
-- the same rule as timestamp subscriptions: queen.log_seed_cursor_v1 of pop.sql).
-- Releases any lease and resets retry and attempt state. Cursor rows are written in
-- ascending partition order, each under the same per-(partition, group) advisory lock the
-- pop's row-creation path try-locks, so a pop never waits on a seek and a seek never races
-- a pop creating the same row. Partition rows are read, never locked: the push serializer is
-- not touched. r_found is false when nothing matches; else the count and whether the
-- seek left anything pending (a rewind: the caller must wake and repair its accelerators).
CREATE OR REPLACE FUNCTION queen.admin_seek_v1(p_group text, p_queue text, p_partition text,
                                               p_to_end bool, p_ts timestamptz,
                                               OUT r_found bool, OUT r_partitions_updated int,
                                               OUT r_rewound bool)
LANGUAGE plpgsql AS $$
DECLARE
    v_qid bigint;
    v_n int := 0;
    v_rewound bool := false;
    r record;
BEGIN
    r_found := false;
    r_partitions_updated := 0;
    r_rewound := false;
    SELECT id INTO v_qid FROM queen.queues WHERE name = p_queue;
    IF v_qid IS NULL THEN
        RETURN;
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
        RETURN;
    END IF;
    -- Data is pending again: the empty-scan floor must not hide it from the candidate scan.
    IF v_rewound THEN
        DELETE FROM queen.consumer_watermarks WHERE queue_id = v_qid AND consumer_group = p_group;
    END IF;
    r_found := true;
    r_partitions_updated := v_n;
    r_rewound := v_rewound;
END
$$;

-- Deletes a group's cursor rows (on one queue, or everywhere when p_queue is NULL) and its
-- empty-scan floors; with p_delete_metadata also its registrations, so a group of the same
-- name starts fresh on its next first contact. Cursor rows are locked in ascending order
-- first (the global consumer-row order). r_found is false for an unknown queue; else the
-- count and the names of the queues touched. Only queues of p_tenant are touched (every
-- one of them when p_queue is NULL), and only its namespace/task registrations.
CREATE OR REPLACE FUNCTION queen.admin_delete_group_v1(p_group text, p_queue text, p_delete_metadata bool,
                                                       p_tenant text DEFAULT '',
                                                       OUT r_found bool, OUT r_deleted_partitions int,
                                                       OUT r_queues text[])
LANGUAGE plpgsql AS $$
DECLARE
    v_qid bigint;
    v_qids bigint[];
    v_queues text[];
    v_n int;
BEGIN
    r_found := false;
    r_deleted_partitions := 0;
    r_queues := '{}';
    IF p_queue IS NOT NULL THEN
        SELECT id INTO v_qid FROM queen.queues WHERE name = p_queue AND tenant_id = p_tenant;
        IF v_qid IS NULL THEN
            RETURN;
        END IF;
        v_qids := ARRAY[v_qid];
    ELSE
        SELECT COALESCE(array_agg(id), '{}') INTO v_qids FROM queen.queues WHERE tenant_id = p_tenant;
    END IF;
    SELECT COALESCE(array_agg(DISTINCT q.name), '{}') INTO v_queues
      FROM queen.admin_memberships_v1(p_group, v_qid) m JOIN queen.queues q ON q.id = m.queue_id
     WHERE q.id = ANY (v_qids);
    PERFORM 1 FROM queen.log_consumers c
      WHERE c.consumer_group = p_group
        AND c.partition_id IN (SELECT id FROM queen.log_partitions WHERE queue_id = ANY (v_qids))
      ORDER BY c.partition_id FOR UPDATE;
    DELETE FROM queen.log_consumers c
     WHERE c.consumer_group = p_group
       AND c.partition_id IN (SELECT id FROM queen.log_partitions WHERE queue_id = ANY (v_qids));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    -- Cursors vanished, so a recreated cursor may start below the old one: drop the floor.
    DELETE FROM queen.consumer_watermarks
     WHERE consumer_group = p_group AND queue_id = ANY (v_qids);
    IF p_delete_metadata THEN
        DELETE FROM queen.consumer_groups_metadata m
         WHERE m.consumer_group = p_group
           AND (m.queue_id = ANY (v_qids)
                OR (v_qid IS NULL AND m.queue_id IS NULL
                    AND queen.tenant_of(CASE WHEN m.namespace <> '' THEN m.namespace ELSE m.task END)
                        = p_tenant));
    END IF;
    r_found := true;
    r_deleted_partitions := v_n;
    r_queues := v_queues;
END
$$;

-- POST /api/v1/consumer-groups/:group/subscription: the stored subscription timestamp of
-- every registration of the group on p_tenant's queues, namespaces and tasks (it seeds
-- partitions created later). Returns rows updated.
CREATE OR REPLACE FUNCTION queen.admin_set_subscription_v1(p_group text, p_ts timestamptz,
                                                           p_tenant text DEFAULT '')
RETURNS int LANGUAGE plpgsql AS $$
DECLARE v_n int;
BEGIN
    UPDATE queen.consumer_groups_metadata m SET subscription_timestamp = p_ts
     WHERE m.consumer_group = p_group
       AND CASE WHEN m.queue_id IS NOT NULL
                THEN m.queue_id IN (SELECT id FROM queen.queues WHERE tenant_id = p_tenant)
                ELSE queen.tenant_of(CASE WHEN m.namespace <> '' THEN m.namespace ELSE m.task END)
                     = p_tenant END;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;

-- ---------------------------------------------------------------------------------------
-- Resources (docs/wire.md §14)
-- ---------------------------------------------------------------------------------------

-- Entry points are plpgsql so their (large, inlined) plans are cached per connection instead
-- of being planned again on every call.

-- The partitions of p_tenant's queues, for admin_partition_stats_v1's p_ids: NULL (every
-- partition, no filter to pay for) when no other tenant has a queue, or p_tenant is NULL.
CREATE OR REPLACE FUNCTION queen.admin_tenant_partitions_v1(p_tenant text)
RETURNS bigint[] LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_tenant IS NULL
          OR NOT EXISTS (SELECT 1 FROM queen.queues q WHERE q.tenant_id <> p_tenant) THEN NULL
        ELSE (SELECT COALESCE(array_agg(lp.id), '{}') FROM queen.log_partitions lp
                JOIN queen.queues q ON q.id = lp.queue_id WHERE q.tenant_id = p_tenant)
    END
$$;

-- GET /api/v1/resources/queues (p_queue NULL: every queue, by name) and the summary of
-- GET /api/v1/resources/queues/:queue (p_queue named: its row, none when unknown), with the
-- message counts summed over the queue's partitions.
-- Only p_tenant's queues (NULL: every tenant's), and only their partitions are counted.
CREATE OR REPLACE FUNCTION queen.admin_queues_v1(p_queue text DEFAULT NULL, p_tenant text DEFAULT NULL)
RETURNS TABLE(id bigint, name text, namespace text, task text, priority int, created_at text,
              partitions bigint, total bigint, pending bigint, processing bigint,
              dead_letter bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_qid bigint;
    v_ids bigint[];
BEGIN
    IF p_queue IS NOT NULL THEN
        SELECT q.id INTO v_qid FROM queen.queues q
         WHERE q.name = p_queue AND (p_tenant IS NULL OR q.tenant_id = p_tenant);
        IF v_qid IS NULL THEN
            RETURN;
        END IF;
    ELSE
        v_ids := queen.admin_tenant_partitions_v1(p_tenant);
    END IF;
    RETURN QUERY
    WITH per_queue AS (
        SELECT s.queue_id AS qid, count(*) AS n, sum(s.total)::bigint AS t,
               sum(s.pending)::bigint AS pe, sum(s.processing)::bigint AS pr,
               sum(s.dead_letter)::bigint AS d
          FROM queen.admin_partition_stats_v1(v_qid, v_ids) s
         GROUP BY s.queue_id
    )
    SELECT q.id, q.name, q.namespace, q.task, q.priority, queen.admin_iso(q.created_at),
           COALESCE(pq.n, 0), COALESCE(pq.t, 0), COALESCE(pq.pe, 0), COALESCE(pq.pr, 0),
           COALESCE(pq.d, 0)
      FROM queen.queues q
      LEFT JOIN per_queue pq ON pq.qid = q.id
     WHERE (v_qid IS NULL OR q.id = v_qid) AND (p_tenant IS NULL OR q.tenant_id = p_tenant)
     ORDER BY q.name;
END
$$;

-- The row of one queue (its options), none when unknown.
CREATE OR REPLACE FUNCTION queen.admin_queue_row_v1(p_queue text)
RETURNS SETOF queen.queues LANGUAGE sql STABLE AS $$
    SELECT * FROM queen.queues WHERE name = p_queue
$$;

-- The partitions of GET /api/v1/resources/queues/:queue, by name: those after p_after (all
-- when NULL), at most p_limit of them (all when NULL). The page is chosen on the
-- (queue_id, name) key first, so only its partitions are counted (docs/wire.md §14).
CREATE OR REPLACE FUNCTION queen.admin_queue_partitions_v1(p_queue_id bigint,
                                                           p_after text DEFAULT NULL,
                                                           p_limit int DEFAULT NULL)
RETURNS TABLE(id bigint, name text, created_at text, last_activity text, last_offset bigint,
              log_start bigint, total bigint, pending bigint, processing bigint,
              dead_letter bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
BEGIN
    IF p_after IS NOT NULL OR p_limit IS NOT NULL THEN
        SELECT array_agg(pg.id) INTO v_ids FROM (
            SELECT lp.id FROM queen.log_partitions lp
             WHERE lp.queue_id = p_queue_id AND (p_after IS NULL OR lp.name > p_after)
             ORDER BY lp.name
             LIMIT p_limit) pg;
        IF v_ids IS NULL THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY
    SELECT p.partition_id, p.partition_name, queen.admin_iso(p.created_at),
           queen.admin_iso(p.last_write_at), p.last_offset, p.log_start, p.total, p.pending,
           p.processing, p.dead_letter
      FROM queen.admin_partition_stats_v1(p_queue_id, v_ids) p
     ORDER BY p.partition_name;
END
$$;

-- The member groups of GET /api/v1/resources/queues/:queue with what each has pending, by name.
CREATE OR REPLACE FUNCTION queen.admin_queue_groups_v1(p_queue_id bigint)
RETURNS TABLE(name text, pending bigint, active_leases bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT c.consumer_group, sum(c.pending)::bigint, count(*) FILTER (WHERE c.lease_live)
      FROM queen.admin_group_cursors_v1(NULL, p_queue_id) c
     GROUP BY c.consumer_group
     ORDER BY c.consumer_group;
END
$$;

-- GET /api/v1/resources/queues/:queue/depth?group=: one row per partition with the group's
-- pending count, and the group's conflation flag. No rows: unknown queue; one row with a NULL
-- partition: a queue without partitions.
CREATE OR REPLACE FUNCTION queen.admin_queue_depth_v1(p_queue text, p_group text)
RETURNS TABLE(partition_name text, pending bigint, conflation bool)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT p.name, queen.admin_pending(p.last_offset, c.committed, p.log_start),
           COALESCE((SELECT m.conflation FROM queen.consumer_groups_metadata m
                      WHERE m.consumer_group = p_group AND m.queue_id = q.id
                        AND m.partition_name = ''), false)
      FROM queen.queues q
      LEFT JOIN queen.log_partitions p ON p.queue_id = q.id
      LEFT JOIN queen.log_consumers c ON c.partition_id = p.id AND c.consumer_group = p_group
     WHERE q.name = p_queue
     ORDER BY p.name;
END
$$;

-- GET /api/v1/resources/overview and the answer of POST /api/v1/stats/refresh, over the
-- queues of p_tenant (only their partitions are counted).
CREATE OR REPLACE FUNCTION queen.admin_overview_v1(p_tenant text DEFAULT '')
RETURNS TABLE(queues bigint, partitions bigint, namespaces bigint, tasks bigint,
              consumer_groups bigint, total bigint, pending bigint, processing bigint,
              dead_letter bigint, completed bigint, at text)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH mine AS MATERIALIZED (SELECT * FROM queen.queues q WHERE q.tenant_id = p_tenant),
    parts AS MATERIALIZED (
        SELECT s.* FROM queen.admin_partition_stats_v1(NULL, queen.admin_tenant_partitions_v1(p_tenant)) s
         WHERE s.queue_id IN (SELECT id FROM mine))
    SELECT (SELECT count(*) FROM mine),
           (SELECT count(*) FROM parts),
           (SELECT count(DISTINCT q.namespace) FROM mine q WHERE q.namespace <> ''),
           (SELECT count(DISTINCT q.task) FROM mine q WHERE q.task <> ''),
           (SELECT count(DISTINCT m.consumer_group) FROM queen.admin_memberships_v1(NULL, NULL) m
             WHERE m.queue_id IN (SELECT id FROM mine)),
           (SELECT COALESCE(sum(x.total), 0)::bigint FROM parts x),
           (SELECT COALESCE(sum(x.pending), 0)::bigint FROM parts x),
           (SELECT COALESCE(sum(x.processing), 0)::bigint FROM parts x),
           (SELECT COALESCE(sum(x.dead_letter), 0)::bigint FROM parts x),
           (SELECT COALESCE(sum(x.total - x.pending), 0)::bigint FROM parts x),
           queen.admin_iso(now());
END
$$;

-- GET /metrics/prometheus (docs/wire.md §15): the scrape's bounded sample over the queues of
-- p_tenant (filtered here, so no other tenant's statistics are computed). First one row for
-- all of them together (queue_name NULL): pending and dead-letter rows summed. Then the p_limit
-- queues with the most pending messages (pending as in the listings: what the slowest member
-- group has left), with their dead-letter rows; then the p_limit (queue, group) pairs
-- furthest behind, with what the group has left. Watermark arithmetic over partition and
-- cursor rows, like the overview: one pass, no segment read.
CREATE OR REPLACE FUNCTION queen.admin_metrics_v1(p_limit int, p_tenant text DEFAULT '')
RETURNS TABLE(queue_name text, consumer_group text, pending bigint, dead_letter bigint)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[] := queen.admin_tenant_partitions_v1(COALESCE(p_tenant, ''));
BEGIN
    RETURN QUERY
    WITH mine AS MATERIALIZED (
        SELECT q.id, q.name FROM queen.queues q WHERE q.tenant_id = COALESCE(p_tenant, '')
    ), per_queue AS MATERIALIZED (
        SELECT q.name, COALESCE(sum(s.pending), 0)::bigint AS pending,
               COALESCE(sum(s.dead_letter), 0)::bigint AS dead_letter
          FROM mine q
          LEFT JOIN queen.admin_partition_stats_v1(NULL, v_ids) s ON s.queue_id = q.id
         GROUP BY q.id, q.name
    ), lag AS (
        SELECT q.name, g.consumer_group,
               sum(queen.admin_pending(p.last_offset, c.committed, p.log_start))::bigint AS pending
          FROM queen.admin_memberships_v1(NULL, NULL) g
          JOIN mine q ON q.id = g.queue_id
          JOIN queen.log_partitions p ON p.queue_id = q.id
          LEFT JOIN queen.log_consumers c
            ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
         GROUP BY q.name, g.consumer_group
    )
    SELECT NULL::text, NULL::text, COALESCE(sum(x.pending), 0)::bigint,
           COALESCE(sum(x.dead_letter), 0)::bigint
      FROM per_queue x
    UNION ALL
    (SELECT x.name, NULL::text, x.pending, x.dead_letter FROM per_queue x
      ORDER BY x.pending DESC, x.dead_letter DESC, x.name LIMIT p_limit)
    UNION ALL
    (SELECT l.name, l.consumer_group, l.pending, NULL::bigint FROM lag l
      ORDER BY l.pending DESC, l.name, l.consumer_group LIMIT p_limit);
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
-- p_limit: the bounded fallback the broker scans when the sidecar has no match. None unless
-- the partition is p_tenant's: another tenant's segments are never read.
CREATE OR REPLACE FUNCTION queen.admin_message_unindexed_v1(p_pid bigint, p_limit int,
                                                            p_tenant text DEFAULT '')
RETURNS TABLE(r_base bigint, r_blob bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.base_offset, s.blob
      FROM queen.log_segments s
      JOIN queen.log_partitions p ON p.id = s.partition_id
      JOIN queen.queues q ON q.id = p.queue_id
     WHERE s.partition_id = p_pid AND s.base_offset < p.txns_start
       AND q.tenant_id = COALESCE(p_tenant, '')
     ORDER BY s.base_offset DESC
     LIMIT p_limit
$$;

-- Everything about offset p_off of partition p_pid except the frame itself: the covering
-- segment (the broker decodes frame r_offset − r_base) and the message's state (partition,
-- queue, config, status, DLQ, one consumer-group entry per cursor row ordered by name). With
-- p_off NULL the offset is located through the hash. No row: unknown, retained away, or on a
-- partition that is not p_tenant's (checked first: nothing of another tenant is located or read).
CREATE OR REPLACE FUNCTION queen.admin_message_v1(p_pid bigint, p_hash bytea, p_off bigint,
                                                  p_tenant text DEFAULT '')
RETURNS TABLE(r_offset bigint, r_base bigint, r_blob bytea, r_created_at text,
              r_partition_id text, r_partition text, r_queue text, r_namespace text,
              r_task text, r_status text, r_error text, r_retry_count int,
              r_lease_expires_at text, r_lease_time int, r_retry_limit int, r_retry_delay int,
              r_ttl int, r_priority int, r_has_queue_mode bool, r_bus_groups int,
              r_mode text, r_groups text[], r_consumed bool[], r_group_leases text[])
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_off bigint;
    v_named int;
    v_queue_mode bool;
    v_all_named bool;
    v_lease timestamptz;
    v_dlq record;
    v_status text;
    v_has_queue_mode bool;
BEGIN
    PERFORM 1 FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
     WHERE lp.id = p_pid AND q.tenant_id = COALESCE(p_tenant, '');
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_off := COALESCE(p_off, queen.admin_message_locate_v1(p_pid, p_hash));
    IF v_off IS NULL THEN
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE c.consumer_group <> '__QUEUE_MODE__'),
           COALESCE(bool_or(c.consumer_group = '__QUEUE_MODE__' AND c.committed >= v_off), false),
           COALESCE(bool_and(c.committed >= v_off) FILTER (WHERE c.consumer_group <> '__QUEUE_MODE__'), false),
           min(c.lease_expires_at) FILTER (WHERE c.worker_id IS NOT NULL AND c.lease_expires_at > now()
                                             AND c.committed < v_off AND c.batch_end >= v_off),
           COALESCE(bool_or(c.consumer_group = '__QUEUE_MODE__'), false)
      INTO v_named, v_queue_mode, v_all_named, v_lease, v_has_queue_mode
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
    SELECT v_off, s.r_base, s.r_blob, queen.admin_iso(s.r_created),
           p.id::text, p.name, q.name, q.namespace, q.task, v_status,
           v_dlq.error, COALESCE(v_dlq.retry_count, 0), queen.admin_iso(v_lease),
           q.lease_time, q.retry_limit, q.retry_delay, q.ttl, q.priority,
           v_has_queue_mode, v_named,
           CASE WHEN v_named = 0 THEN 'queue' WHEN v_has_queue_mode THEN 'hybrid' ELSE 'bus' END,
           g.names, g.consumed, g.leases
      FROM queen.log_partitions p
      JOIN queen.queues q ON q.id = p.queue_id
      CROSS JOIN LATERAL queen.log_segment_at_v1(p.id, v_off) s
      CROSS JOIN LATERAL (
          SELECT COALESCE(array_agg(c.consumer_group ORDER BY c.consumer_group), '{}') AS names,
                 COALESCE(array_agg(c.committed >= v_off ORDER BY c.consumer_group), '{}') AS consumed,
                 COALESCE(array_agg(CASE WHEN c.worker_id IS NOT NULL
                                         THEN queen.admin_iso(c.lease_expires_at) END
                                    ORDER BY c.consumer_group), '{}') AS leases
            FROM queen.log_consumers c WHERE c.partition_id = p_pid
      ) g
     WHERE p.id = p_pid;
END
$$;

-- POST /api/v1/traces: one row per trace event; the id is minted by the broker. Stored when
-- the partition is p_tenant's; a partition id that names no partition is kept as before for
-- the default tenant only. Otherwise nothing is stored and the answer is NULL (the broker's
-- 404), the same for another tenant's partition as for none.
CREATE OR REPLACE FUNCTION queen.admin_trace_v1(p_id uuid, p_pid bigint, p_txn text, p_group text,
                                                p_event text, p_names text[], p_data jsonb,
                                                p_tenant text DEFAULT '')
RETURNS uuid LANGUAGE sql AS $$
    INSERT INTO queen.message_traces (id, partition_id, transaction_id, consumer_group, event_type, trace_names, data)
    SELECT p_id, p_pid, p_txn, p_group, p_event, p_names, p_data
     WHERE COALESCE((SELECT q.tenant_id FROM queen.log_partitions lp
                      JOIN queen.queues q ON q.id = lp.queue_id WHERE lp.id = p_pid),
                    CASE WHEN COALESCE(p_tenant, '') = '' THEN '' END)
           = COALESCE(p_tenant, '')
    RETURNING id
$$;
