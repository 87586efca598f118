#!/usr/bin/env python3
"""An executor that is not execplane's: it speaks the ingress's HTTP protocol
with nothing but the Python standard library (urllib), runs the TCP connect
probe of `verify.tcp.connect` itself, heartbeats, sends a log chunk, stores
its evidence as an output file and reports the result (twice, under one
idempotency key, as a client whose first answer was lost would).

    http_executor.py BASE_URL EXECUTOR_ID ATTEMPTS

The shared key comes from EXECPLANE_INGRESS_KEY. It prints one JSON line per
finished attempt and exits 0 after ATTEMPTS of them (1 if it gives up).
"""

import hashlib
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE, EXECUTOR, WANTED = sys.argv[1].rstrip("/"), sys.argv[2], int(sys.argv[3])
KEY = os.environ["EXECPLANE_INGRESS_KEY"]


def call(path, body, method="POST", content_type="application/json"):
    request = urllib.request.Request(
        BASE + path,
        data=body if isinstance(body, bytes) else json.dumps(body).encode(),
        method=method,
        headers={
            "Authorization": "Bearer " + KEY,
            "X-Execplane-Executor": EXECUTOR,
            "Content-Type": content_type,
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=40) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def evidence(connected, latency, error):
    """verify.tcp.connect's documented result (docs/OPERATIONS.md)."""
    return {
        "operation": "verify.tcp.connect",
        "samples": [{
            "n": 1, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "latency_ms": int(latency or 0), "reached": connected,
            "observed": {"executor": "python-http"},
            "assertions": [{"name": "connect", "expected": True, "actual": connected,
                            "passed": connected}],
            "error": error,
        }],
        "passed": connected,
        "recommended_failure_category": None if connected else "target_unreachable",
    }


def store_output(lease, name, data):
    """Uploads `data` as output `name` of the leased attempt: its reference."""
    query = urllib.parse.urlencode({
        "lease_epoch": lease["lease_epoch"], "runner_instance": lease["runner_instance"],
        "sha256": hashlib.sha256(data).hexdigest(), "class": "evidence",
    })
    status, stored = call("/v1/executor/outputs/%s/%s?%s" % (lease["attempt_id"], name, query),
                          data, method="PUT", content_type="application/json")
    assert status == 201, (status, stored)
    return stored


def probe(inputs):
    started = time.monotonic()
    try:
        with socket.create_connection((inputs["host"], inputs["port"]), timeout=2):
            pass
        return True, round((time.monotonic() - started) * 1000, 2), None
    except OSError as error:
        return False, None, str(error)


def main():
    status, session = call("/v1/executor/register", {"runner_type": "verification", "capacity": 2})
    if status != 200:
        print(json.dumps({"register": status, "body": session}), flush=True)
        return 1
    instance = session["instance_id"]
    done, deadline = 0, time.monotonic() + 120
    while done < WANTED and time.monotonic() < deadline:
        status, reply = call("/v1/executor/poll", {"instance_id": instance, "wait_ms": 2000})
        if status != 200:
            print(json.dumps({"poll": status, "body": reply}), flush=True)
            return 1
        for item in reply["work"]:
            lease = {
                "attempt_id": item["attempt_id"],
                "lease_epoch": item["lease_epoch"],
                "runner_instance": instance,
            }
            status, answer = call("/v1/executor/reports", dict(lease, type="started"))
            assert status == 200 and answer["lease_valid"], (status, answer)
            status, answer = call(
                "/v1/executor/reports", dict(lease, type="heartbeat", message="probing", percent=50)
            )
            assert status == 200, (status, answer)
            inputs = item["spec"]["inputs"]
            connected, latency, error = probe(inputs)
            status, _ = call(
                "/v1/executor/logs",
                dict(lease, stream="stdout", seq=0,
                     text="connect %s:%s -> %s\n" % (inputs["host"], inputs["port"], connected)),
            )
            assert status == 202, status
            result = evidence(connected, latency, error)
            stored = store_output(lease, "probe.json", json.dumps(result).encode())
            if connected:
                final = dict(lease, type="finished", outcome="succeeded", message="connected")
            else:
                final = dict(lease, type="finished", outcome="failed", category="target_unreachable",
                             message=error)
            final.update(result=result, outputs=[stored], idempotency_key="final-" + item["attempt_id"])
            # Sent twice, as after a lost answer: the key makes it one event.
            for _ in range(2):
                status, answer = call("/v1/executor/reports", final)
                assert status == 200 and "result_refused" not in answer, (status, answer)
            done += 1
            print(json.dumps({"finished": item["attempt_id"], "connected": connected}), flush=True)
    return 0 if done >= WANTED else 1


if __name__ == "__main__":
    sys.exit(main())
