//! A transform built against the frozen 0.1.0 contract (`sdk/wit-0.1.0`) with wit-bindgen
//! alone, as components built before 0.2.0 were: the host must keep loading and running it.
//! It copies every record to output topic 0 and logs one line at `init` (the 0.1.0 `logging`
//! import).

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "../../../sdk/wit-0.1.0", world: "transform" });

    use exports::runnel::transform::transformer::Guest;
    use runnel::transform::logging::{log, Level};
    use runnel::transform::types::{InputBatch, OutputBatch, OutputRecord};

    struct Copy;

    impl Guest for Copy {
        fn init(_parameters: Vec<(String, String)>, output_topics: Vec<String>) -> Result<(), String> {
            log(Level::Info, &format!("v0.1 guest writing to {}", output_topics.join(",")));
            Ok(())
        }

        fn process(batch: InputBatch) -> Result<OutputBatch, String> {
            let records = batch
                .records
                .iter()
                .map(|r| OutputRecord {
                    topic: 0,
                    partition: -1,
                    timestamp: r.timestamp,
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                })
                .collect();
            Ok(OutputBatch { data: batch.data, records })
        }
    }

    export!(Copy);
}
