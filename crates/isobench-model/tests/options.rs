//! Loading with options on the CPU: graphs are ignored there, every step
//! reports itself as eager with no device time, and bad options are
//! errors that name the field.

mod common;

use common::repo_path;
use isobench_model::{
    CausalLm, Device, KvCache, ModelFolder, ModelOptions, SeqStep, StepBatch, StepStats,
    load_model, load_model_with, parse_device,
};

fn decode_step(model: &mut dyn CausalLm, cache: &mut KvCache, seqs: usize) -> Vec<Vec<f32>> {
    // Sequence i has one token at position 0 in block i.
    let batch = StepBatch {
        token_ids: (0..seqs as u32).map(|i| 10 + i).collect(),
        positions: vec![0; seqs],
        slot_mapping: (0..seqs as u32).map(|i| i * 4).collect(),
        seqs: (0..seqs as u32)
            .map(|i| SeqStep {
                num_new_tokens: 1,
                context_len: 1,
                block_table: vec![i],
            })
            .collect(),
    };
    model.forward(&batch, cache).unwrap().to_vec2().unwrap()
}

#[test]
fn graphs_are_ignored_on_the_cpu_and_steps_report_eager() {
    let folder = ModelFolder::open(repo_path("models/tiny-llama")).unwrap();
    let device = parse_device("cpu").unwrap();
    let mut with_graphs = load_model_with(&folder, &device, &ModelOptions::default()).unwrap();
    let mut plain = load_model(&folder, &Device::Cpu, None).unwrap();
    assert_eq!(with_graphs.last_step(), StepStats::default());
    let mut cache_a = KvCache::new(folder.config(), 8, 4, &device, with_graphs.dtype()).unwrap();
    let mut cache_b = KvCache::new(folder.config(), 8, 4, &device, plain.dtype()).unwrap();
    let a = decode_step(with_graphs.as_mut(), &mut cache_a, 3);
    let b = decode_step(plain.as_mut(), &mut cache_b, 3);
    assert_eq!(a, b);
    assert_eq!(
        with_graphs.last_step(),
        StepStats {
            graph_replayed: false,
            padded_batch: 3,
            device_time: None,
        }
    );
}

#[test]
fn bad_options_name_the_field() {
    let folder = ModelFolder::open(repo_path("models/tiny-llama")).unwrap();
    let options = ModelOptions {
        graph_buckets: vec![4, 0],
        ..ModelOptions::default()
    };
    let err = load_model_with(&folder, &Device::Cpu, &options)
        .err()
        .expect("bucket 0 is refused");
    assert_eq!(err.kind(), "invalid_options");
    assert!(
        err.to_string().contains("graph_buckets contains 0"),
        "{err}"
    );
    let options = ModelOptions {
        dtype: Some(isobench_model::DType::U32),
        ..ModelOptions::default()
    };
    let err = load_model_with(&folder, &Device::Cpu, &options)
        .err()
        .expect("u32 is refused");
    assert!(
        err.to_string().contains("accepted dtypes: f32, f16, bf16"),
        "{err}"
    );
}
