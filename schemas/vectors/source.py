"""The decoded values of the shared test vectors (docs/EVENTS.md, "Test
vectors"): the source `generate.py` encodes into `<stem>.json`.

Every id is derived the way execplane derives it (uuid v5 names: attempts,
events, leases, the outbox's result and work records, artifacts, log
chunks), so the vectors are records execplane could have written. The
attempt events are whole histories of seven attempts of six jobs; their
results, artifacts, commands, work records, runner reports and log chunks
belong to the same jobs.

Each record is given with the fields that its kind sets; `generate.py`
fills in the rest with the schema's defaults, in schema order.
"""

import hashlib
import json
import uuid

# Namespaces of the uuid v5 names (src/attempt/ids.rs, src/store/outbox.rs,
# src/artifacts/worker.rs).
IDS = uuid.UUID("6f1c2d0e-8a4b-4f3e-9d6a-3b7e5c21a904")
OUTBOX = uuid.UUID("2b8e51c4-77d9-4a0e-8f31-c6d20e94b517")
ARTIFACTS = uuid.UUID("6a1f0c2e-93d4-4b7a-a51e-7f20c3b8d914")


def v5(namespace, name):
    """RFC 4122 uuid v5 of a byte string (uuid.uuid5 takes text only before 3.12)."""
    return uuid.UUID(bytes=hashlib.sha1(namespace.bytes + name).digest()[:16], version=5)


def attempt_id_for(command_id, attempt_no):
    return v5(IDS, uuid.UUID(command_id).bytes + b"/attempt/" + attempt_no.to_bytes(4, "big"))


def event_id_for(attempt_id, seq):
    return v5(IDS, uuid.UUID(attempt_id).bytes + b"/event/" + seq.to_bytes(8, "big"))


def lease_id_for(attempt_id, epoch):
    return v5(IDS, uuid.UUID(attempt_id).bytes + b"/lease/" + epoch.to_bytes(8, "big"))


def derived_id(event_id, purpose):
    """The id of an outbox record an event causes (`result`, `work`)."""
    return v5(OUTBOX, uuid.UUID(event_id).bytes + purpose.encode())


def artifact_id_for(attempt_id, name):
    return v5(ARTIFACTS, f"{attempt_id}/{name}".encode())


def chunk_id_for(attempt_id, epoch, stream, seq):
    # `{stream:?}`: the Rust variant name.
    return v5(uuid.UUID(attempt_id), f"{epoch}:{stream.capitalize()}:{seq}".encode())


def canonical(value):
    """Canonical JSON as execplane writes `inputs_json`: keys sorted, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def s(text):
    return str(text)


T0 = 1767225600000  # 2026-01-01T00:00:00.000Z
POLICY = "sha256:" + sha256(b"tenants:\n  team-a: {}\n")
BUCKET = "execplane-artifacts"


def labels(mapping):
    return [{"key": key, "value": value} for key, value in sorted(mapping.items())]


def spec(command_id, job_id, operation, inputs, **fields):
    value = {
        "command_id": command_id,
        "job_id": job_id,
        "tenant": "team-a",
        "requested_by": fields.get("requested_by", "control-plane"),
        "operation": operation,
        "inputs_json": canonical(inputs),
        "runner_requirements": {
            "pool": labels(fields.get("pool", {})),
            "capabilities": fields.get("capabilities", []),
        },
        "targets": fields.get("targets", []),
        "secret_refs": fields.get("secret_refs", []),
        "timeouts": fields["timeouts"],
        "retry": fields["retry"],
        "policy": {
            "destructive": False,
            "elevated": False,
            "approved_plan_digest": None,
            "explicit_command": False,
        },
        "callback": fields.get("callback"),
        "trace": fields.get("trace"),
    }
    return value


# Job A: a TCP probe of a node; attempt 1 loses its lease and is retried,
# attempt 2 succeeds and its HTTP callback is delivered.
CMD_A = "6f0c5d1e-2b7a-4c39-9e58-1d2f3a4b5c6d"
JOB_A = "plan-42/db-7"
SPEC_A = spec(
    CMD_A,
    JOB_A,
    "verify.tcp.connect",
    {"target": "db-7", "port": 5432, "timeout": "2s"},
    pool={"zone": "dmz"},
    capabilities=["tcp"],
    targets=[
        {"kind": "node", "id": "db-7", "address": "10.0.0.7", "attributes": labels({"rack": "r1"})}
    ],
    timeouts={
        "schedule_to_start_ms": 30000,
        "start_to_close_ms": 60000,
        "heartbeat_ms": 10000,
        "schedule_to_close_ms": 120000,
    },
    retry={"max_attempts": 2, "initial_backoff_ms": 1000, "max_backoff_ms": 5000},
    callback={"url": "https://control-plane.example/callbacks/execplane", "topic": "cp.results.v1"},
    trace={
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "cp=plan-42",
    },
)
A1 = s(attempt_id_for(CMD_A, 1))
A2 = s(attempt_id_for(CMD_A, 2))
RUNNER_A1 = "verification-7f3c9a"
RUNNER_A2 = "verification-2b81d4"

# Job B: an HTTP probe with a secret header, cancelled while running.
CMD_B = "0b6c7f6e-6a59-4c47-9c8e-2f3f9c1d2e4a"
JOB_B = "plan-42/api-health"
SPEC_B = spec(
    CMD_B,
    JOB_B,
    "verify.http.endpoint",
    {
        "url": "https://api.internal.example/health",
        "method": "GET",
        "headers": {"authorization": {"$secret": "api"}},
        "expect": {"status": 200, "max_latency_ms": 2000},
    },
    secret_refs=[
        {"name": "api", "mount": "secret", "path": "apps/api", "key": "token", "generate": None},
        {
            "name": "session",
            "mount": "secret",
            "path": "apps/api",
            "key": "session-key",
            "generate": {"length": 40},
        },
    ],
    timeouts={
        "schedule_to_start_ms": 30000,
        "start_to_close_ms": 600000,
        "heartbeat_ms": 30000,
        "schedule_to_close_ms": 900000,
    },
    retry={"max_attempts": 3, "initial_backoff_ms": 1000, "max_backoff_ms": 60000},
)
B1 = s(attempt_id_for(CMD_B, 1))
RUNNER_B1 = "verification-2b81d4"

# Job C: an ExecuteJob whose inputs break the contract.
CMD_C = "3d8e2a41-5f6b-4c7d-8e9f-0a1b2c3d4e5f"
JOB_C = "plan-42/db-8"
C1 = s(attempt_id_for(CMD_C, 1))

# Job D: an OpenTofu plan (holding its workspace key), then approved.
CMD_D = "6f0e0b1e-6a2c-4f0b-9a51-0c4d1a000001"
JOB_D = "infra/network-plan"
MODULE_DIGEST = "sha256:" + sha256(b"demo-network-1.0.0.tar.gz")
SPEC_D = spec(
    CMD_D,
    JOB_D,
    "opentofu.plan",
    {
        "package": {"name": "demo-network", "version": "1.0.0", "digest": MODULE_DIGEST},
        "path": "network",
        "workspace": "demo",
        "variables": {"greeting": "hello"},
    },
    requested_by="bob",
    timeouts={
        "schedule_to_start_ms": 60000,
        "start_to_close_ms": 300000,
        "heartbeat_ms": 30000,
        "schedule_to_close_ms": 600000,
    },
    retry={"max_attempts": 1, "initial_backoff_ms": 1000, "max_backoff_ms": 60000},
    callback={"url": None, "topic": "cp.results.v1"},
)
D1 = s(attempt_id_for(CMD_D, 1))
RUNNER_D1 = "opentofu-5d0e11"
PLAN_BYTES = b"tfplan: demo-network/network@demo, 1 to add"
PLAN_SHA = sha256(PLAN_BYTES)
PLAN_DIGEST = "sha256:" + PLAN_SHA
APPROVE_D = "9a4c1e77-0d2b-4e5f-8a6b-7c8d9e0f1a2b"

# Job E: leased, but its runner never started it; its callback is given up.
CMD_E = "5e7f9a1b-3c5d-4e6f-8a0b-1c2d3e4f5a6b"
JOB_E = "plan-42/cache-3"
SPEC_E = spec(
    CMD_E,
    JOB_E,
    "verify.tcp.connect",
    {"host": "10.0.0.9", "port": 6379},
    targets=[{"kind": "service", "id": "cache-3", "address": None, "attributes": []}],
    timeouts={
        "schedule_to_start_ms": 30000,
        "start_to_close_ms": 60000,
        "heartbeat_ms": 10000,
        "schedule_to_close_ms": 120000,
    },
    retry={"max_attempts": 1, "initial_backoff_ms": 1000, "max_backoff_ms": 5000},
    callback={"url": "https://control-plane.example/callbacks/execplane", "topic": None},
)
E1 = s(attempt_id_for(CMD_E, 1))
RUNNER_E1 = "verification-9c04e2"

# Job G: the approved plan of job D applied; running.
CMD_G = "8c0e2b4d-6f8a-4c1e-9b3d-5f7a9c1e3b5d"
JOB_G = "infra/network-apply"
SPEC_G = spec(
    CMD_G,
    JOB_G,
    "opentofu.apply",
    {
        "package": {"name": "demo-network", "version": "1.0.0", "digest": MODULE_DIGEST},
        "path": "network",
        "workspace": "demo",
        "variables": {"greeting": "hello"},
        "plan_artifact": PLAN_DIGEST,
    },
    requested_by="bob",
    timeouts={
        "schedule_to_start_ms": 60000,
        "start_to_close_ms": 300000,
        "heartbeat_ms": 30000,
        "schedule_to_close_ms": 600000,
    },
    retry={"max_attempts": 1, "initial_backoff_ms": 1000, "max_backoff_ms": 60000},
    trace={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": None},
)
SPEC_G["policy"]["approved_plan_digest"] = PLAN_DIGEST
G1 = s(attempt_id_for(CMD_G, 1))
RUNNER_G1 = "opentofu-5d0e11"


def output(attempt_id, name, media_type, klass, data):
    digest = sha256(data)
    return {
        "name": name,
        "class": klass,
        "media_type": media_type,
        "size": len(data),
        "sha256": digest,
        "key": f"outputs/{attempt_id}/{digest}/{name}",
    }


SAMPLES_A2 = canonical(
    {
        "operation": "verify.tcp.connect",
        "passed": True,
        "consecutive_passes": 1,
        "recommended_failure_category": None,
        "evidence_artifact": None,
        "samples": [
            {
                "n": 1,
                "at": "2026-01-01T00:00:46.120Z",
                "latency_ms": 3,
                "reached": True,
                "observed": {"peer": "10.0.0.7:5432"},
                "assertions": [],
                "error": None,
            }
        ],
    }
)
OUTPUT_A2 = output(A2, "samples.json", "application/json", "evidence", SAMPLES_A2.encode())
RESULT_D1 = canonical(
    {
        "module": "demo-network@1.0.0",
        "workspace": "demo",
        "backend": "local",
        "cli_version": "1.12.6",
        "plan": {
            "artifact": PLAN_DIGEST,
            "add": 1,
            "change": 0,
            "destroy": 0,
            "changes": [{"address": "null_resource.greeting", "actions": ["create"]}],
            "has_changes": True,
        },
        "outputs": {},
        "state": None,
        "resources": [],
    }
)
OUTPUT_D1 = output(D1, "plan.tfplan", "application/octet-stream", "evidence", PLAN_BYTES)


def history(attempt_id, job_id, events):
    """Events of one attempt: (name, occurred_at, type, fields), seq from 1."""
    out = []
    for seq, (name, at, kind, fields) in enumerate(events, start=1):
        record = {
            "event_id": s(event_id_for(attempt_id, seq)),
            "attempt_id": attempt_id,
            "job_id": job_id,
            "seq": seq,
            "occurred_at": at,
            "type": kind,
        }
        record.update(fields)
        out.append((name, record))
    return out


def created(command_id, attempt_no, spec_value, available_at, previous=None, target_keys=()):
    return {
        "command_id": command_id,
        "attempt_no": attempt_no,
        "spec": spec_value,
        "available_at": available_at,
        "previous_attempt_id": previous,
        "policy_digest": POLICY,
        "target_keys": list(target_keys),
    }


def granted(attempt_id, epoch, runner, expires_at):
    return {
        "lease_id": s(lease_id_for(attempt_id, epoch)),
        "epoch": epoch,
        "runner_instance": runner,
        "expires_at": expires_at,
    }


ATTEMPT_EVENTS = (
    history(
        A1,
        JOB_A,
        [
            ("A1 created", T0, "created", created(CMD_A, 1, SPEC_A, T0)),
            ("A1 lease_granted", T0 + 40, "lease_granted", granted(A1, 1, RUNNER_A1, T0 + 10040)),
            ("A1 started", T0 + 310, "started", {"epoch": 1, "runner_instance": RUNNER_A1}),
            (
                "A1 progress (with percent)",
                T0 + 520,
                "progress",
                {"epoch": 1, "message": "connecting to 10.0.0.7:5432", "percent": 40},
            ),
            ("A1 lease_extended", T0 + 6100, "lease_extended", {"epoch": 1, "expires_at": T0 + 16100}),
            (
                "A1 finished failed (lease_lost, heartbeat timer, lease revoked, retried)",
                T0 + 16100,
                "finished",
                {
                    "outcome": "failed",
                    "category": "lease_lost",
                    "message": f"lease epoch 1 on {RUNNER_A1} expired without a heartbeat: heartbeat (10s) passed at {T0 + 16100}",
                    "timer": "heartbeat",
                    "lease_revoked": True,
                    "retry_attempt_id": A2,
                },
            ),
            (
                "A1 report_fenced (after the terminal event)",
                T0 + 16950,
                "report_fenced",
                {
                    "report_kind": "finished",
                    "epoch": 1,
                    "current_epoch": 1,
                    "runner_instance": RUNNER_A1,
                    "reason": "the attempt is already failed",
                },
            ),
        ],
    )
    + history(
        A2,
        JOB_A,
        [
            (
                "A2 created (a retry: previous_attempt_id, later available_at)",
                T0 + 16100,
                "created",
                created(CMD_A, 2, SPEC_A, T0 + 17100, previous=A1),
            ),
            ("A2 lease_granted", T0 + 17130, "lease_granted", granted(A2, 2, RUNNER_A2, T0 + 27130)),
            ("A2 started", T0 + 17400, "started", {"epoch": 2, "runner_instance": RUNNER_A2}),
            (
                "A2 finished succeeded (result and outputs)",
                T0 + 17800,
                "finished",
                {
                    "outcome": "succeeded",
                    "message": "passed: 10.0.0.7:5432 answered in 3 ms",
                    "result_json": SAMPLES_A2,
                    "outputs": [OUTPUT_A2],
                },
            ),
            (
                "A2 callback_recorded (delivered)",
                T0 + 18050,
                "callback_recorded",
                {
                    "url": "https://control-plane.example/callbacks/execplane",
                    "delivered": True,
                    "delivery_attempts": 1,
                    "http_status": 200,
                    "error": None,
                    "idempotency_key": f"{A2}:4",
                },
            ),
        ],
    )
    + history(
        B1,
        JOB_B,
        [
            ("B1 created (no callback, no trace)", T0 + 60000, "created", created(CMD_B, 1, SPEC_B, T0 + 60000)),
            ("B1 lease_granted", T0 + 60020, "lease_granted", granted(B1, 1, RUNNER_B1, T0 + 90020)),
            ("B1 started", T0 + 60300, "started", {"epoch": 1, "runner_instance": RUNNER_B1}),
            (
                "B1 cancel_requested",
                T0 + 65000,
                "cancel_requested",
                {"reason": "superseded by plan-43", "requested_by": "control-plane", "grace_deadline": T0 + 75000},
            ),
            (
                "B1 finished cancelled",
                T0 + 65400,
                "finished",
                {"outcome": "cancelled", "category": "cancelled", "message": "cancelled at the runner's request"},
            ),
        ],
    )
    + history(
        C1,
        JOB_C,
        [
            (
                "C1 rejected (the first and terminal event)",
                T0 + 70000,
                "rejected",
                {
                    "command_id": CMD_C,
                    "attempt_no": 1,
                    "tenant": "team-a",
                    "operation": "verify.tcp.connect",
                    "category": "contract",
                    "problems": [
                        {"path": "inputs.port", "message": 'invalid type: string "postgres", expected u16'},
                        {"path": "timeouts.heartbeat", "message": "must be at most start_to_close"},
                    ],
                    "policy_digest": POLICY,
                },
            ),
        ],
    )
    + history(
        D1,
        JOB_D,
        [
            (
                "D1 created (target keys, callback topic only)",
                T0 + 80000,
                "created",
                created(
                    CMD_D,
                    1,
                    SPEC_D,
                    T0 + 80000,
                    target_keys=[{"key": "workspace:team-a/demo-network/network/demo", "limit": 1}],
                ),
            ),
            ("D1 lease_granted", T0 + 80500, "lease_granted", granted(D1, 1, RUNNER_D1, T0 + 110500)),
            ("D1 started", T0 + 80800, "started", {"epoch": 1, "runner_instance": RUNNER_D1}),
            (
                "D1 progress (no percent)",
                T0 + 82000,
                "progress",
                {"epoch": 1, "message": "tofu plan", "percent": None},
            ),
            (
                "D1 finished succeeded (a saved plan)",
                T0 + 95000,
                "finished",
                {
                    "outcome": "succeeded",
                    "message": "plan: 1 to add, 0 to change, 0 to destroy",
                    "result_json": RESULT_D1,
                    "outputs": [OUTPUT_D1],
                },
            ),
            (
                "D1 plan_approved",
                T0 + 400000,
                "plan_approved",
                {"command_id": APPROVE_D, "plan_digest": PLAN_DIGEST, "requested_by": "alice"},
            ),
        ],
    )
    + history(
        E1,
        JOB_E,
        [
            ("E1 created", T0 + 90000, "created", created(CMD_E, 1, SPEC_E, T0 + 90000)),
            ("E1 lease_granted", T0 + 90010, "lease_granted", granted(E1, 1, RUNNER_E1, T0 + 100010)),
            (
                "E1 finished timed_out (schedule_to_start, lease revoked)",
                T0 + 120000,
                "finished",
                {
                    "outcome": "timed_out",
                    "category": "timeout",
                    "message": f"no runner started the attempt: schedule_to_start (30s) passed at {T0 + 120000}",
                    "timer": "schedule_to_start",
                    "lease_revoked": True,
                },
            ),
            (
                "E1 callback_recorded (given up)",
                T0 + 420000,
                "callback_recorded",
                {
                    "url": "https://control-plane.example/callbacks/execplane",
                    "delivered": False,
                    "delivery_attempts": 8,
                    "http_status": None,
                    "error": "connecting to control-plane.example:443: connection refused",
                    "idempotency_key": f"{E1}:3",
                },
            ),
        ],
    )
    + history(
        G1,
        JOB_G,
        [
            (
                "G1 created (an approved plan, no callback)",
                T0 + 410000,
                "created",
                created(
                    CMD_G,
                    1,
                    SPEC_G,
                    T0 + 410000,
                    target_keys=[{"key": "workspace:team-a/demo-network/network/demo", "limit": 1}],
                ),
            ),
            ("G1 lease_granted", T0 + 410200, "lease_granted", granted(G1, 1, RUNNER_G1, T0 + 440200)),
            ("G1 started (still running)", T0 + 410500, "started", {"epoch": 1, "runner_instance": RUNNER_G1}),
        ],
    )
)


def event(attempt_id, seq):
    for _, record in ATTEMPT_EVENTS:
        if record["attempt_id"] == attempt_id and record["seq"] == seq:
            return record
    raise KeyError((attempt_id, seq))


def result(attempt_id, seq, status, **fields):
    terminal = event(attempt_id, seq)
    first = event(attempt_id, 1)
    spec_value = first.get("spec") or {}
    return {
        "attempt_id": attempt_id,
        "job_id": terminal["job_id"],
        "command_id": first["command_id"],
        "attempt_no": first["attempt_no"],
        "tenant": spec_value.get("tenant", first.get("tenant")),
        "operation": spec_value.get("operation", first.get("operation")),
        "status": status,
        "category": terminal.get("category"),
        "message": fields.get("message", terminal.get("message", "")),
        "result_json": terminal.get("result_json"),
        "finished_at": terminal["occurred_at"],
        "terminal_seq": seq,
        "idempotency_key": f"{attempt_id}:{seq}",
        "retry_attempt_id": terminal.get("retry_attempt_id"),
    }


# An ssh command whose runner lost its lease after starting it.
CMD_F = "7b9d1f3a-5c7e-4a9b-8d1f-3a5c7e9b1d3f"
F1 = s(attempt_id_for(CMD_F, 1))

RESULTS = [
    ("A1 failed (lease_lost, retried as A2)", result(A1, 6, "failed")),
    ("A2 succeeded (result_json)", result(A2, 4, "succeeded")),
    ("B1 cancelled", result(B1, 5, "cancelled")),
    (
        "C1 rejected (message: the problems)",
        result(
            C1,
            1,
            "rejected",
            message='inputs.port: invalid type: string "postgres", expected u16; timeouts.heartbeat: must be at most start_to_close',
        ),
    ),
    ("D1 succeeded (a saved plan)", result(D1, 5, "succeeded")),
    ("E1 timed_out", result(E1, 3, "timed_out")),
    (
        "F1 outcome_unknown (not event-backed here)",
        {
            "attempt_id": F1,
            "job_id": "plan-42/restart-app",
            "command_id": CMD_F,
            "attempt_no": 1,
            "tenant": "team-a",
            "operation": "ssh.command",
            "status": "outcome_unknown",
            "category": "lease_lost",
            "message": f"lease epoch 1 on ssh-41aa07 expired without a heartbeat: heartbeat (30s) passed at {T0 + 200000}",
            "result_json": None,
            "finished_at": T0 + 200000,
            "terminal_seq": 5,
            "idempotency_key": f"{F1}:5",
            "retry_attempt_id": None,
        },
    ),
]


def artifact(attempt_id, name, media_type, klass, producer, data, created_at, output_key=None):
    digest = sha256(data)
    key = output_key or f"{attempt_id}/{digest[:16]}/{name}"
    return {
        "artifact_id": s(artifact_id_for(attempt_id, name)),
        "attempt_id": attempt_id,
        "name": name,
        "media_type": media_type,
        "size": len(data),
        "sha256": digest,
        "producer": producer,
        "retention_class": klass,
        "uri": f"s3://{BUCKET}/{key}",
        "created_at": created_at,
    }


LOG_A2 = b"connecting to 10.0.0.7:5432\nconnected in 3 ms\n"
HELM_ATTEMPT = s(attempt_id_for("2c4e6a8b-0d1f-4a3c-9e5b-7d9f1b3d5f7a", 1))
RENDERED = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n"
ARTIFACTS_LIST = [
    ("A2 runner.log (logs)", artifact(A2, "runner.log", "text/plain; charset=utf-8", "logs", RUNNER_A2, LOG_A2, T0 + 21000)),
    (
        "A2 result.json (evidence, written by the worker)",
        artifact(A2, "result.json", "application/json", "evidence", "runner-result", SAMPLES_A2.encode(), T0 + 21000),
    ),
    (
        "A2 samples.json (a runner output, stored by the runner)",
        artifact(
            A2,
            "samples.json",
            "application/json",
            "evidence",
            RUNNER_A2,
            SAMPLES_A2.encode(),
            T0 + 21000,
            output_key=OUTPUT_A2["key"],
        ),
    ),
    (
        "D1 plan.tfplan (a runner output)",
        artifact(
            D1,
            "plan.tfplan",
            "application/octet-stream",
            "evidence",
            RUNNER_D1,
            PLAN_BYTES,
            T0 + 98000,
            output_key=OUTPUT_D1["key"],
        ),
    ),
    (
        "helm rendered.yaml (rendered)",
        artifact(HELM_ATTEMPT, "rendered.yaml", "application/yaml", "rendered", "helm-0c11f2", RENDERED, T0 + 130000),
    ),
]

COMMANDS = [
    (
        "execute_job (job A: callback, trace, targets)",
        {"command_id": CMD_A, "kind": "execute_job", "issued_at": T0 - 120, "execute": SPEC_A},
    ),
    (
        "execute_job (job B: secret references)",
        {"command_id": CMD_B, "kind": "execute_job", "issued_at": T0 + 59900, "execute": SPEC_B},
    ),
    (
        "execute_job (job D: opentofu.plan)",
        {"command_id": CMD_D, "kind": "execute_job", "issued_at": T0 + 79950, "execute": SPEC_D},
    ),
    (
        "execute_job (job E: a target without address, a callback URL only)",
        {"command_id": CMD_E, "kind": "execute_job", "issued_at": T0 + 89990, "execute": SPEC_E},
    ),
    (
        "execute_job (job G: an approved plan, a trace without tracestate)",
        {"command_id": CMD_G, "kind": "execute_job", "issued_at": T0 + 409990, "execute": SPEC_G},
    ),
    (
        "cancel_attempt (with a grace)",
        {
            "command_id": "c1d2e3f4-a5b6-4c7d-8e9f-a0b1c2d3e4f5",
            "kind": "cancel_attempt",
            "issued_at": T0 + 64990,
            "cancel": {
                "attempt_id": B1,
                "reason": "superseded by plan-43",
                "requested_by": "control-plane",
                "grace_ms": 10000,
            },
        },
    ),
    (
        "cancel_attempt (the dispatcher's default grace)",
        {
            "command_id": "d2e3f4a5-b6c7-4d8e-9fa0-b1c2d3e4f5a6",
            "kind": "cancel_attempt",
            "issued_at": T0 + 65010,
            "cancel": {"attempt_id": B1, "reason": "operator", "requested_by": "alice", "grace_ms": None},
        },
    ),
    (
        "approve_plan",
        {
            "command_id": APPROVE_D,
            "kind": "approve_plan",
            "issued_at": T0 + 399990,
            "approve": {
                "plan_attempt_id": D1,
                "plan_digest": PLAN_DIGEST,
                "tenant": "team-a",
                "approved_by": "alice",
            },
        },
    ),
]


def work(kind, attempt_id, seq, lease_epoch, runner, expires_at=None, spec_value=None, reason=None):
    terminal = event(attempt_id, seq)
    first = event(attempt_id, 1)
    return {
        "record_id": s(derived_id(terminal["event_id"], "work")),
        "runner_instance": runner,
        "type": kind,
        "attempt_id": attempt_id,
        "job_id": terminal["job_id"],
        "attempt_no": first["attempt_no"],
        "lease_id": s(lease_id_for(attempt_id, lease_epoch)),
        "lease_epoch": lease_epoch,
        "expires_at": expires_at,
        "spec": spec_value,
        "reason": reason,
    }


WORK_ITEMS = [
    ("work_item (A1's lease)", work("work_item", A1, 2, 1, RUNNER_A1, T0 + 10040, SPEC_A)),
    ("work_item (B1's lease: secret references, no callback)", work("work_item", B1, 2, 1, RUNNER_B1, T0 + 90020, SPEC_B)),
    ("work_item (G1's lease: an approved plan)", work("work_item", G1, 2, 1, RUNNER_G1, T0 + 440200, SPEC_G)),
    ("work_item (D1's lease: a callback topic only)", work("work_item", D1, 2, 1, RUNNER_D1, T0 + 110500, SPEC_D)),
    (
        "work_item (E1's lease: a target without address, a callback URL only)",
        work("work_item", E1, 2, 1, RUNNER_E1, T0 + 100010, SPEC_E),
    ),
    ("lease_extended (A1)", work("lease_extended", A1, 5, 1, RUNNER_A1, T0 + 16100)),
    (
        "lease_revoked (A1, the heartbeat timer)",
        work(
            "lease_revoked",
            A1,
            6,
            1,
            RUNNER_A1,
            T0 + 16100,
            reason=event(A1, 6)["message"],
        ),
    ),
    ("cancel (B1)", work("cancel", B1, 4, 1, RUNNER_B1, T0 + 90020, reason="superseded by plan-43")),
]

RUNNER_EVENTS = [
    (
        "started",
        {
            "event_id": "1f0a2b3c-4d5e-4f60-8172-8394a5b6c7d8",
            "attempt_id": A2,
            "lease_epoch": 2,
            "runner_instance": RUNNER_A2,
            "sent_at": T0 + 17390,
            "type": "started",
        },
    ),
    (
        "heartbeat (no progress)",
        {
            "event_id": "2a1b3c4d-5e6f-4a7b-9c8d-0e1f2a3b4c5d",
            "attempt_id": A2,
            "lease_epoch": 2,
            "runner_instance": RUNNER_A2,
            "sent_at": T0 + 17500,
            "type": "heartbeat",
        },
    ),
    (
        "heartbeat (with progress)",
        {
            "event_id": "3b2c4d5e-6f7a-4b8c-8d9e-1f2a3b4c5d6e",
            "attempt_id": D1,
            "lease_epoch": 1,
            "runner_instance": RUNNER_D1,
            "sent_at": T0 + 86000,
            "type": "heartbeat",
            "message": "tofu plan",
            "percent": 50,
        },
    ),
    (
        "progress",
        {
            "event_id": "4c3d5e6f-7a8b-4c9d-9eaf-2a3b4c5d6e7f",
            "attempt_id": A1,
            "lease_epoch": 1,
            "runner_instance": RUNNER_A1,
            "sent_at": T0 + 515,
            "type": "progress",
            "message": "connecting to 10.0.0.7:5432",
            "percent": 40,
        },
    ),
    (
        "finished succeeded (result and outputs)",
        {
            "event_id": "5d4e6f7a-8b9c-4dae-8fb0-3b4c5d6e7f80",
            "attempt_id": A2,
            "lease_epoch": 2,
            "runner_instance": RUNNER_A2,
            "sent_at": T0 + 17790,
            "type": "finished",
            "message": "passed: 10.0.0.7:5432 answered in 3 ms",
            "outcome": "succeeded",
            "result_json": SAMPLES_A2,
            "outputs": [OUTPUT_A2],
        },
    ),
    (
        "finished failed (a category)",
        {
            "event_id": "6e5f7a8b-9cad-4ebf-90c1-4c5d6e7f8091",
            "attempt_id": A1,
            "lease_epoch": 1,
            "runner_instance": RUNNER_A1,
            "sent_at": T0 + 16940,
            "type": "finished",
            "message": "lease lost: fenced myself before the deadline",
            "outcome": "failed",
            "category": "lease_lost",
        },
    ),
    (
        "finished cancelled",
        {
            "event_id": "7f6a8b9c-adbe-4fc0-a1d2-5d6e7f8091a2",
            "attempt_id": B1,
            "lease_epoch": 1,
            "runner_instance": RUNNER_B1,
            "sent_at": T0 + 65390,
            "type": "finished",
            "message": "cancelled at the runner's request",
            "outcome": "cancelled",
        },
    ),
]

VERIFY_OPERATIONS = [
    "verify.attempt.output",
    "verify.custom.probe",
    "verify.http.endpoint",
    "verify.kubernetes.condition",
    "verify.postgres.ready",
    "verify.resource.capability",
    "verify.tcp.connect",
]

RUNNER_PRESENCE = [
    (
        "ready (sandboxed)",
        {
            "runner_instance": RUNNER_A2,
            "runner_type": "verification",
            "version": "0.3.0",
            "pool": labels({"arch": "x86_64", "zone": "dmz"}),
            "capabilities": ["http", "tcp"],
            "operations": VERIFY_OPERATIONS,
            "capacity": 16,
            "in_flight": 3,
            "work_partition": 2,
            "status": "ready",
            "started_at": T0 - 3600000,
            "sent_at": T0 + 17000,
            "isolation": "sandboxed",
        },
    ),
    (
        "draining (no capacity offered)",
        {
            "runner_instance": RUNNER_A1,
            "runner_type": "verification",
            "version": "0.3.0",
            "pool": labels({"zone": "dmz"}),
            "capabilities": ["tcp"],
            "operations": VERIFY_OPERATIONS,
            "capacity": 0,
            "in_flight": 1,
            "work_partition": 1,
            "status": "draining",
            "started_at": T0 - 7200000,
            "sent_at": T0 + 16500,
            "isolation": "sandboxed, host network",
        },
    ),
    (
        "ready (a release before 0.2: no operations; isolation unknown)",
        {
            "runner_instance": "verification-0a1b2c",
            "runner_type": "verification",
            "version": "0.1.0",
            "pool": [],
            "capabilities": ["tcp"],
            "operations": [],
            "capacity": 8,
            "in_flight": 0,
            "work_partition": 3,
            "status": "ready",
            "started_at": T0 - 86400000,
            "sent_at": T0 + 1000,
            "isolation": "unknown",
        },
    ),
    (
        "stopped (a remote executor)",
        {
            "runner_instance": "ssh-41aa07",
            "runner_type": "ssh",
            "version": "0.3.0",
            "pool": [],
            "capabilities": [],
            "operations": ["ssh.command"],
            "capacity": 0,
            "in_flight": 0,
            "work_partition": 0,
            "status": "stopped",
            "started_at": T0 - 600000,
            "sent_at": T0 + 210000,
            "isolation": "remote",
        },
    ),
]


def chunk(attempt_id, epoch, runner, stream, seq, text, sent_at):
    return {
        "chunk_id": s(chunk_id_for(attempt_id, epoch, stream, seq)),
        "attempt_id": attempt_id,
        "lease_epoch": epoch,
        "runner_instance": runner,
        "stream": stream,
        "seq": seq,
        "text": text,
        "sent_at": sent_at,
    }


LOG_CHUNKS = [
    ("stdout", chunk(D1, 1, RUNNER_D1, "stdout", 0, "Plan: 1 to add, 0 to change, 0 to destroy.\n", T0 + 94000)),
    (
        "stderr (non-ASCII text)",
        chunk(D1, 1, RUNNER_D1, "stderr", 0, "Warning: variable \u201cgreeting\u201d is deprecated \u2713\n", T0 + 93000),
    ),
    ("runner", chunk(A2, 2, RUNNER_A2, "runner", 1, "connected in 3 ms\n", T0 + 17700)),
]

# Every family, by the schema file's stem.
VECTORS = {
    "artifacts": ARTIFACTS_LIST,
    "attempt-events": ATTEMPT_EVENTS,
    "commands": COMMANDS,
    "log-chunks": LOG_CHUNKS,
    "results": RESULTS,
    "runner-events": RUNNER_EVENTS,
    "runner-presence": RUNNER_PRESENCE,
    "work-items": WORK_ITEMS,
}
