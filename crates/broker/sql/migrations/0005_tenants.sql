-- 0005_tenants: tenant isolation (docs/engine.md §2.10, README "Tenants"). Applied once;
-- idempotent all the same.
--
-- A tenant's queue, namespace and task names are stored qualified by the tenant
-- (crates/proto/src/tenant.rs: tenant, U+0001, name; the default tenant's names are stored as
-- sent), so queen.queues.name stays unique and every lookup by name already resolves inside
-- one tenant. tenant_id is derived from the stored name, never written by a statement, so no
-- insert path can get it wrong and a database written before tenants existed is entirely
-- the default tenant (''). The routes addressed by partition id, lease id or across queues
-- compare it with the caller's tenant (ack.sql, lease.sql, dlq.sql, admin.sql).
ALTER TABLE queen.queues ADD COLUMN IF NOT EXISTS tenant_id TEXT NOT NULL
    GENERATED ALWAYS AS (CASE WHEN strpos(name, E'\x01') > 0
                              THEN split_part(name, E'\x01', 1) ELSE '' END) STORED;
CREATE INDEX IF NOT EXISTS idx_queues_tenant ON queen.queues (tenant_id, name);
