//! The wasm32 exports: wit-bindgen `Guest` impls that adapt the WIT functions to
//! [`Transform`]/[`Assignor`]. `export_transform!`/`export_assignor!` instantiate them in the
//! user's crate (the export symbols must be emitted there, once per component).

use core::any::Any;
use core::cell::RefCell;
use core::marker::PhantomData;

use crate::assign::{Assignor, Group, Member, MemberAssignment, Topic, TopicPartition};
use crate::bindings::assignor::exports::runnel::transform::group_assignor as wit_assignor;
use crate::bindings::assignor::runnel::transform::group_assignment as wit_assignment;
use crate::bindings::transform::exports::runnel::transform::transformer as wit_transformer;
use crate::bindings::validator::exports::runnel::transform::validation as wit_validation;
use crate::raw::{InputBatch, OutputBatch};
use crate::transform::{Instance, Transform};
use crate::validate::{Validator, ValidatorInstance};

thread_local! {
    // The instance `init` built; a component instance is single-threaded and the host calls
    // `process` only after `init`. `dyn Any` because a static cannot be generic over `T`.
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// The type `export_transform!` exports for `T`.
pub struct TransformExport<T>(PhantomData<T>);

impl<T: Transform> wit_transformer::Guest for TransformExport<T> {
    fn init(parameters: Vec<(String, String)>, output_topics: Vec<String>) -> Result<(), String> {
        let instance = Instance::<T>::new(parameters, output_topics).map_err(|e| e.into_message())?;
        INSTANCE.with(|slot| *slot.borrow_mut() = Some(Box::new(instance)));
        Ok(())
    }

    fn process(batch: InputBatch) -> Result<OutputBatch, String> {
        INSTANCE.with(|slot| {
            let mut slot = slot.borrow_mut();
            let instance = slot
                .as_mut()
                .and_then(|i| i.downcast_mut::<Instance<T>>())
                .ok_or_else(|| "process called before a successful init".to_string())?;
            let (data, records) = instance.process(&batch).map_err(|e| e.into_message())?;
            Ok(OutputBatch { data, records })
        })
    }
}

/// The type `export_assignor!` exports for `A`.
pub struct AssignorExport<A>(PhantomData<A>);

impl<A: Assignor> wit_assignor::Guest for AssignorExport<A> {
    fn name() -> String {
        A::name().to_string()
    }

    fn assign(group: wit_assignment::GroupSpec) -> Result<Vec<wit_assignment::MemberAssignment>, String> {
        let partition =
            |tp: wit_assignment::TopicPartition| TopicPartition { topic: tp.topic, partition: tp.partition };
        let group = Group {
            members: group
                .members
                .into_iter()
                .map(|m| Member {
                    member_id: m.member_id,
                    rack: m.rack,
                    subscriptions: m.subscriptions,
                    owned: m.owned.into_iter().map(partition).collect(),
                })
                .collect(),
            topics: group
                .topics
                .into_iter()
                .map(|t| Topic { name: t.name, partition_sizes: t.partition_sizes, partition_racks: t.partition_racks })
                .collect(),
            racks: group.racks,
            rack_sets: group.rack_sets,
        };
        let result = A::assign(&group).map_err(|e| e.into_message())?;
        Ok(result
            .into_iter()
            .map(|a: MemberAssignment| wit_assignment::MemberAssignment {
                member: a.member,
                partitions: a
                    .partitions
                    .into_iter()
                    .map(|tp| wit_assignment::TopicPartition { topic: tp.topic, partition: tp.partition })
                    .collect(),
            })
            .collect())
    }
}

/// The type `export_validator!` exports for `V`.
pub struct ValidatorExport<V>(PhantomData<V>);

impl<V: Validator> wit_validation::Guest for ValidatorExport<V> {
    fn init(parameters: Vec<(String, String)>) -> Result<(), String> {
        let instance = ValidatorInstance::<V>::new(parameters).map_err(|e| e.into_message())?;
        INSTANCE.with(|slot| *slot.borrow_mut() = Some(Box::new(instance)));
        Ok(())
    }

    fn validate(batch: InputBatch) -> Result<(), wit_validation::Rejection> {
        INSTANCE.with(|slot| {
            let mut slot = slot.borrow_mut();
            let Some(instance) = slot.as_mut().and_then(|i| i.downcast_mut::<ValidatorInstance<V>>()) else {
                return Err(wit_validation::Rejection {
                    message: "validate called before a successful init".to_string(),
                    records: Vec::new(),
                });
            };
            instance.validate(&batch).map_err(|r| wit_validation::Rejection {
                message: r.message,
                records: r
                    .records
                    .into_iter()
                    .map(|e| wit_validation::RecordError { index: e.index, message: e.message })
                    .collect(),
            })
        })
    }
}
