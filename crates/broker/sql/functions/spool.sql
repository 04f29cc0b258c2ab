-- spool: what the disk spool's drain asks PostgreSQL (docs/engine.md §4.6). Replayed (CREATE OR
-- REPLACE) when its checksum changes.

-- Where a spooled write whose commit was in doubt may already be stored: for each incoming
-- hash (16 bytes per message, xxh3_128(transactionId), in record order; idx k is the k-th),
-- every offset of (p_queue, p_partition) whose stored hash equals it, from the hash sidecar.
-- The broker reads the message id stored at each offset (queen.log_segment_at_v1) and takes a
-- message as stored only when it is its own id: with the queue's dedup off, an equal hash may
-- be another message of the same transactionId. No row: the partition does not exist, or
-- nothing of the write is stored (or its sidecar rows were purged already).
CREATE OR REPLACE FUNCTION queen.log_txn_offsets_v1(
    p_queue text, p_partition text, p_hashes bytea)
RETURNS TABLE(r_idx int, r_partition_id bigint, r_off bigint)
LANGUAGE sql STABLE AS $$
    SELECT inc.idx, lp.id, t.base_offset + s.idx
    FROM queen.queues q
    JOIN queen.log_partitions lp ON lp.queue_id = q.id AND lp.name = p_partition
    CROSS JOIN queen.log_unnest_hashes(p_hashes) AS inc
    JOIN queen.log_txns t
      ON t.partition_id = lp.id AND t.base_offset >= lp.txns_start
     AND position(inc.h IN t.hashes) > 0
    CROSS JOIN LATERAL queen.log_unnest_hashes(t.hashes) AS s
    WHERE q.name = p_queue AND s.h = inc.h
    ORDER BY 1, 3
$$;
