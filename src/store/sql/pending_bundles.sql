(SELECT a.attempt_id, a.result_json, false, a.outputs,
        (SELECT l.runner_instance FROM leases l WHERE l.attempt_id = a.attempt_id),
        (SELECT coalesce(sum(octet_length(c.text)), 0)::bigint FROM artifact_chunks c
         WHERE c.attempt_id = a.attempt_id)
 FROM attempts a
 WHERE a.finished_at IS NOT NULL
   AND a.finished_at < to_timestamp($1::double precision / 1000.0)
   AND NOT EXISTS (SELECT 1 FROM artifact_bundles b WHERE b.attempt_id = a.attempt_id)
 ORDER BY a.finished_at LIMIT $2)
UNION ALL
(SELECT l.attempt_id, NULL::text, true, '[]'::jsonb, NULL::text,
        (SELECT coalesce(sum(octet_length(c.text)), 0)::bigint FROM artifact_chunks c
         WHERE c.attempt_id = l.attempt_id)
 FROM (SELECT DISTINCT c.attempt_id FROM artifact_chunks c
       JOIN artifact_bundles b USING (attempt_id)
       WHERE c.received_at < to_timestamp($1::double precision / 1000.0)
       LIMIT $2) l)
