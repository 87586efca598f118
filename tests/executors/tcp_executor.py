#!/usr/bin/env python3
"""An executor that is not execplane's, over the ingress's TCP protocol:
4-byte big-endian length + JSON frames, with nothing but the Python standard
library (socket, struct). It authenticates with the first frame, registers,
polls, runs the `verify.tcp.connect` probe itself and reports.

    tcp_executor.py HOST PORT EXECUTOR_ID ATTEMPTS

The shared key comes from EXECPLANE_INGRESS_KEY. Exits 0 after ATTEMPTS
finished attempts.
"""

import json
import os
import socket
import struct
import sys
import time

HOST, PORT, EXECUTOR, WANTED = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
KEY = os.environ["EXECPLANE_INGRESS_KEY"]


class Connection:
    def __init__(self):
        self.sock = socket.create_connection((HOST, PORT), timeout=40)
        self.next_id = 0

    def _read_exact(self, size):
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the ingress")
            data += chunk
        return data

    def call(self, op, body):
        self.next_id += 1
        payload = json.dumps({"op": op, "id": self.next_id, "body": body}).encode()
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)
        (size,) = struct.unpack(">I", self._read_exact(4))
        reply = json.loads(self._read_exact(size))
        assert reply["id"] == self.next_id, reply
        return reply


def probe(inputs):
    try:
        with socket.create_connection((inputs["host"], inputs["port"]), timeout=2):
            return True, None
    except OSError as error:
        return False, str(error)


def evidence(connected, error):
    """verify.tcp.connect's documented result (docs/OPERATIONS.md)."""
    return {
        "operation": "verify.tcp.connect",
        "samples": [{
            "n": 1, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "latency_ms": 0,
            "reached": connected, "observed": {"executor": "python-tcp"},
            "assertions": [{"name": "connect", "expected": True, "actual": connected,
                            "passed": connected}],
            "error": error,
        }],
        "passed": connected,
        "recommended_failure_category": None if connected else "target_unreachable",
    }


def main():
    conn = Connection()
    reply = conn.call("auth", {"key": KEY, "executor_id": EXECUTOR})
    assert reply["ok"], reply
    reply = conn.call("register", {"runner_type": "verification"})
    assert reply["ok"], reply
    instance = reply["body"]["instance_id"]
    done, deadline = 0, time.monotonic() + 120
    while done < WANTED and time.monotonic() < deadline:
        reply = conn.call("poll", {"instance_id": instance, "wait_ms": 2000})
        assert reply["ok"], reply
        for item in reply["body"]["work"]:
            lease = {"attempt_id": item["attempt_id"], "lease_epoch": item["lease_epoch"],
                     "runner_instance": instance}
            reply = conn.call("report", dict(lease, type="started"))
            assert reply["ok"] and reply["body"]["lease_valid"], reply
            connected, error = probe(item["spec"]["inputs"])
            reply = conn.call("log", dict(lease, stream="stdout", seq=0, text="connected=%s\n" % connected))
            assert reply["ok"], reply
            if connected:
                final = dict(lease, type="finished", outcome="succeeded", message="connected",
                             result=evidence(connected, error))
            else:
                final = dict(lease, type="finished", outcome="failed", category="target_unreachable",
                             message=error)
            reply = conn.call("report", final)
            assert reply["ok"], reply
            done += 1
            print(json.dumps({"finished": item["attempt_id"], "connected": connected}), flush=True)
    return 0 if done >= WANTED else 1


if __name__ == "__main__":
    sys.exit(main())
