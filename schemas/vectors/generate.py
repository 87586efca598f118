#!/usr/bin/env python3
"""Writes the shared test vectors, `schemas/vectors/<stem>.json`, one file
per schema of `schemas/` (docs/EVENTS.md, "Test vectors").

Each vector is `{"name", "hex", "decoded"}`: `decoded` is the record in the
decoded-JSON mapping of docs/EVENTS.md, `hex` the record value exactly as
execplane puts it on the wire (single-object framing: C3 01, the schema's
CRC-64-AVRO fingerprint little-endian, the Avro datum), lowercase.

The values come from `source.py`, filled out with the schema's defaults in
schema order; the datum is fastavro's `schemaless_writer`, and the
fingerprint is fastavro's, checked here against an independent CRC-64-AVRO
of the Parsing Canonical Form and against the values `tests/codec_roundtrip.rs`
pins. Each vector is decoded back and must equal its `decoded`.
Deterministic: the same sources write the same bytes.

    python3 schemas/vectors/generate.py           rewrite the files
    python3 schemas/vectors/generate.py --check   exit 1 if any file differs
    python3 schemas/vectors/generate.py --xxd attempt-events NAME
                                                  a vector as `xxd` shows it
Needs fastavro (scripts/consumers.sh installs it in .stack/consumers-venv).
"""

import copy
import hashlib
import io
import json
import pathlib
import re
import sys

import fastavro
import fastavro.schema

HERE = pathlib.Path(__file__).resolve().parent
SCHEMAS = HERE.parent
ROOT = SCHEMAS.parent
sys.dont_write_bytecode = True  # no __pycache__ beside the vectors
sys.path.insert(0, str(HERE))
import source  # noqa: E402

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
# The hash that precedes an attempt's first event (docs/EVENTS.md).
GENESIS_HASH = bytes(32)


def crc64_avro(data):
    """CRC-64-AVRO, the Avro specification's reference algorithm."""
    empty = 0xC15D213AA4D7A795
    table = []
    for index in range(256):
        fp = index
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def strip_logical(schema):
    """The schema without logical types: the datum is the same, and longs
    decode as integers (the decoded-JSON mapping), never as dates."""
    if isinstance(schema, list):
        return [strip_logical(branch) for branch in schema]
    if isinstance(schema, dict):
        return {key: strip_logical(value) for key, value in schema.items() if key != "logicalType"}
    return schema


class Family:
    """One schema file: its schema, fingerprint and named types."""

    def __init__(self, stem):
        self.stem = stem
        self.text = (SCHEMAS / f"{stem}.avsc").read_text()
        self.schema = json.loads(self.text)
        pcf = fastavro.schema.to_parsing_canonical_form(self.schema)
        fastavro_hex = fastavro.schema.fingerprint(pcf, "CRC-64-AVRO")
        own = crc64_avro(pcf.encode()).to_bytes(8, "little").hex()
        if fastavro_hex != own:
            raise SystemExit(f"{stem}: fastavro's fingerprint {fastavro_hex} is not CRC-64-AVRO {own}")
        self.fingerprint = bytes.fromhex(fastavro_hex)
        self.parsed = fastavro.parse_schema(strip_logical(self.schema))
        self.names = {}
        self._collect(self.schema, self.schema.get("namespace", ""))

    def _collect(self, schema, namespace):
        if isinstance(schema, list):
            for branch in schema:
                self._collect(branch, namespace)
        elif isinstance(schema, dict):
            kind = schema["type"]
            if kind in ("record", "enum", "fixed"):
                namespace = schema.get("namespace", namespace)
                self.names[schema["name"]] = schema
                self.names[f"{namespace}.{schema['name']}"] = schema
            for field in schema.get("fields", []):
                self._collect(field["type"], namespace)
            if kind == "array":
                self._collect(schema["items"], namespace)
            if kind == "map":
                self._collect(schema["values"], namespace)

    def resolve(self, schema):
        if isinstance(schema, str) and schema not in PRIMITIVES:
            return self.names[schema]
        return schema

    def fill(self, schema, value, path):
        """`value` as the decoded-JSON mapping: every record field present,
        in schema order, defaults where the source leaves a field out."""
        schema = self.resolve(schema)
        if isinstance(schema, list):
            if value is None:
                if "null" not in schema:
                    raise SystemExit(f"{self.stem} {path}: null outside a nullable union")
                return None
            branches = [self.resolve(branch) for branch in schema if branch != "null"]
            if len(branches) != 1:
                raise SystemExit(f"{self.stem} {path}: only [null, X] unions are mapped")
            return self.fill(branches[0], value, path)
        if isinstance(schema, dict):
            kind = schema["type"]
            if kind == "record":
                if not isinstance(value, dict):
                    raise SystemExit(f"{self.stem} {path}: a record needs an object")
                known = {field["name"] for field in schema["fields"]}
                unknown = set(value) - known
                if unknown:
                    raise SystemExit(f"{self.stem} {path}: no such fields {sorted(unknown)}")
                out = {}
                for field in schema["fields"]:
                    name = field["name"]
                    if name in value:
                        out[name] = self.fill(field["type"], value[name], f"{path}.{name}")
                    elif "default" in field:
                        out[name] = copy.deepcopy(field["default"])
                    else:
                        raise SystemExit(f"{self.stem} {path}: `{name}` has no default and is missing")
                return out
            if kind == "array":
                return [self.fill(schema["items"], item, f"{path}[{index}]") for index, item in enumerate(value)]
            if kind == "enum":
                if value not in schema["symbols"]:
                    raise SystemExit(f"{self.stem} {path}: `{value}` is not a symbol of {schema['name']}")
                return value
            return self.fill(kind, value, path)
        if schema in ("int", "long"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise SystemExit(f"{self.stem} {path}: {schema} needs an integer")
        elif schema == "boolean" and not isinstance(value, bool):
            raise SystemExit(f"{self.stem} {path}: boolean needs true or false")
        elif schema == "string" and not isinstance(value, str):
            raise SystemExit(f"{self.stem} {path}: string needs a string")
        return value

    def encode(self, decoded):
        """The record value on the wire: C3 01, fingerprint, datum."""
        fastavro.validation.validate(decoded, self.parsed, raise_errors=True, strict=True)
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self.parsed, decoded, strict=True)
        return b"\xc3\x01" + self.fingerprint + buffer.getvalue()

    def decode(self, framed):
        if framed[:2] != b"\xc3\x01" or framed[2:10] != self.fingerprint:
            raise SystemExit(f"{self.stem}: not single-object framed with this schema")
        return fastavro.schemaless_reader(io.BytesIO(framed[10:]), self.parsed)


def pinned_fingerprints():
    """What tests/codec_roundtrip.rs pins (`FASTAVRO_FINGERPRINTS`): family
    name -> current fingerprint hex, when that table is there to read."""
    text = (ROOT / "tests" / "codec_roundtrip.rs").read_text()
    return dict(re.findall(r'\(Family::(\w+), "([0-9a-f]{16})", "[0-9a-f]{16}"\)', text))


RUST_FAMILY = {
    "artifacts": "Artifact",
    "attempt-events": "AttemptEvent",
    "commands": "Command",
    "log-chunks": "LogChunk",
    "results": "Result",
    "runner-events": "RunnerEvent",
    "runner-presence": "Presence",
    "work-items": "WorkItem",
}


def vectors():
    """Every file's text, by stem."""
    stems = sorted(path.stem for path in SCHEMAS.glob("*.avsc"))
    if sorted(source.VECTORS) != stems:
        raise SystemExit(f"source.py covers {sorted(source.VECTORS)}, schemas/ holds {stems}")
    pinned = pinned_fingerprints()
    files = {}
    for stem in stems:
        family = Family(stem)
        expected = pinned.get(RUST_FAMILY[stem])
        if expected is not None and expected != family.fingerprint.hex():
            raise SystemExit(
                f"{stem}: fingerprint {family.fingerprint.hex()} is not the {expected} tests/codec_roundtrip.rs pins"
            )
        out = []
        names = set()
        for name, value in source.VECTORS[stem]:
            if name in names:
                raise SystemExit(f"{stem}: two vectors are named `{name}`")
            names.add(name)
            decoded = family.fill(family.schema, value, name)
            framed = family.encode(decoded)
            if family.decode(framed) != decoded:
                raise SystemExit(f"{stem} {name}: does not decode back to itself")
            out.append({"name": name, "hex": framed.hex(), "decoded": decoded})
        files[stem] = json.dumps(out, indent=2, ensure_ascii=False) + "\n"
    return files


def chains(events):
    """The hash chain of attempt-event vectors ({"hex": ...} in order):
    (seq, prev_hash, hash) of each, per attempt (docs/EVENTS.md)."""
    tips = {}
    out = []
    for vector in events:
        framed = bytes.fromhex(vector["hex"])
        attempt = vector["decoded"]["attempt_id"]
        prev = tips.get(attempt, GENESIS_HASH)
        digest = hashlib.sha256(prev + framed[10:]).digest()
        tips[attempt] = digest
        out.append((vector["decoded"]["seq"], prev.hex(), digest.hex()))
    return out


def xxd(data):
    lines = []
    for offset in range(0, len(data), 16):
        row = data[offset : offset + 16]
        words = " ".join(row[index : index + 2].hex() for index in range(0, len(row), 2))
        text = "".join(chr(byte) if 0x20 <= byte < 0x7F else "." for byte in row)
        lines.append(f"{offset:08x}: {words:<39}  {text}")
    return "\n".join(lines)


def main(argv):
    if argv[:1] == ["--xxd"] and len(argv) == 3:
        stem, name = argv[1], argv[2]
        for vector in json.loads((HERE / f"{stem}.json").read_text()):
            if vector["name"] == name:
                print(xxd(bytes.fromhex(vector["hex"])))
                return 0
        print(f"no vector `{name}` in {stem}.json", file=sys.stderr)
        return 1
    check = argv == ["--check"]
    if argv and not check:
        print(__doc__, file=sys.stderr)
        return 2
    stale = []
    for stem, text in vectors().items():
        path = HERE / f"{stem}.json"
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.name)
        if not check:
            path.write_text(text)
    if check and stale:
        print(f"out of date (run schemas/vectors/generate.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
