package bench;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The benchmark's four workloads in Kafka Streams (DSL), configured by the BENCH_* environment
 * variables of benchmarks/common.py. Same Avro schemas (schemaless binary bodies), same
 * checkpoint/commit interval, same out-of-orderness bound (grace), per-record emission of the
 * rolling aggregate (record cache off) and final window results through suppress(untilWindowCloses),
 * the documented way to emit a window once, when it closes (emitStrategy(onWindowClose()) checks
 * only once per emit interval of wall-clock time, so the last windows of a backlog would wait for
 * a record that never comes).
 *
 * <p>j1 (stream-table join): the customers topic as a KTable materialized in a versioned store
 * (Stores.persistentVersionedKeyValueStore, history of one day), so that KStream.leftJoin looks up
 * each order's customer as of the order's timestamp rather than the latest value; with a grace
 * period (BENCH_JOIN_GRACE_MS, default the 2 s bound) the orders wait in a buffer until stream
 * time has passed them by that much, the documented way to join out-of-order records as of
 * their time.
 */
public final class KStreamsBench {
    static final long WINDOW_MS = 10_000;
    static final long BOUND_MS = 2_000;
    static final long GAP_MS = 1_001;
    static final Duration HISTORY = Duration.ofDays(1);

    public static void main(String[] args) throws Exception {
        String workload = env("BENCH_WORKLOAD");
        String avroDir = env("BENCH_AVRO_DIR");
        StreamsBuilder builder = new StreamsBuilder();
        if (workload.equals("j1")) {
            join(builder, avroDir);
        } else {
            workload(builder, workload, avroDir);
        }
        run(builder);
    }

    /** j1: orders (BENCH_INPUT) left-joined with the customers (BENCH_TABLE) as of each order's time. */
    static void join(StreamsBuilder builder, String avroDir) throws IOException {
        Schema customer = parse(avroDir, "customer");
        Schema order = parse(avroDir, "order");
        Schema enriched = parse(avroDir, "enriched");
        AvroSerde customerSerde = new AvroSerde(customer);
        AvroSerde orderSerde = new AvroSerde(order);
        KTable<String, GenericRecord> customers = builder.table(env("BENCH_TABLE"),
                Consumed.with(Serdes.String(), (Serde<GenericRecord>) customerSerde).withTimestampExtractor(new TsExtractor()),
                Materialized.<String, GenericRecord>as(Stores.persistentVersionedKeyValueStore("customers", HISTORY))
                        .withKeySerde(Serdes.String()).withValueSerde(customerSerde));
        builder.stream(env("BENCH_INPUT"),
                        Consumed.with(Serdes.String(), (Serde<GenericRecord>) orderSerde).withTimestampExtractor(new TsExtractor()))
                .leftJoin(customers, (o, c) -> {
                    GenericRecord r = new GenericData.Record(enriched);
                    r.put("id", o.get("id"));
                    r.put("customer", o.get("customer"));
                    r.put("amount", o.get("amount"));
                    r.put("ts", o.get("ts"));
                    r.put("customer_value", c == null ? null : c.get("value"));
                    return (GenericRecord) r;
                }, Joined.with(Serdes.String(), orderSerde, customerSerde).withGracePeriod(Duration.ofMillis(
                        Long.parseLong(System.getenv().getOrDefault("BENCH_JOIN_GRACE_MS", String.valueOf(BOUND_MS))))))
                .to(env("BENCH_OUTPUT"), Produced.with(Serdes.String(), new AvroSerde(enriched)));
    }

    static void workload(StreamsBuilder builder, String workload, String avroDir) throws IOException {
        Schema event = parse(avroDir, "event");
        Schema agg = parse(avroDir, "agg");
        Schema windowAvg = parse(avroDir, "window_avg");
        Schema session = parse(avroDir, "session");
        AvroSerde eventSerde = new AvroSerde(event);
        Consumed<String, GenericRecord> consumed = Consumed.with(Serdes.String(), (Serde<GenericRecord>) eventSerde);
        if (workload.equals("w3") || workload.equals("w4")) {
            consumed = consumed.withTimestampExtractor(new TsExtractor());
        }
        KStream<String, GenericRecord> in = builder.stream(env("BENCH_INPUT"), consumed);
        String out = env("BENCH_OUTPUT");
        Grouped<String, GenericRecord> grouped = Grouped.with(Serdes.String(), eventSerde);
        switch (workload) {
            case "w1" -> in.filter((k, v) -> (Long) v.get("value") % 5 != 0)
                    .mapValues(v -> {
                        GenericRecord r = new GenericData.Record(event);
                        r.put("key", v.get("key"));
                        r.put("value", (Long) v.get("value") * 3 + 1);
                        r.put("ts", v.get("ts"));
                        return (GenericRecord) r;
                    })
                    .to(out, Produced.with(Serdes.String(), eventSerde));
            case "w2" -> in.groupByKey(grouped)
                    .aggregate(() -> new long[] {0, 0}, KStreamsBench::add,
                            Materialized.<String, long[], KeyValueStore<Bytes, byte[]>>as("count-sum")
                                    .withKeySerde(Serdes.String()).withValueSerde(new PairSerde()))
                    .toStream()
                    .mapValues(a -> {
                        GenericRecord r = new GenericData.Record(agg);
                        r.put("count", a[0]);
                        r.put("sum", a[1]);
                        return (GenericRecord) r;
                    })
                    .to(out, Produced.with(Serdes.String(), new AvroSerde(agg)));
            case "w3" -> in.groupByKey(grouped)
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(BOUND_MS)))
                    .aggregate(() -> new long[] {0, 0}, KStreamsBench::add,
                            Materialized.<String, long[], WindowStore<Bytes, byte[]>>as("avg")
                                    .withKeySerde(Serdes.String()).withValueSerde(new PairSerde()))
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                    .toStream()
                    .map((wk, a) -> {
                        GenericRecord r = new GenericData.Record(windowAvg);
                        r.put("start", wk.window().start());
                        r.put("end", wk.window().end());
                        r.put("value", (double) a[1] / a[0]);
                        return KeyValue.pair(wk.key(), (GenericRecord) r);
                    })
                    .to(out, Produced.with(Serdes.String(), new AvroSerde(windowAvg)));
            case "w4" -> in.groupByKey(grouped)
                    .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(GAP_MS), Duration.ofMillis(BOUND_MS)))
                    .aggregate(() -> new long[] {0, 0}, KStreamsBench::add,
                            (k, a, b) -> new long[] {a[0] + b[0], a[1] + b[1]},
                            Materialized.<String, long[], SessionStore<Bytes, byte[]>>as("sessions")
                                    .withKeySerde(Serdes.String()).withValueSerde(new PairSerde()))
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                    .toStream()
                    .filter((wk, a) -> a != null)
                    .map((wk, a) -> {
                        Schema cs = session.getField("value").schema();
                        GenericRecord v = new GenericData.Record(cs);
                        v.put("count", a[0]);
                        v.put("sum", a[1]);
                        GenericRecord r = new GenericData.Record(session);
                        r.put("start", wk.window().start());
                        r.put("end", wk.window().end() + GAP_MS);  // Kafka Streams' end is the last record
                        r.put("value", v);
                        return KeyValue.pair(wk.key(), (GenericRecord) r);
                    })
                    .to(out, Produced.with(Serdes.String(), new AvroSerde(session)));
            default -> throw new IllegalArgumentException("unknown workload " + workload);
        }
    }

    static void run(StreamsBuilder builder) throws InterruptedException {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, env("BENCH_GROUP"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, env("BENCH_BOOTSTRAP"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                env("BENCH_GUARANTEE").equals("exactly_once") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(env("BENCH_COMMIT_MS")));
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);  // one output per input record, as the others
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Integer.parseInt(System.getenv().getOrDefault("BENCH_THREADS", "1")));
        props.put(StreamsConfig.STATE_DIR_CONFIG, env("BENCH_STATE_DIR"));
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.COMPRESSION_TYPE_CONFIG), "lz4");

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            done.countDown();
        }));
        streams.setUncaughtExceptionHandler(e -> {
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        done.await();
    }

    static long[] add(String key, GenericRecord v, long[] acc) {
        return new long[] {acc[0] + 1, acc[1] + (Long) v.get("value")};
    }

    static String env(String name) {
        String v = System.getenv(name);
        if (v == null) {
            throw new IllegalArgumentException("missing environment variable " + name);
        }
        return v;
    }

    static Schema parse(String dir, String name) throws IOException {
        return new Schema.Parser().parse(new File(dir, name + ".avsc"));
    }

    /** The event-time timestamp: the value's ts field (the value is deserialized already). */
    public static final class TsExtractor implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            Object v = record.value();
            return v instanceof GenericRecord g ? (Long) g.get("ts") : record.timestamp();
        }
    }

    /** Schemaless Avro binary bodies (no registry, no header), as fastavro's schemaless reader/writer. */
    static final class AvroSerde implements Serde<GenericRecord>, Serializer<GenericRecord>, Deserializer<GenericRecord> {
        private final Schema schema;
        private final ThreadLocal<GenericDatumReader<GenericRecord>> reader;
        private final ThreadLocal<GenericDatumWriter<GenericRecord>> writer;
        private final ThreadLocal<BinaryDecoder> decoder = new ThreadLocal<>();
        private final ThreadLocal<BinaryEncoder> encoder = new ThreadLocal<>();

        AvroSerde(Schema schema) {
            this.schema = schema;
            this.reader = ThreadLocal.withInitial(() -> new GenericDatumReader<>(schema));
            this.writer = ThreadLocal.withInitial(() -> new GenericDatumWriter<>(schema));
        }

        @Override
        public byte[] serialize(String topic, GenericRecord data) {
            if (data == null) {
                return null;
            }
            try {
                ByteArrayOutputStream bytes = new ByteArrayOutputStream(64);
                BinaryEncoder enc = EncoderFactory.get().binaryEncoder(bytes, encoder.get());
                encoder.set(enc);
                writer.get().write(data, enc);
                enc.flush();
                return bytes.toByteArray();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public GenericRecord deserialize(String topic, byte[] data) {
            if (data == null) {
                return null;
            }
            try {
                BinaryDecoder dec = DecoderFactory.get().binaryDecoder(data, decoder.get());
                decoder.set(dec);
                return reader.get().read(null, dec);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public Serializer<GenericRecord> serializer() {
            return this;
        }

        @Override
        public Deserializer<GenericRecord> deserializer() {
            return this;
        }

        @Override
        public void configure(java.util.Map<String, ?> configs, boolean isKey) {
        }

        @Override
        public void close() {
        }
    }

    /** (count, sum) as 16 bytes. */
    static final class PairSerde implements Serde<long[]>, Serializer<long[]>, Deserializer<long[]> {
        @Override
        public byte[] serialize(String topic, long[] a) {
            return a == null ? null : ByteBuffer.allocate(16).putLong(a[0]).putLong(a[1]).array();
        }

        @Override
        public long[] deserialize(String topic, byte[] b) {
            if (b == null) {
                return null;
            }
            ByteBuffer buf = ByteBuffer.wrap(b);
            return new long[] {buf.getLong(), buf.getLong()};
        }

        @Override
        public Serializer<long[]> serializer() {
            return this;
        }

        @Override
        public Deserializer<long[]> deserializer() {
            return this;
        }

        @Override
        public void configure(java.util.Map<String, ?> configs, boolean isKey) {
        }

        @Override
        public void close() {
        }
    }
}
