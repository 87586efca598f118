UPDATE runner_instances r SET lost_lease_at = greatest(r.lost_lease_at, u.at)
FROM UNNEST($1::text[], $2::timestamptz[]) AS u(instance_id, at)
WHERE r.instance_id = u.instance_id
