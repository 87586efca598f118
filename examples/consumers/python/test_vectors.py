#!/usr/bin/env python3
"""Decodes every shared test vector (schemas/vectors/*.json) with the
consumer's own decoder and compares it with the vector's `decoded`; then
folds the attempt-event vectors, in order, and checks that they fold (and
chain) without a problem. Exit 0 when everything matches, 1 otherwise.

    python3 test_vectors.py [--vectors DIR] [--schemas DIR]
"""

import argparse
import json
import pathlib
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the example
import fold  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
VECTORS = HERE.parents[2] / "schemas" / "vectors"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vectors", default=str(VECTORS))
    parser.add_argument("--schemas", default=str(fold.SCHEMAS))
    args = parser.parse_args(argv)
    decoder = fold.Decoder(args.schemas)
    passed, failed = 0, 0
    files = sorted(pathlib.Path(args.vectors).glob("*.json"))
    schemas = sorted(path.stem for path in pathlib.Path(args.schemas).glob("*.avsc"))
    if [path.stem for path in files] != schemas:
        print(f"FAIL vectors {[path.stem for path in files]} are not one per schema {schemas}")
        failed += 1
    for path in files:
        for vector in json.loads(path.read_text()):
            label = f"{path.stem}: {vector['name']}"
            try:
                decoded, _ = decoder.decode(path.stem, bytes.fromhex(vector["hex"]))
            except fold.DecodeError as error:
                print(f"FAIL {label}: {error}")
                failed += 1
                continue
            if decoded != vector["decoded"]:
                print(f"FAIL {label}: decodes to {json.dumps(decoded, sort_keys=True)}")
                failed += 1
                continue
            passed += 1
    events = json.loads((pathlib.Path(args.vectors) / "attempt-events.json").read_text())
    folded = fold.Fold(decoder)
    for vector in events:
        folded.push(bytes.fromhex(vector["hex"]), {}, vector["name"])
    folded.finish()
    if folded.problems or folded.duplicates:
        for problem in folded.problems:
            print(f"FAIL folding the attempt-event vectors: {problem}")
        failed += 1
    else:
        passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
