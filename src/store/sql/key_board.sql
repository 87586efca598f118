-- For each key: how many attempts hold it, and the first $3 attempts due
-- by $2 that wait for it, oldest first, with the limit each recorded.
-- Each is a short range of a partial index, whatever the backlog.
SELECT k,
       (SELECT count(*) FROM target_keys h WHERE h.key = k AND h.holding),
       ARRAY(SELECT q.attempt_id FROM target_keys q
             WHERE q.key = k AND NOT q.holding AND q.available_at <= $2
             ORDER BY q.available_at, q.attempt_id LIMIT $3),
       ARRAY(SELECT q.key_limit FROM target_keys q
             WHERE q.key = k AND NOT q.holding AND q.available_at <= $2
             ORDER BY q.available_at, q.attempt_id LIMIT $3)
FROM unnest($1::text[]) k
