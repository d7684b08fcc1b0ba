// A transactional producer for tests/cluster_transactions.rs: Kafka 4.4's Java client, which
// runs transaction version 2 (KIP-890: partitions added by producing, an epoch bump on every
// end) wherever the broker finalizes it. Runs transactions of RECORDS values "<name>-<i>" (value
// i to partition i % PARTITIONS), aborting every fourth, until its stdin closes; or, with STEPS,
// one transaction per line of stdin, "commit" or "abort", until it closes. Prints one line per
// transaction, "<OUTCOME> <name>" with OUTCOME one of COMMITTED, ABORTED, UNKNOWN (the client
// could not learn it), then DONE. Compiled with javac against the jars of scripts/kafka-jars.sh.
//
// Error handling is the one KafkaProducer's javadoc gives: a fenced or otherwise fatal producer
// is closed and a new one initialised (which aborts what the old one left open); any other
// KafkaException aborts the transaction; a commit that times out is retried.
//
// Usage: java -cp <lib>/*:<classes> TxnDriver BOOTSTRAP TRANSACTIONAL_ID TOPIC PARTITIONS RECORDS [steps]

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnDriver {
    private static final AtomicBoolean STOP = new AtomicBoolean();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String id = args[1];
        String topic = args[2];
        int partitions = Integer.parseInt(args[3]);
        int records = Integer.parseInt(args[4]);
        boolean steps = args.length > 5 && args[5].equals("steps");
        BufferedReader commands = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        if (!steps) {
            Thread stdin = new Thread(() -> {
                try {
                    while (commands.readLine() != null) {
                    }
                } catch (Exception e) {
                    // A broken stdin stops the driver as EOF does.
                }
                STOP.set(true);
            });
            stdin.setDaemon(true);
            stdin.start();
        }

        KafkaProducer<String, String> producer = null;
        long n = 0;
        while (true) {
            boolean abort;
            if (steps) {
                String command = commands.readLine();
                if (command == null) {
                    break;
                }
                abort = command.trim().equals("abort");
            } else if (STOP.get()) {
                break;
            } else {
                abort = (n + 1) % 4 == 0;
            }
            while (producer == null && !STOP.get()) {
                producer = open(bootstrap, id);
                if (producer == null) {
                    Thread.sleep(200);
                }
            }
            if (producer == null) {
                break;
            }
            n++;
            String name = id + "-" + n;
            String outcome = "UNKNOWN";
            boolean fatal = false;
            try {
                producer.beginTransaction();
                for (int i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topic, i % partitions, null, name + "-" + i));
                }
                if (abort) {
                    producer.abortTransaction();
                    outcome = "ABORTED";
                } else {
                    commit(producer);
                    outcome = "COMMITTED";
                }
            } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                System.err.println(name + ": fatal: " + e);
                fatal = true;
            } catch (TimeoutException e) {
                // A commit whose retries all timed out: its outcome is not known to the client.
                System.err.println(name + ": timed out: " + e);
                fatal = true;
            } catch (KafkaException e) {
                System.err.println(name + ": " + e + "; aborting");
                try {
                    producer.abortTransaction();
                    outcome = "ABORTED";
                } catch (KafkaException again) {
                    System.err.println(name + ": abort: " + again);
                    fatal = true;
                }
            }
            System.out.println(outcome + " " + name);
            System.out.flush();
            if (fatal) {
                close(producer);
                producer = null;
            }
        }
        if (producer != null) {
            close(producer);
        }
        System.out.println("DONE");
        System.out.flush();
    }

    /// Commits, retrying a commit that timed out (the javadoc allows calling it again).
    private static void commit(KafkaProducer<String, String> producer) {
        for (int attempt = 1;; attempt++) {
            try {
                producer.commitTransaction();
                return;
            } catch (TimeoutException e) {
                if (attempt == 3) {
                    throw e;
                }
            }
        }
    }

    /// A new producer with its transactions initialised, or null (after printing why).
    private static KafkaProducer<String, String> open(String bootstrap, String id) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
        props.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 10000);
        props.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 5000);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 10000);
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 15000);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        KafkaProducer<String, String> producer = new KafkaProducer<>(props);
        try {
            producer.initTransactions();
            return producer;
        } catch (KafkaException e) {
            System.err.println(id + ": initTransactions: " + e);
            close(producer);
            return null;
        }
    }

    private static void close(KafkaProducer<String, String> producer) {
        try {
            producer.close(java.time.Duration.ofSeconds(5));
        } catch (KafkaException e) {
            System.err.println("close: " + e);
        }
    }
}
