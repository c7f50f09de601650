"""The unit tier: no ZooKeeper, no Kafka, no JVM; one folder per folder of zkconsumer/."""
