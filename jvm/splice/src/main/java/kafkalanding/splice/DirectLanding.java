package kafkalanding.splice;

import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Landing without rows: each Spark task reads one offset range of one Kafka partition with a
 * Kafka consumer of its own (read_committed) and appends the records its body check vouches for
 * straight into the landing files, spliced (the body as produced, then the encoded Kafka columns,
 * a {@link LandingFile} as the splice writer's), one file per frozen task and table, in offset
 * order. No record becomes a Spark row: the rows this source returns are what the tasks wrote and
 * counted ({@link ResultRows}), for the landing to publish and to check conservation with.
 *
 * <p>It only lands what it is sure of. A record of another schema id, or with bad framing, is
 * counted (the other ids and the dead letters get jobs of their own, through the decode); as is a
 * Kafka timestamp outside years 1-9999, which the landing file's timestamp-millis cannot hold. A
 * body the strict walk refuses ({@link Contract#DEAD}) is counted as a dead letter of the id, and
 * the dead-letter job writes it with the walk's reason. A body whose routing value the walk leaves
 * to the decode ({@link Contract#UNSURE}) stops the task: it removes its files and says "unsure",
 * and the landing goes the decoding way.
 *
 * <p>The roles, a file each, as Spark's own Kafka source has them: this provider; {@link
 * LandingJob}, the options (named in {@link Contract}) parsed once on the driver; {@link LandTable}
 * and {@link LandScan}, one {@link OffsetRange} per Spark task; {@link RangeReader}, which runs
 * {@link RangeLanding}, the loop over one range, writing {@link TaskFiles}.
 */
public final class DirectLanding implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return Contract.DIRECT_FORMAT;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return ResultRows.SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new LandTable(new LandingJob(properties));
  }
}
