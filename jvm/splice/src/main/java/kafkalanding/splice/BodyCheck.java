package kafkalanding.splice;

import static kafkalanding.splice.Contract.DEAD;
import static kafkalanding.splice.Contract.FIELD_SEP;
import static kafkalanding.splice.Contract.LANDS;
import static kafkalanding.splice.Contract.MAY_VOUCH;
import static kafkalanding.splice.Contract.UNSURE;

import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

import org.apache.avro.Schema;

/**
 * The body check of one writer schema, from its config ({@link Contract#BODY_CHECK_CONFIG}): the
 * strict walk ({@link BodyWalk}) through each body, and its verdict, one of three:
 *
 * <ul>
 *   <li>{@link Contract#LANDS}: every reader reads the body to its last byte and gets the same
 *       values. For it, the routing value (as a string, as Spark casts it) and the event time
 *       (epoch microseconds).
 *   <li>{@link Contract#DEAD}: it does not land; the verdict's rule says why ({@link BodyRules}),
 *       and the field it was in. The decode never runs on it: nothing that fails this walk
 *       reaches a decoder that could allocate beyond its bytes (a 6-byte array of nulls asked
 *       Avro's reader for an 8 GB array).
 *   <li>{@link Contract#UNSURE}: the bytes land as they are (the walk read all of them, by every
 *       rule), but a value the landing needs is one this walk does not compute as Spark does: a
 *       routing field of another type than string, int, long, boolean or enum (Spark's cast
 *       decides its string), an event time field of another type or out of years 1-9999 (the
 *       decode names that reason), or a check that may not vouch. The decode reads those values;
 *       the bytes are still the walked ones, never a record Avro's skip cut.
 * </ul>
 *
 * Read-only once built, so one check serves every task at once; each task brings its {@link
 * Verdict}.
 */
final class BodyCheck {
  /** What the walk says of one body; `end`: where its record ends (all of it: LANDS or UNSURE);
   * `rule` and `field`: why a DEAD one does not land, and the top-level field it was in. A task's
   * own, reused with its walk: one per record was about a tenth of what a landing allocated. */
  static final class Verdict {
    final BodyWalk walk = new BodyWalk();
    int status = UNSURE;
    String route;
    Long event;
    int end = -1;
    int rule;
    String field;

    Verdict set(int status, String route, Long event, int end) {
      this.status = status;
      this.route = route;
      this.event = event;
      this.end = end;
      this.rule = 0;
      this.field = null;
      return this;
    }
  }

  private final Schema writer;
  private final boolean mayVouch;
  private final int routeAt;
  private final int eventAt;
  /** The types whose values take no byte (null, fixed of size 0, records of only such fields):
   * an array of them may hold more items than the body has bytes. */
  private final Set<Schema> zeroWidth = Collections.newSetFromMap(new IdentityHashMap<>());

  BodyCheck(String config) {
    String[] parts = config.split(FIELD_SEP, 4);
    writer = new Schema.Parser().setValidateDefaults(false).parse(parts[3]);
    routeAt = position(parts[1]);
    eventAt = position(parts[2]);
    mayVouch = parts[0].equals(MAY_VOUCH) && (routeAt < 0 || routeAt != eventAt);
    findZeroWidth(writer, Collections.newSetFromMap(new IdentityHashMap<>()));
  }

  /** A check that never vouches, of a record schema: for {@link #end}. */
  BodyCheck(Schema writer) {
    this.writer = writer;
    routeAt = -1;
    eventAt = -1;
    mayVouch = false;
    findZeroWidth(writer, Collections.newSetFromMap(new IdentityHashMap<>()));
  }

  /**
   * Where the record that starts at `buf[start]` ends, walked by every rule, bytes after it allowed
   * (a landing record's Kafka columns follow its body); -1 if it breaks a rule, `into.rule` saying which.
   */
  int end(byte[] buf, int start, int limit, Verdict into) {
    BodyWalk w = into.walk.reset(buf, start, limit, zeroWidth);
    try {
      for (Schema.Field f : writer.getFields()) {
        w.walk(f.schema());
      }
      return w.pos;
    } catch (BodyWalk.Dead e) {
      into.rule = w.rule;
      return -1;
    }
  }

  private int position(String name) {
    Schema.Field f = name.isEmpty() ? null : writer.getField(name);
    return f == null ? -1 : f.pos();
  }

  /** Whether `s` takes no byte, noting every such type inside it; `seen` stops at recursion. */
  private boolean findZeroWidth(Schema s, Set<Schema> seen) {
    if (!seen.add(s)) {
      return zeroWidth.contains(s);  // a record inside itself: it takes bytes, or never ends
    }
    boolean zero;
    switch (s.getType()) {
      case NULL:
        zero = true;
        break;
      case FIXED:
        zero = s.getFixedSize() == 0;
        break;
      case RECORD:
        zero = true;
        for (Schema.Field f : s.getFields()) {
          zero &= findZeroWidth(f.schema(), seen);
        }
        break;
      case ARRAY:
        findZeroWidth(s.getElementType(), seen);
        zero = false;
        break;
      case MAP:
        findZeroWidth(s.getValueType(), seen);
        zero = false;
        break;
      case UNION:
        for (Schema b : s.getTypes()) {
          findZeroWidth(b, seen);
        }
        zero = false;  // its branch index takes a byte
        break;
      default:
        zero = false;
    }
    if (zero) {
      zeroWidth.add(s);
    }
    return zero;
  }

  /**
   * The verdict on the body `buf[start, limit)`, in `into`. A body lands whole or not at all:
   * bytes after its record are a rule broken, so the end of a record that lands is `limit`.
   */
  Verdict check(byte[] buf, int start, int limit, Verdict into) {
    BodyWalk w = into.walk.reset(buf, start, limit, zeroWidth);
    List<Schema.Field> fields = writer.getFields();
    int i = 0;
    try {
      String route = null;
      Long event = null;
      for (; i < fields.size(); i++) {
        Schema s = fields.get(i).schema();
        if (i == routeAt) {
          route = w.routeValue(s);
        } else if (i == eventAt) {
          event = w.eventMicros(s);
        } else {
          w.walk(s);
        }
      }
      w.end();
      return w.decode || !mayVouch ? into.set(UNSURE, null, null, limit) : into.set(LANDS, route, event, limit);
    } catch (BodyWalk.Dead e) {
      into.set(DEAD, null, null, -1);
      into.rule = w.rule;
      into.field = i < fields.size() ? fields.get(i).name() : null;
      return into;
    }
  }
}
