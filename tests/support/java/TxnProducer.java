// A transactional producer written with Apache Kafka's own Java client (kafka-clients 4.x),
// run as a single source file (java -cp <kafka jars> TxnProducer.java ...): against a Kafka 4
// cluster where transaction.version=2 is finalized it runs transactions v2 (KIP-890), whose
// every commit or abort bumps the producer epoch (the marker carries the new one).
//
//   TxnProducer BOOTSTRAP TOPIC TRANSACTIONAL_ID TRANSACTIONS RECORDS_EACH ABORT_EVERY CODEC
//
// Each transaction writes RECORDS_EACH records to partition 0; every ABORT_EVERY-th one is
// aborted (0: none). Prints "done N" once every transaction has ended.
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class TxnProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], tid = args[2];
        int transactions = Integer.parseInt(args[3]);
        int each = Integer.parseInt(args[4]);
        int abortEvery = Integer.parseInt(args[5]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", tid);
        props.put("compression.type", args[6]);
        props.put("linger.ms", "2");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            for (int t = 0; t < transactions; t++) {
                producer.beginTransaction();
                for (int i = 0; i < each; i++) {
                    String key = tid + "-" + t + "-" + i;
                    producer.send(new ProducerRecord<>(topic, 0, key.getBytes(), ("value of " + key).getBytes()));
                }
                if (abortEvery > 0 && t % abortEvery == abortEvery - 1) {
                    producer.abortTransaction();
                } else {
                    producer.commitTransaction();
                }
            }
        }
        System.out.println("done " + transactions);
    }
}
