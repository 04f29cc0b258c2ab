-- kv: the key-value store (docs/engine.md §15, table in migrations/0007_kv.sql). ONE apply
-- function, queen.kv_apply_v1, serves POST /api/v1/kv, the transaction's kv rider
-- (transaction.sql, before any partition lock) and the locks (engine/locks.rs), plus the
-- retention loop's sweep of expired rows. Replayed (CREATE OR REPLACE) when its checksum
-- changes.
--
-- Every operation arrives checked by the broker (http/kv/parse.rs):
--   {"op":"get","ns","key"} | {"op":"getMany","ns","keys":[…]}
--   {"op":"getPrefix","ns","prefix","after"?,"limit","keysOnly"?}
--   {"op":"put"|"putIfAbsent","ns","key","value","ttlSeconds"|"forever","expect"?,"required"?}
--   {"op":"delete","ns","key","expect"?,"required"?} | {"op":"check","ns","key","expect","required"?}
--   {"op":"incr","ns","key","delta","min"?,"max"?,"ttlSeconds"|"forever","required"?}
-- (putIfAbsent is put with expect 0.) The broker refuses two writes of one key in one call.

-- The one timestamp format of the store's answers: fixed-width UTC with milliseconds, so two
-- readings of one instant are equal strings.
CREATE OR REPLACE FUNCTION queen.kv_ts_v1(p timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(p AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- The one existence predicate: an expired row is absent before the sweep deletes it.
CREATE OR REPLACE FUNCTION queen.kv_live_v1(p_expires_at timestamptz, p_now timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_expires_at IS NULL OR p_expires_at > p_now
$$;

-- A row as the answers show it.
CREATE OR REPLACE FUNCTION queen.kv_row_v1(r queen.kv)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('key', r.key, 'value', r.value, 'version', r.version,
                              'expiresAt', queen.kv_ts_v1(r.expires_at),
                              'updatedAt', queen.kv_ts_v1(r.updated_at))
$$;

-- The expiry a write asks for: ttlSeconds from now, or NULL for forever.
CREATE OR REPLACE FUNCTION queen.kv_expiry_v1(o jsonb, p_now timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN o ? 'ttlSeconds'
                THEN p_now + make_interval(secs => (o->>'ttlSeconds')::double precision) END
$$;

-- Writes (inserts, or overwrites a live or expired row of) one key with a fresh version.
-- created_at survives only an overwrite of a live row.
CREATE OR REPLACE FUNCTION queen.kv_write_v1(p_tenant text, p_ns text, p_key text, p_value jsonb,
                                             p_expires_at timestamptz, p_now timestamptz)
RETURNS queen.kv LANGUAGE plpgsql AS $$
DECLARE
    v_row queen.kv;
BEGIN
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at,
                               created_at, updated_at)
    VALUES (p_tenant, p_ns, p_key, p_value, nextval('queen.kv_version_seq'), p_expires_at,
            p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE
        SET value = EXCLUDED.value, version = EXCLUDED.version,
            expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at,
            created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now)
                              THEN k.created_at ELSE EXCLUDED.created_at END
    RETURNING * INTO v_row;
    RETURN v_row;
END
$$;

-- A lost precondition: the verdict with the row as it is (version 0 when absent).
CREATE OR REPLACE FUNCTION queen.kv_lost_v1(p_reason text, p_key text, p_live boolean, r queen.kv)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_live
                THEN jsonb_build_object('applied', false, 'reason', p_reason, 'key', p_key,
                                        'value', r.value, 'version', r.version)
                ELSE jsonb_build_object('applied', false, 'reason', p_reason, 'key', p_key,
                                        'value', NULL, 'version', 0) END
$$;

-- The verdict an `expect` loses on (expect 0: the key must be absent; expect n > 0: its live row
-- must be at version n), or NULL when it holds: shared by check and put.
CREATE OR REPLACE FUNCTION queen.kv_expect_lost_v1(p_expect bigint, p_live boolean, p_key text,
                                                   r queen.kv)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_expect = 0 AND p_live THEN queen.kv_lost_v1('exists', p_key, true, r)
                WHEN p_expect > 0 AND NOT p_live THEN queen.kv_lost_v1('absent', p_key, false, r)
                WHEN p_expect > 0 AND r.version <> p_expect
                    THEN queen.kv_lost_v1('version', p_key, true, r) END
$$;

-- getMany: the live rows in key order while they fit p_budget bytes (the first always does),
-- and the keys without a live row in request order. Keys left out by the budget are in neither
-- list, and truncated says so.
CREATE OR REPLACE FUNCTION queen.kv_get_many_v1(p_tenant text, o jsonb, p_now timestamptz,
                                                p_budget bigint)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_keys text[] := ARRAY(SELECT jsonb_array_elements_text(o->'keys'));
    v_rows jsonb := '[]';
    v_live text[] := '{}';
    v_used bigint := 0;
    v_row jsonb;
    v_truncated boolean := false;
    r queen.kv;
BEGIN
    FOR r IN
        SELECT * FROM queen.kv k
        WHERE k.tenant_id = p_tenant AND k.namespace = o->>'ns' AND k.key = ANY (v_keys)
          AND queen.kv_live_v1(k.expires_at, p_now)
        ORDER BY k.key
    LOOP
        v_live := v_live || r.key;
        CONTINUE WHEN v_truncated;
        v_row := queen.kv_row_v1(r);
        IF jsonb_array_length(v_rows) > 0 AND v_used + octet_length(v_row::text) > p_budget THEN
            v_truncated := true;
            CONTINUE;
        END IF;
        v_used := v_used + octet_length(v_row::text);
        v_rows := v_rows || jsonb_build_array(v_row);
    END LOOP;
    RETURN jsonb_build_object(
        'rows', v_rows,
        'missing', COALESCE((SELECT jsonb_agg(x ORDER BY i)
                             FROM unnest(v_keys) WITH ORDINALITY AS t(x, i)
                             WHERE x <> ALL (v_live)), '[]'),
        'truncated', v_truncated);
END
$$;

-- getPrefix: live keys that start with the prefix (bytes, not LIKE), after `after`, in byte
-- order, at most `limit` and while they fit p_budget bytes (the first always does); the walk
-- stops at the first key past the prefix.
CREATE OR REPLACE FUNCTION queen.kv_get_prefix_v1(p_tenant text, o jsonb, p_now timestamptz,
                                                  p_budget bigint)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_prefix text := o->>'prefix';
    v_after text := o->>'after';
    v_limit int := (o->>'limit')::int;
    v_keys_only boolean := COALESCE((o->>'keysOnly')::boolean, false);
    v_rows jsonb := '[]';
    v_n int := 0;
    v_last text;
    v_truncated boolean := false;
    v_used bigint := 0;
    v_row jsonb;
    r queen.kv;
BEGIN
    FOR r IN
        SELECT * FROM queen.kv k
        WHERE k.tenant_id = p_tenant AND k.namespace = o->>'ns'
          AND k.key >= v_prefix AND (v_after IS NULL OR k.key > v_after)
        ORDER BY k.key
    LOOP
        EXIT WHEN NOT starts_with(r.key, v_prefix);
        CONTINUE WHEN NOT queen.kv_live_v1(r.expires_at, p_now);
        v_row := CASE WHEN v_keys_only
            THEN jsonb_build_object('key', r.key, 'version', r.version,
                                    'expiresAt', queen.kv_ts_v1(r.expires_at))
            ELSE queen.kv_row_v1(r) END;
        IF v_n = v_limit OR (v_n > 0 AND v_used + octet_length(v_row::text) > p_budget) THEN
            v_truncated := true;
            EXIT;
        END IF;
        v_used := v_used + octet_length(v_row::text);
        v_rows := v_rows || jsonb_build_array(v_row);
        v_n := v_n + 1;
        v_last := r.key;
    END LOOP;
    RETURN jsonb_build_object('rows', v_rows, 'truncated', v_truncated,
                              'nextAfter', CASE WHEN v_truncated THEN v_last END);
END
$$;

-- One operation of a key the caller holds (kv_apply_v1 took its lock): its verdict. p_budget:
-- the bytes a getMany or getPrefix may still answer.
CREATE OR REPLACE FUNCTION queen.kv_op_v1(p_tenant text, o jsonb, p_now timestamptz,
                                          p_budget bigint)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_op text := o->>'op';
    v_ns text := o->>'ns';
    v_key text := o->>'key';
    v_expect bigint := CASE WHEN v_op = 'putIfAbsent' THEN 0 ELSE (o->>'expect')::bigint END;
    v_lost jsonb;
    v_live boolean;
    v_old numeric;
    v_new numeric;
    r queen.kv;
BEGIN
    IF v_op = 'getMany' THEN
        RETURN queen.kv_get_many_v1(p_tenant, o, p_now, p_budget);
    ELSIF v_op = 'getPrefix' THEN
        RETURN queen.kv_get_prefix_v1(p_tenant, o, p_now, p_budget);
    END IF;
    IF v_op = 'get' THEN
        SELECT * INTO r FROM queen.kv k
        WHERE k.tenant_id = p_tenant AND k.namespace = v_ns AND k.key = v_key;
    ELSE
        SELECT * INTO r FROM queen.kv k
        WHERE k.tenant_id = p_tenant AND k.namespace = v_ns AND k.key = v_key
        FOR UPDATE;
    END IF;
    v_live := FOUND AND queen.kv_live_v1(r.expires_at, p_now);

    CASE v_op
    WHEN 'get' THEN
        IF NOT v_live THEN
            RETURN jsonb_build_object('found', false, 'key', v_key);
        END IF;
        RETURN jsonb_build_object('found', true) || queen.kv_row_v1(r);
    WHEN 'check' THEN
        v_lost := queen.kv_expect_lost_v1(v_expect, v_live, v_key, r);
        IF v_lost IS NOT NULL THEN
            RETURN v_lost;
        END IF;
        RETURN jsonb_build_object('applied', true, 'key', v_key,
                                  'value', CASE WHEN v_live THEN r.value END,
                                  'version', CASE WHEN v_live THEN r.version ELSE 0 END);
    WHEN 'put', 'putIfAbsent' THEN
        v_lost := queen.kv_expect_lost_v1(v_expect, v_live, v_key, r);
        IF v_lost IS NOT NULL THEN
            RETURN v_lost;
        END IF;
        r := queen.kv_write_v1(p_tenant, v_ns, v_key, COALESCE(o->'value', 'null'),
                               queen.kv_expiry_v1(o, p_now), p_now);
        RETURN jsonb_build_object('applied', true, 'key', v_key, 'value', r.value,
                                  'version', r.version,
                                  'expiresAt', queen.kv_ts_v1(r.expires_at));
    WHEN 'delete' THEN
        IF NOT v_live THEN
            RETURN queen.kv_lost_v1('absent', v_key, false, r);
        ELSIF v_expect = 0 THEN
            RETURN queen.kv_lost_v1('exists', v_key, true, r);
        ELSIF v_expect > 0 AND r.version <> v_expect THEN
            RETURN queen.kv_lost_v1('version', v_key, true, r);
        END IF;
        DELETE FROM queen.kv k
        WHERE k.tenant_id = p_tenant AND k.namespace = v_ns AND k.key = v_key;
        RETURN jsonb_build_object('applied', true, 'key', v_key, 'version', r.version);
    WHEN 'incr' THEN
        IF v_live AND jsonb_typeof(r.value) <> 'number' THEN
            RETURN queen.kv_lost_v1('type', v_key, true, r);
        END IF;
        -- An absent or expired row counts as 0, whatever it held.
        v_old := CASE WHEN v_live THEN (r.value #>> '{}')::numeric ELSE 0 END;
        v_new := v_old + (o->>'delta')::numeric;
        IF v_new > (o->>'max')::numeric OR v_new < (o->>'min')::numeric THEN
            RETURN jsonb_build_object('applied', false, 'reason', 'limit', 'key', v_key,
                                      'value', to_jsonb(v_old),
                                      'version', CASE WHEN v_live THEN r.version ELSE 0 END);
        END IF;
        -- The expiry is the creating write's: a live counter keeps its own.
        r := queen.kv_write_v1(p_tenant, v_ns, v_key, to_jsonb(v_new),
                               CASE WHEN v_live THEN r.expires_at
                                    ELSE queen.kv_expiry_v1(o, p_now) END, p_now);
        RETURN jsonb_build_object('applied', true, 'key', v_key, 'value', r.value,
                                  'version', r.version,
                                  'expiresAt', queen.kv_ts_v1(r.expires_at));
    ELSE
        RAISE EXCEPTION 'kv_op_v1: unknown operation %', v_op;
    END CASE;
END
$$;

-- Applies p_ops in order for p_tenant and answers their verdicts, index-aligned; the rows of
-- its getMany and getPrefix operations share p_read_budget bytes (engine/kv.rs). Every key
-- the call writes or checks is held first (a transaction-scoped advisory lock, class 19286,
-- taken in one order), so writes of one key serialise, each judged against the row the
-- previous writer committed, and its version is drawn after the previous writer's.
-- An operation with "required":true whose precondition is lost raises 'QKV …' (DETAIL:
-- {"opIndex","kvReason","version","value"}), rolling back the whole call, and with it the
-- transaction it rides in.
DROP FUNCTION IF EXISTS queen.kv_apply_v1(text, jsonb);
DROP FUNCTION IF EXISTS queen.kv_op_v1(text, jsonb, timestamptz);
DROP FUNCTION IF EXISTS queen.kv_get_many_v1(text, jsonb, timestamptz);
DROP FUNCTION IF EXISTS queen.kv_get_prefix_v1(text, jsonb, timestamptz);
CREATE OR REPLACE FUNCTION queen.kv_apply_v1(p_tenant text, p_ops jsonb, p_read_budget bigint)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_budget bigint := p_read_budget;
    v_out jsonb := '[]';
    v_lock int;
    v_op jsonb;
    v_i int;
    v_r jsonb;
BEGIN
    -- A standby answers reads from its replay position, which may lag what the primary
    -- acknowledged: refuse as unavailable (25006), never a stale version.
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION 'the key-value store is read on the primary only; this server is in recovery'
            USING ERRCODE = '25006';
    END IF;
    FOR v_lock IN
        SELECT DISTINCT hashtext(p_tenant || E'\x01' || (e->>'ns') || E'\x01' || (e->>'key'))
        FROM jsonb_array_elements(p_ops) AS t(e)
        WHERE e->>'op' IN ('put', 'putIfAbsent', 'delete', 'incr', 'check')
        ORDER BY 1
    LOOP
        PERFORM pg_advisory_xact_lock(19286, v_lock);
    END LOOP;
    -- Rows committed by the writers waited for are read from here on.
    v_now := clock_timestamp();
    FOR v_op, v_i IN
        SELECT e, (i - 1)::int FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS t(e, i) ORDER BY i
    LOOP
        v_r := queen.kv_op_v1(p_tenant, v_op, v_now, v_budget);
        IF v_r ? 'rows' THEN
            v_budget := v_budget - octet_length((v_r->'rows')::text);
        END IF;
        IF COALESCE((v_op->>'required')::boolean, false)
           AND NOT COALESCE((v_r->>'applied')::boolean, false) THEN
            RAISE EXCEPTION 'QKV required % of key "%" lost (%); transaction rolled back',
                v_op->>'op', v_op->>'key', v_r->>'reason'
                USING DETAIL = jsonb_build_object('opIndex', v_i, 'kvReason', v_r->>'reason',
                                                  'version', v_r->'version',
                                                  'value', v_r->'value')::text;
        END IF;
        v_out := v_out || jsonb_build_array(v_r);
    END LOOP;
    RETURN v_out;
END
$$;

-- The retention loop's sweep: deletes up to p_max_rows expired rows (rows a writer holds are
-- left for the next run); returns how many.
CREATE OR REPLACE FUNCTION queen.kv_sweep_step_v1(p_max_rows int)
RETURNS int LANGUAGE sql AS $$
    WITH due AS (
        SELECT k.tenant_id, k.namespace, k.key FROM queen.kv k
        WHERE k.expires_at <= clock_timestamp()
        ORDER BY k.expires_at
        LIMIT GREATEST(p_max_rows, 1)
        FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM queen.kv k USING due d
        WHERE k.tenant_id = d.tenant_id AND k.namespace = d.namespace AND k.key = d.key
        RETURNING 1
    )
    SELECT count(*)::int FROM gone
$$;
