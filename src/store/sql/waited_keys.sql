-- The next $3 keys after $1 (in key order) that an attempt due by $2 waits
-- for: a skip scan, one index probe a key, however deep each queue is.
WITH RECURSIVE next(key, n) AS (
    (SELECT key, 1 FROM target_keys
     WHERE NOT holding AND key > $1 AND available_at <= $2 ORDER BY key LIMIT 1)
  UNION ALL
    SELECT (SELECT t.key FROM target_keys t
            WHERE NOT t.holding AND t.key > next.key AND t.available_at <= $2
            ORDER BY t.key LIMIT 1),
           n + 1
    FROM next WHERE next.key IS NOT NULL AND n < $3
)
SELECT key FROM next WHERE key IS NOT NULL
