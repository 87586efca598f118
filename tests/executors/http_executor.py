#!/usr/bin/env python3
"""An executor that is not execplane's: it speaks the ingress's HTTP protocol
with nothing but the Python standard library (urllib), runs the TCP connect
probe of `verify.tcp.connect` itself, heartbeats, sends a log chunk and
reports the result.

    http_executor.py BASE_URL EXECUTOR_ID ATTEMPTS

The shared key comes from EXECPLANE_INGRESS_KEY. It prints one JSON line per
finished attempt and exits 0 after ATTEMPTS of them (1 if it gives up).
"""

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request

BASE, EXECUTOR, WANTED = sys.argv[1].rstrip("/"), sys.argv[2], int(sys.argv[3])
KEY = os.environ["EXECPLANE_INGRESS_KEY"]


def call(path, body):
    request = urllib.request.Request(
        BASE + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": "Bearer " + KEY,
            "X-Execplane-Executor": EXECUTOR,
            "Content-Type": "application/json",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=40) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


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
            if connected:
                final = dict(lease, type="finished", outcome="succeeded", message="connected",
                             result={"executor": "python-http", "latency_ms": latency})
            else:
                final = dict(lease, type="finished", outcome="failed", category="target_unreachable",
                             message=error, result={"executor": "python-http"})
            status, answer = call("/v1/executor/reports", final)
            assert status == 200, (status, answer)
            done += 1
            print(json.dumps({"finished": item["attempt_id"], "connected": connected}), flush=True)
    return 0 if done >= WANTED else 1


if __name__ == "__main__":
    sys.exit(main())
