#!/usr/bin/env bash
# Ensures the example consumers of the published log (docs/EVENTS.md) can
# run, for their README and the tests that run them:
#   .stack/consumers-venv                  Python with confluent-kafka and
#                                          fastavro, pinned: run
#                                          examples/consumers/python/*.py
#                                          with .stack/consumers-venv/bin/python
#   examples/consumers/java/target/execplane-consumer.jar
#                                          the Java consumer (its
#                                          dependencies in target/lib)
# The venv is made from Debian's /usr/bin/python3, as scripts/ansible.sh's.
# The Java consumer is built with Maven into the local repository that
# scripts/kafka.sh fills (.stack/kafka/m2: Kafka's client is there already
# once the broker was fetched). Installs python3-venv, a JDK and Maven
# from Debian when missing. Idempotent: a venv with the pinned versions is
# kept, and the jar is rebuilt only when a source or the pom is newer.
source "$(dirname "$0")/lib.sh"

CONFLUENT_KAFKA="confluent-kafka==2.16.1"
FASTAVRO="fastavro==1.13.1"
VENV="$STACK_DIR/consumers-venv"
JAVA_DIR="$ROOT/examples/consumers/java"
JAR="$JAVA_DIR/target/execplane-consumer.jar"
M2="$STACK_DIR/kafka/m2"

pinned() {
  [ -x "$VENV/bin/python" ] && grep -qx 'home = /usr/bin' "$VENV/pyvenv.cfg" 2>/dev/null \
    && "$VENV/bin/python" - "$CONFLUENT_KAFKA" "$FASTAVRO" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if all(version(name) == wanted for name, wanted in (pin.split("==") for pin in sys.argv[1:])) else 1)
PY
}

if ! pinned; then
  [ -x /usr/bin/python3 ] || apt_install python3
  /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || apt_install python3-venv
  log "installing $CONFLUENT_KAFKA and $FASTAVRO into $VENV"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$CONFLUENT_KAFKA" "$FASTAVRO" \
    || die "cannot install $CONFLUENT_KAFKA and $FASTAVRO from PyPI"
fi

# The jar is current when nothing it is built from is newer.
if [ -f "$JAR" ] && [ -d "$JAVA_DIR/target/lib" ] \
  && [ -z "$(find "$JAVA_DIR/pom.xml" "$JAVA_DIR/src" -newer "$JAR" -print -quit)" ]; then
  exit 0
fi
command -v javac >/dev/null 2>&1 || apt_install openjdk-17-jdk-headless
command -v mvn >/dev/null 2>&1 || apt_install maven
log "building the Java consumer ($JAR)"
mkdir -p "$M2"
build_log="$STACK_DIR/consumers-java-build.log"
if ! mvn -q -B -Dstyle.color=never -Dmaven.repo.local="$M2" -f "$JAVA_DIR/pom.xml" package >"$build_log" 2>&1; then
  tail -n 40 "$build_log" >&2
  die "cannot build the Java consumer (the whole log: $build_log)"
fi
[ -f "$JAR" ] || die "the build wrote no $JAR (see $build_log)"
