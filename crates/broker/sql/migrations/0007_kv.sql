-- 0007_kv: the key-value store (docs/engine.md §15, docs/wire.md §20): one table shared by
-- POST /api/v1/kv, the transaction's kv rider and the locks (a permit is a row of namespace
-- "queen-locks"). Applied once; idempotent all the same.
--
-- A row is live while expires_at is NULL (forever) or in the future; an expired row is absent
-- to every operation at once (sql/functions/kv.sql) and deleted later by the retention loop
-- (queen.kv_sweep_step_v1), through the partial index on expires_at.
--
-- version is drawn from queen.kv_version_seq (CACHE 1) by every write, after the writer holds
-- the key: versions rise in the order writes to one key happen, so a lock's token (its row's
-- version) is strictly greater for every later holder, across deletes and expiries.
-- namespace and key compare by bytes (COLLATE "C"): getPrefix pages in byte order.
CREATE SEQUENCE IF NOT EXISTS queen.kv_version_seq CACHE 1;

CREATE TABLE IF NOT EXISTS queen.kv (
    tenant_id  text NOT NULL,
    namespace  text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    value      jsonb NOT NULL,
    version    bigint NOT NULL,
    expires_at timestamptz,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, namespace, key)
) WITH (fillfactor = 70);

CREATE INDEX IF NOT EXISTS idx_kv_expires ON queen.kv (expires_at) WHERE expires_at IS NOT NULL;
