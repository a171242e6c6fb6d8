"""Produces and consumes through a Rosetta Kafka listener with kafka-python.

Usage: python3 kafka_python.py host:port topic count
"""
import sys

from kafka import KafkaConsumer, KafkaProducer


def main():
    broker, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = KafkaProducer(bootstrap_servers=broker, acks="all", compression_type="gzip")
    for i in range(count):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i)
    producer.flush(timeout=30)
    producer.close()

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker,
        group_id=topic + "-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
    )
    seen = set()
    for msg in consumer:
        if msg.value != b"v" + msg.key[1:]:
            raise SystemExit("bad message %r" % (msg.key,))
        seen.add(msg.key)
        if len(seen) == count:
            break
    consumer.commit()
    consumer.close()
    if len(seen) != count:
        raise SystemExit("consumed %d of %d" % (len(seen), count))
    print("kafka-python ok: %d messages" % len(seen))


if __name__ == "__main__":
    main()
