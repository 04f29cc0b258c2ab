//! The request logic between HTTP and PostgreSQL: push, pop, ack, lease, transaction, DLQ.
