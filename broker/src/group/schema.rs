//! Kafka's `__consumer_offsets` key/value schemas. Placeholder until the group issue lands.
