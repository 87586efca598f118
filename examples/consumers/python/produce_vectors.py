#!/usr/bin/env python3
"""Writes the attempt-event test vectors (schemas/vectors/attempt-events.json)
to a topic as execplane's relay publishes them (docs/EVENTS.md): keyed by
attempt, with the CloudEvents headers and the hash-chain headers, so the
consumers can be tried without a running execplane.

    produce_vectors.py --brokers 127.0.0.1:9092 --topic scratch.attempt-events.v1
                       [--partitions 6] [--mixed CONFLUENT_ID] [--tamper]

Creates the topic when it is missing. Plain: every vector once, as it is.
--mixed CONFLUENT_ID: as a log written across releases and framings looks:
the events of job plan-42/api-health in Confluent framing with that
registry id (the current schema), those of job plan-42/cache-3 written with
the previous release's schema (schemas/previous/) but its callback_recorded
(a type that schema lacks: written after an upgrade), those of job
plan-42/db-8 without the chain headers (as records published before the
topic carried them), four records published again at the end (a relay
that crashed between publishing and deleting), and the second attempt of
job plan-42/db-7 with its seq 3 first published ahead of its seq 2 (a
record that timed out while the next one was delivered, and the round
published again).
--tamper: one event's datum altered after its hash was computed (it still
decodes).
Prints how many records it wrote.
"""

import argparse
import datetime
import hashlib
import io
import json
import pathlib
import sys

import fastavro

sys.dont_write_bytecode = True  # no __pycache__ in the example
import fold  # noqa: E402

VECTORS = fold.HERE.parents[2] / "schemas" / "vectors" / "attempt-events.json"
SOURCE = "execplane/dispatcher"


def headers_of(event, trace, links):
    at = datetime.datetime.fromtimestamp(event["occurred_at"] / 1000, tz=datetime.timezone.utc)
    headers = [
        ("ce_specversion", "1.0"),
        ("ce_id", event["event_id"]),
        ("ce_type", f"io.execplane.attempt.{event['type']}"),
        ("ce_source", SOURCE),
        ("ce_time", at.isoformat(timespec="milliseconds").replace("+00:00", "Z")),
        ("ce_subject", event["attempt_id"]),
        ("content-type", "application/avro"),
    ]
    if trace:
        headers.append(("traceparent", trace["traceparent"]))
        if trace.get("tracestate"):
            headers.append(("tracestate", trace["tracestate"]))
    if links:
        seq, prev, digest = links
        headers += [("execplane_seq", str(seq)), ("execplane_prev_hash", prev), ("execplane_hash", digest)]
    return [(name, value.encode()) for name, value in headers]


PREVIOUS = fold.load(fold.SCHEMAS / "previous" / "attempt-events.avsc")
PREVIOUS_TYPES = next(field["type"]["symbols"] for field in PREVIOUS["fields"] if field["name"] == "type")


def previous_datum(decoded):
    """The event written with the previous release's schema."""
    schema = PREVIOUS
    names = {field["name"] for field in schema["fields"]}
    record = {key: value for key, value in decoded.items() if key in names}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(fold.strip_logical(schema)), record)
    return fold.fingerprint(schema), buffer.getvalue()


def main(argv=None):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--mixed", type=int, metavar="CONFLUENT_ID")
    parser.add_argument("--tamper", action="store_true")
    args = parser.parse_args(argv)

    admin = AdminClient({"bootstrap.servers": args.brokers})
    if args.topic not in admin.list_topics(timeout=10).topics:
        for future in admin.create_topics([NewTopic(args.topic, args.partitions, 1)]).values():
            future.result()

    vectors = json.loads(VECTORS.read_text())
    retried = next(
        vector["decoded"]["attempt_id"]
        for vector in vectors
        if vector["decoded"]["job_id"] == "plan-42/db-7" and vector["decoded"]["seq"] == 1
        and vector["decoded"]["attempt_no"] == 2
    )
    specs = {}
    records = []
    tips = {}
    for vector in vectors:
        event = vector["decoded"]
        attempt = event["attempt_id"]
        if event["type"] == "created":
            specs[attempt] = event["spec"]
        framed = bytes.fromhex(vector["hex"])
        datum = framed[10:]
        job = event["job_id"]
        if args.mixed is not None and job == "plan-42/cache-3" and event["type"] in PREVIOUS_TYPES:
            fingerprint, datum = previous_datum(event)
            framed = b"\xc3\x01" + fingerprint + datum
        elif args.mixed is not None and job == "plan-42/api-health":
            framed = b"\x00" + args.mixed.to_bytes(4, "big") + datum
        prev = tips.get(attempt, fold.GENESIS_HASH)
        digest = hashlib.sha256(prev + datum).digest()
        tips[attempt] = digest
        links = (event["seq"], prev.hex(), digest.hex())
        if args.mixed is not None and job == "plan-42/db-8":
            links = None
        if args.tamper and vector is vectors[2]:
            # Another runner named, after the hash was computed.
            framed = framed.replace(b"verification-7f3c9a", b"verification-7f3c9b")
        trace = (specs.get(attempt) or {}).get("trace")
        records.append((attempt, framed, headers_of(event, trace, links)))
    if args.mixed is not None:
        records += [records[0], records[1], records[2], records[-1]]
        # Job plan-42/db-7's second attempt: seq 3 delivered while seq 2
        # timed out, then the round published again (seq 2, seq 3).
        second = [index for index, vector in enumerate(vectors) if vector["decoded"]["attempt_id"] == retried]
        records.insert(second[1], records[second[2]])

    producer = Producer({"bootstrap.servers": args.brokers, "enable.idempotence": True, "acks": "all"})
    failures = []
    for key, value, headers in records:
        producer.produce(
            args.topic,
            key=key.encode(),
            value=value,
            headers=headers,
            on_delivery=lambda error, _: error and failures.append(error),
        )
    producer.flush(30)
    if failures:
        print(f"produce_vectors: {failures[0]}", file=sys.stderr)
        return 1
    print(len(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
