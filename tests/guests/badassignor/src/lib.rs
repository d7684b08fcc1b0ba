//! Hostile test assignor: misbehaves when a subscribed topic's name starts with a command.
//! `trap-` executes `unreachable`, `spin-` loops past its deadline, `membomb-` allocates until
//! the memory cap, `invalid-` returns a plan that assigns a partition twice, `error-` returns an
//! error. Otherwise it is a valid (if lopsided) assignor: every partition goes to the subscriber
//! of its topic whose member id sorts last, so a test can tell its plans from the built-ins'.

use runnel_sdk::assign::{Assignor, Group, MemberAssignment, TopicPartition};
use runnel_sdk::Error;

pub struct BadAssignor;

impl Assignor for BadAssignor {
    fn name() -> &'static str {
        "bad-assignor"
    }

    fn assign(group: &Group) -> Result<Vec<MemberAssignment>, Error> {
        for topic in &group.topics {
            let name = topic.name.as_str();
            if name.starts_with("trap-") {
                trap();
            } else if name.starts_with("spin-") {
                let mut counter = 0u64;
                loop {
                    counter = core::hint::black_box(counter).wrapping_add(1);
                }
            } else if name.starts_with("membomb-") {
                let mut hoard = Vec::new();
                loop {
                    let mut chunk = vec![0u8; 1 << 20];
                    for page in chunk.chunks_mut(4096) {
                        page[0] = core::hint::black_box(1);
                    }
                    hoard.push(core::hint::black_box(chunk));
                }
            } else if name.starts_with("error-") {
                return Err(Error::new("refused by request"));
            }
        }
        let mut result: Vec<MemberAssignment> =
            (0..group.members.len() as u32).map(|member| MemberAssignment { member, partitions: Vec::new() }).collect();
        for (t, topic) in group.topics.iter().enumerate() {
            let t = t as u32;
            let last =
                group.subscribers(t).max_by(|&a, &b| group.members[a].member_id.cmp(&group.members[b].member_id));
            let Some(last) = last else { continue };
            let mut partitions: Vec<TopicPartition> =
                (0..topic.partition_count() as i32).map(|partition| TopicPartition { topic: t, partition }).collect();
            if topic.name.starts_with("invalid-") {
                // Partition 0 twice: the host must refuse the plan.
                partitions.push(TopicPartition { topic: t, partition: 0 });
            }
            result[last].partitions.extend(partitions);
        }
        Ok(result)
    }
}

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    panic!("trap");
}

runnel_sdk::export_assignor!(BadAssignor);
