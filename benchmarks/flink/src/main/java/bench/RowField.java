package bench;

import org.apache.flink.api.common.serialization.SerializationSchema;
import org.apache.flink.types.Row;

/**
 * PyFlink's Kafka sink serializes the whole element into the key and into the value, and its
 * Python API has no schema that picks a field; the PyFlink app (benchmarks/apps/pyflink_app.py)
 * emits Row(key bytes, Avro body bytes) and takes field 0 as the key and field 1 as the value
 * with this schema.
 */
public final class RowField implements SerializationSchema<Row> {
    private final int index;

    public RowField(int index) {
        this.index = index;
    }

    @Override
    public byte[] serialize(Row row) {
        return (byte[]) row.getField(index);
    }
}
