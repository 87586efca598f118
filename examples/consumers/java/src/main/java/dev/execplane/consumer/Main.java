package dev.execplane.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.UUID;
import java.util.stream.Stream;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Folds execplane's published log into attempt states, as docs/EVENTS.md says a consumer does,
 * with nothing but Apache Avro and the Kafka client.
 *
 * <pre>
 * java -jar target/execplane-consumer.jar --brokers HOST:PORT [--topic exec.attempt-events.v1]
 *     [--confluent-id ID=SCHEMA_FILE ...] [--schemas schemas]
 * java -jar target/execplane-consumer.jar --vectors schemas/vectors [--schemas schemas]
 * </pre>
 *
 * The first form reads every partition from its first offset to the end offsets taken at start,
 * drops records whose ce_id was seen, checks the hash-chain links the headers state, folds each
 * attempt's events in seq order (one read ahead of an earlier one waits for it), and prints
 * one JSON object: {"records", "duplicates", "attempts": {id: {job_id, attempt_no, status,
 * last_seq}}}. A problem (a record that does not decode, an event that cannot follow, a broken
 * link, an event never read while later ones of its attempt were) is reported on stderr and exits 2; a topic that cannot be read exits 1. The second form
 * decodes every test vector and compares it with its "decoded", then folds the attempt-event
 * vectors: exit 0 when all match, 1 otherwise.
 */
public final class Main {
  private static final ObjectMapper JSON = new ObjectMapper();

  private Main() {}

  public static void main(String[] args) throws Exception {
    // No logging backend is on the class path (only Avro and the Kafka
    // client are): SLF4J would say so on every start.
    if (System.getProperty("slf4j.internal.verbosity") == null) {
      System.setProperty("slf4j.internal.verbosity", "ERROR");
    }
    System.exit(run(args));
  }

  private static int usage(String message) {
    System.err.println("execplane-consumer: " + message);
    System.err.println(
        "usage: --brokers HOST:PORT [--topic T] [--confluent-id ID=SCHEMA_FILE ...] [--schemas DIR]"
            + "\n       --vectors DIR [--schemas DIR]");
    return 64;
  }

  static int run(String[] args) throws Exception {
    String brokers = null;
    String topic = "exec.attempt-events.v1";
    Path schemas = Path.of("schemas");
    Path vectors = null;
    Map<Integer, Path> confluent = new HashMap<>();
    for (int index = 0; index < args.length; index++) {
      String name = args[index];
      if (index + 1 >= args.length) {
        return usage(name + " needs a value");
      }
      String value = args[++index];
      switch (name) {
        case "--brokers" -> brokers = value;
        case "--topic" -> topic = value;
        case "--schemas" -> schemas = Path.of(value);
        case "--vectors" -> vectors = Path.of(value);
        case "--confluent-id" -> {
          int equals = value.indexOf('=');
          if (equals < 1 || !value.substring(0, equals).chars().allMatch(Character::isDigit)) {
            return usage("--confluent-id " + value + ": not ID=SCHEMA_FILE");
          }
          confluent.put(Integer.parseInt(value.substring(0, equals)), Path.of(value.substring(equals + 1)));
        }
        default -> {
          return usage("unknown argument " + name);
        }
      }
    }
    Decoder decoder = new Decoder(schemas, confluent);
    if (vectors != null) {
      return vectors(decoder, schemas, vectors);
    }
    if (brokers == null) {
      return usage("--brokers or --vectors is required");
    }
    Fold fold = new Fold(decoder);
    try {
      read(brokers, topic, fold);
      fold.finish();
    } catch (Exception error) {
      System.err.println("fold: reading " + topic + ": " + error);
      return 1;
    }
    System.out.println(JSON.writeValueAsString(fold.result()));
    for (String problem : fold.problems) {
      System.err.println("fold: " + problem);
    }
    return fold.problems.isEmpty() ? 0 : 2;
  }

  /** Every record of every partition from its first offset to the end offsets taken now. */
  private static void read(String brokers, String topic, Fold fold) throws IOException {
    Properties properties = new Properties();
    properties.put("bootstrap.servers", brokers);
    // Assigned, never subscribed: the group is neither joined nor committed to.
    properties.put("group.id", "execplane-fold-" + UUID.randomUUID());
    properties.put("enable.auto.commit", "false");
    properties.put("auto.offset.reset", "earliest");
    // Reading must not create the topic it names.
    properties.put("allow.auto.create.topics", "false");
    properties.put("key.deserializer", ByteArrayDeserializer.class.getName());
    properties.put("value.deserializer", ByteArrayDeserializer.class.getName());
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(properties)) {
      List<PartitionInfo> infos = consumer.partitionsFor(topic, Duration.ofSeconds(10));
      if (infos == null || infos.isEmpty()) {
        throw new IOException("no topic " + topic);
      }
      List<TopicPartition> all = new ArrayList<>();
      for (PartitionInfo info : infos) {
        all.add(new TopicPartition(topic, info.partition()));
      }
      Map<TopicPartition, Long> first = consumer.beginningOffsets(all, Duration.ofSeconds(10));
      Map<TopicPartition, Long> end = consumer.endOffsets(all, Duration.ofSeconds(10));
      Map<TopicPartition, Long> pending = new TreeMap<>((a, b) -> a.partition() - b.partition());
      for (TopicPartition partition : all) {
        if (end.get(partition) > first.get(partition)) {
          pending.put(partition, end.get(partition));
        }
      }
      if (pending.isEmpty()) {
        return;
      }
      List<TopicPartition> assigned = new ArrayList<>(pending.keySet());
      consumer.assign(assigned);
      for (TopicPartition partition : assigned) {
        consumer.seek(partition, first.get(partition));
      }
      long idle = 0;
      while (!pending.isEmpty()) {
        var batch = consumer.poll(Duration.ofSeconds(1));
        if (batch.isEmpty()) {
          // A partition may end in records no consumer is handed (transaction
          // markers): its position says it is done.
          pending.entrySet().removeIf(entry -> consumer.position(entry.getKey()) >= entry.getValue());
          idle++;
          if (!pending.isEmpty() && idle >= 30) {
            throw new IOException(
                "no record for 30 s; partitions " + pending.keySet() + " short of their end");
          }
          continue;
        }
        idle = 0;
        for (ConsumerRecord<byte[], byte[]> record : batch) {
          TopicPartition partition = new TopicPartition(record.topic(), record.partition());
          Long high = pending.get(partition);
          if (high == null) {
            continue;
          }
          if (record.offset() < high) {
            Map<String, byte[]> headers = new HashMap<>();
            for (Header header : record.headers()) {
              if (header.value() != null) {
                headers.put(header.key(), header.value());
              }
            }
            byte[] value = record.value() == null ? new byte[0] : record.value();
            fold.push(
                value, headers, "partition " + record.partition() + " offset " + record.offset());
          }
          if (record.offset() + 1 >= high) {
            pending.remove(partition);
          }
        }
      }
    }
  }

  /** Decodes every vector and compares; folds the attempt-event vectors. */
  private static int vectors(Decoder decoder, Path schemas, Path directory) throws IOException {
    int passed = 0;
    int failed = 0;
    List<Path> files;
    try (Stream<Path> listed = Files.list(directory)) {
      files = listed.filter(path -> path.toString().endsWith(".json")).sorted().toList();
    }
    List<String> stems = files.stream().map(Main::stem).toList();
    List<String> expected;
    try (Stream<Path> listed = Files.list(schemas)) {
      expected =
          listed
              .filter(path -> path.toString().endsWith(".avsc"))
              .map(Main::stem)
              .sorted()
              .toList();
    }
    if (!stems.equals(expected)) {
      System.out.println("FAIL vectors " + stems + " are not one per schema " + expected);
      failed++;
    }
    for (Path file : files) {
      String stem = stem(file);
      for (JsonNode vector : JSON.readTree(file.toFile())) {
        String label = stem + ": " + vector.get("name").asText();
        try {
          byte[] value = java.util.HexFormat.of().parseHex(vector.get("hex").asText());
          JsonNode decoded = decoder.decode(stem, value).json();
          if (!Decoder.sameJson(decoded, vector.get("decoded"))) {
            System.out.println("FAIL " + label + ": decodes to " + decoded);
            failed++;
            continue;
          }
          passed++;
        } catch (Decoder.DecodeException error) {
          System.out.println("FAIL " + label + ": " + error.getMessage());
          failed++;
        }
      }
    }
    Fold fold = new Fold(decoder);
    for (JsonNode vector : JSON.readTree(directory.resolve("attempt-events.json").toFile())) {
      byte[] value = java.util.HexFormat.of().parseHex(vector.get("hex").asText());
      fold.push(value, Map.of(), vector.get("name").asText());
    }
    fold.finish();
    if (!fold.problems.isEmpty() || fold.duplicates != 0) {
      for (String problem : fold.problems) {
        System.out.println("FAIL folding the attempt-event vectors: " + problem);
      }
      failed++;
    } else {
      passed++;
    }
    System.out.println(passed + " passed, " + failed + " failed");
    return failed == 0 ? 0 : 1;
  }

  private static String stem(Path path) {
    String name = path.getFileName().toString();
    return name.substring(0, name.lastIndexOf('.'));
  }
}
