-- 0010_ephemeral: ephemeral queues (docs/engine.md §17, docs/wire.md §25). Applied once;
-- idempotent all the same.
--
-- Two tiers, one per promise:
-- * queen.eph_queues is LOGGED: a queue's declared options (POST /api/v1/ephemeral/configure)
--   survive everything PostgreSQL survives.
-- * every other table is UNLOGGED: no WAL is written for the contents, every broker of the
--   database sees them, a broker restart keeps them, and PostgreSQL empties them itself after a
--   crash (crash recovery resets unlogged tables) and does not have them on a promoted standby.
--   The contents are lost together, never in part.
--
-- A ring is one (tenant, queue, partition). Its epoch is drawn from the LOGGED sequence
-- queen.eph_epoch_seq when the ring row is created (first push after a crash, a reset or a
-- delete), so a new incarnation always has a greater epoch than any before it, and a message id
-- (`e:<epoch hex>:<partition>:<seq>`) minted by a lost incarnation is told apart as `stale`.
-- seq counts per ring from 1 under the queue's row lock, so seq order is commit order.
CREATE SEQUENCE IF NOT EXISTS queen.eph_epoch_seq;

CREATE TABLE IF NOT EXISTS queen.eph_queues (
    tenant_id   text NOT NULL,
    queue       text COLLATE "C" NOT NULL,
    options     jsonb NOT NULL,
    declared_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue)
);

-- One row per queue that has contents state (declared or implicit): the lock every write of the
-- queue takes first, and the queue's gauges. Its absence is "no contents", not "no queue".
CREATE UNLOGGED TABLE IF NOT EXISTS queen.eph_live (
    tenant_id      text NOT NULL,
    queue          text COLLATE "C" NOT NULL,
    length         bigint NOT NULL DEFAULT 0,
    bytes          bigint NOT NULL DEFAULT 0,
    pushed         bigint NOT NULL DEFAULT 0,
    dropped_bounds bigint NOT NULL DEFAULT 0,
    dropped_ttl    bigint NOT NULL DEFAULT 0,
    dropped_retry  bigint NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, queue)
);

CREATE UNLOGGED TABLE IF NOT EXISTS queen.eph_rings (
    tenant_id text NOT NULL,
    queue     text COLLATE "C" NOT NULL,
    partition text COLLATE "C" NOT NULL,
    epoch     bigint NOT NULL,
    next_seq  bigint NOT NULL DEFAULT 1,
    PRIMARY KEY (tenant_id, queue, partition)
);

-- payload is the client's JSON text as it arrived (checked JSON), returned byte for byte.
CREATE UNLOGGED TABLE IF NOT EXISTS queen.eph_messages (
    tenant_id  text NOT NULL,
    queue      text COLLATE "C" NOT NULL,
    partition  text COLLATE "C" NOT NULL,
    seq        bigint NOT NULL,
    payload    text NOT NULL,
    bytes      int NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, queue, partition, seq)
);
-- Oldest first across the queue's partitions: the ttl and dropOldest walks.
CREATE INDEX IF NOT EXISTS idx_eph_messages_age
    ON queen.eph_messages (tenant_id, queue, created_at, partition, seq);

-- A group's cursor on a ring: the first seq it has not been handed.
CREATE UNLOGGED TABLE IF NOT EXISTS queen.eph_cursors (
    tenant_id text NOT NULL,
    queue     text COLLATE "C" NOT NULL,
    partition text COLLATE "C" NOT NULL,
    grp       text COLLATE "C" NOT NULL,
    next_seq  bigint NOT NULL,
    PRIMARY KEY (tenant_id, queue, partition, grp)
);

-- A message handed to a group and not yet retired by it: leased until lease_until, or ready for
-- redelivery (lease_until NULL after a nack, or in the past after an expiry). attempts counts
-- its deliveries to the group.
CREATE UNLOGGED TABLE IF NOT EXISTS queen.eph_leases (
    tenant_id   text NOT NULL,
    queue       text COLLATE "C" NOT NULL,
    partition   text COLLATE "C" NOT NULL,
    grp         text COLLATE "C" NOT NULL,
    seq         bigint NOT NULL,
    attempts    int NOT NULL,
    lease_until timestamptz,
    PRIMARY KEY (tenant_id, queue, partition, grp, seq)
);
