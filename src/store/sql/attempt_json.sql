SELECT jsonb_build_object(
    -- The job's state and last change are its latest attempt's.
    'job', to_jsonb(j) || jsonb_build_object(
        'status', (SELECT l.status FROM attempts l WHERE l.attempt_id = j.latest_attempt_id),
        'updated_at', (SELECT max(u.updated_at) FROM attempts u WHERE u.job_id = j.job_id)),
    'attempts', COALESCE((SELECT jsonb_agg(to_jsonb(a) - 'last_hash' ORDER BY a.attempt_no)
                          FROM attempts a WHERE a.job_id = j.job_id), '[]'::jsonb))
FROM jobs j WHERE j.job_id = $1
