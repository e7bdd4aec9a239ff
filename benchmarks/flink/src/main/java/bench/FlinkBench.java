package bench;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.time.Duration;
import java.util.Properties;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.api.java.tuple.Tuple4;
import org.apache.flink.api.java.tuple.Tuple5;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.connector.kafka.source.reader.deserializer.KafkaRecordDeserializationSchema;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.windowing.assigners.EventTimeSessionWindows;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The benchmark's four workloads in Apache Flink's DataStream API with its Kafka connector,
 * configured by the BENCH_* environment variables of benchmarks/common.py plus BENCH_PARALLELISM
 * (1 or 2), in a local MiniCluster (StreamExecutionEnvironment.createLocalEnvironment): one JVM,
 * no Flink distribution.
 *
 * <p>As the other systems: the same Avro schemas (schemaless binary bodies), checkpoints every
 * BENCH_COMMIT_MS with the source's offsets committed to the group BENCH_GROUP on each completed
 * checkpoint (which the suite samples), read_committed input, and for exactly_once a Kafka sink
 * whose transactions commit with the checkpoint (a transactional-id prefix per run). W2 is
 * KeyedStream.reduce, which emits the updated aggregate for every record (as Kafka Streams with
 * its record cache off); W3/W4 are event-time windows on the value's ts with a watermark bound of
 * 2 s per Kafka partition (Flink's bounded-out-of-orderness watermark is max ts − bound − 1, so a
 * window [start, end) fires once a partition's records reach end + 2 s, where Kafka Streams'
 * grace of 2 s closes it) and no allowed lateness: each window emits once, when it fires. Flink's
 * session window is [first, last + gap), the shared schema's end already.
 *
 * <p>State: Flink's default heap backend ("hashmap"), checkpoints to files under BENCH_STATE_DIR.
 * No restart strategy: a failure ends the process, which the suite reports.
 */
public final class FlinkBench {
    static final long WINDOW_MS = 10_000;
    static final long BOUND_MS = 2_000;
    static final long GAP_MS = 1_001;

    /** An input event decoded: (key, value, ts). */
    static final TypeInformation<Tuple3<String, Long, Long>> EVENT = Types.TUPLE(Types.STRING, Types.LONG, Types.LONG);

    public static void main(String[] args) throws Exception {
        String workload = env("BENCH_WORKLOAD");
        boolean eos = env("BENCH_GUARANTEE").equals("exactly_once");
        long commitMs = Long.parseLong(env("BENCH_COMMIT_MS"));
        int parallelism = Integer.parseInt(System.getenv().getOrDefault("BENCH_PARALLELISM", "1"));
        String avroDir = env("BENCH_AVRO_DIR");

        Configuration conf = new Configuration();
        conf.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        conf.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, new File(env("BENCH_STATE_DIR"), "checkpoints").toURI().toString());
        conf.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
        conf.set(RestOptions.BIND_ADDRESS, "127.0.0.1");
        conf.set(RestOptions.BIND_PORT, "0");
        StreamExecutionEnvironment flink = StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
        flink.enableCheckpointing(commitMs, eos ? CheckpointingMode.EXACTLY_ONCE : CheckpointingMode.AT_LEAST_ONCE);

        boolean eventTime = workload.equals("w3") || workload.equals("w4");
        WatermarkStrategy<Tuple3<String, Long, Long>> watermarks = eventTime
                ? WatermarkStrategy.<Tuple3<String, Long, Long>>forBoundedOutOfOrderness(Duration.ofMillis(BOUND_MS))
                        .withTimestampAssigner((e, kafkaTs) -> e.f2)
                : WatermarkStrategy.noWatermarks();  // records keep their Kafka timestamp (W2's output copies it)
        DataStream<Tuple3<String, Long, Long>> in = flink.fromSource(source(avroDir), watermarks, "input");
        String eventSchema = read(avroDir, "event");
        switch (workload) {
            case "w1" -> in.filter(e -> e.f1 % 5 != 0)
                    .map(e -> Tuple3.of(e.f0, e.f1 * 3 + 1, e.f2)).returns(EVENT)
                    .sinkTo(sink(eos, new AvroOut<Tuple3<String, Long, Long>>(eventSchema, (e, r) -> {
                        r.put("key", e.f0);
                        r.put("value", e.f1);
                        r.put("ts", e.f2);
                    })));
            case "w2" -> in.map(e -> Tuple3.of(e.f0, 1L, e.f1)).returns(EVENT)  // (key, count, sum)
                    .keyBy(e -> e.f0)
                    .reduce((a, b) -> Tuple3.of(a.f0, a.f1 + b.f1, a.f2 + b.f2))
                    .sinkTo(sink(eos, new AvroOut<Tuple3<String, Long, Long>>(read(avroDir, "agg"), (a, r) -> {
                        r.put("count", a.f1);
                        r.put("sum", a.f2);
                    })));
            case "w3" -> in.keyBy(e -> e.f0)
                    .window(TumblingEventTimeWindows.of(Duration.ofMillis(WINDOW_MS)))
                    .aggregate(new CountSum(), new Average())
                    .sinkTo(sink(eos, new AvroOut<Tuple4<String, Long, Long, Double>>(read(avroDir, "window_avg"), (w, r) -> {
                        r.put("start", w.f1);
                        r.put("end", w.f2);
                        r.put("value", w.f3);
                    })));
            case "w4" -> in.keyBy(e -> e.f0)
                    .window(EventTimeSessionWindows.withGap(Duration.ofMillis(GAP_MS)))
                    .aggregate(new CountSum(), new Session())
                    .sinkTo(sink(eos, new AvroOut<Tuple5<String, Long, Long, Long, Long>>(read(avroDir, "session"), (s, r) -> {
                        GenericRecord cs = new GenericData.Record(r.getSchema().getField("value").schema());
                        cs.put("count", s.f3);
                        cs.put("sum", s.f4);
                        r.put("start", s.f1);
                        r.put("end", s.f2);
                        r.put("value", cs);
                    })));
            default -> throw new IllegalArgumentException("unknown workload " + workload + "; Fix: BENCH_WORKLOAD=w1|w2|w3|w4");
        }
        flink.execute("bench-" + workload);
    }

    static KafkaSource<Tuple3<String, Long, Long>> source(String avroDir) throws IOException {
        return KafkaSource.<Tuple3<String, Long, Long>>builder()
                .setBootstrapServers(env("BENCH_BOOTSTRAP"))
                .setTopics(env("BENCH_INPUT"))
                .setGroupId(env("BENCH_GROUP"))
                .setStartingOffsets(OffsetsInitializer.earliest())  // a fresh group per run
                .setDeserializer(new AvroIn(read(avroDir, "event")))
                .setProperty("isolation.level", "read_committed")
                .setProperty("commit.offsets.on.checkpoint", "true")
                .build();
    }

    static <T extends Tuple> KafkaSink<T> sink(boolean eos, AvroOut<T> out) {
        Properties producer = new Properties();
        producer.setProperty("linger.ms", "5");
        producer.setProperty("compression.type", "lz4");
        // the broker's transaction.max.timeout.ms (Flink's default of 1 h is above it): a
        // transaction lasts a checkpoint, however long that takes
        producer.setProperty("transaction.timeout.ms", "900000");
        out.topic = env("BENCH_OUTPUT");
        return KafkaSink.<T>builder()
                .setBootstrapServers(env("BENCH_BOOTSTRAP"))
                .setKafkaProducerConfig(producer)
                .setRecordSerializer(out)
                .setDeliveryGuarantee(eos ? DeliveryGuarantee.EXACTLY_ONCE : DeliveryGuarantee.AT_LEAST_ONCE)
                .setTransactionalIdPrefix(env("BENCH_GROUP"))  // the group is new in every run
                .build();
    }

    /** (count, sum) of the values, merged for sessions. */
    static final class CountSum implements AggregateFunction<Tuple3<String, Long, Long>, long[], long[]> {
        @Override
        public long[] createAccumulator() {
            return new long[] {0, 0};
        }

        @Override
        public long[] add(Tuple3<String, Long, Long> e, long[] acc) {
            acc[0] += 1;
            acc[1] += e.f1;
            return acc;
        }

        @Override
        public long[] getResult(long[] acc) {
            return acc;
        }

        @Override
        public long[] merge(long[] a, long[] b) {
            return new long[] {a[0] + b[0], a[1] + b[1]};
        }
    }

    /** W3: (key, start, end, average). */
    static final class Average extends ProcessWindowFunction<long[], Tuple4<String, Long, Long, Double>, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<long[]> accs, Collector<Tuple4<String, Long, Long, Double>> out) {
            long[] a = accs.iterator().next();
            out.collect(Tuple4.of(key, ctx.window().getStart(), ctx.window().getEnd(), (double) a[1] / a[0]));
        }
    }

    /** W4: (key, start, end = last record + gap, count, sum). */
    static final class Session extends ProcessWindowFunction<long[], Tuple5<String, Long, Long, Long, Long>, String, TimeWindow> {
        @Override
        public void process(String key, Context ctx, Iterable<long[]> accs, Collector<Tuple5<String, Long, Long, Long, Long>> out) {
            long[] a = accs.iterator().next();
            out.collect(Tuple5.of(key, ctx.window().getStart(), ctx.window().getEnd(), a[0], a[1]));
        }
    }

    /** Schemaless Avro bench.Event bodies (as fastavro's schemaless reader) into (key, value, ts). */
    static final class AvroIn implements KafkaRecordDeserializationSchema<Tuple3<String, Long, Long>> {
        private final String schemaJson;
        private transient GenericDatumReader<GenericRecord> reader;
        private transient BinaryDecoder decoder;

        AvroIn(String schemaJson) {
            this.schemaJson = schemaJson;
        }

        @Override
        public void deserialize(ConsumerRecord<byte[], byte[]> record, Collector<Tuple3<String, Long, Long>> out) throws IOException {
            if (record.value() == null) {
                return;
            }
            if (reader == null) {
                reader = new GenericDatumReader<>(new Schema.Parser().parse(schemaJson));
            }
            decoder = DecoderFactory.get().binaryDecoder(record.value(), decoder);
            GenericRecord r = reader.read(null, decoder);
            out.collect(Tuple3.of(r.get("key").toString(), (Long) r.get("value"), (Long) r.get("ts")));
        }

        @Override
        public TypeInformation<Tuple3<String, Long, Long>> getProducedType() {
            return EVENT;
        }
    }

    /** Fills an output record of the schema from a tuple whose field 0 is the key. */
    interface Fill<T> extends Serializable {
        void fill(T element, GenericRecord record);
    }

    /** Key (the tuple's field 0, UTF-8) and a schemaless Avro body; the record's timestamp is the element's. */
    static final class AvroOut<T extends Tuple> implements KafkaRecordSerializationSchema<T> {
        private final String schemaJson;
        private final Fill<T> fill;
        String topic;
        private transient Schema schema;
        private transient GenericDatumWriter<GenericRecord> writer;
        private transient BinaryEncoder encoder;
        private transient ByteArrayOutputStream bytes;

        AvroOut(String schemaJson, Fill<T> fill) {
            this.schemaJson = schemaJson;
            this.fill = fill;
        }

        @Override
        public ProducerRecord<byte[], byte[]> serialize(T element, KafkaSinkContext context, Long timestamp) {
            if (writer == null) {
                schema = new Schema.Parser().parse(schemaJson);
                writer = new GenericDatumWriter<>(schema);
                bytes = new ByteArrayOutputStream(64);
            }
            GenericRecord r = new GenericData.Record(schema);
            fill.fill(element, r);
            try {
                bytes.reset();
                encoder = EncoderFactory.get().binaryEncoder(bytes, encoder);
                writer.write(r, encoder);
                encoder.flush();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            String key = element.getField(0);
            return new ProducerRecord<>(topic, null, timestamp, key.getBytes(java.nio.charset.StandardCharsets.UTF_8),
                    bytes.toByteArray());
        }
    }

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null) {
            throw new IllegalArgumentException("missing environment variable " + name + "; Fix: start it through benchmarks/suite.py");
        }
        return v;
    }

    static String read(String dir, String name) throws IOException {
        return Files.readString(new File(dir, name + ".avsc").toPath());
    }
}
