"""Checks a signed execplane callback (Standard Webhooks; docs/EVENTS.md, "Callbacks")."""
import base64, hashlib, hmac, time


def verify(secrets, headers, body, tolerance=300, now=None):
    """True when one of `secrets` ("whsec_...") signed `body` (bytes) within `tolerance` seconds."""
    msg_id, timestamp = headers["webhook-id"], headers["webhook-timestamp"]
    if abs((now or time.time()) - int(timestamp)) > tolerance:
        return False  # stale, or from the future: a replay
    signed = f"{msg_id}.{timestamp}.".encode() + body
    given = [sig.partition(",")[2] for sig in headers["webhook-signature"].split()]
    for secret in secrets:
        mac = hmac.new(base64.b64decode(secret.removeprefix("whsec_")), signed, hashlib.sha256)
        if any(hmac.compare_digest(base64.b64encode(mac.digest()).decode(), sig) for sig in given):
            return True
    return False


if __name__ == "__main__":
    # A test's entry point: {"secrets", "headers", "body", "now"} on stdin; exit 0 when it verifies.
    import json, sys
    case = json.load(sys.stdin)
    ok = verify(case["secrets"], case["headers"], case["body"].encode(), now=case.get("now"))
    sys.exit(0 if ok else 1)
