//! librdkafka's own flush, shared by the benchmarks that time a produce run to its last ack.

use std::time::Duration;

use rdkafka::producer::{Producer, ProducerContext, ThreadedProducer};

/// librdkafka's own flush (linger ends at once; waits until every record is delivered), which
/// rdkafka's `flush` is not: it polls in 100 ms steps and, once the last delivery report is
/// served elsewhere, waits out the step (10 transactions/s on any broker). The producer's
/// polling thread serves the delivery reports meanwhile.
pub fn flush_now<C: ProducerContext>(producer: &ThreadedProducer<C>, timeout: Duration) {
    // SAFETY: the pointer is the live producer's handle; rd_kafka_flush is thread-safe.
    let code = unsafe { rdkafka::bindings::rd_kafka_flush(producer.client().native_ptr(), timeout.as_millis() as i32) };
    assert_eq!(code, rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR, "flush");
}
