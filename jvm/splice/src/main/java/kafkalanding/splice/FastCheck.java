package kafkalanding.splice;

import static kafkalanding.splice.Contract.BODY_CHECK_CONFIG;
import static kafkalanding.splice.Contract.DEAD;
import static kafkalanding.splice.Contract.UNSURE;

import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The body check as a Spark UDF ({@link Contract#BODY_CHECK_CLASS}, registered by the decode,
 * decode.register_body_check): a body's {@link BodyCheck} verdict as a row of status, routing
 * value, event time, rule and field (decode.BODY_CHECK_TYPE).
 *
 * <p>Its argument besides the body is a short key; the config it names is a session setting,
 * {@link Contract#BODY_CHECK_CONFIG} + key, which Spark hands every task of the query. A key, not
 * the config itself: a UDF's string argument becomes a new Java string on every row, and a schema
 * can be tens of kilobytes.
 */
public final class FastCheck implements UDF2<byte[], String, Row> {
  private static final long serialVersionUID = 1L;
  private static final ConcurrentHashMap<String, BodyCheck> CHECKS = new ConcurrentHashMap<>();
  private static final Row NOT_SURE = RowFactory.create(UNSURE, null, null, null, null);

  @Override
  public Row call(byte[] body, String key) {
    if (body == null || key == null) {
      return NOT_SURE;
    }
    // A verdict of its own: one check serves the UDF's tasks at once.
    BodyCheck.Verdict v = CHECKS.computeIfAbsent(key, FastCheck::check).check(body, 0, body.length,
        new BodyCheck.Verdict());
    if (v.status == DEAD) {
      return RowFactory.create(DEAD, null, null, v.rule, v.field);
    }
    return v.status == UNSURE ? NOT_SURE : RowFactory.create(v.status, v.route, v.event, null, null);
  }

  private static BodyCheck check(String key) {
    TaskContext task = TaskContext.get();
    String config = task == null ? null : task.getLocalProperty(BODY_CHECK_CONFIG + key);
    if (config == null) {
      throw new IllegalStateException("the body check has no config " + BODY_CHECK_CONFIG + key + " in its query's "
          + "session settings: set it before the query runs (decode.register_body_check)");
    }
    return new BodyCheck(config);
  }
}
