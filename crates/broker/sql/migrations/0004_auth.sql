-- auth (docs/wire.md §1, §11): a dead letter keeps the producerSub of the message it copies,
-- so the DLQ listing can say who produced it after the segment is retained away, and a
-- replay pushes the message back under the same identity. NULL: pushed with auth off.
ALTER TABLE queen.log_dlq ADD COLUMN IF NOT EXISTS producer_sub TEXT;
