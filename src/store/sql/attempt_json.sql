SELECT jsonb_build_object(
    'job', to_jsonb(j),
    'attempts', COALESCE((SELECT jsonb_agg(to_jsonb(a) - 'last_hash' ORDER BY a.attempt_no)
                          FROM attempts a WHERE a.job_id = j.job_id), '[]'::jsonb))
FROM jobs j WHERE j.job_id = $1
