-- 0003_options: what the queue options that take effect need (docs/engine.md §2.1, §2.8, §3.1;
-- docs/wire.md §3.2). Applied once; idempotent all the same.

-- A dead letter of an encrypted queue keeps the encryption envelope as its payload copy,
-- never the plaintext; this flag says the copy is an envelope (a plaintext payload may look
-- like one), so the listing decrypts it and a replay stores it back as an encrypted frame.
ALTER TABLE queen.log_dlq ADD COLUMN IF NOT EXISTS payload_encrypted BOOL NOT NULL DEFAULT FALSE;

-- retryDelay and ttl now take effect. Ours: both default to 0 (off) instead of the reference's
-- 1000 ms and 3600 s, which were echoed but never enforced: enforcing them on every queue
-- that never asked would delay every nack by a second and silently stop delivering backlogs
-- older than an hour. Rows still holding those untouched defaults had no such behaviour, so
-- they keep having none.
ALTER TABLE queen.queues ALTER COLUMN retry_delay SET DEFAULT 0;
ALTER TABLE queen.queues ALTER COLUMN ttl SET DEFAULT 0;
UPDATE queen.queues SET retry_delay = 0 WHERE retry_delay = 1000;
UPDATE queen.queues SET ttl = 0 WHERE ttl = 3600;
