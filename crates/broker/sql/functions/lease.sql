-- lease: renewal of a pop's leases (docs/wire.md §9; docs/engine.md §6.7). Like the ack path it
-- locks only queen.log_consumers rows, in ascending (partition_id, consumer_group) order.
-- Replayed (CREATE OR REPLACE) when its checksum changes.

-- Renews every live lease of p_worker (a multi-partition pop shares one worker id) to at
-- least now + p_seconds (minimum 1). GREATEST: renewal never shortens a lease; the live
-- filter: it never revives an expired or released one. Rows are locked in the global
-- consumer order first, so a renewal cannot deadlock against a multi-row ack flush.
-- Result {"renewed":n,"expiresAt":<earliest renewed expiry, ISO µs Z>|null}.
-- p_tenant: the caller's tenant; leases on partitions of other tenants are neither renewed
-- nor counted, so a foreign lease id reads like an expired or unknown one (renewed 0). The
-- check is two primary-key probes per leased row (a lease id names a handful of rows).
DROP FUNCTION IF EXISTS queen.log_renew_lease_v1(text, int);
CREATE OR REPLACE FUNCTION queen.log_renew_lease_v1(p_worker text, p_seconds int,
                                                    p_tenant text DEFAULT '')
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_until timestamptz := v_now + make_interval(secs => GREATEST(COALESCE(p_seconds, 60), 1));
    v_renewed int;
    v_min timestamptz;
BEGIN
    IF COALESCE(p_worker, '') = '' THEN
        RETURN jsonb_build_object('renewed', 0, 'expiresAt', NULL);
    END IF;
    PERFORM 1 FROM queen.log_consumers
    WHERE worker_id = p_worker AND lease_expires_at > v_now
      AND EXISTS (SELECT 1 FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
                  WHERE lp.id = partition_id AND q.tenant_id = COALESCE(p_tenant, ''))
    ORDER BY partition_id, consumer_group
    FOR UPDATE;

    WITH renewed AS (
        UPDATE queen.log_consumers
        SET lease_expires_at = GREATEST(lease_expires_at, v_until)
        WHERE worker_id = p_worker AND lease_expires_at > v_now
          AND EXISTS (SELECT 1 FROM queen.log_partitions lp JOIN queen.queues q ON q.id = lp.queue_id
                      WHERE lp.id = partition_id AND q.tenant_id = COALESCE(p_tenant, ''))
        RETURNING lease_expires_at
    )
    SELECT count(*), min(lease_expires_at) INTO v_renewed, v_min FROM renewed;
    RETURN jsonb_build_object('renewed', v_renewed, 'expiresAt', queen.log_iso_micros(v_min));
END
$$;
