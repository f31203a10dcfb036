package kafkalanding.splice;

import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.util.SerializableConfiguration;

/**
 * The landing archive read back as Kafka's records: an hour's landing files and dead letters, in
 * offset order per Kafka partition, as rows with the columns of Spark's Kafka source (the
 * timestamp as Kafka's milliseconds, and a dead letter's archived reason beside). A landing
 * record's value is its body as produced, walked out of the record by every rule ({@link
 * BodyCheck#end}), framed again with its file's schema id; a dead letter's is its raw value. So
 * landing from the archive decodes, routes and writes what landing from Kafka would.
 *
 * <p>One Spark task per segment of the option ({@link Contract#OPTION_SEGMENTS}): a contiguous
 * offset range of one partition and every file holding records of it, merged by offset ({@link
 * ArchiveReader}). An offset found in two files fails the task, naming both: an archive is one
 * landing's, never two.
 */
public final class ArchiveSource implements TableProvider, DataSourceRegister {
  /** A header, as Spark's Kafka source has one: its key and value, the names of the archive's own columns. */
  static final StructType HEADER = new StructType()
      .add(Contract.ARCHIVE_COLUMNS.get(0), DataTypes.StringType, false)
      .add(Contract.ARCHIVE_COLUMNS.get(1), DataTypes.BinaryType, true);
  static final StructType SCHEMA = schema();

  /** {@link Contract#ARCHIVE_COLUMNS} with their types: Spark's Kafka source's, the timestamp in milliseconds. */
  private static StructType schema() {
    DataType[] types = {DataTypes.BinaryType, DataTypes.BinaryType, DataTypes.StringType, DataTypes.IntegerType,
        DataTypes.LongType, DataTypes.LongType, DataTypes.createArrayType(HEADER, false), DataTypes.StringType};
    boolean[] nullable = {true, true, false, false, false, true, true, true};
    StructType s = new StructType();
    for (int i = 0; i < types.length; i++) {
      s = s.add(Contract.ARCHIVE_COLUMNS.get(i), types[i], nullable[i]);
    }
    return s;
  }

  @Override
  public String shortName() {
    return Contract.ARCHIVE_FORMAT;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new Read(ArchiveSegment.parseAll(properties.getOrDefault(Contract.OPTION_SEGMENTS, "")));
  }

  /** The table, its scan and its batch: one Spark task per segment. */
  private static final class Read implements Table, SupportsRead, Scan, Batch {
    private final ArchiveSegment[] segments;

    Read(ArchiveSegment[] segments) {
      this.segments = segments;
    }

    @Override
    public String name() {
      return Contract.ARCHIVE_FORMAT;
    }

    @Override
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> this;
    }

    @Override
    public StructType readSchema() {
      return SCHEMA;
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      return segments.clone();
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      // On the driver: the session's Hadoop settings, so a gs:// archive is read as format("avro") reads it.
      return new ArchiveReader.Factory(
          new SerializableConfiguration(SparkSession.active().sessionState().newHadoopConf()));
    }
  }
}
