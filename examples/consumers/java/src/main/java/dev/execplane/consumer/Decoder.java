package dev.execplane.consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.IndexedRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;

/**
 * Decodes the record values of each family (schema file stem) as docs/EVENTS.md describes:
 * single-object framing by the fingerprint of the current or the previous schema, Confluent
 * framing by a registry id given with its writer schema, always resolved to the current schema;
 * and turns the value into the decoded-JSON mapping.
 */
final class Decoder {
  static final class DecodeException extends Exception {
    DecodeException(String message) {
      super(message);
    }
  }

  /** A framed record value: its writer schema and datum. */
  record Unframed(Schema writer, byte[] datum) {}

  /** A decoded record value: its decoded JSON and its datum. */
  record Decoded(ObjectNode json, byte[] datum) {}

  private record Family(Schema reader, Map<Long, Schema> writers) {}

  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  private static final HexFormat HEX = HexFormat.of();

  private final Path schemas;
  private final Map<Integer, Schema> confluent = new HashMap<>();
  private final Map<String, Family> families = new HashMap<>();

  Decoder(Path schemas, Map<Integer, Path> confluentIds) throws IOException {
    this.schemas = schemas;
    for (Map.Entry<Integer, Path> entry : confluentIds.entrySet()) {
      confluent.put(entry.getKey(), parse(entry.getValue()));
    }
  }

  private static Schema parse(Path path) throws IOException {
    // A parser per file: each file defines its own named types.
    return new Schema.Parser().parse(Files.readString(path));
  }

  private Family family(String stem) throws IOException {
    Family family = families.get(stem);
    if (family == null) {
      Schema current = parse(schemas.resolve(stem + ".avsc"));
      Map<Long, Schema> writers = new HashMap<>();
      writers.put(SchemaNormalization.parsingFingerprint64(current), current);
      Path previous = schemas.resolve("previous").resolve(stem + ".avsc");
      if (Files.exists(previous)) {
        Schema old = parse(previous);
        writers.putIfAbsent(SchemaNormalization.parsingFingerprint64(old), old);
      }
      family = new Family(current, writers);
      families.put(stem, family);
    }
    return family;
  }

  Unframed unframe(String stem, byte[] value) throws IOException, DecodeException {
    Family family = family(stem);
    if (value.length == 0) {
      throw new DecodeException("empty record value");
    }
    if ((value[0] & 0xff) == 0xc3 && value.length > 1 && value[1] == 0x01) {
      if (value.length < 10) {
        throw new DecodeException("truncated single-object header");
      }
      long fingerprint = ByteBuffer.wrap(value, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
      Schema writer = family.writers().get(fingerprint);
      if (writer == null) {
        throw new DecodeException(
            "unknown " + stem + " schema fingerprint " + HEX.formatHex(value, 2, 10));
      }
      return new Unframed(writer, Arrays.copyOfRange(value, 10, value.length));
    }
    if (value[0] == 0x00) {
      if (value.length < 5) {
        throw new DecodeException("truncated Confluent header");
      }
      int id = ByteBuffer.wrap(value, 1, 4).order(ByteOrder.BIG_ENDIAN).getInt();
      Schema writer = confluent.get(id);
      if (writer == null) {
        throw new DecodeException(
            "unknown Confluent schema id " + id + " (give it with --confluent-id)");
      }
      return new Unframed(writer, Arrays.copyOfRange(value, 5, value.length));
    }
    throw new DecodeException(String.format("unknown framing: first byte 0x%02x", value[0]));
  }

  Decoded decode(String stem, byte[] value) throws IOException, DecodeException {
    Schema reader = family(stem).reader();
    Unframed unframed = unframe(stem, value);
    BinaryDecoder in = DecoderFactory.get().binaryDecoder(unframed.datum(), null);
    Object record;
    try {
      record = new GenericDatumReader<Object>(unframed.writer(), reader).read(null, in);
      if (!in.isEnd()) {
        throw new DecodeException("trailing bytes after the datum");
      }
    } catch (IOException | RuntimeException error) {
      throw new DecodeException("not a " + stem + " datum: " + error);
    }
    return new Decoded((ObjectNode) toJson(reader, record), unframed.datum());
  }

  /**
   * The decoded-JSON mapping: a record is an object with its fields in schema order, a union
   * null or its bare branch, an enum its symbol, an int or long an integer, bytes and fixed
   * lowercase hex.
   */
  static JsonNode toJson(Schema schema, Object value) {
    switch (schema.getType()) {
      case NULL:
        return NODES.nullNode();
      case UNION:
        if (value == null) {
          return NODES.nullNode();
        }
        int branch = GenericData.get().resolveUnion(schema, value);
        return toJson(schema.getTypes().get(branch), value);
      case RECORD:
        ObjectNode object = NODES.objectNode();
        IndexedRecord record = (IndexedRecord) value;
        for (Schema.Field field : schema.getFields()) {
          object.set(field.name(), toJson(field.schema(), record.get(field.pos())));
        }
        return object;
      case ARRAY:
        ArrayNode array = NODES.arrayNode();
        for (Object item : (List<?>) value) {
          array.add(toJson(schema.getElementType(), item));
        }
        return array;
      case MAP:
        ObjectNode map = NODES.objectNode();
        for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
          map.set(entry.getKey().toString(), toJson(schema.getValueType(), entry.getValue()));
        }
        return map;
      case ENUM:
      case STRING:
        return NODES.textNode(value.toString());
      case BYTES:
        ByteBuffer buffer = ((ByteBuffer) value).duplicate();
        byte[] bytes = new byte[buffer.remaining()];
        buffer.get(bytes);
        return NODES.textNode(HEX.formatHex(bytes));
      case FIXED:
        return NODES.textNode(HEX.formatHex(((GenericFixed) value).bytes()));
      case INT:
        return NODES.numberNode((Integer) value);
      case LONG:
        return NODES.numberNode((Long) value);
      case FLOAT:
        return NODES.numberNode((Float) value);
      case DOUBLE:
        return NODES.numberNode((Double) value);
      case BOOLEAN:
        return NODES.booleanNode((Boolean) value);
      default:
        throw new IllegalArgumentException("no JSON mapping for " + schema.getType());
    }
  }

  /** JSON equality by value: objects by their members whatever the order, numbers by value. */
  static boolean sameJson(JsonNode a, JsonNode b) {
    if (a.isNumber() && b.isNumber()) {
      return a.decimalValue().compareTo(b.decimalValue()) == 0;
    }
    if (a.getNodeType() != b.getNodeType()) {
      return false;
    }
    if (a.isObject()) {
      if (a.size() != b.size()) {
        return false;
      }
      var names = a.fieldNames();
      while (names.hasNext()) {
        String name = names.next();
        if (!b.has(name) || !sameJson(a.get(name), b.get(name))) {
          return false;
        }
      }
      return true;
    }
    if (a.isArray()) {
      if (a.size() != b.size()) {
        return false;
      }
      for (int index = 0; index < a.size(); index++) {
        if (!sameJson(a.get(index), b.get(index))) {
          return false;
        }
      }
      return true;
    }
    return a.equals(b);
  }
}
