-- timers: the pending timers of queen.log_timers (migration 0008, docs/engine.md §16) — the
-- operations of POST /api/v1/timers and of the transaction's `timers` rider, and the wheel's
-- claim. Replayed (CREATE OR REPLACE) when its checksum changes.
--
-- A due timer is fired by the wheel of some broker (engine/timer_wheel/): it claims due rows with
-- FOR UPDATE SKIP LOCKED (log_timers_claim_v1: a token and a short claim, committed at once),
-- then runs ONE transaction that pushes the messages and deletes the rows it still holds the
-- token of (the `fire` op below, through log_transaction_wire_v1). A broker that dies between
-- the two leaves rows whose claim ends and which any wheel claims again; a fire whose token
-- was replaced (claim ended and taken by another broker, or a reschedule) raises and rolls
-- its whole transaction back, push included. So a timer is pushed once.

-- The rider's operations for one tenant, applied in order; one result per operation.
--   {"op":"schedule"|"reschedule","queue","timerKey","partition","payload":base64,"txn",
--    "messageId","delayMs","storedQueue","sealed"}  upsert on (tenant, queue, timerKey): new
--                           payload, delivery time and txn, attempts back to 0, any claim
--                           dropped. `sealed`: the payload is an encryption envelope. A
--                           plaintext payload for a queue (`storedQueue`, the tenant-qualified
--                           name) that exists with encryption_enabled raises 'QENC …' with the
--                           queue as DETAIL, and nothing of the call is written: the broker
--                           seals and calls again (as for pushes, docs/engine.md §3.1.1).
--   {"op":"cancel","queue","timerKey"}     delete unless a fire holds a live claim
--   {"op":"fire","queue","timerKey","token"}  delete the row the token still claims, or raise
--                           'QTIMER …' (the broker's fire only; never sent by a client)
-- Results: {"status":"scheduled"|"rescheduled","deliverAt","txn","messageId"},
-- {"status":"cancelled"|"absent"|"too_late","txn"?}, {"status":"fired"}.
CREATE OR REPLACE FUNCTION queen.log_timers_apply_v1(p_ops jsonb, p_tenant text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_op jsonb;
    v_out jsonb := '[]'::jsonb;
    v_existed bool;
    v_at timestamptz;
    v_txn text;
    v_claimed bool;
    v_sealed bool;
BEGIN
    FOR v_op IN SELECT e FROM jsonb_array_elements(COALESCE(p_ops, '[]'::jsonb)) AS t(e) LOOP
        CASE v_op->>'op'
        WHEN 'schedule', 'reschedule' THEN
            v_sealed := COALESCE((v_op->>'sealed')::bool, false);
            IF NOT v_sealed AND EXISTS (SELECT 1 FROM queen.queues q
                                        WHERE q.name = v_op->>'storedQueue'
                                          AND q.encryption_enabled) THEN
                RAISE EXCEPTION 'QENC queue % has encryptionEnabled; its timers are sealed',
                    v_op->>'queue'
                    USING DETAIL = v_op->>'storedQueue';
            END IF;
            v_at := clock_timestamp() + (v_op->>'delayMs')::bigint * interval '1 millisecond';
            INSERT INTO queen.log_timers AS t
                (tenant_id, queue, timer_key, partition, payload, payload_encrypted, txn,
                 message_id, deliver_at, visible_at)
            VALUES (p_tenant, v_op->>'queue', v_op->>'timerKey', v_op->>'partition',
                    decode(v_op->>'payload', 'base64'), v_sealed, v_op->>'txn',
                    (v_op->>'messageId')::uuid, v_at, v_at)
            ON CONFLICT (tenant_id, queue, timer_key) DO UPDATE SET
                partition = EXCLUDED.partition, payload = EXCLUDED.payload,
                payload_encrypted = EXCLUDED.payload_encrypted, txn = EXCLUDED.txn,
                message_id = EXCLUDED.message_id, deliver_at = EXCLUDED.deliver_at,
                visible_at = EXCLUDED.visible_at, claim_token = NULL, attempts = 0,
                last_error = NULL
            RETURNING (xmax <> 0) INTO v_existed;
            v_out := v_out || jsonb_build_object(
                'status', CASE WHEN v_existed THEN 'rescheduled' ELSE 'scheduled' END,
                'deliverAt', queen.log_iso_micros(v_at),
                'txn', v_op->>'txn', 'messageId', v_op->>'messageId');
        WHEN 'cancel' THEN
            DELETE FROM queen.log_timers
            WHERE tenant_id = p_tenant AND queue = v_op->>'queue'
              AND timer_key = v_op->>'timerKey'
              AND (claim_token IS NULL OR visible_at <= clock_timestamp())
            RETURNING txn INTO v_txn;
            IF FOUND THEN
                v_out := v_out || jsonb_build_object('status', 'cancelled', 'txn', v_txn);
            ELSE
                v_claimed := false;
                SELECT txn, true INTO v_txn, v_claimed FROM queen.log_timers
                WHERE tenant_id = p_tenant AND queue = v_op->>'queue'
                  AND timer_key = v_op->>'timerKey';
                v_out := v_out || CASE WHEN v_claimed
                    THEN jsonb_build_object('status', 'too_late', 'txn', v_txn)
                    ELSE jsonb_build_object('status', 'absent') END;
            END IF;
        WHEN 'fire' THEN
            DELETE FROM queen.log_timers
            WHERE tenant_id = p_tenant AND queue = v_op->>'queue'
              AND timer_key = v_op->>'timerKey' AND claim_token = (v_op->>'token')::uuid;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'QTIMER timer %/% is no longer claimed by this fire; transaction rolled back',
                    v_op->>'queue', v_op->>'timerKey';
            END IF;
            v_out := v_out || jsonb_build_object('status', 'fired');
        ELSE
            RAISE EXCEPTION 'log_timers_apply_v1: unknown op %', v_op->>'op';
        END CASE;
    END LOOP;
    RETURN v_out;
END
$$;

-- The wheel's claim: up to p_limit due rows (visible_at passed) that no other transaction has
-- locked, each given a fresh token and hidden from every wheel for p_claim_ms (the time the
-- fire has to commit). Committed on its own, before the fire. payload_encrypted (last, so
-- a broker reading the columns before it still reads them right) was added by 0011.
DROP FUNCTION IF EXISTS queen.log_timers_claim_v1(int, int);
CREATE OR REPLACE FUNCTION queen.log_timers_claim_v1(p_limit int, p_claim_ms int)
RETURNS TABLE (tenant_id text, queue text, timer_key text, partition text, payload bytea,
               txn text, message_id uuid, claim_token uuid, attempts int,
               payload_encrypted bool)
LANGUAGE sql AS $$
    UPDATE queen.log_timers t
    SET claim_token = gen_random_uuid(),
        visible_at = clock_timestamp() + p_claim_ms * interval '1 millisecond'
    FROM (SELECT d.tenant_id, d.queue, d.timer_key FROM queen.log_timers d
          WHERE d.visible_at <= clock_timestamp()
          ORDER BY d.visible_at
          LIMIT p_limit
          FOR UPDATE SKIP LOCKED) due
    WHERE t.tenant_id = due.tenant_id AND t.queue = due.queue AND t.timer_key = due.timer_key
    RETURNING t.tenant_id, t.queue::text, t.timer_key::text, t.partition, t.payload, t.txn,
              t.message_id, t.claim_token, t.attempts, t.payload_encrypted
$$;

-- Milliseconds until the earliest row becomes visible to a wheel (≤ 0: due now); NULL when
-- there is no timer at all. One probe of idx_log_timers_visible.
CREATE OR REPLACE FUNCTION queen.log_timers_next_v1()
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT floor(extract(epoch FROM (min(visible_at) - clock_timestamp())) * 1000)::bigint
    FROM queen.log_timers
$$;

-- A fire that failed for reasons of its own (its queue is full, the database refused the
-- push): the claim is dropped and the row waits p_delay_ms before any wheel takes it again.
CREATE OR REPLACE FUNCTION queen.log_timers_back_off_v1(p_tenant text, p_queue text,
                                                        p_key text, p_token uuid,
                                                        p_delay_ms int, p_error text)
RETURNS void
LANGUAGE sql AS $$
    UPDATE queen.log_timers
    SET claim_token = NULL, attempts = attempts + 1, last_error = p_error,
        visible_at = clock_timestamp() + p_delay_ms * interval '1 millisecond'
    WHERE tenant_id = p_tenant AND queue = p_queue AND timer_key = p_key
      AND claim_token = p_token
$$;

-- One pending timer of a tenant's queue (no row: not pending).
DROP FUNCTION IF EXISTS queen.log_timers_peek_v1(text, text, text);
CREATE OR REPLACE FUNCTION queen.log_timers_peek_v1(p_tenant text, p_queue text, p_key text)
RETURNS TABLE (timer_key text, partition text, payload bytea, txn text, message_id uuid,
               deliver_at text, attempts int, firing bool, payload_encrypted bool)
LANGUAGE sql STABLE AS $$
    SELECT t.timer_key::text, t.partition, t.payload, t.txn, t.message_id,
           queen.log_iso_micros(t.deliver_at), t.attempts,
           t.claim_token IS NOT NULL AND t.visible_at > clock_timestamp(), t.payload_encrypted
    FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND t.queue = p_queue AND t.timer_key = p_key
$$;

-- A keyset page of a tenant's queue's pending timers: keys after p_after (exclusive) in
-- byte order, at most p_limit of them.
CREATE OR REPLACE FUNCTION queen.log_timers_list_v1(p_tenant text, p_queue text,
                                                    p_after text, p_limit int)
RETURNS TABLE (timer_key text, partition text, txn text, message_id uuid, deliver_at text,
               attempts int)
LANGUAGE sql STABLE AS $$
    SELECT t.timer_key::text, t.partition, t.txn, t.message_id,
           queen.log_iso_micros(t.deliver_at), t.attempts
    FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND t.queue = p_queue
      AND (p_after IS NULL OR t.timer_key > p_after COLLATE "C")
    ORDER BY t.timer_key
    LIMIT p_limit
$$;
