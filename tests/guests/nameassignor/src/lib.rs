//! An assignor of the first form (`partition-assignor`: members and topics by name), built with
//! wit-bindgen alone against the `name-assignor` world, as assignors were built before the SDK
//! moved to `group-assignor`: the host must keep loading and running it. Each subscribed
//! topic's partitions go round-robin over its subscribers in member id order; one line is
//! logged per call.

#[cfg(target_arch = "wasm32")]
mod component {
    wit_bindgen::generate!({ path: "../../../sdk/wit", world: "name-assignor" });

    use exports::runnel::transform::partition_assignor::Guest;
    use runnel::transform::assignment::{Member, MemberAssignment, TopicMetadata, TopicPartitions};
    use runnel::transform::logging::{log, Level};

    struct RoundRobin;

    impl Guest for RoundRobin {
        fn name() -> String {
            "name-round-robin".to_string()
        }

        fn assign(members: Vec<Member>, topics: Vec<TopicMetadata>) -> Result<Vec<MemberAssignment>, String> {
            log(Level::Info, &format!("assigning {} topics to {} members", topics.len(), members.len()));
            let mut order: Vec<usize> = (0..members.len()).collect();
            order.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
            let mut result: Vec<MemberAssignment> = members
                .iter()
                .map(|m| MemberAssignment { member_id: m.member_id.clone(), partitions: Vec::new() })
                .collect();
            for topic in &topics {
                let subscribers: Vec<usize> =
                    order.iter().copied().filter(|&m| members[m].subscriptions.contains(&topic.name)).collect();
                if subscribers.is_empty() {
                    continue;
                }
                let mut shares = vec![Vec::new(); subscribers.len()];
                for p in 0..topic.partition_sizes.len() {
                    shares[p % subscribers.len()].push(p as i32);
                }
                for (&m, partitions) in subscribers.iter().zip(shares) {
                    result[m].partitions.push(TopicPartitions { topic: topic.name.clone(), partitions });
                }
            }
            Ok(result)
        }
    }

    export!(RoundRobin);
}
