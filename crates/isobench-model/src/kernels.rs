//! This crate's CUDA modules (kernels/*.cu, compiled by build.rs into
//! fatbins: sm_90 machine code and the PTX), each loaded once per device
//! at its first use, and a kernel of one with the device's stream.

use std::sync::{Arc, Mutex, PoisonError};

use candle_core::Result;
use candle_core::cuda_backend::cudarc::driver::{CudaFunction, CudaModule, CudaStream, LaunchArgs};
use candle_core::cuda_backend::cudarc::nvrtc::Ptx;
use candle_core::cuda_backend::{CudaDevice, DeviceId, WrapErr};

/// One of kernels/*.cu.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Argmax,
    Decode,
    PagedAttention,
}

impl Source {
    fn fatbin(self) -> &'static [u8] {
        match self {
            Source::Argmax => include_bytes!(concat!(env!("OUT_DIR"), "/argmax.fatbin")),
            Source::Decode => include_bytes!(concat!(env!("OUT_DIR"), "/decode.fatbin")),
            Source::PagedAttention => {
                include_bytes!(concat!(env!("OUT_DIR"), "/paged_attention.fatbin"))
            }
        }
    }
}

/// The modules loaded so far, by device.
static LOADED: Mutex<Vec<(DeviceId, Source, Arc<CudaModule>)>> = Mutex::new(Vec::new());

/// A kernel and the stream it launches on.
pub(crate) struct Kernel {
    pub function: CudaFunction,
    pub stream: Arc<CudaStream>,
}

impl Kernel {
    pub fn builder(&self) -> LaunchArgs<'_> {
        self.stream.launch_builder(&self.function)
    }
}

/// Kernel `name` of `source`'s module on `device`'s stream.
pub(crate) fn kernel(device: &CudaDevice, source: Source, name: &str) -> Result<Kernel> {
    let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
    let found = loaded
        .iter()
        .find(|(id, loaded_source, _)| *id == device.id() && *loaded_source == source)
        .map(|(_, _, cuda_module)| cuda_module.clone());
    let cuda_module = match found {
        Some(cuda_module) => cuda_module,
        None => {
            let cuda_module = device
                .cuda_stream()
                .context()
                .load_module(Ptx::from_binary(source.fatbin().to_vec()))
                .w()?;
            loaded.push((device.id(), source, cuda_module.clone()));
            cuda_module
        }
    };
    Ok(Kernel {
        function: cuda_module.load_function(name).w()?,
        stream: device.cuda_stream(),
    })
}
