//! CUDA graphs of steps, one per padded shape (see [`crate::graph_shapes`]).
//!
//! A step's tensors have shapes that depend only on its number of
//! sequences and of tokens (see [`crate::step`]), so the whole forward
//! pass can be captured once per shape and replayed: a decode step by its
//! row bucket, a step with prompt tokens by its row and token buckets. For
//! each shape, captured the first time a step needs it (a server runs one
//! step of every shape it can reach before it listens,
//! [`crate::capture_graphs`]):
//!
//! - static device tensors hold every step input (`input_ids`, `positions`,
//!   `slot_mapping` of the shape's tokens, `block_tables [rows, W]`,
//!   `context_lens`, `query_starts`, `last_token_rows`), and the graphs of
//!   one row bucket share a static f32 logits buffer `[rows, vocab]`
//!   (replays follow one another on one stream, and each one's logits are
//!   copied out before the next);
//! - the step's inputs are laid out on the host, padded to the shape
//!   ([`HostStep::padded`]: padded tokens write their K/V to
//!   `PADDING_SLOT`, nowhere, and attend to slots of block 0), and uploaded
//!   in one copy into a packed static buffer, block tables last and only
//!   as wide as the step's longest; the graph itself starts by unpacking
//!   the buffer into the input tensors. Block tables are as wide as the
//!   context ([`crate::KvCache::max_blocks_per_seq`]: 8,192 blocks for
//!   131,072 tokens, unless a server's limit narrows it), so they are not
//!   unpacked in the graph but before it, by a copy kernel into the first
//!   columns of the static tables (the other columns keep older steps'
//!   blocks, which no kernel reads: a row reads only as far as its
//!   context). So a replay is one host-to-device copy, one copy kernel
//!   and one graph launch, and its upload grows with the step's longest
//!   context, not with the model's;
//! - the captured region is [`Network::run`] on the static tensors,
//!   followed by a `slice_set` of its logits into the static buffer. Its
//!   temporaries are allocated and freed inside the capture (stream-ordered
//!   allocation), so they become memory nodes and the graph relaunches.
//!
//! Capture follows ../shared/cuda/README.md: one eager warm-up of the exact
//! step first (it loads kernels and lets cuBLAS pick its algorithms, with
//! candle's host-to-device parameter cache on), then capture in
//! thread-local mode. The warm-up runs the real step: writing the same K/V
//! to the same slots twice is harmless, so the graph then replays it and
//! its logits are the step's. If anything in capture fails, a warning is
//! logged once and that shape runs eagerly for good.
//!
//! Graphs read the KV cache's buffers directly: a step on another cache
//! drops every graph and captures anew.

use std::collections::HashMap;
use std::sync::Arc;

use candle_core::{DType, Device, Storage, Tensor, TensorId};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream, DevicePtr};

use crate::graph_shapes::{GraphShape, GraphShapes};
use crate::llama::Network;
use crate::step::{HostStep, StepLimits, StepTensors};
use crate::timer::cuda_error;
use crate::{KvCache, ModelError, StepBatch};

pub(crate) struct GraphRunner {
    shapes: GraphShapes,
    vocab_size: usize,
    graphs: HashMap<GraphShape, Entry>,
    /// The static logits of each row bucket.
    logits: HashMap<usize, Tensor>,
    /// The cache the graphs write to (its first key tensor).
    cache: Option<TensorId>,
}

enum Entry {
    Captured(Box<ShapeGraph>),
    /// Capture failed once; steps of this shape run eagerly.
    Eager,
}

/// A captured step and the static tensors it reads and writes.
struct ShapeGraph {
    statics: Statics,
    graph: CudaGraph,
    /// The host side of the packed upload, reused every step.
    staging: Vec<u32>,
}

// SAFETY: a `ShapeGraph` is owned by one model, which the engine moves to
// its own thread; the graph is only used through `&mut self` (never from two
// threads at once, which is all CUDA asks of graph objects), and `launch`
// binds the graph's context to the calling thread first.
unsafe impl Send for ShapeGraph {}

/// A shape's static tensors.
struct Statics {
    /// Every input of the step, packed in [`HostStep::fields`] order,
    /// then the step's block tables (as wide as its longest).
    packed: Tensor,
    /// The step's tensors, filled from `packed` inside the graph.
    step: StepTensors,
    /// `(offset, len)` of each of the step's tensors in `packed`.
    ranges: Vec<(usize, usize)>,
    /// f32 logits [rows, vocab], shared with the row bucket's other shapes.
    logits: Tensor,
}

impl GraphRunner {
    pub(crate) fn new(shapes: GraphShapes, vocab_size: usize) -> Self {
        Self {
            shapes,
            vocab_size,
            graphs: HashMap::new(),
            logits: HashMap::new(),
            cache: None,
        }
    }

    /// The buckets of the shapes a step can replay.
    pub(crate) fn shapes(&self) -> &GraphShapes {
        &self.shapes
    }

    /// Replays `batch` (validated) from its shape's graph, capturing it
    /// first if needed. `None` when the step has to run eagerly: larger
    /// than every bucket, or the shape's capture failed. Returns the
    /// logits [sequences, vocab] and the rows the graph ran.
    pub(crate) fn run(
        &mut self,
        net: &Network,
        batch: &StepBatch,
        limits: StepLimits,
        cache: &KvCache,
    ) -> Result<Option<(Tensor, usize)>, ModelError> {
        let rows = batch.seqs.len();
        let max_padded_context = limits.table_width * limits.block_size;
        let Some(shape) = self
            .shapes
            .of(rows, batch.token_ids.len(), max_padded_context)
        else {
            return Ok(None);
        };
        let cache_id = cache.layer(0).0.id();
        if self.cache != Some(cache_id) {
            self.graphs.clear();
            self.logits.clear();
            self.cache = Some(cache_id);
        }
        let host = HostStep::padded(batch, shape.rows, shape.tokens, limits.block_size);
        if !self.graphs.contains_key(&shape) {
            let logits = match self.logits.get(&shape.rows) {
                Some(logits) => logits.clone(),
                None => {
                    let logits =
                        Tensor::zeros((shape.rows, self.vocab_size), DType::F32, cache.device())?;
                    self.logits.insert(shape.rows, logits.clone());
                    logits
                }
            };
            let state = match ShapeGraph::capture(net, &host, limits.table_width, logits, cache) {
                Ok(graph) => Entry::Captured(Box::new(graph)),
                Err(err) => {
                    tracing::warn!(
                        rows = shape.rows,
                        tokens = shape.tokens,
                        error = %err,
                        "CUDA graph capture failed; steps of this shape run eagerly"
                    );
                    Entry::Eager
                }
            };
            self.graphs.insert(shape, state);
        }
        let Some(Entry::Captured(entry)) = self.graphs.get_mut(&shape) else {
            return Ok(None);
        };
        entry.replay(&host)?;
        // A copy, so the caller's logits stay valid through later replays.
        let logits = entry.statics.logits.narrow(0, 0, rows)?.copy()?;
        Ok(Some((logits, shape.rows)))
    }
}

impl ShapeGraph {
    /// Allocates the shape's static input tensors (block tables
    /// `table_width` wide), uploads `host` (the step that asked for the
    /// shape), runs it once eagerly and captures it, writing its logits
    /// into `logits` ([rows, vocab], f32).
    fn capture(
        net: &Network,
        host: &HostStep,
        table_width: usize,
        logits: Tensor,
        cache: &KvCache,
    ) -> Result<Self, ModelError> {
        let device = cache.device();
        let cuda = device.as_cuda_device()?;
        let stream = cuda.cuda_stream();
        if !stream.context().has_async_alloc() {
            return Err(ModelError::Cuda(
                "the device has no stream-ordered allocator, which capturing candle's temporaries needs".into(),
            ));
        }
        let statics = Statics::new(host, table_width, logits, device)?;
        let mut staging = Vec::new();
        statics.upload(host, &stream, &mut staging)?;
        // Small parameter uploads (shapes, strides) come from candle's cache
        // while this guard lives: the warm-up fills it, the capture reads it.
        let _parameter_cache = cuda.enable_cuda_graph_htod_cache();
        statics.step(net, cache)?;
        stream.synchronize().map_err(cuda_error)?;
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(cuda_error)?;
        let captured = statics.step(net, cache);
        // Always end the capture, even when a step operation failed.
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        captured?;
        let graph = graph
            .map_err(cuda_error)?
            .ok_or_else(|| ModelError::Cuda("the capture produced no graph".into()))?;
        stream.context().check_err().map_err(cuda_error)?;
        graph.upload().map_err(cuda_error)?;
        Ok(Self {
            statics,
            graph,
            staging,
        })
    }

    fn replay(&mut self, host: &HostStep) -> Result<(), ModelError> {
        let stream = self.statics.logits.device().as_cuda_device()?.cuda_stream();
        self.statics.upload(host, &stream, &mut self.staging)?;
        self.graph.launch().map_err(cuda_error)
    }
}

impl Statics {
    fn new(
        host: &HostStep,
        table_width: usize,
        logits: Tensor,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let (rows, tokens) = (host.context_lens.len(), host.input_ids.len());
        let mut ranges = Vec::new();
        let mut offset = 0;
        for field in host.fields() {
            ranges.push((offset, field.len()));
            offset += field.len();
        }
        let zeros = |len: usize| Tensor::zeros(len, DType::U32, device);
        Ok(Self {
            // The fields, then room for block tables as wide as the graph's.
            packed: zeros(offset + rows * table_width)?,
            step: StepTensors {
                input_ids: zeros(tokens)?,
                positions: zeros(tokens)?,
                slot_mapping: zeros(tokens)?,
                block_tables: Tensor::zeros((rows, table_width), DType::U32, device)?,
                context_lens: zeros(rows)?,
                query_starts: zeros(rows + 1)?,
                last_token_rows: zeros(rows)?,
            },
            ranges,
            logits,
        })
    }

    /// Copies the host step into `packed` (its fields, then its block
    /// tables, `[rows, table_cols]`: one host-to-device copy), then the
    /// tables into the first columns of `block_tables` (one copy kernel),
    /// in stream order before the next replay.
    fn upload(
        &self,
        host: &HostStep,
        stream: &Arc<CudaStream>,
        staging: &mut Vec<u32>,
    ) -> Result<(), ModelError> {
        staging.clear();
        for field in host.fields() {
            staging.extend_from_slice(field);
        }
        let tables_offset = staging.len();
        staging.extend_from_slice(&host.block_tables);
        let [rows, width] = *self.step.block_tables.dims() else {
            return Err(ModelError::Cuda("graph block tables are not 2D".into()));
        };
        let cols = host.table_cols;
        let fields_len = self.packed.elem_count() - rows * width;
        if tables_offset != fields_len || host.block_tables.len() != rows * cols || cols > width {
            return Err(ModelError::Cuda(format!(
                "graph inputs hold {fields_len} values and [{rows}, {width}] block tables; the step has {tables_offset} values and [{}, {cols}] tables",
                host.block_tables.len() / cols
            )));
        }
        {
            let (storage, layout) = self.packed.storage_and_layout();
            let Storage::Cuda(storage) = &*storage else {
                return Err(ModelError::Cuda(
                    "graph inputs are not on a CUDA device".into(),
                ));
            };
            if layout.start_offset() != 0 {
                return Err(ModelError::Cuda(
                    "graph inputs do not start their buffer".into(),
                ));
            }
            let (pointer, _sync) = storage.as_cuda_slice::<u32>()?.device_ptr(stream);
            // SAFETY: `packed` is this shape's own buffer of at least
            // `staging.len()` u32s (checked above: `cols <= width`); only
            // this stream reads it, after this copy in stream order. The
            // host data is pageable, so the driver has staged it by the
            // time the call returns.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(pointer, staging, stream.cu_stream())
            }
            .map_err(cuda_error)?;
        }
        let tables = self
            .packed
            .narrow(0, tables_offset, rows * cols)?
            .reshape((rows, cols))?;
        self.step.block_tables.slice_set(&tables, 1, 0)?;
        Ok(())
    }

    /// The captured work: unpack the inputs, run the network, keep the
    /// logits.
    fn step(&self, net: &Network, cache: &KvCache) -> Result<(), ModelError> {
        let targets = [
            &self.step.input_ids,
            &self.step.positions,
            &self.step.slot_mapping,
            &self.step.context_lens,
            &self.step.query_starts,
            &self.step.last_token_rows,
        ];
        for (target, &(offset, len)) in targets.into_iter().zip(&self.ranges) {
            let source = self
                .packed
                .narrow(0, offset, len)?
                .reshape(target.shape())?;
            target.slice_set(&source, 0, 0)?;
        }
        let logits = net.run(&self.step, cache)?;
        self.logits.slice_set(&logits, 0, 0)?;
        Ok(())
    }
}
