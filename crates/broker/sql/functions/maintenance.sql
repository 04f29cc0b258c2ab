-- maintenance: the cluster-wide maintenance flags of queen.system_state (docs/engine.md §2.9):
-- 'maintenance_mode' (pushes go to the brokers' disk spools) and 'pop_maintenance_mode' (every
-- pop answers 204 at once). An absent row is off. Every broker re-reads them at most every
-- 500 ms, so a toggle through one broker reaches all of them within a second.
-- Replayed (CREATE OR REPLACE) when its checksum changes.

-- The pop-only reader this file replaces.
DROP FUNCTION IF EXISTS queen.log_pop_maintenance_v1();

-- Both flags in one read.
CREATE OR REPLACE FUNCTION queen.maintenance_flags_v1(OUT push bool, OUT pop bool)
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(bool_or(s.value = 'true'::jsonb) FILTER (WHERE s.key = 'maintenance_mode'), false),
           COALESCE(bool_or(s.value = 'true'::jsonb) FILTER (WHERE s.key = 'pop_maintenance_mode'), false)
    FROM queen.system_state s
    WHERE s.key IN ('maintenance_mode', 'pop_maintenance_mode')
$$;

-- Sets one flag (an upsert; the key is checked so a typo cannot create a flag nobody reads)
-- and answers both flags as they now stand.
CREATE OR REPLACE FUNCTION queen.maintenance_set_v1(p_key text, p_on bool, OUT push bool, OUT pop bool)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_key NOT IN ('maintenance_mode', 'pop_maintenance_mode') THEN
        RAISE EXCEPTION 'unknown maintenance flag %', p_key USING ERRCODE = '22023';
    END IF;
    INSERT INTO queen.system_state (key, value, updated_at)
    VALUES (p_key, to_jsonb(p_on), now())
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
    SELECT f.push, f.pop INTO push, pop FROM queen.maintenance_flags_v1() f;
END
$$;
