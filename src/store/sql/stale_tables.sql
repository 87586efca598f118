SELECT s.relname::text FROM pg_stat_user_tables s
JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.relname = ANY($1)
  AND s.n_live_tup > 1000 + 2 * greatest(c.reltuples, 0)
