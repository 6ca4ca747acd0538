//! Device time of a step, from two CUDA events recorded on the model's
//! stream around it. Reading the time waits on the end event, which has
//! completed by the time the caller has its logits on the host, so the
//! timing adds no synchronisation of its own. On the CPU there is no timer.

use std::time::Duration;

use candle_core::Device;

use crate::ModelError;

#[cfg(feature = "cuda")]
pub(crate) struct StepTimer {
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    start: cudarc::driver::CudaEvent,
    end: cudarc::driver::CudaEvent,
    /// Both events were recorded for the last step.
    complete: bool,
}

#[cfg(not(feature = "cuda"))]
pub(crate) enum StepTimer {}

impl StepTimer {
    /// A timer for `device`'s stream; `None` on the CPU.
    pub(crate) fn for_device(device: &Device) -> Result<Option<Self>, ModelError> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(cuda) => {
                let stream = cuda.cuda_stream();
                let context = stream.context();
                // Flags 0: a timing event (cudarc's default disables timing).
                let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
                Ok(Some(Self {
                    start: context.new_event(timing).map_err(cuda_error)?,
                    end: context.new_event(timing).map_err(cuda_error)?,
                    stream,
                    complete: false,
                }))
            }
            _ => Ok(None),
        }
    }

    /// Marks the start of a step.
    pub(crate) fn start(&mut self) -> Result<(), ModelError> {
        #[cfg(feature = "cuda")]
        {
            self.complete = false;
            self.start.record(&self.stream).map_err(cuda_error)
        }
        #[cfg(not(feature = "cuda"))]
        match *self {}
    }

    /// Marks the end of a step that ran to completion.
    pub(crate) fn stop(&mut self) -> Result<(), ModelError> {
        #[cfg(feature = "cuda")]
        {
            self.end.record(&self.stream).map_err(cuda_error)?;
            self.complete = true;
            Ok(())
        }
        #[cfg(not(feature = "cuda"))]
        match *self {}
    }

    /// The device time between the last step's events; waits for the step
    /// to finish if it has not.
    pub(crate) fn elapsed(&self) -> Option<Duration> {
        #[cfg(feature = "cuda")]
        {
            if !self.complete {
                return None;
            }
            let ms = self.start.elapsed_ms(&self.end).ok()?;
            Some(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
        }
        #[cfg(not(feature = "cuda"))]
        match *self {}
    }
}

#[cfg(feature = "cuda")]
pub(crate) fn cuda_error(err: cudarc::driver::DriverError) -> ModelError {
    ModelError::Cuda(err.to_string())
}
