package kafkalanding.splice;

import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The direct landing as a table Spark reads once, in a batch: its rows are the tasks' {@link ResultRows}. */
final class LandTable implements Table, SupportsRead {
  private final LandingJob job;

  LandTable(LandingJob job) {
    this.job = job;
  }

  @Override
  public String name() {
    return Contract.DIRECT_FORMAT + " " + job.topic;
  }

  @Override
  public StructType schema() {
    return ResultRows.SCHEMA;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return Set.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return () -> new LandScan(job);
  }
}
