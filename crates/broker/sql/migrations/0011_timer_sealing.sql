-- 0011_timer_sealing: a pending timer's payload is sealed at schedule when its queue encrypts
-- (docs/engine.md §16.1), as the reference stores it. Applied once; idempotent all the same.
-- Rows written before it hold plaintext and keep `false`.
ALTER TABLE queen.log_timers
    ADD COLUMN IF NOT EXISTS payload_encrypted boolean NOT NULL DEFAULT false;
