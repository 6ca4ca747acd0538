//! Loading with options on the CPU: graphs are ignored there, every step
//! reports itself as eager with no device time, bad options are errors
//! that name the field, and models loaded with one weight cache share
//! their tensors.

mod common;

use common::repo_path;
use isobench_model::{
    CausalLm, DType, Device, KvCache, ModelFolder, ModelOptions, SeqStep, StepBatch, StepStats,
    WeightCache, load_model, load_model_cached, load_model_with, parse_device,
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
            fused_fallbacks: 0,
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

#[test]
fn models_loaded_with_one_cache_share_tensors_and_compute_the_same() {
    let folder = ModelFolder::open(repo_path("models/tiny-llama")).unwrap();
    let own = ModelOptions::default();
    let plain = ModelOptions {
        own_kernels: false,
        ..ModelOptions::default()
    };
    let cache = WeightCache::new();
    assert!(cache.is_empty());
    let mut cached_own = load_model_cached(&folder, &Device::Cpu, &own, &cache).unwrap();
    let own_tensors = cache.len();
    assert!(own_tensors > 10, "{own_tensors} tensors cached");
    // candle's ops share every tensor but the ones they stack (q/k/v and
    // gate/up, a weight each per layer; tiny-llama has no biases)...
    let layers = folder.config().num_hidden_layers;
    let mut cached_plain = load_model_cached(&folder, &Device::Cpu, &plain, &cache).unwrap();
    let tensors = cache.len();
    assert_eq!(tensors, own_tensors + 2 * layers);
    // ...which the next such model shares too: nothing new.
    let again = load_model_cached(&folder, &Device::Cpu, &plain, &cache).unwrap();
    assert_eq!(cache.len(), tensors);
    drop(again);
    // Another dtype is another set (the CPU step's, in f16).
    let f16 = ModelOptions {
        dtype: Some(DType::F16),
        ..ModelOptions::default()
    };
    let halves = load_model_cached(&folder, &Device::Cpu, &f16, &cache).unwrap();
    assert_eq!(halves.dtype(), DType::F16);
    assert_eq!(cache.len(), tensors + own_tensors);
    // Another folder has other tensors under the same names.
    let other = ModelFolder::open(repo_path("models/small-llama")).unwrap();
    let err = load_model_cached(&other, &Device::Cpu, &own, &cache)
        .err()
        .expect("a cache serves one folder")
        .to_string();
    assert!(
        err.contains("serves one model folder") && err.contains("small-llama"),
        "{err}"
    );
    assert_eq!(cache.len(), tensors + own_tensors);

    for (cached, options) in [(cached_own.as_mut(), &own), (cached_plain.as_mut(), &plain)] {
        let mut alone = load_model_with(&folder, &Device::Cpu, options).unwrap();
        let mut cache_a = KvCache::new(folder.config(), 8, 4, &Device::Cpu, DType::F32).unwrap();
        let mut cache_b = KvCache::new(folder.config(), 8, 4, &Device::Cpu, DType::F32).unwrap();
        assert_eq!(
            decode_step(cached, &mut cache_a, 3),
            decode_step(alone.as_mut(), &mut cache_b, 3)
        );
    }
}
