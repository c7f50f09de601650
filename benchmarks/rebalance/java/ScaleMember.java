// A group member running Kafka's own ZooKeeper consumer (kafka.javaapi.consumer), for
// benchmarks.rebalance.scale: N streams on each of several topics, which Kafka's
// ConsoleConsumer (one stream) cannot do. Compiled by the benchmark against Kafka's jars.
//   java -cp <kafka libs>:<dir> ScaleMember <consumer.properties> <topic,topic,...> <streams per topic>
// Drains its streams; SIGTERM runs connector.shutdown() (a clean leave); prints "READY" once
// createMessageStreams returned.
import java.io.FileInputStream;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import kafka.consumer.Consumer;
import kafka.consumer.ConsumerConfig;
import kafka.consumer.ConsumerIterator;
import kafka.consumer.KafkaStream;
import kafka.javaapi.consumer.ConsumerConnector;

public final class ScaleMember {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        final ConsumerConnector connector = Consumer.createJavaConsumerConnector(new ConsumerConfig(props));
        Map<String, Integer> counts = new HashMap<>();
        for (String topic : args[1].split(",")) {
            counts.put(topic, Integer.parseInt(args[2]));
        }
        Runtime.getRuntime().addShutdownHook(new Thread(connector::shutdown));
        Map<String, List<KafkaStream<byte[], byte[]>>> streams = connector.createMessageStreams(counts);
        List<Thread> threads = new ArrayList<>();
        for (List<KafkaStream<byte[], byte[]>> list : streams.values()) {
            for (final KafkaStream<byte[], byte[]> stream : list) {
                Thread t = new Thread(() -> {
                    ConsumerIterator<byte[], byte[]> it = stream.iterator();
                    try {
                        while (it.hasNext()) {
                            it.next();
                        }
                    } catch (RuntimeException e) {
                        // shutdown
                    }
                });
                t.setDaemon(true);
                t.start();
                threads.add(t);
            }
        }
        System.err.println("READY");
        System.err.flush();
        for (Thread t : threads) {
            t.join();
        }
    }
}
