-- Each target key a queued attempt waits for: its limit, how many hold it
-- (and which, the first ten), and how many due attempts are ahead of it.
SELECT k.key, k.key_limit,
       (SELECT count(*) FROM target_keys h WHERE h.key = k.key AND h.holding),
       ARRAY(SELECT h.attempt_id FROM target_keys h
             WHERE h.key = k.key AND h.holding ORDER BY h.attempt_id LIMIT 10),
       (SELECT count(*) FROM target_keys q
        WHERE q.key = k.key AND NOT q.holding AND q.available_at <= $2
          AND (q.available_at, q.attempt_id) < (k.available_at, k.attempt_id))
FROM target_keys k WHERE k.attempt_id = $1 AND NOT k.holding
ORDER BY k.key
