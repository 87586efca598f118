package dev.execplane.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * Attempt states from attempt events (docs/EVENTS.md, "Folding attempt events into states"),
 * with the hash chain checked as it goes. Records repeat: one whose ce_id was seen is dropped.
 * Events are applied in seq order: one read ahead of an earlier one of its attempt waits for it
 * (the relay publishes a failed round again, so it comes).
 */
final class Fold {
  private static final Set<String> TERMINAL =
      Set.of("succeeded", "failed", "timed_out", "cancelled", "rejected", "outcome_unknown");
  private static final Set<String> BOOKKEEPING =
      Set.of("report_fenced", "callback_recorded", "plan_approved");
  private static final byte[] GENESIS_HASH = new byte[32];
  private static final HexFormat HEX = HexFormat.of();

  private static final class Attempt {
    String jobId;
    long attemptNo;
    String status;
    long lastSeq;
    byte[] hash;
    Long leaseEpoch;
    boolean leaseActive;
  }

  /** An event read ahead of an earlier one of its attempt. */
  private record Waiting(JsonNode event, byte[] datum, Map<String, byte[]> headers, String where) {}

  private static final class Problem extends Exception {
    Problem(String message) {
      super(message);
    }
  }

  private final Decoder decoder;
  long records;
  long duplicates;
  private final Map<String, byte[]> seen = new HashMap<>();
  private final Map<String, Attempt> attempts = new HashMap<>();
  private final Map<String, Map<Long, Waiting>> waiting = new HashMap<>();
  private final Set<String> broken = new HashSet<>();
  final List<String> problems = new ArrayList<>();

  Fold(Decoder decoder) {
    this.decoder = decoder;
  }

  private static byte[] sha256(byte[]... parts) {
    try {
      MessageDigest digest = MessageDigest.getInstance("SHA-256");
      for (byte[] part : parts) {
        digest.update(part);
      }
      return digest.digest();
    } catch (NoSuchAlgorithmException error) {
      throw new IllegalStateException(error);
    }
  }

  private static String text(byte[] header) {
    return header == null ? null : new String(header, StandardCharsets.UTF_8);
  }

  /** One record: its value and its headers (name to bytes). */
  void push(byte[] value, Map<String, byte[]> headers, String where) throws IOException {
    records++;
    Decoder.Decoded decoded;
    try {
      decoded = decoder.decode("attempt-events", value);
    } catch (Decoder.DecodeException error) {
      problems.add(where + ": " + error.getMessage());
      return;
    }
    ObjectNode event = decoded.json();
    String ceId = text(headers.get("ce_id"));
    if (ceId == null) {
      ceId = event.get("event_id").asText();
    }
    byte[] digest = sha256(decoded.datum());
    byte[] first = seen.get(ceId);
    if (first != null) {
      duplicates++;
      if (!Arrays.equals(first, digest)) {
        problems.add(where + ": a repeat of ce_id " + ceId + " differs from its first publication");
      }
      return;
    }
    seen.put(ceId, digest);
    String attemptId = event.get("attempt_id").asText();
    long seq = event.get("seq").asLong();
    String at = (where + " attempt " + attemptId + " seq " + seq).strip();
    if (broken.contains(attemptId)) {
      return;
    }
    if (!ceId.equals(event.get("event_id").asText())) {
      stop(attemptId, at, "ce_id " + ceId + " is not the event's id " + event.get("event_id").asText());
      return;
    }
    Attempt state = attempts.get(attemptId);
    long following = state == null ? 1 : state.lastSeq + 1;
    Map<Long, Waiting> queue = waiting.computeIfAbsent(attemptId, id -> new HashMap<>());
    if (seq < following || queue.containsKey(seq)) {
      stop(attemptId, at, "another event " + ceId + " with seq " + seq);
      return;
    }
    queue.put(seq, new Waiting(event, decoded.datum(), headers, at));
    while (queue.containsKey(following)) {
      Waiting next = queue.remove(following);
      try {
        byte[] hash = link(attempts.get(attemptId), next.event(), next.datum(), next.headers());
        apply(next.event(), hash);
      } catch (Problem problem) {
        stop(attemptId, next.where(), problem.getMessage());
        return;
      }
      following++;
    }
  }

  /** The attempt's fold stops at its first problem. */
  private void stop(String attemptId, String where, String text) {
    broken.add(attemptId);
    waiting.remove(attemptId);
    problems.add(where + ": " + text);
  }

  /** Events still waiting for an earlier one that never came: a gap. */
  void finish() {
    for (Map.Entry<String, Map<Long, Waiting>> entry : new TreeMap<>(waiting).entrySet()) {
      if (entry.getValue().isEmpty()) {
        continue;
      }
      Attempt state = attempts.get(entry.getKey());
      long following = state == null ? 1 : state.lastSeq + 1;
      List<String> read = new ArrayList<>();
      for (Long seq : new TreeMap<>(entry.getValue()).keySet()) {
        read.add(seq.toString());
      }
      problems.add(
          "attempt "
              + entry.getKey()
              + ": seq "
              + following
              + " was never read (read: seq "
              + String.join(", ", read)
              + ")");
    }
    waiting.clear();
  }

  /** Checks the links the headers state; the event's chain hash. */
  private static byte[] link(
      Attempt state, JsonNode event, byte[] datum, Map<String, byte[]> headers) throws Problem {
    byte[] tip = state == null ? GENESIS_HASH : state.hash;
    String seq = text(headers.get("execplane_seq"));
    if (seq != null && !seq.equals(Long.toString(event.get("seq").asLong()))) {
      throw new Problem("execplane_seq " + seq + " is not the event's seq");
    }
    String prev = text(headers.get("execplane_prev_hash"));
    if (prev != null && !prev.equals(HEX.formatHex(tip))) {
      throw new Problem("execplane_prev_hash does not link to the attempt's previous event");
    }
    byte[] hash = sha256(tip, datum);
    String stated = text(headers.get("execplane_hash"));
    if (stated != null && !stated.equals(HEX.formatHex(hash))) {
      throw new Problem("execplane_hash is not sha256(prev_hash || datum)");
    }
    return hash;
  }

  private void apply(JsonNode event, byte[] hash) throws Problem {
    String attemptId = event.get("attempt_id").asText();
    String kind = event.get("type").asText();
    long seq = event.get("seq").asLong();
    Attempt state = attempts.get(attemptId);
    if (state == null) {
      state = new Attempt();
      if (kind.equals("created")) {
        state.status = "queued";
      } else if (kind.equals("rejected")) {
        state.status = "rejected";
      } else {
        throw new Problem("an attempt starts with created or rejected, not " + kind);
      }
      state.jobId = event.get("job_id").asText();
      state.attemptNo = event.get("attempt_no").asLong();
      state.lastSeq = 1;
      state.hash = hash;
      attempts.put(attemptId, state);
      return;
    }
    String status = state.status;
    if (TERMINAL.contains(status) && !BOOKKEEPING.contains(kind)) {
      throw new Problem(kind + " after the terminal state " + status);
    }
    Long activeEpoch = state.leaseEpoch != null && state.leaseActive ? state.leaseEpoch : null;
    switch (kind) {
      case "created", "rejected" -> throw new Problem("an attempt is created once");
      case "lease_granted" -> {
        if (!status.equals("queued")) {
          throw new Problem("lease granted to an attempt that is not queued");
        }
        state.status = "leased";
        state.leaseEpoch = event.get("epoch").asLong();
        state.leaseActive = true;
      }
      case "lease_extended" -> {
        if (activeEpoch == null || activeEpoch != event.get("epoch").asLong()) {
          throw new Problem("lease extended without an active lease of that epoch");
        }
      }
      case "started" -> {
        if (activeEpoch == null || activeEpoch != event.get("epoch").asLong()) {
          throw new Problem("started without an active lease of that epoch");
        }
        if (status.equals("leased")) {
          state.status = "running";
        }
      }
      case "cancel_requested" -> state.status = "cancel_requested";
      case "finished" -> {
        state.status = event.get("outcome").asText();
        state.leaseActive = false;
      }
      case "plan_approved" -> {
        if (!status.equals("succeeded")) {
          throw new Problem("a plan approved whose attempt did not succeed");
        }
      }
      default -> {
        // progress, report_fenced, callback_recorded: no change of status.
      }
    }
    state.lastSeq = seq;
    state.hash = hash;
  }

  ObjectNode result() {
    JsonNodeFactory nodes = JsonNodeFactory.instance;
    ObjectNode root = nodes.objectNode();
    root.put("records", records);
    root.put("duplicates", duplicates);
    ObjectNode out = root.putObject("attempts");
    for (Map.Entry<String, Attempt> entry : new TreeMap<>(attempts).entrySet()) {
      Attempt state = entry.getValue();
      ObjectNode attempt = out.putObject(entry.getKey());
      attempt.put("job_id", state.jobId);
      attempt.put("attempt_no", state.attemptNo);
      attempt.put("status", state.status);
      attempt.put("last_seq", state.lastSeq);
    }
    return root;
  }
}
