-- dlq: dead letters (docs/engine.md §6.3, §2.8; docs/wire.md §11): the hand-off that files one
-- under the lease that asked for it, the listing, and the operations on filed rows (purge,
-- delete by address, replay). The hand-off locks only the consumer row, like the ack path; a
-- replay locks the partition row, then the address's DLQ rows (the global lock order,
-- docs/engine.md §4.5). Replayed (CREATE OR REPLACE) when its checksum changes.

-- Files the dead letter a log_ack_by_hash_v1 {"dlq":true} asked for, under that lease:
-- inserts the log_dlq row (a payload snapshot, with the retry budget consumed), moves the
-- cursor past the poison frame (GREATEST: a stale caller never moves it backwards), resets
-- attempt and retry state so the next batch starts fresh, and releases the lease.
--
-- The worker must still hold the row. The row lock plus an unchanged worker_id prove no
-- other pop has claimed the span since the ack, so an expiry in the few milliseconds of the
-- hand-off does not have to throw the verdict away. A second call finds the lease released
-- and returns {"ok":false} with no side effects. A NULL payload is stored as JSON null.
-- The payload is `json`, like the log_dlq column: any pushed document, `\u0000` included.
-- p_encrypted: the payload is the frame's encryption envelope, copied as stored (the broker
-- never decrypts to file a dead letter, so no plaintext of an encrypted queue lands here).
-- p_producer_sub is the poison frame's producerSub (NULL: pushed with auth off; the default
-- keeps the eight-argument call of brokers before auth working during a rolling upgrade).
DROP FUNCTION IF EXISTS queen.log_dlq_head_v1(bigint, text, text, bigint, uuid, text, jsonb, text);
DROP FUNCTION IF EXISTS queen.log_dlq_head_v1(bigint, text, text, bigint, uuid, text, json, text);
DROP FUNCTION IF EXISTS queen.log_dlq_head_v1(bigint, text, text, bigint, uuid, text, json, text, bool);
DROP FUNCTION IF EXISTS queen.log_dlq_head_v1(bigint, text, text, bigint, uuid, text, json, text, text);
CREATE OR REPLACE FUNCTION queen.log_dlq_head_v1(
    p_partition_id bigint, p_group text, p_worker text, p_off bigint, p_message_id uuid,
    p_txn text, p_payload json, p_error text, p_encrypted bool DEFAULT false,
    p_producer_sub text DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_row_worker text;
    v_retries int;
    v_committed bigint;
    v_id uuid;
    v_last_offset bigint;
    v_queue text;
BEGIN
    SELECT worker_id, batch_retry_count, committed INTO v_row_worker, v_retries, v_committed
    FROM queen.log_consumers
    WHERE partition_id = p_partition_id AND consumer_group = p_group
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN jsonb_build_object('ok', false, 'error', 'consumer not found');
    END IF;
    IF COALESCE(p_worker, '') = '' OR v_row_worker IS DISTINCT FROM p_worker THEN
        RETURN jsonb_build_object('ok', false, 'error', 'invalid or expired lease');
    END IF;

    INSERT INTO queen.log_dlq (partition_id, consumer_group, "offset", message_id,
                               transaction_id, payload, error, retry_count, payload_encrypted,
                               producer_sub)
    VALUES (p_partition_id, p_group, p_off, p_message_id, p_txn,
            COALESCE(p_payload, 'null'::json), p_error, v_retries,
            COALESCE(p_encrypted, false), p_producer_sub)
    RETURNING id INTO v_id;

    UPDATE queen.log_consumers
    SET committed = GREATEST(committed, p_off), worker_id = NULL, lease_expires_at = NULL,
        lease_acquired_at = NULL, batch_end = NULL, batch_retry_count = 0,
        attempt_offset = NULL, attempt_count = 0,
        total_consumed = total_consumed + 1, last_consumed_at = clock_timestamp()
    WHERE partition_id = p_partition_id AND consumer_group = p_group;

    SELECT lp.last_offset, q.name INTO v_last_offset, v_queue
    FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
    WHERE lp.id = p_partition_id;
    RETURN jsonb_build_object(
        'ok', true, 'id', v_id, 'committed', GREATEST(v_committed, p_off),
        'wakeQueue', CASE WHEN v_last_offset > GREATEST(v_committed, p_off) THEN v_queue END);
END
$$;

-- One page of dead letters, newest first, plus the number of matching rows. Every filter is
-- optional (NULL). Names come from a left join: a DLQ row outlives its partition.
-- Result {"total":n,"rows":[{id, partitionId, queue, partition, consumerGroup, offset,
-- messageId, transactionId, data, encrypted, producerSub, errorMessage, retryCount, failedAt}]}
-- (encrypted: data is an encryption envelope the broker opens before answering).
-- Built as `json`, not `jsonb`: `data` is the json payload copy, which jsonb may not hold.
-- Only dead letters of p_tenant's queues are listed; a row whose partition is gone (none are
-- made since tenants exist: queue deletion takes its dead letters, partition cleanup keeps
-- partitions that have some) counts as the default tenant's.
DROP FUNCTION IF EXISTS queen.log_dlq_list_v1(text, text, text, timestamptz, timestamptz, int, int);
CREATE OR REPLACE FUNCTION queen.log_dlq_list_v1(
    p_queue text, p_group text, p_partition text, p_from timestamptz, p_to timestamptz,
    p_limit int, p_offset int, p_tenant text DEFAULT '')
RETURNS json
LANGUAGE sql STABLE AS $$
    WITH matching AS (
        SELECT d.*, lp.name AS partition_name, q.name AS queue_name
        FROM queen.log_dlq d
        LEFT JOIN queen.log_partitions lp ON lp.id = d.partition_id
        LEFT JOIN queen.queues q ON q.id = lp.queue_id
        WHERE (p_queue IS NULL OR q.name = p_queue)
          AND COALESCE(q.tenant_id, '') = COALESCE(p_tenant, '')
          AND (p_group IS NULL OR d.consumer_group = p_group)
          AND (p_partition IS NULL OR lp.name = p_partition)
          AND (p_from IS NULL OR d.failed_at >= p_from)
          AND (p_to IS NULL OR d.failed_at <= p_to)
    ),
    page AS (
        SELECT * FROM matching
        ORDER BY failed_at DESC, "offset" DESC, id
        LIMIT GREATEST(p_limit, 1) OFFSET GREATEST(p_offset, 0)
    )
    SELECT json_build_object(
        'total', (SELECT count(*) FROM matching),
        'rows', COALESCE((
            SELECT json_agg(json_build_object(
                'id', p.id, 'partitionId', p.partition_id::text, 'queue', p.queue_name,
                'partition', p.partition_name, 'consumerGroup', p.consumer_group,
                'offset', p."offset", 'messageId', p.message_id,
                'transactionId', p.transaction_id, 'data', p.payload,
                'encrypted', p.payload_encrypted,
                'producerSub', p.producer_sub,
                'errorMessage', p.error, 'retryCount', COALESCE(p.retry_count, 0),
                'failedAt', to_char(p.failed_at AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
                ORDER BY p.failed_at DESC, p."offset" DESC, p.id)
            FROM page p), '[]'::json))
$$;

-- Deletes the dead letters of queue p_queue, of consumer group p_group only when not NULL.
-- Returns how many rows went. Rows whose partition is gone no longer belong to a queue name
-- and are not matched.
CREATE OR REPLACE FUNCTION queen.log_dlq_purge_v1(p_queue text, p_group text)
RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM queen.log_dlq d
        USING queen.log_partitions lp, queen.queues q
        WHERE lp.id = d.partition_id AND q.id = lp.queue_id AND q.name = p_queue
          AND (p_group IS NULL OR d.consumer_group = p_group)
        RETURNING 1)
    SELECT count(*) FROM gone
$$;

-- Deletes the dead letters of one address (partition, transactionId), of every group.
-- Returns how many rows went (0: the address has none, or its partition is not p_tenant's).
DROP FUNCTION IF EXISTS queen.log_dlq_delete_v1(bigint, text);
CREATE OR REPLACE FUNCTION queen.log_dlq_delete_v1(p_pid bigint, p_txn text, p_tenant text DEFAULT '')
RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM queen.log_dlq d WHERE d.partition_id = p_pid AND d.transaction_id = p_txn
          AND COALESCE((SELECT q.tenant_id FROM queen.log_partitions lp
                        JOIN queen.queues q ON q.id = lp.queue_id WHERE lp.id = p_pid), '')
              = COALESCE(p_tenant, '')
        RETURNING 1)
    SELECT count(*) FROM gone
$$;

-- The payload copy a replay of the address pushes back: one row when the address has dead
-- letters (the newest one's copy; r_payload NULL for an empty payload, r_producer_sub the
-- producerSub it was pushed with), none otherwise, with whether the copy is an encryption
-- envelope and whether the partition's queue encrypts now.
-- Read before the replay so the broker can build the segment; the replay itself decides.
-- p_tenant: an address on another tenant's partition has none.
DROP FUNCTION IF EXISTS queen.log_dlq_payload_v1(bigint, text);
CREATE OR REPLACE FUNCTION queen.log_dlq_payload_v1(p_pid bigint, p_txn text, p_tenant text DEFAULT '')
RETURNS TABLE(r_payload text, r_encrypted bool, r_queue_encrypts bool, r_producer_sub text)
LANGUAGE sql STABLE AS $$
    SELECT d.payload::text, d.payload_encrypted, COALESCE(q.encryption_enabled, false),
           d.producer_sub
    FROM queen.log_dlq d
    LEFT JOIN queen.log_partitions lp ON lp.id = d.partition_id
    LEFT JOIN queen.queues q ON q.id = lp.queue_id
    WHERE d.partition_id = p_pid AND d.transaction_id = p_txn
      AND COALESCE(q.tenant_id, '') = COALESCE(p_tenant, '')
    ORDER BY d.failed_at DESC, d.id
    LIMIT 1
$$;

-- Replays an address: deletes its dead letters (every group) and appends the one-frame
-- segment the broker built from the payload copy to the same partition, in this one call,
-- hence one transaction. The append bypasses the dedup window (window 0): the transactionId is
-- stored under it already, and the replay is deliberate.
--
-- Lock order: the partition row first (FOR NO KEY UPDATE, the allocator's own lock, which the
-- append then reuses), then the DLQ rows (the DELETE locks them). Not the other way round:
-- delete_queue_v1 (queues.sql) holds the partition rows while it deletes their DLQ rows, so a
-- replay holding DLQ rows while waiting for the partition would close a cycle with it.
-- A second replay of the same address waits on the first one's partition lock, then finds the
-- rows gone and answers {"status":"none"} having written nothing: no double push.
--
-- Result: {"status":"none"} (no dead letter), {"status":"gone"} (its partition was deleted;
-- nothing written), or {"status":"replayed","replayed":n,"queue":Q,"partition":P,
-- "push":<log_push_one_v1 result>}. When the append is refused (the queue now encrypts and
-- the segment is plaintext, or its maxSize has no room) the call raises 'QREFUSED' with that
-- result as DETAIL, so the deletion rolls back with it and the dead letter stays.
-- p_encrypted: the segment's payload is an encryption envelope. p_tenant: a partition of
-- another tenant answers {"status":"none"}, like an address without dead letters.
DROP FUNCTION IF EXISTS queen.log_dlq_replay_v1(bigint, text, bytea, bytea);
DROP FUNCTION IF EXISTS queen.log_dlq_replay_v1(bigint, text, bytea, bytea, bool);
CREATE OR REPLACE FUNCTION queen.log_dlq_replay_v1(
    p_pid bigint, p_txn text, p_hashes bytea, p_blob bytea, p_encrypted bool DEFAULT false,
    p_tenant text DEFAULT '')
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
    v_partition text;
    v_deleted bigint;
    v_push jsonb;
BEGIN
    SELECT q.name, lp.name INTO v_queue, v_partition
    FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
    WHERE lp.id = p_pid AND q.tenant_id = COALESCE(p_tenant, '')
    FOR NO KEY UPDATE OF lp;
    IF NOT FOUND THEN
        IF COALESCE(p_tenant, '') = ''
           AND NOT EXISTS (SELECT 1 FROM queen.log_partitions WHERE id = p_pid)
           AND EXISTS (SELECT 1 FROM queen.log_dlq
                   WHERE partition_id = p_pid AND transaction_id = p_txn) THEN
            RETURN jsonb_build_object('status', 'gone');
        END IF;
        RETURN jsonb_build_object('status', 'none');
    END IF;

    v_deleted := queen.log_dlq_delete_v1(p_pid, p_txn, p_tenant);
    IF v_deleted = 0 THEN
        RETURN jsonb_build_object('status', 'none');
    END IF;
    v_push := queen.log_push_one_v1(v_queue, v_partition, 1, p_hashes, -1, p_blob, p_pid, 0,
                                    p_encrypted);
    IF v_push->>'status' <> 'queued' THEN
        RAISE EXCEPTION 'QREFUSED replay of % refused', p_txn USING DETAIL = v_push::text;
    END IF;
    RETURN jsonb_build_object(
        'status', 'replayed', 'replayed', v_deleted, 'queue', v_queue,
        'partition', v_partition, 'push', v_push);
END
$$;
