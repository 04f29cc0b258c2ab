-- server_identity: which PostgreSQL server a new pooled connection reached (docs/engine.md
-- §12.5), asked once per connection, never per request. The system identifier tells clusters
-- apart (a standby shares its primary's, so the address and port tell nodes apart), and
-- pg_is_in_recovery() says whether the server is a standby. Over a Unix socket the address is
-- NULL (the socket directories would need pg_read_all_settings): there the system identifier
-- and the port tell servers apart. Only what any role may read.
SELECT (SELECT system_identifier FROM pg_control_system())::text AS system_identifier,
       host(inet_server_addr()) AS address,
       current_setting('port') AS port,
       pg_is_in_recovery() AS in_recovery
