#!/usr/bin/env python3
"""Folds execplane's published log into attempt states, as docs/EVENTS.md
says a consumer does, with nothing but confluent-kafka, fastavro, the
schemas and that document.

    fold.py --brokers 127.0.0.1:9092 [--topic exec.attempt-events.v1]
            [--confluent-id ID=SCHEMA_FILE ...] [--schemas DIR]

Reads every partition of the topic from its first offset up to the end
offsets taken at start, then stops. Records repeat (delivery is at least
once): a record whose `ce_id` was seen is dropped. Each record is decoded
(single-object framing, or Confluent framing with an id given by
`--confluent-id`, the writer schema of that id), its hash-chain links are
checked where its headers state them, and its event is folded into its
attempt in seq order (an event read ahead of an earlier one of its attempt
waits for it). Prints one JSON object:

    {"records": N, "duplicates": N,
     "attempts": {"<attempt_id>": {"job_id": "...", "attempt_no": N,
                                   "status": "...", "last_seq": N}}}

Anything that does not fit the contract (a record that does not decode,
an event that cannot follow its attempt's last one, a broken chain link,
an event never read while later ones of its attempt were) is reported on stderr, the attempt's fold stops there, and the exit
status is 2. Exit 1: the topic could not be read.
"""

import argparse
import hashlib
import io
import json
import pathlib
import sys
import uuid

import fastavro
import fastavro.schema

HERE = pathlib.Path(__file__).resolve().parent
SCHEMAS = HERE.parents[2] / "schemas"

SINGLE_OBJECT = b"\xc3\x01"
CONFLUENT = b"\x00"
GENESIS_HASH = bytes(32)
TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "rejected", "outcome_unknown"}
BOOKKEEPING = {"report_fenced", "callback_recorded", "plan_approved"}


class DecodeError(Exception):
    pass


def strip_logical(schema):
    """Logical types off: a timestamp-millis decodes as its long."""
    if isinstance(schema, list):
        return [strip_logical(branch) for branch in schema]
    if isinstance(schema, dict):
        return {key: strip_logical(value) for key, value in schema.items() if key != "logicalType"}
    return schema


def load(path):
    return json.loads(pathlib.Path(path).read_text())


def fingerprint(schema):
    """The single-object fingerprint: CRC-64-AVRO of the Parsing Canonical
    Form, as the 8 bytes written after C3 01."""
    pcf = fastavro.schema.to_parsing_canonical_form(schema)
    return bytes.fromhex(fastavro.schema.fingerprint(pcf, "CRC-64-AVRO"))


PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def named_types(schema, namespace="", names=None):
    """Every named type of a schema, by name and by full name."""
    names = {} if names is None else names
    if isinstance(schema, list):
        for branch in schema:
            named_types(branch, namespace, names)
    elif isinstance(schema, dict):
        kind = schema["type"]
        if kind in ("record", "enum", "fixed"):
            namespace = schema.get("namespace", namespace)
            names[schema["name"]] = names[f"{namespace}.{schema['name']}"] = schema
        for field in schema.get("fields", []):
            named_types(field["type"], namespace, names)
        for key in ("items", "values"):
            if key in schema:
                named_types(schema[key], namespace, names)
    return names


def to_json(schema, value, names):
    """fastavro's value in the decoded-JSON mapping (docs/EVENTS.md), walked
    along the reader schema: records are objects with their fields in schema
    order, a union is null or its bare branch, an enum its symbol, an int or
    long an integer, bytes and fixed lowercase hex."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        schema = names[schema]
    if value is None:
        return None
    if isinstance(schema, list):
        branches = [branch for branch in schema if branch != "null"]
        if len(branches) == 1:
            return to_json(branches[0], value, names)
        return to_json_any(value)  # the schemas have only [null, X] unions
    if isinstance(schema, dict):
        kind = schema["type"]
        if kind == "record":
            return {field["name"]: to_json(field["type"], value[field["name"]], names) for field in schema["fields"]}
        if kind == "array":
            return [to_json(schema["items"], item, names) for item in value]
        if kind == "map":
            return {key: to_json(schema["values"], item, names) for key, item in value.items()}
        if kind == "enum":
            return value
        if kind == "fixed":
            return bytes(value).hex()
        return to_json(kind, value, names)
    if schema == "bytes":
        return bytes(value).hex()
    return value


def to_json_any(value):
    if isinstance(value, dict):
        return {key: to_json_any(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_json_any(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value


class Decoder:
    """Decodes the record values of each family (schema file stem): by the
    fingerprint of the current or the previous schema, or by a Confluent id,
    always resolved to the current schema."""

    def __init__(self, schemas=SCHEMAS, confluent=None):
        self.schemas = pathlib.Path(schemas)
        # id -> writer schema (parsed, logical types off)
        self.confluent = {
            int(schema_id): fastavro.parse_schema(strip_logical(load(path)))
            for schema_id, path in (confluent or {}).items()
        }
        self.families = {}
        self.shapes = {}

    def family(self, stem):
        if stem not in self.families:
            current = load(self.schemas / f"{stem}.avsc")
            reader = fastavro.parse_schema(strip_logical(current))
            self.shapes[stem] = (current, named_types(current))
            writers = {fingerprint(current): reader}
            previous = self.schemas / "previous" / f"{stem}.avsc"
            if previous.exists():
                old = load(previous)
                writers.setdefault(fingerprint(old), fastavro.parse_schema(strip_logical(old)))
            self.families[stem] = (reader, writers)
        return self.families[stem]

    def unframe(self, stem, value):
        """(writer schema, datum) of a framed record value."""
        reader, writers = self.family(stem)
        if value[:2] == SINGLE_OBJECT:
            if len(value) < 10:
                raise DecodeError("truncated single-object header")
            writer = writers.get(value[2:10])
            if writer is None:
                raise DecodeError(f"unknown {stem} schema fingerprint {value[2:10].hex()}")
            return writer, value[10:]
        if value[:1] == CONFLUENT:
            if len(value) < 5:
                raise DecodeError("truncated Confluent header")
            schema_id = int.from_bytes(value[1:5], "big")
            writer = self.confluent.get(schema_id)
            if writer is None:
                raise DecodeError(f"unknown Confluent schema id {schema_id} (give it with --confluent-id)")
            return writer, value[5:]
        if not value:
            raise DecodeError("empty record value")
        raise DecodeError(f"unknown framing: first byte 0x{value[0]:02x}")

    def decode(self, stem, value):
        """(decoded JSON, datum) of a framed record value of family `stem`."""
        reader, _ = self.family(stem)
        writer, datum = self.unframe(stem, value)
        stream = io.BytesIO(datum)
        try:
            record = fastavro.schemaless_reader(stream, writer, reader)
        except Exception as error:  # fastavro raises several kinds
            raise DecodeError(f"not a {stem} datum: {type(error).__name__}: {error}") from error
        if stream.read(1):
            raise DecodeError("trailing bytes after the datum")
        schema, names = self.shapes[stem]
        return to_json(schema, record, names), datum


class Fold:
    """Attempt states from attempt events (docs/EVENTS.md, "Folding attempt
    events into states"), with the hash chain checked as it goes. Events
    are applied in seq order: one read ahead of its attempt's next seq waits
    until the events before it are read (the relay publishes a failed round
    again, so they come)."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.records = 0
        self.duplicates = 0
        self.seen = {}  # ce_id -> sha256 of the datum
        self.attempts = {}
        self.waiting = {}  # attempt_id -> {seq: (event, datum, headers, where)}
        self.broken = set()
        self.problems = []

    def problem(self, where, text):
        self.problems.append(f"{where}: {text}")

    def push(self, value, headers, where=""):
        """One record: its value and its headers (name -> bytes)."""
        self.records += 1
        try:
            event, datum = self.decoder.decode("attempt-events", value)
        except DecodeError as error:
            self.problem(where, str(error))
            return
        ce_id = headers.get("ce_id")
        ce_id = ce_id.decode() if ce_id is not None else event["event_id"]
        digest = hashlib.sha256(datum).digest()
        if ce_id in self.seen:
            self.duplicates += 1
            if self.seen[ce_id] != digest:
                self.problem(where, f"a repeat of ce_id {ce_id} differs from its first publication")
            return
        self.seen[ce_id] = digest
        attempt_id, seq = event["attempt_id"], event["seq"]
        where = f"{where} attempt {attempt_id} seq {seq}".strip()
        if attempt_id in self.broken:
            return
        if ce_id != event["event_id"]:
            self.stop(attempt_id, where, f"ce_id {ce_id} is not the event's id {event['event_id']}")
            return
        state = self.attempts.get(attempt_id)
        following = state["last_seq"] + 1 if state else 1
        waiting = self.waiting.setdefault(attempt_id, {})
        if seq < following or seq in waiting:
            self.stop(attempt_id, where, f"another event {ce_id} with seq {seq}")
            return
        waiting[seq] = (event, datum, headers, where)
        while following in waiting:
            event, datum, headers, where = waiting.pop(following)
            try:
                self.link(self.attempts.get(attempt_id), event, datum, headers)
                self.apply(event)
            except ValueError as error:
                self.stop(attempt_id, where, str(error))
                return
            following += 1

    def stop(self, attempt_id, where, text):
        """The attempt's fold stops at its first problem."""
        self.broken.add(attempt_id)
        self.waiting.pop(attempt_id, None)
        self.problem(where, text)

    def finish(self):
        """Events still waiting for an earlier one that never came: a gap."""
        for attempt_id, waiting in sorted(self.waiting.items()):
            if waiting:
                state = self.attempts.get(attempt_id)
                following = state["last_seq"] + 1 if state else 1
                self.problem(
                    f"attempt {attempt_id}",
                    f"seq {following} was never read (read: seq {', '.join(map(str, sorted(waiting)))})",
                )
        self.waiting.clear()

    def link(self, state, event, datum, headers):
        """Checks the links the headers state, and moves the chain's tip."""
        tip = state["hash"] if state else GENESIS_HASH
        seq = headers.get("execplane_seq")
        if seq is not None and seq.decode() != str(event["seq"]):
            raise ValueError(f"execplane_seq {seq.decode()} is not the event's seq")
        prev = headers.get("execplane_prev_hash")
        if prev is not None and prev.decode() != tip.hex():
            raise ValueError("execplane_prev_hash does not link to the attempt's previous event")
        digest = hashlib.sha256(tip + datum).digest()
        stated = headers.get("execplane_hash")
        if stated is not None and stated.decode() != digest.hex():
            raise ValueError("execplane_hash is not sha256(prev_hash || datum)")
        event["_hash"] = digest

    def apply(self, event):
        attempt_id, kind, seq = event["attempt_id"], event["type"], event["seq"]
        state = self.attempts.get(attempt_id)
        if state is None:
            if kind == "created":
                status = "queued"
            elif kind == "rejected":
                status = "rejected"
            else:
                raise ValueError(f"an attempt starts with created or rejected, not {kind}")
            self.attempts[attempt_id] = {
                "job_id": event["job_id"],
                "attempt_no": event["attempt_no"],
                "status": status,
                "last_seq": 1,
                "hash": event["_hash"],
                "lease": None,  # (epoch, active)
            }
            return
        status = state["status"]
        if status in TERMINAL and kind not in BOOKKEEPING:
            raise ValueError(f"{kind} after the terminal state {status}")
        lease = state["lease"]
        active_epoch = lease[0] if lease and lease[1] else None
        if kind in ("created", "rejected"):
            raise ValueError("an attempt is created once")
        if kind == "lease_granted":
            if status != "queued":
                raise ValueError("lease granted to an attempt that is not queued")
            state["status"] = "leased"
            state["lease"] = (event["epoch"], True)
        elif kind == "lease_extended":
            if active_epoch != event["epoch"]:
                raise ValueError("lease extended without an active lease of that epoch")
        elif kind == "started":
            if active_epoch != event["epoch"]:
                raise ValueError("started without an active lease of that epoch")
            if status == "leased":
                state["status"] = "running"
        elif kind == "cancel_requested":
            state["status"] = "cancel_requested"
        elif kind == "finished":
            state["status"] = event["outcome"]
            if lease:
                state["lease"] = (lease[0], False)
        elif kind == "plan_approved":
            if status != "succeeded":
                raise ValueError("a plan approved whose attempt did not succeed")
        # progress, report_fenced, callback_recorded: no change of status.
        state["last_seq"] = seq
        state["hash"] = event["_hash"]

    def result(self):
        return {
            "records": self.records,
            "duplicates": self.duplicates,
            "attempts": {
                attempt_id: {key: state[key] for key in ("job_id", "attempt_no", "status", "last_seq")}
                for attempt_id, state in sorted(self.attempts.items())
            },
        }


def read_topic(brokers, topic, each, stall=30.0):
    """Every record of every partition from its first offset to the end
    offsets taken now, handed to `each(value, headers, where)`."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            # Assigned, never subscribed: the group is neither joined nor committed to.
            "group.id": f"execplane-fold-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            # Reading must not create the topic it names.
            "allow.auto.create.topics": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise KafkaException(described.error if described else f"no topic {topic}")
        pending, assignment = {}, []
        for partition in sorted(described.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                pending[partition] = high
                assignment.append(TopicPartition(topic, partition, low))
        if not assignment:
            return
        consumer.assign(assignment)
        idle = 0.0
        while pending:
            message = consumer.poll(1.0)
            if message is None:
                # A partition may end in records no consumer is handed
                # (transaction markers): its position says it is done.
                for position in consumer.position(assignment):
                    if position.partition in pending and position.offset >= pending[position.partition]:
                        del pending[position.partition]
                idle += 1.0
                if pending and idle >= stall:
                    raise KafkaException(f"no record for {stall:.0f} s; partitions {sorted(pending)} short of their end")
                continue
            if message.error():
                raise KafkaException(message.error())
            idle = 0.0
            partition, offset = message.partition(), message.offset()
            high = pending.get(partition)
            if high is None:
                continue
            if offset < high:
                headers = {name: value for name, value in (message.headers() or []) if value is not None}
                each(message.value() or b"", headers, f"partition {partition} offset {offset}")
            if offset + 1 >= high:
                del pending[partition]
    finally:
        consumer.close()


def confluent_ids(items):
    ids = {}
    for item in items:
        schema_id, _, path = item.partition("=")
        if not schema_id.isdigit() or not path:
            raise SystemExit(f"--confluent-id {item}: not ID=SCHEMA_FILE")
        ids[int(schema_id)] = path
    return ids


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--topic", default="exec.attempt-events.v1")
    parser.add_argument("--confluent-id", action="append", default=[], metavar="ID=SCHEMA_FILE")
    parser.add_argument("--schemas", default=str(SCHEMAS), help="the schemas/ directory")
    args = parser.parse_args(argv)
    fold = Fold(Decoder(args.schemas, confluent_ids(args.confluent_id)))
    try:
        read_topic(args.brokers, args.topic, fold.push)
        fold.finish()
    except Exception as error:  # confluent_kafka raises KafkaException and others
        print(f"fold: reading {args.topic}: {error}", file=sys.stderr)
        return 1
    print(json.dumps(fold.result()))
    for problem in fold.problems:
        print(f"fold: {problem}", file=sys.stderr)
    return 2 if fold.problems else 0


if __name__ == "__main__":
    sys.exit(main())
