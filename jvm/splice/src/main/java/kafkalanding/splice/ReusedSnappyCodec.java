package kafkalanding.splice;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.zip.CRC32;

import org.apache.avro.file.Codec;
import org.apache.avro.file.CodecFactory;
import org.xerial.snappy.Snappy;

/**
 * Avro's snappy codec (the same blocks: the compressed bytes, then the CRC32 of the uncompressed
 * ones, big-endian) with one output buffer per file, reused from block to block. Avro's own
 * allocates a new buffer for every block; a block is compressed, written and done before the next
 * one, so one buffer serves them all.
 */
final class ReusedSnappyCodec extends Codec {
  static final CodecFactory FACTORY = new CodecFactory() {
    @Override
    protected Codec createInstance() {
      return new ReusedSnappyCodec();
    }
  };

  private final CRC32 crc32 = new CRC32();
  private ByteBuffer out = ByteBuffer.allocate(0);

  @Override
  public String getName() {
    return "snappy";
  }

  @Override
  public ByteBuffer compress(ByteBuffer in) throws IOException {
    int offset = computeOffset(in);
    int room = Snappy.maxCompressedLength(in.remaining()) + 4;
    if (out.capacity() < room) {
      out = ByteBuffer.allocate(room);
    }
    out.clear();
    int size = Snappy.compress(in.array(), offset, in.remaining(), out.array(), 0);
    crc32.reset();
    crc32.update(in.array(), offset, in.remaining());
    out.putInt(size, (int) crc32.getValue());
    out.limit(size + 4);
    return out;
  }

  @Override
  public ByteBuffer decompress(ByteBuffer in) throws IOException {
    int offset = computeOffset(in);
    ByteBuffer result = ByteBuffer.allocate(Snappy.uncompressedLength(in.array(), offset, in.remaining() - 4));
    int size = Snappy.uncompress(in.array(), offset, in.remaining() - 4, result.array(), 0);
    result.limit(size);
    crc32.reset();
    crc32.update(result.array(), 0, size);
    if (in.getInt(in.limit() - 4) != (int) crc32.getValue()) {
      throw new IOException("snappy block checksum failure");
    }
    return result;
  }

  @Override
  public int hashCode() {
    return getName().hashCode();
  }

  @Override
  public boolean equals(Object other) {
    return other != null && other.getClass() == getClass();
  }
}
