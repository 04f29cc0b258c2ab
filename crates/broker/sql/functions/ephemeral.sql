-- ephemeral: ephemeral queues (docs/engine.md §17, tables in migrations/0010_ephemeral.sql).
-- One function per verb of /api/v1/ephemeral/*, each one transaction; every write of a queue
-- takes the queue's queen.eph_live row lock first, so a queue's pushes, pops and acks are
-- serialized across every broker of the database. Replayed (CREATE OR REPLACE) when its
-- checksum changes.
--
-- Options arrive resolved by the broker: p_defaults holds every option's default (defined once,
-- in engine/ephemeral/options.rs) and a declared queue's own options override them.
-- The group of a groupless pop is '__QUEUE_MODE__', as on the durable engine.

-- The effective options of a queue: the defaults, overridden by what it was declared with.
CREATE OR REPLACE FUNCTION queen.eph_options_v1(p_tenant text, p_queue text, p_defaults jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT p_defaults || coalesce((SELECT q.options FROM queen.eph_queues q
                                    WHERE q.tenant_id = p_tenant AND q.queue = p_queue),
                                  '{}'::jsonb)
$$;

-- Takes the queue's row lock; creates the row first when p_create. False: no row (not created).
CREATE OR REPLACE FUNCTION queen.eph_lock_v1(p_tenant text, p_queue text, p_create boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM queen.eph_live WHERE tenant_id = p_tenant AND queue = p_queue FOR UPDATE;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT p_create THEN
        RETURN false;
    END IF;
    INSERT INTO queen.eph_live (tenant_id, queue) VALUES (p_tenant, p_queue)
    ON CONFLICT DO NOTHING;
    PERFORM 1 FROM queen.eph_live WHERE tenant_id = p_tenant AND queue = p_queue FOR UPDATE;
    RETURN true;
END
$$;

-- Deletes the listed messages (and every group's lease on them), counting them as dropped for
-- p_reason ('bounds' or 'ttl'); returns how many were deleted.
CREATE OR REPLACE FUNCTION queen.eph_drop_v1(p_tenant text, p_queue text, p_parts text[],
                                             p_seqs bigint[], p_reason text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
    v_bytes bigint;
BEGIN
    WITH gone AS (
        DELETE FROM queen.eph_messages m
        USING unnest(p_parts, p_seqs) AS d(partition, seq)
        WHERE m.tenant_id = p_tenant AND m.queue = p_queue
          AND m.partition = d.partition AND m.seq = d.seq
        RETURNING m.partition, m.seq, m.bytes
    ), leases AS (
        DELETE FROM queen.eph_leases l USING gone g
        WHERE l.tenant_id = p_tenant AND l.queue = p_queue
          AND l.partition = g.partition AND l.seq = g.seq
    )
    SELECT count(*), coalesce(sum(g.bytes), 0) INTO v_n, v_bytes FROM gone g;
    UPDATE queen.eph_live
       SET length = length - v_n, bytes = bytes - v_bytes,
           dropped_bounds = dropped_bounds + CASE WHEN p_reason = 'bounds' THEN v_n ELSE 0 END,
           dropped_ttl = dropped_ttl + CASE WHEN p_reason = 'ttl' THEN v_n ELSE 0 END
     WHERE tenant_id = p_tenant AND queue = p_queue;
    RETURN v_n;
END
$$;

-- Deletes the ring's messages that every group of the queue has retired: behind every cursor
-- and leased by none. A group that has read any ring of the queue holds this one from its start
-- until it reads it too; a queue no group has read keeps everything (a first pop starts at the
-- head of the ring).
CREATE OR REPLACE FUNCTION queen.eph_free_v1(p_tenant text, p_queue text, p_partition text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_low bigint;
    v_n bigint;
    v_bytes bigint;
BEGIN
    SELECT min(coalesce(c.next_seq, 0)) INTO v_low
      FROM (SELECT DISTINCT k.grp FROM queen.eph_cursors k
             WHERE k.tenant_id = p_tenant AND k.queue = p_queue) g
      LEFT JOIN queen.eph_cursors c
        ON c.tenant_id = p_tenant AND c.queue = p_queue AND c.partition = p_partition
       AND c.grp = g.grp;
    IF v_low IS NULL THEN
        RETURN;
    END IF;
    WITH gone AS (
        DELETE FROM queen.eph_messages m
        WHERE m.tenant_id = p_tenant AND m.queue = p_queue AND m.partition = p_partition
          AND m.seq < v_low
          AND NOT EXISTS (SELECT 1 FROM queen.eph_leases l
                           WHERE l.tenant_id = p_tenant AND l.queue = p_queue
                             AND l.partition = p_partition AND l.seq = m.seq)
        RETURNING m.bytes
    )
    SELECT count(*), coalesce(sum(bytes), 0) INTO v_n, v_bytes FROM gone;
    IF v_n > 0 THEN
        UPDATE queen.eph_live SET length = length - v_n, bytes = bytes - v_bytes
         WHERE tenant_id = p_tenant AND queue = p_queue;
    END IF;
END
$$;

-- What time takes away, under the queue's lock: messages older than ttlSeconds (0: never), and
-- leases whose message has no delivery left (attempts past retryLimit) once they end.
CREATE OR REPLACE FUNCTION queen.eph_expire_v1(p_tenant text, p_queue text, p_opt jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_ttl bigint := (p_opt->>'ttlSeconds')::bigint;
    v_retry int := (p_opt->>'retryLimit')::int;
    v_parts text[];
    v_seqs bigint[];
    v_n bigint;
    v_part text;
BEGIN
    IF v_ttl > 0 THEN
        SELECT array_agg(m.partition), array_agg(m.seq) INTO v_parts, v_seqs
          FROM queen.eph_messages m
         WHERE m.tenant_id = p_tenant AND m.queue = p_queue
           AND m.created_at < now() - make_interval(secs => v_ttl);
        IF v_parts IS NOT NULL THEN
            PERFORM queen.eph_drop_v1(p_tenant, p_queue, v_parts, v_seqs, 'ttl');
        END IF;
    END IF;
    WITH gone AS (
        DELETE FROM queen.eph_leases l
         WHERE l.tenant_id = p_tenant AND l.queue = p_queue AND l.attempts > v_retry
           AND (l.lease_until IS NULL OR l.lease_until <= now())
        RETURNING l.partition
    )
    SELECT count(*), array_agg(DISTINCT partition) INTO v_n, v_parts FROM gone;
    IF v_n > 0 THEN
        UPDATE queen.eph_live SET dropped_retry = dropped_retry + v_n
         WHERE tenant_id = p_tenant AND queue = p_queue;
        FOREACH v_part IN ARRAY v_parts LOOP
            PERFORM queen.eph_free_v1(p_tenant, p_queue, v_part);
        END LOOP;
    END IF;
END
$$;

-- POST /api/v1/ephemeral/configure: declares the queue with p_options (checked by the broker;
-- an absent option is the default). Answers {created}.
CREATE OR REPLACE FUNCTION queen.eph_configure_v1(p_tenant text, p_queue text, p_options jsonb)
RETURNS jsonb LANGUAGE sql AS $$
    INSERT INTO queen.eph_queues AS q (tenant_id, queue, options)
    VALUES (p_tenant, p_queue, p_options)
    ON CONFLICT (tenant_id, queue) DO UPDATE SET options = EXCLUDED.options
    RETURNING jsonb_build_object('created', q.xmax = 0)
$$;

-- POST /api/v1/ephemeral/push: appends p_payloads (JSON texts) to one ring, all or nothing.
-- Answers {outcome:'pushed',pushed,dropped} | {outcome:'full',…} (policy reject) |
-- {outcome:'too_large',…} (the batch alone breaks the bounds, whatever the policy).
CREATE OR REPLACE FUNCTION queen.eph_push_v1(p_tenant text, p_queue text, p_partition text,
                                             p_payloads text[], p_defaults jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_opt jsonb := queen.eph_options_v1(p_tenant, p_queue, p_defaults);
    v_max_len bigint := (v_opt->>'maxLength')::bigint;
    v_max_bytes bigint := (v_opt->>'maxBytes')::bigint;
    v_n bigint := coalesce(array_length(p_payloads, 1), 0);
    v_bytes bigint;
    v_live queen.eph_live;
    v_ring queen.eph_rings;
    v_need_n bigint;
    v_need_b bigint;
    v_parts text[] := '{}';
    v_seqs bigint[] := '{}';
    r record;
BEGIN
    SELECT coalesce(sum(octet_length(p)), 0) INTO v_bytes FROM unnest(p_payloads) AS p;
    IF v_n > v_max_len OR v_bytes > v_max_bytes THEN
        RETURN jsonb_build_object('outcome', 'too_large', 'length', v_n, 'bytes', v_bytes,
                                  'maxLength', v_max_len, 'maxBytes', v_max_bytes);
    END IF;
    PERFORM queen.eph_lock_v1(p_tenant, p_queue, true);
    PERFORM queen.eph_expire_v1(p_tenant, p_queue, v_opt);
    SELECT * INTO v_live FROM queen.eph_live WHERE tenant_id = p_tenant AND queue = p_queue;
    v_need_n := v_live.length + v_n - v_max_len;
    v_need_b := v_live.bytes + v_bytes - v_max_bytes;
    IF v_need_n > 0 OR v_need_b > 0 THEN
        IF v_opt->>'policy' <> 'dropOldest' THEN
            RETURN jsonb_build_object('outcome', 'full', 'length', v_live.length,
                                      'bytes', v_live.bytes, 'maxLength', v_max_len,
                                      'maxBytes', v_max_bytes);
        END IF;
        FOR r IN SELECT m.partition, m.seq, m.bytes FROM queen.eph_messages m
                  WHERE m.tenant_id = p_tenant AND m.queue = p_queue
                  ORDER BY m.created_at, m.partition, m.seq LOOP
            EXIT WHEN v_need_n <= 0 AND v_need_b <= 0;
            v_parts := v_parts || r.partition::text;
            v_seqs := v_seqs || r.seq;
            v_need_n := v_need_n - 1;
            v_need_b := v_need_b - r.bytes;
        END LOOP;
        PERFORM queen.eph_drop_v1(p_tenant, p_queue, v_parts, v_seqs, 'bounds');
    END IF;
    SELECT * INTO v_ring FROM queen.eph_rings
     WHERE tenant_id = p_tenant AND queue = p_queue AND partition = p_partition;
    IF NOT FOUND THEN
        INSERT INTO queen.eph_rings (tenant_id, queue, partition, epoch)
        VALUES (p_tenant, p_queue, p_partition, nextval('queen.eph_epoch_seq'))
        RETURNING * INTO v_ring;
    END IF;
    INSERT INTO queen.eph_messages (tenant_id, queue, partition, seq, payload, bytes, created_at)
    SELECT p_tenant, p_queue, p_partition, v_ring.next_seq + u.o - 1, u.p, octet_length(u.p),
           clock_timestamp()
      FROM unnest(p_payloads) WITH ORDINALITY AS u(p, o);
    UPDATE queen.eph_rings SET next_seq = next_seq + v_n
     WHERE tenant_id = p_tenant AND queue = p_queue AND partition = p_partition;
    UPDATE queen.eph_live SET length = length + v_n, bytes = bytes + v_bytes, pushed = pushed + v_n
     WHERE tenant_id = p_tenant AND queue = p_queue;
    RETURN jsonb_build_object('outcome', 'pushed', 'pushed', v_n,
                              'dropped', coalesce(array_length(v_seqs, 1), 0));
END
$$;

-- The partition a pop naming none reads: the one whose oldest message ready for p_group (a
-- redelivery, or the first one past its cursor) is the oldest of the queue. NULL: none ready.
CREATE OR REPLACE FUNCTION queen.eph_pick_v1(p_tenant text, p_queue text, p_group text)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT r.partition::text
      FROM queen.eph_rings r
     CROSS JOIN LATERAL (SELECT least(
        (SELECT m.created_at FROM queen.eph_messages m
          WHERE m.tenant_id = r.tenant_id AND m.queue = r.queue AND m.partition = r.partition
            AND m.seq >= coalesce((SELECT c.next_seq FROM queen.eph_cursors c
                                    WHERE c.tenant_id = r.tenant_id AND c.queue = r.queue
                                      AND c.partition = r.partition AND c.grp = p_group), 0)
          ORDER BY m.seq LIMIT 1),
        (SELECT m.created_at FROM queen.eph_leases l
           JOIN queen.eph_messages m ON m.tenant_id = l.tenant_id AND m.queue = l.queue
                                    AND m.partition = l.partition AND m.seq = l.seq
          WHERE l.tenant_id = r.tenant_id AND l.queue = r.queue AND l.partition = r.partition
            AND l.grp = p_group AND (l.lease_until IS NULL OR l.lease_until <= now())
          ORDER BY l.seq LIMIT 1)) AS at) x
     WHERE r.tenant_id = p_tenant AND r.queue = p_queue AND x.at IS NOT NULL
     ORDER BY x.at, r.partition
     LIMIT 1
$$;

-- GET /api/v1/ephemeral/pop: up to p_batch messages of one ring for p_group, redeliveries first,
-- then past the group's cursor, both in seq order; leased for leaseSeconds, or retired at once
-- when p_auto_ack. With p_window and a windowBuffer count, claims nothing while fewer than
-- min(count, p_batch) are ready. Answers {partition,epoch,messages:[{seq,attempts,payload}]}
-- or {messages:[],ready,held,windowMs}.
CREATE OR REPLACE FUNCTION queen.eph_pop_v1(p_tenant text, p_queue text, p_partition text,
                                            p_group text, p_batch int, p_auto_ack boolean,
                                            p_window boolean, p_defaults jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_opt jsonb := queen.eph_options_v1(p_tenant, p_queue, p_defaults);
    v_lease interval := make_interval(secs => (v_opt->>'leaseSeconds')::int);
    v_wcount int := least(coalesce((v_opt #>> '{windowBuffer,count}')::int, 0), p_batch);
    v_wms int := coalesce((v_opt #>> '{windowBuffer,ms}')::int, 0);
    v_part text := p_partition;
    v_ring queen.eph_rings;
    v_cursor bigint;
    v_ready int;
    v_seqs bigint[];
    v_atts int[];
    v_redo bigint[];
    v_new_max bigint;
    v_msgs jsonb;
BEGIN
    PERFORM queen.eph_lock_v1(p_tenant, p_queue, true);
    PERFORM queen.eph_expire_v1(p_tenant, p_queue, v_opt);
    IF v_part IS NULL THEN
        v_part := queen.eph_pick_v1(p_tenant, p_queue, p_group);
    END IF;
    SELECT * INTO v_ring FROM queen.eph_rings
     WHERE tenant_id = p_tenant AND queue = p_queue AND partition = v_part;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('messages', '[]'::jsonb, 'ready', 0, 'held', false);
    END IF;
    INSERT INTO queen.eph_cursors (tenant_id, queue, partition, grp, next_seq)
    VALUES (p_tenant, p_queue, v_part, p_group, 0) ON CONFLICT DO NOTHING;
    SELECT c.next_seq INTO v_cursor FROM queen.eph_cursors c
     WHERE c.tenant_id = p_tenant AND c.queue = p_queue AND c.partition = v_part
       AND c.grp = p_group;

    IF p_window AND v_wcount > 1 THEN
        SELECT count(*) INTO v_ready FROM (
            (SELECT 1 FROM queen.eph_leases l
              WHERE l.tenant_id = p_tenant AND l.queue = p_queue AND l.partition = v_part
                AND l.grp = p_group AND (l.lease_until IS NULL OR l.lease_until <= now())
              LIMIT v_wcount)
            UNION ALL
            (SELECT 1 FROM queen.eph_messages m
              WHERE m.tenant_id = p_tenant AND m.queue = p_queue AND m.partition = v_part
                AND m.seq >= v_cursor
              LIMIT v_wcount)) x;
        IF v_ready < v_wcount THEN
            RETURN jsonb_build_object('messages', '[]'::jsonb, 'ready', v_ready,
                                      'held', v_ready > 0, 'windowMs', v_wms);
        END IF;
    END IF;

    SELECT array_agg(u.seq ORDER BY u.redo DESC, u.seq), array_agg(u.att ORDER BY u.redo DESC, u.seq),
           array_agg(u.seq) FILTER (WHERE u.redo), max(u.seq) FILTER (WHERE NOT u.redo)
      INTO v_seqs, v_atts, v_redo, v_new_max
      FROM (SELECT * FROM (
                (SELECT l.seq, l.attempts + 1 AS att, true AS redo FROM queen.eph_leases l
                  WHERE l.tenant_id = p_tenant AND l.queue = p_queue AND l.partition = v_part
                    AND l.grp = p_group AND (l.lease_until IS NULL OR l.lease_until <= now())
                  ORDER BY l.seq LIMIT p_batch)
                UNION ALL
                (SELECT m.seq, 1, false FROM queen.eph_messages m
                  WHERE m.tenant_id = p_tenant AND m.queue = p_queue AND m.partition = v_part
                    AND m.seq >= v_cursor
                  ORDER BY m.seq LIMIT p_batch)) c
             ORDER BY c.redo DESC, c.seq LIMIT p_batch) u;
    IF v_seqs IS NULL THEN
        RETURN jsonb_build_object('messages', '[]'::jsonb, 'ready', 0, 'held', false);
    END IF;

    SELECT jsonb_agg(jsonb_build_object('seq', u.s, 'attempts', u.a, 'payload', m.payload)
                     ORDER BY u.o)
      INTO v_msgs
      FROM unnest(v_seqs, v_atts) WITH ORDINALITY AS u(s, a, o)
      JOIN queen.eph_messages m ON m.tenant_id = p_tenant AND m.queue = p_queue
                               AND m.partition = v_part AND m.seq = u.s;

    IF v_new_max IS NOT NULL THEN
        UPDATE queen.eph_cursors SET next_seq = v_new_max + 1
         WHERE tenant_id = p_tenant AND queue = p_queue AND partition = v_part AND grp = p_group;
    END IF;
    IF p_auto_ack THEN
        DELETE FROM queen.eph_leases
         WHERE tenant_id = p_tenant AND queue = p_queue AND partition = v_part
           AND grp = p_group AND seq = ANY (coalesce(v_redo, '{}'));
        PERFORM queen.eph_free_v1(p_tenant, p_queue, v_part);
    ELSE
        INSERT INTO queen.eph_leases (tenant_id, queue, partition, grp, seq, attempts, lease_until)
        SELECT p_tenant, p_queue, v_part, p_group, u.s, u.a, now() + v_lease
          FROM unnest(v_seqs, v_atts) AS u(s, a)
        ON CONFLICT (tenant_id, queue, partition, grp, seq)
        DO UPDATE SET attempts = EXCLUDED.attempts, lease_until = EXCLUDED.lease_until;
    END IF;
    RETURN jsonb_build_object('partition', v_part, 'epoch', v_ring.epoch,
                              'messages', coalesce(v_msgs, '[]'::jsonb),
                              'leaseSeconds', (v_opt->>'leaseSeconds')::int);
END
$$;

-- POST /api/v1/ephemeral/ack: p_acks = [{partition,epoch,seq,retry}] in request order; answers
-- their outcomes in that order: 'stale' (the ring is gone or is a later incarnation), 'unknown'
-- (no live lease of p_group on that message: never delivered to it, acked, expired, nacked,
-- dropped), 'acked' (retired; also a nack whose deliveries are spent: dropped, counted) or
-- 'redelivered' (a nack: ready again at once).
CREATE OR REPLACE FUNCTION queen.eph_ack_v1(p_tenant text, p_queue text, p_group text,
                                            p_acks jsonb, p_defaults jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_retry int := (queen.eph_options_v1(p_tenant, p_queue, p_defaults)->>'retryLimit')::int;
    v_out jsonb := '[]'::jsonb;
    v_parts text[] := '{}';
    v_part text;
    v_epoch bigint;
    v_lease queen.eph_leases;
    v_outcome text;
    a jsonb;
BEGIN
    IF NOT queen.eph_lock_v1(p_tenant, p_queue, false) THEN
        RETURN (SELECT coalesce(jsonb_agg(to_jsonb('stale'::text)), '[]'::jsonb)
                  FROM jsonb_array_elements(p_acks));
    END IF;
    FOR a IN SELECT value FROM jsonb_array_elements(p_acks) LOOP
        v_part := a->>'partition';
        SELECT r.epoch INTO v_epoch FROM queen.eph_rings r
         WHERE r.tenant_id = p_tenant AND r.queue = p_queue AND r.partition = v_part;
        IF NOT FOUND OR v_epoch <> (a->>'epoch')::bigint THEN
            v_outcome := 'stale';
        ELSE
            SELECT * INTO v_lease FROM queen.eph_leases l
             WHERE l.tenant_id = p_tenant AND l.queue = p_queue AND l.partition = v_part
               AND l.grp = p_group AND l.seq = (a->>'seq')::bigint
             FOR UPDATE;
            IF NOT FOUND OR v_lease.lease_until IS NULL OR v_lease.lease_until <= now() THEN
                v_outcome := 'unknown';
            ELSIF (a->>'retry')::boolean AND v_lease.attempts <= v_retry THEN
                UPDATE queen.eph_leases SET lease_until = NULL
                 WHERE tenant_id = p_tenant AND queue = p_queue AND partition = v_part
                   AND grp = p_group AND seq = v_lease.seq;
                v_outcome := 'redelivered';
            ELSE
                DELETE FROM queen.eph_leases
                 WHERE tenant_id = p_tenant AND queue = p_queue AND partition = v_part
                   AND grp = p_group AND seq = v_lease.seq;
                IF (a->>'retry')::boolean THEN
                    UPDATE queen.eph_live SET dropped_retry = dropped_retry + 1
                     WHERE tenant_id = p_tenant AND queue = p_queue;
                END IF;
                v_parts := v_parts || v_part;
                v_outcome := 'acked';
            END IF;
        END IF;
        v_out := v_out || to_jsonb(v_outcome);
    END LOOP;
    FOR v_part IN SELECT DISTINCT unnest(v_parts) LOOP
        PERFORM queen.eph_free_v1(p_tenant, p_queue, v_part);
    END LOOP;
    RETURN v_out;
END
$$;

-- POST /api/v1/ephemeral/reset: drops every message, lease, cursor and ring (the next push
-- starts a new incarnation: ids of the old one answer 'stale'); the declaration stays.
-- Answers how many messages were dropped.
CREATE OR REPLACE FUNCTION queen.eph_reset_v1(p_tenant text, p_queue text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    IF NOT queen.eph_lock_v1(p_tenant, p_queue, false) THEN
        RETURN 0;
    END IF;
    DELETE FROM queen.eph_leases WHERE tenant_id = p_tenant AND queue = p_queue;
    DELETE FROM queen.eph_cursors WHERE tenant_id = p_tenant AND queue = p_queue;
    DELETE FROM queen.eph_rings WHERE tenant_id = p_tenant AND queue = p_queue;
    WITH gone AS (
        DELETE FROM queen.eph_messages WHERE tenant_id = p_tenant AND queue = p_queue RETURNING 1
    )
    SELECT count(*) INTO v_n FROM gone;
    UPDATE queen.eph_live SET length = 0, bytes = 0
     WHERE tenant_id = p_tenant AND queue = p_queue;
    RETURN v_n;
END
$$;

-- DELETE /api/v1/ephemeral/queue/:queue: the contents and the declaration. Answers
-- {deleted (anything was there), declared (a declaration was removed)}.
CREATE OR REPLACE FUNCTION queen.eph_delete_v1(p_tenant text, p_queue text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_live boolean := queen.eph_lock_v1(p_tenant, p_queue, false);
    v_declared boolean;
BEGIN
    IF v_live THEN
        PERFORM queen.eph_reset_v1(p_tenant, p_queue);
        DELETE FROM queen.eph_live WHERE tenant_id = p_tenant AND queue = p_queue;
    END IF;
    DELETE FROM queen.eph_queues WHERE tenant_id = p_tenant AND queue = p_queue;
    v_declared := FOUND;
    RETURN jsonb_build_object('deleted', v_live OR v_declared, 'declared', v_declared);
END
$$;

-- One queue's gauges, or NULL when it is neither declared nor has contents state.
CREATE OR REPLACE FUNCTION queen.eph_gauges_v1(p_tenant text, p_queue text, p_defaults jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN q.queue IS NULL AND l.queue IS NULL THEN NULL ELSE jsonb_build_object(
        'queue', p_queue, 'declared', q.queue IS NOT NULL,
        'length', coalesce(l.length, 0), 'bytes', coalesce(l.bytes, 0),
        'pushed', coalesce(l.pushed, 0),
        'partitions', (SELECT count(*) FROM queen.eph_rings r
                        WHERE r.tenant_id = p_tenant AND r.queue = p_queue),
        'groups', (SELECT count(DISTINCT c.grp) FROM queen.eph_cursors c
                    WHERE c.tenant_id = p_tenant AND c.queue = p_queue),
        'dropped', jsonb_build_object('bounds', coalesce(l.dropped_bounds, 0),
                                      'ttl', coalesce(l.dropped_ttl, 0),
                                      'retry', coalesce(l.dropped_retry, 0)),
        'options', p_defaults || coalesce(q.options, '{}'::jsonb)) END
      FROM (SELECT 1) one
      LEFT JOIN queen.eph_queues q ON q.tenant_id = p_tenant AND q.queue = p_queue
      LEFT JOIN queen.eph_live l ON l.tenant_id = p_tenant AND l.queue = p_queue
$$;

-- GET /api/v1/ephemeral/queues: the tenant's queues (declared or with contents state) in byte
-- order, at most p_limit of them.
CREATE OR REPLACE FUNCTION queen.eph_queues_v1(p_tenant text, p_defaults jsonb, p_limit int)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(queen.eph_gauges_v1(p_tenant, n.queue, p_defaults) ORDER BY n.queue),
                    '[]'::jsonb)
      FROM (SELECT u.queue FROM (SELECT q.queue FROM queen.eph_queues q WHERE q.tenant_id = p_tenant
                                 UNION
                                 SELECT l.queue FROM queen.eph_live l WHERE l.tenant_id = p_tenant) u
             ORDER BY u.queue LIMIT p_limit) n
$$;

-- GET /api/v1/ephemeral/queues/:queue/depth: the gauges plus each ring and each group's
-- position on it, or NULL when the queue is not there.
CREATE OR REPLACE FUNCTION queen.eph_depth_v1(p_tenant text, p_queue text, p_defaults jsonb)
RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT g || jsonb_build_object(
        'rings', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                      'partition', r.partition, 'epoch', to_hex(r.epoch),
                      'nextSeq', r.next_seq, 'length', s.n, 'bytes', s.b) ORDER BY r.partition),
                      '[]'::jsonb)
                    FROM queen.eph_rings r
                   CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce(sum(m.bytes), 0) AS b
                                         FROM queen.eph_messages m
                                        WHERE m.tenant_id = r.tenant_id AND m.queue = r.queue
                                          AND m.partition = r.partition) s
                   WHERE r.tenant_id = p_tenant AND r.queue = p_queue),
        'cursors', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'group', c.grp, 'partition', c.partition, 'nextSeq', c.next_seq,
                        'pending', (SELECT count(*) FROM queen.eph_messages m
                                     WHERE m.tenant_id = c.tenant_id AND m.queue = c.queue
                                       AND m.partition = c.partition AND m.seq >= c.next_seq),
                        'inflight', (SELECT count(*) FROM queen.eph_leases l
                                      WHERE l.tenant_id = c.tenant_id AND l.queue = c.queue
                                        AND l.partition = c.partition AND l.grp = c.grp
                                        AND l.lease_until > now()),
                        'redeliver', (SELECT count(*) FROM queen.eph_leases l
                                       WHERE l.tenant_id = c.tenant_id AND l.queue = c.queue
                                         AND l.partition = c.partition AND l.grp = c.grp
                                         AND (l.lease_until IS NULL OR l.lease_until <= now())))
                        ORDER BY c.grp, c.partition), '[]'::jsonb)
                      FROM queen.eph_cursors c
                     WHERE c.tenant_id = p_tenant AND c.queue = p_queue))
      FROM queen.eph_gauges_v1(p_tenant, p_queue, p_defaults) AS g
     WHERE g IS NOT NULL
$$;

-- The retention loop's ttl sweep: applies eph_expire_v1 to up to p_max queues that hold a
-- message older than their ttlSeconds (queues locked by a push or pop are skipped: that call
-- expires them itself), so an idle queue's expired messages go too. Answers how many queues.
CREATE OR REPLACE FUNCTION queen.eph_sweep_step_v1(p_defaults jsonb, p_max int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    r record;
    v_n int := 0;
BEGIN
    FOR r IN SELECT l.tenant_id, l.queue, o.opt
               FROM queen.eph_live l
              CROSS JOIN LATERAL (SELECT queen.eph_options_v1(l.tenant_id, l.queue, p_defaults)
                                         AS opt) o
              WHERE (o.opt->>'ttlSeconds')::bigint > 0
                AND EXISTS (SELECT 1 FROM queen.eph_messages m
                             WHERE m.tenant_id = l.tenant_id AND m.queue = l.queue
                               AND m.created_at < now() - make_interval(
                                                      secs => (o.opt->>'ttlSeconds')::bigint))
              ORDER BY l.tenant_id, l.queue
              LIMIT greatest(p_max, 1)
              FOR UPDATE OF l SKIP LOCKED LOOP
        PERFORM queen.eph_expire_v1(r.tenant_id, r.queue, r.opt);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;
