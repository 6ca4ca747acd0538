//! Where a model's tensors come from, and how model code asks for them.
//!
//! A [`WeightSource`] is either memory-mapped safetensors files (one
//! `model.safetensors`, or the shards listed by
//! `model.safetensors.index.json`) or the seeded generator of
//! [`crate::seeded`]. [`Weights`] is a view with a name prefix, like
//! candle's `VarBuilder`: model code writes
//! `w.pp("self_attn").pp("q_proj").get((out, hidden), "weight", Init::Normal)`
//! with the checkpoint's own names, and a wrong or missing tensor is an
//! error that names the file, the tensor and the shape config.json implies.
//! A [`WeightCache`] lets several models of one folder share their tensors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::quantized::GgmlDType;
use candle_core::safetensors::{Load, MmapedSafetensors};
use candle_core::{DType, Device, Shape, Tensor};
use half::{bf16, f16};

use crate::gguf::{GgufFile, is_dense};
use crate::seeded::{self, Init};
use crate::{ModelError, WeightSeed};

pub(crate) enum WeightSource {
    Files(SafetensorsFiles),
    Seeded(WeightSeed),
    Gguf(Arc<GgufFile>),
}

/// Memory-mapped safetensors files and which file holds each tensor.
pub(crate) struct SafetensorsFiles {
    files: Vec<(PathBuf, MmapedSafetensors)>,
    location: HashMap<String, usize>,
}

impl SafetensorsFiles {
    pub(crate) fn open(paths: &[PathBuf]) -> Result<Self, ModelError> {
        let mut files = Vec::with_capacity(paths.len());
        let mut location = HashMap::new();
        for path in paths {
            // SAFETY: the file is mapped read-only; like every safetensors
            // loader we rely on it not being truncated while the model runs.
            let mapped = unsafe { MmapedSafetensors::new(path) }.map_err(|err| {
                ModelError::InvalidWeights {
                    path: path.clone(),
                    message: format!("not a readable safetensors file: {err}"),
                }
            })?;
            for (name, _) in mapped.tensors() {
                location.insert(name, files.len());
            }
            files.push((path.clone(), mapped));
        }
        Ok(Self { files, location })
    }

    fn get(
        &self,
        name: &str,
        shape: &Shape,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor, ModelError> {
        let Some(&index) = self.location.get(name) else {
            return Err(ModelError::MissingWeight {
                name: name.to_string(),
                files: self.file_list(),
            });
        };
        let (path, mapped) = &self.files[index];
        let invalid = |message: String| ModelError::InvalidWeights {
            path: path.clone(),
            message,
        };
        let view = mapped
            .get(name)
            .map_err(|err| invalid(format!("tensor `{name}`: {err}")))?;
        if view.shape() != shape.dims() {
            return Err(ModelError::WeightShape {
                path: path.clone(),
                name: name.to_string(),
                expected: shape.dims().to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let tensor = view
            .load(device)
            .map_err(|err| invalid(format!("tensor `{name}`: {err}")))?;
        if !tensor.dtype().is_float() {
            return Err(invalid(format!(
                "tensor `{name}` has dtype {:?}; accepted: f32, f16, bf16",
                tensor.dtype()
            )));
        }
        Ok(tensor.to_dtype(dtype)?)
    }

    fn file_list(&self) -> String {
        let names: Vec<String> = self
            .files
            .iter()
            .map(|(path, _)| path.display().to_string())
            .collect();
        names.join(", ")
    }
}

/// Tensors already loaded, for more models of the same folder: load them
/// with [`crate::load_model_cached`] and one cache, and a tensor asked for
/// again in the same dtype on the same device is the one loaded first
/// (candle tensors share their storage), not read or generated again.
/// Models that share tensors never write to them. Projections that a
/// model on candle's ops runs as one matrix product (q/k/v, gate/up) are
/// cached stacked, as that model asks for them; the CPU step asks for the
/// parts. The cache holds every tensor it was given until it is dropped,
/// and serves the first folder it loads from only: another folder is an
/// error.
#[derive(Default)]
pub struct WeightCache {
    folder: Mutex<Option<PathBuf>>,
    tensors: Mutex<CachedTensors>,
}

/// Tensors by (checkpoint name, shape, dtype), one per device.
type CachedTensors = HashMap<(String, Vec<usize>, DType), Vec<Tensor>>;

impl WeightCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The tensors held (one per name, shape, dtype and device).
    pub fn len(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CachedTensors> {
        // A panic elsewhere while the lock was held leaves the map whole.
        self.tensors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Binds the cache to `folder` on first use; an error for any other
    /// (two spellings of one path are the same folder).
    pub(crate) fn serve(&self, folder: &Path) -> Result<(), ModelError> {
        let folder = &std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
        let mut served = self
            .folder
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match served.as_deref() {
            None => {
                *served = Some(folder.to_path_buf());
                Ok(())
            }
            Some(first) if first == folder => Ok(()),
            Some(first) => Err(ModelError::InvalidOptions(format!(
                "a WeightCache serves one model folder: it holds tensors of {}, not of {}; load {} with a cache of its own",
                first.display(),
                folder.display(),
                folder.display()
            ))),
        }
    }

    /// The cached tensor for `key` on `device`, else `load`'s, kept.
    fn get_or_load(
        &self,
        key: (String, Vec<usize>, DType),
        device: &Device,
        load: impl FnOnce() -> Result<Tensor, ModelError>,
    ) -> Result<Tensor, ModelError> {
        let cached = self.lock().get(&key).and_then(|tensors| {
            tensors
                .iter()
                .find(|tensor| tensor.device().same_device(device))
                .cloned()
        });
        if let Some(tensor) = cached {
            return Ok(tensor);
        }
        let tensor = load()?;
        self.lock().entry(key).or_default().push(tensor.clone());
        Ok(tensor)
    }
}

/// A prefixed view of a [`WeightSource`] that loads tensors in one dtype
/// onto one device, through a [`WeightCache`] if given one.
#[derive(Clone)]
pub(crate) struct Weights<'a> {
    source: &'a WeightSource,
    prefix: String,
    dtype: DType,
    device: &'a Device,
    cache: Option<&'a WeightCache>,
}

impl<'a> Weights<'a> {
    pub(crate) fn new(
        source: &'a WeightSource,
        dtype: DType,
        device: &'a Device,
        cache: Option<&'a WeightCache>,
    ) -> Self {
        Self {
            source,
            prefix: String::new(),
            dtype,
            device,
            cache,
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    pub(crate) fn device(&self) -> &'a Device {
        self.device
    }

    /// The view one level down: `pp("q_proj")` turns `model.layers.0.self_attn`
    /// into `model.layers.0.self_attn.q_proj`.
    pub(crate) fn pp(&self, name: impl std::fmt::Display) -> Self {
        let prefix = if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        };
        Self {
            prefix,
            ..self.clone()
        }
    }

    /// Weight matrix `name` [n, k] for the CPU step: in the view's dtype,
    /// or as a GGUF file stores it (f32, f16 and bf16 kept, quantized
    /// blocks for candle's quantized matmul).
    pub(crate) fn matrix(
        &self,
        (n, k): (usize, usize),
        name: &str,
    ) -> Result<crate::cpu::Weight, ModelError> {
        use crate::cpu::{Matrix, Weight};
        let WeightSource::Gguf(file) = self.source else {
            let tensor = self.get((n, k), name, Init::Normal)?;
            return Ok(Weight::Dense(Matrix::from_tensor(&tensor)?));
        };
        let tensor = file.tensor(&self.full_name(name), &(n, k).into())?;
        if !is_dense(tensor.dtype()) {
            return Ok(Weight::Quantized(tensor));
        }
        let dense = match tensor.dtype() {
            GgmlDType::F16 => tensor.dequantize_f16(&Device::Cpu)?,
            GgmlDType::BF16 => tensor.dequantize(&Device::Cpu)?.to_dtype(DType::BF16)?,
            _ => tensor.dequantize(&Device::Cpu)?,
        };
        Ok(Weight::Dense(Matrix::from_tensor(&dense)?))
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// Vector `name` as f32 (norm weights, biases) for the CPU step.
    pub(crate) fn vector(
        &self,
        len: usize,
        name: &str,
        init: Init,
    ) -> Result<Vec<f32>, ModelError> {
        Ok(self.get(len, name, init)?.to_dtype(DType::F32)?.to_vec1()?)
    }

    /// Tensor `name` under this view's prefix, checked against `shape`.
    /// `init` says how the seeded generator fills it.
    pub(crate) fn get(
        &self,
        shape: impl Into<Shape>,
        name: &str,
        init: Init,
    ) -> Result<Tensor, ModelError> {
        let shape = shape.into();
        let full_name = self.full_name(name);
        match self.cache {
            Some(cache) => {
                let key = (full_name.clone(), shape.dims().to_vec(), self.dtype);
                cache.get_or_load(key, self.device, || self.load(shape, full_name, init))
            }
            None => self.load(shape, full_name, init),
        }
    }

    /// Tensors `name` of the views `parts` (each with its shape), stacked
    /// along their first dim into one: the weights (or biases) of
    /// projections that read the same input, run as one matrix product (q,
    /// k and v; gate and up). Cached as one tensor, under the parts' names
    /// joined by `+` (`...self_attn.q_proj+k_proj+v_proj.weight`); the
    /// parts are read only to be stacked.
    pub(crate) fn stacked(
        &self,
        parts: &[(&str, Shape)],
        name: &str,
        init: Init,
    ) -> Result<Tensor, ModelError> {
        let load = || -> Result<Tensor, ModelError> {
            let tensors = parts
                .iter()
                .map(|(part, shape)| {
                    let part = self.pp(part);
                    part.load(shape.clone(), part.full_name(name), init)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Tensor::cat(&tensors, 0)?)
        };
        let Some(cache) = self.cache else {
            return load();
        };
        let names: Vec<&str> = parts.iter().map(|(part, _)| *part).collect();
        let mut dims = parts
            .first()
            .map_or_else(Vec::new, |(_, shape)| shape.dims().to_vec());
        if let Some(rows) = dims.first_mut() {
            *rows = parts.iter().map(|(_, shape)| shape.dims()[0]).sum();
        }
        let key = (self.pp(names.join("+")).full_name(name), dims, self.dtype);
        cache.get_or_load(key, self.device, load)
    }

    /// Tensor `full_name` from the source.
    fn load(&self, shape: Shape, full_name: String, init: Init) -> Result<Tensor, ModelError> {
        match self.source {
            WeightSource::Files(files) => files.get(&full_name, &shape, self.dtype, self.device),
            WeightSource::Gguf(file) => Ok(file
                .tensor(&full_name, &shape)?
                .dequantize(self.device)?
                .to_dtype(self.dtype)?),
            WeightSource::Seeded(seed) => {
                let (name, len) = (full_name.as_str(), shape.elem_count());
                // Generated in the model's dtype, so only those bytes are
                // uploaded (half of f32's for bf16).
                let tensor = match self.dtype {
                    DType::BF16 => {
                        let values = seeded::generate_as(*seed, name, len, init, bf16::from_f32);
                        Tensor::from_vec(values, shape, self.device)?
                    }
                    DType::F16 => {
                        let values = seeded::generate_as(*seed, name, len, init, f16::from_f32);
                        Tensor::from_vec(values, shape, self.device)?
                    }
                    _ => {
                        let values = seeded::generate_as(*seed, name, len, init, |v| v);
                        Tensor::from_vec(values, shape, self.device)?.to_dtype(self.dtype)?
                    }
                };
                Ok(tensor)
            }
        }
    }
}
