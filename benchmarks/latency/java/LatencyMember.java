// Kafka's own ZooKeeper consumer (kafka.javaapi.consumer, Kafka 0.9.0.1's jars) as a latency
// worker for benchmarks.latency: one stream of one topic, each message's delivery time minus the
// stamp in its first 8 bytes (microseconds since the epoch). Compiled by the benchmark.
//   java -cp <kafka libs>:<dir> LatencyMember <consumer.properties> <topic> <window file> <setting> [trace]
// Prints "READY" on stderr once createMessageStreams returned, then waits for the window file
// ("t0 t1 deadline", microseconds since the epoch, written once every worker is ready), and prints one JSON summary line on stdout
// (as benchmarks/latency/stamps.py's: nearest-rank percentiles of the messages stamped in [t0, t1),
// process CPU seconds between wall-clock t0 and t1). With a trace path, writes (partition, stamp,
// delivered) as big-endian int64 triples for every message stamped at or after t0.
import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.Arrays;
import java.util.Collections;
import java.util.Properties;

import kafka.consumer.Consumer;
import kafka.consumer.ConsumerConfig;
import kafka.consumer.ConsumerIterator;
import kafka.consumer.ConsumerTimeoutException;
import kafka.consumer.KafkaStream;
import kafka.javaapi.consumer.ConsumerConnector;
import kafka.message.MessageAndMetadata;

public final class LatencyMember {
    private static long nowUs() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1000;
    }

    private static long cpuNs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    private static long[] grow(long[] a, int n) {
        return n < a.length ? a : Arrays.copyOf(a, a.length * 2);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        String topic = args[1];
        String setting = args[3];
        DataOutputStream trace = args.length > 4
                ? new DataOutputStream(new BufferedOutputStream(new FileOutputStream(args[4]), 1 << 20)) : null;
        ConsumerConnector connector = Consumer.createJavaConsumerConnector(new ConsumerConfig(props));
        KafkaStream<byte[], byte[]> stream = connector.createMessageStreams(Collections.singletonMap(topic, 1)).get(topic).get(0);
        System.err.println("READY");
        System.err.flush();
        Path windowFile = Paths.get(args[2]);
        while (!Files.exists(windowFile)) Thread.sleep(50);
        String[] window = new String(Files.readAllBytes(windowFile), "UTF-8").trim().split("\\s+");
        final long t0 = Long.parseLong(window[0]);
        final long t1 = Long.parseLong(window[1]);
        long deadline = Long.parseLong(window[2]);
        final long[] cpu = {-1, -1};
        Thread sampler = new Thread(() -> {
            try {
                long[] at = {t0, t1};
                for (int i = 0; i < 2; i++) {
                    long wait = (at[i] - nowUs()) / 1000;
                    if (wait > 0) Thread.sleep(wait);
                    cpu[i] = cpuNs();
                }
            } catch (InterruptedException e) {
                // stopped before the window ended
            }
        });
        sampler.setDaemon(true);
        sampler.start();
        long[] latencies = new long[1 << 20];
        int n = 0;
        ConsumerIterator<byte[], byte[]> it = stream.iterator();
        outer:
        while (nowUs() < deadline) {
            try {
                while (it.hasNext()) {
                    MessageAndMetadata<byte[], byte[]> m = it.next();
                    long now = nowUs();
                    long stamp = ByteBuffer.wrap(m.message()).getLong(0);
                    if (stamp >= t0) {
                        if (stamp < t1) {
                            latencies = grow(latencies, n);
                            latencies[n++] = now - stamp;
                        }
                        if (trace != null) {
                            trace.writeLong(m.partition());
                            trace.writeLong(stamp);
                            trace.writeLong(now);
                        }
                    }
                    if (now >= deadline) break outer;
                }
            } catch (ConsumerTimeoutException e) {
                // consumer.timeout.ms: look at the deadline again
            }
        }
        sampler.interrupt();
        connector.shutdown();
        if (trace != null) trace.close();
        Arrays.sort(latencies, 0, n);
        StringBuilder out = new StringBuilder("{\"kind\": \"kafka\", \"setting\": \"" + setting + "\", \"count\": " + n);
        double cpuS = cpu[1] >= 0 ? (cpu[1] - cpu[0]) / 1e9 : -1;
        out.append(", \"cpu_s\": ").append(cpuS >= 0 ? String.valueOf(cpuS) : "null");
        String[] names = {"p50", "p99", "p999", "max"};
        long[] fractions = {500_000, 990_000, 999_000, 1_000_000};
        for (int i = 0; i < names.length; i++) {
            long rank = Math.max(1, (fractions[i] * n + 999_999) / 1_000_000);
            out.append(", \"").append(names[i]).append("_ms\": ");
            out.append(n > 0 ? String.valueOf(Math.round(latencies[(int) rank - 1]) / 1000.0) : "null");
        }
        out.append(", \"cpu_s_per_m\": ").append(cpuS >= 0 && n > 0 ? String.valueOf(Math.round(cpuS / n * 1e8) / 100.0) : "null");
        System.out.println(out.append("}"));
        System.out.flush();
        System.exit(0);
    }
}
