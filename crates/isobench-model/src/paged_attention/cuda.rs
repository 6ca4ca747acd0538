//! The CUDA side of the two ops: launches the kernels of
//! kernels/paged_attention.cu (compiled by build.rs to machine code and
//! PTX, loaded once per device) on the device's stream.
//!
//! Only shapes (host-known layout dims) decide what is launched; the
//! metadata's contents stay on the device. Nothing here copies to or from
//! the host, allocates from host data or synchronises, and the output and
//! scratch buffers come from the device's stream-ordered allocator (or,
//! for the single-token steps of `crate::decode`, from the caller:
//! [`Buffers`], [`attend_into`]), so a decode step can be captured in a
//! CUDA graph. Both kernels launch with programmatic dependent launch
//! (`crate::kernels`) and let the next kernel start at once. A decode step (one new
//! token per sequence: as many query rows as sequences) whose batch alone
//! would not fill the GPU is split along the context (flash decoding):
//! the context is cut into partitions of 512 tokens (`PARTITION`), or fewer
//! the smaller the batch, and each of a row's `splits` thread blocks
//! takes every `splits`-th partition up to the row's context, so a wide
//! table costs no empty work; a reduce kernel combines the splits. A step
//! with prompt tokens over a bf16 or f16 cache of head_dim 64 or 128 runs
//! on tensor cores, a block per tile of a sequence's query rows and KV
//! head (kernels/prefill_attention.cu); every other step runs one block
//! per query row and KV head over the whole visible context.
//!
//! Slots and block numbers are not bounds-checked on the device (that
//! would need a host round trip): `crate::step` validates them before any
//! step reaches the model, and `write_kv` skips slots past the cache, so
//! [`super::PADDING_SLOT`] writes nowhere.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaStorage, DType, Layout, Result, Shape, Storage, Tensor, bail};
use half::{bf16, f16};

use super::Metadata;
use super::launch::{Shapes, THREADS};
use crate::kernels::{Launch, Source, device_ptr, empty, kernel};

/// Cache element types, named as in the kernels' names.
trait Elem: CudaDType + DeviceRepr {
    const NAME: &'static str;
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
}

impl Elem for f16 {
    const NAME: &'static str = "f16";
}

impl Elem for bf16 {
    const NAME: &'static str = "bf16";
}

/// The CUDA side of `WriteKv`.
pub(super) fn write_kv(
    (cache, cache_layout): (&mut CudaStorage, &Layout),
    (new, new_layout): (&CudaStorage, &Layout),
    (slots, slots_layout): (&CudaStorage, &Layout),
) -> Result<()> {
    let (num_slots, row) = match cache_layout.dims() {
        [blocks, block_size, kv_heads, head_dim] => (blocks * block_size, kv_heads * head_dim),
        dims => bail!("paged attention: cache must be 4-dimensional, not {dims:?}"),
    };
    let slots = contiguous(slots.as_cuda_slice::<u32>()?, slots_layout, "slot_mapping")?;
    if new_layout.shape().elem_count() != slots.len() * row {
        bail!(
            "paged attention: {} new entries for {} slots of {row}",
            new_layout.shape().elem_count(),
            slots.len()
        );
    }
    if slots.is_empty() {
        return Ok(());
    }
    let target = WriteTarget {
        slots: &slots,
        row,
        num_slots,
    };
    match (cache.dtype(), new.dtype()) {
        (DType::F32, DType::F32) => {
            write_typed::<f32>(cache, cache_layout, new, new_layout, target)
        }
        (DType::F16, DType::F16) => {
            write_typed::<f16>(cache, cache_layout, new, new_layout, target)
        }
        (DType::BF16, DType::BF16) => {
            write_typed::<bf16>(cache, cache_layout, new, new_layout, target)
        }
        (cache, new) => bail!(
            "paged attention: cache ({cache:?}) and new entries ({new:?}) must have one float dtype"
        ),
    }
}

/// Where `write_kv` writes: the slots, the elements per slot, the slots in
/// the cache.
struct WriteTarget<'a> {
    slots: &'a CudaView<'a, u32>,
    row: usize,
    num_slots: usize,
}

fn write_typed<T: Elem>(
    cache: &mut CudaStorage,
    cache_layout: &Layout,
    new: &CudaStorage,
    new_layout: &Layout,
    target: WriteTarget<'_>,
) -> Result<()> {
    let device = cache.device.clone();
    let new = contiguous(new.as_cuda_slice::<T>()?, new_layout, "new keys/values")?;
    let Some((start, end)) = cache_layout.contiguous_offsets() else {
        bail!("paged attention: cache must be contiguous")
    };
    let elem = std::mem::size_of::<T>();
    let row_bytes = target.row * elem;
    // 16 bytes per thread when rows and both starts allow it.
    let wide = row_bytes.is_multiple_of(16)
        && (start * elem).is_multiple_of(16)
        && (new_layout.start_offset() * elem).is_multiple_of(16);
    let (name, units) = if wide {
        ("write_kv_vec16", row_bytes / 16)
    } else {
        ("write_kv_bytes", row_bytes)
    };
    let units_arg = int(units, "a cache row's width")?;
    let num_slots = u32::try_from(target.num_slots).unwrap_or(u32::MAX);
    let mut cache = cache.as_cuda_slice_mut::<T>()?.slice_mut(start..end);
    let func = kernel(&device, Source::PagedAttention, name)?;
    let config = LaunchConfig {
        grid_dim: (
            grid(target.slots.len(), "tokens")?,
            grid_y(units.div_ceil(THREADS as usize))?,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut launch = func.builder();
    launch
        .arg(&mut cache)
        .arg(&new)
        .arg(target.slots)
        .arg(&units_arg)
        .arg(&num_slots);
    // SAFETY: the arguments match write_kv_* in kernels/paged_attention.cu;
    // each thread reads one unit of `new` and writes one unit of a slot
    // that is below num_slots (checked by the kernel).
    unsafe { launch.launch(config) }.w()?;
    Ok(())
}

/// The CUDA side of `PagedAttention`.
pub(super) fn attend(
    metadata: &Metadata,
    num_heads: usize,
    q: (&CudaStorage, &Layout),
    keys: (&CudaStorage, &Layout),
    values: (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    match (q.0.dtype(), keys.0.dtype(), values.0.dtype()) {
        (DType::F32, DType::F32, DType::F32) => {
            attend_typed::<f32>(metadata, num_heads, q, keys, values)
        }
        (DType::F16, DType::F16, DType::F16) => {
            attend_typed::<f16>(metadata, num_heads, q, keys, values)
        }
        (DType::BF16, DType::BF16, DType::BF16) => {
            attend_typed::<bf16>(metadata, num_heads, q, keys, values)
        }
        (q, k, _) => {
            bail!("paged attention: queries ({q:?}) and cache ({k:?}) must have one float dtype")
        }
    }
}

fn attend_typed<T: Elem>(
    metadata: &Metadata,
    num_heads: usize,
    q: (&CudaStorage, &Layout),
    keys: (&CudaStorage, &Layout),
    values: (&CudaStorage, &Layout),
) -> Result<(CudaStorage, Shape)> {
    let device = &q.0.device;
    let plan = Plan::new(metadata, num_heads, q.1, keys.1, values.1, size_of::<T>())?;
    // SAFETY: every element is written by the kernels below before it is read.
    let out = unsafe { device.alloc::<T>(plan.out_len())? };
    let partials = match plan.partial_floats() {
        0 => None,
        // SAFETY: the reduce reads only splits the attention kernel wrote.
        floats => Some(unsafe { device.alloc::<f32>(floats)? }),
    };
    let stream = device.cuda_stream();
    let out_address = out.device_ptr(&stream).0;
    let partials_address = partials
        .as_ref()
        .map_or(out_address, |partials| partials.device_ptr(&stream).0);
    launch::<T>(
        &plan,
        metadata,
        [q, keys, values],
        (out_address, partials_address),
    )?;
    let shape = Shape::from((plan.shapes.rows, num_heads * plan.shapes.head_dim));
    Ok((CudaStorage::wrap_cuda_slice(out, device.clone()), shape))
}

/// The buffers of a decode attention, allocated for a whole step by a
/// caller that runs the attention of every layer into them
/// ([`attend_into`]): allocations between the step's kernels would stand
/// between them in a CUDA graph, and keep each from starting before the
/// previous one ends (`crate::kernels`).
pub(crate) struct Buffers {
    /// [rows, heads * head_dim], the queries' dtype.
    pub out: Tensor,
    /// The splits' partials (f32), when the attention is split.
    partials: Option<Tensor>,
}

impl Buffers {
    /// Buffers for the attention of `q` over these caches and `metadata`.
    pub(crate) fn new(
        q: &Tensor,
        caches: (&Tensor, &Tensor),
        metadata: &Metadata,
        num_heads: usize,
    ) -> Result<Self> {
        let plan = Plan::of(q, caches, metadata, num_heads)?;
        let device = q.device().as_cuda_device()?;
        let partials = match plan.partial_floats() {
            0 => None,
            floats => Some(empty(device, DType::F32, (1, floats))?),
        };
        Ok(Self {
            // Uninitialised, as in `attend_typed`: the kernels write every
            // element they later read.
            out: empty(
                device,
                q.dtype(),
                (plan.shapes.rows, num_heads * plan.shapes.head_dim),
            )?,
            partials,
        })
    }
}

/// The attention of `q` into `buffers.out`, as [`super::attend`]
/// computes it, with no allocation.
pub(crate) fn attend_into(
    q: &Tensor,
    (keys, values): (&Tensor, &Tensor),
    metadata: &Metadata,
    num_heads: usize,
    buffers: &Buffers,
) -> Result<()> {
    let plan = Plan::of(q, (keys, values), metadata, num_heads)?;
    let partial_floats = buffers.partials.as_ref().map_or(0, Tensor::elem_count);
    if buffers.out.elem_count() != plan.out_len()
        || partial_floats != plan.partial_floats()
        || buffers.out.dtype() != q.dtype()
    {
        bail!("paged attention: buffers made for another step");
    }
    if keys.dtype() != q.dtype() || values.dtype() != q.dtype() {
        bail!(
            "paged attention: queries ({:?}) and cache ({:?}) must have one float dtype",
            q.dtype(),
            keys.dtype()
        );
    }
    let (q_storage, q_layout) = q.storage_and_layout();
    let (keys_storage, keys_layout) = keys.storage_and_layout();
    let (values_storage, values_layout) = values.storage_and_layout();
    let (Storage::Cuda(q_storage), Storage::Cuda(keys_storage), Storage::Cuda(values_storage)) =
        (&*q_storage, &*keys_storage, &*values_storage)
    else {
        bail!("paged attention: queries and caches must be on the GPU")
    };
    let out = device_ptr(&buffers.out)?;
    let partials = buffers.partials.as_ref().map_or(Ok(out), device_ptr)?;
    let operands = [
        (q_storage, q_layout),
        (keys_storage, keys_layout),
        (values_storage, values_layout),
    ];
    match q.dtype() {
        DType::F32 => launch::<f32>(&plan, metadata, operands, (out, partials)),
        DType::F16 => launch::<f16>(&plan, metadata, operands, (out, partials)),
        DType::BF16 => launch::<bf16>(&plan, metadata, operands, (out, partials)),
        other => bail!("paged attention: no kernels for {other:?}"),
    }
}

/// What an attention launches, from its operands' shapes alone.
struct Plan {
    shapes: Shapes,
    splits: usize,
    partition_size: usize,
}

impl Plan {
    /// The plan of `q`'s attention over these caches.
    fn of(
        q: &Tensor,
        (keys, values): (&Tensor, &Tensor),
        metadata: &Metadata,
        num_heads: usize,
    ) -> Result<Self> {
        Self::new(
            metadata,
            num_heads,
            q.layout(),
            keys.layout(),
            values.layout(),
            q.dtype().size_in_bytes(),
        )
    }

    fn new(
        metadata: &Metadata,
        num_heads: usize,
        q_layout: &Layout,
        keys_layout: &Layout,
        values_layout: &Layout,
        elem: usize,
    ) -> Result<Self> {
        let shapes = Shapes::new(
            num_heads,
            q_layout,
            keys_layout,
            values_layout,
            (
                metadata.block_tables.layout(),
                metadata.context_lens.layout(),
                metadata.query_starts.layout(),
            ),
        )?;
        let (splits, partition_size) = shapes.split(elem);
        Ok(Self {
            shapes,
            splits,
            partition_size,
        })
    }

    fn out_len(&self) -> usize {
        self.shapes.rows * self.shapes.num_heads * self.shapes.head_dim
    }

    /// (max, sum) then the unnormalised output per row, head and split;
    /// none unsplit.
    fn partial_floats(&self) -> usize {
        if self.splits > 1 {
            self.shapes.rows * self.shapes.num_heads * self.splits * (self.shapes.head_dim + 2)
        } else {
            0
        }
    }
}

/// Launches the attention (and the reduce of a split one) into `out` and
/// `partials` (device addresses, sized by `plan`).
fn launch<T: Elem>(
    plan: &Plan,
    metadata: &Metadata,
    [(q, q_layout), (keys, keys_layout), (values, values_layout)]: [(&CudaStorage, &Layout); 3],
    (out, partials): (u64, u64),
) -> Result<()> {
    let (tables_storage, tables_layout) = metadata.block_tables.storage_and_layout();
    let (lens_storage, lens_layout) = metadata.context_lens.storage_and_layout();
    let (starts_storage, starts_layout) = metadata.query_starts.storage_and_layout();
    let (Storage::Cuda(tables), Storage::Cuda(lens), Storage::Cuda(starts)) =
        (&*tables_storage, &*lens_storage, &*starts_storage)
    else {
        bail!("paged attention: step metadata must be on the GPU with the cache")
    };
    // The kernels read K/V rows with 16-byte loads.
    let elem = size_of::<T>();
    if !(keys_layout.start_offset() * elem).is_multiple_of(16)
        || !(values_layout.start_offset() * elem).is_multiple_of(16)
    {
        bail!("paged attention on CUDA: the caches must start 16-byte aligned");
    }
    let device = &q.device;
    let stream = device.cuda_stream();
    let address = |slice, layout, what| view_address(slice, layout, what, &stream);
    let tables = address(
        tables.as_cuda_slice::<u32>()?,
        tables_layout,
        "block_tables",
    )?;
    let lens = address(lens.as_cuda_slice::<u32>()?, lens_layout, "context_lens")?;
    let starts = address(
        starts.as_cuda_slice::<u32>()?,
        starts_layout,
        "query_starts",
    )?;
    let q = view_address(q.as_cuda_slice::<T>()?, q_layout, "queries", &stream)?;
    let keys = view_address(
        keys.as_cuda_slice::<T>()?,
        keys_layout,
        "key cache",
        &stream,
    )?;
    let values = view_address(
        values.as_cuda_slice::<T>()?,
        values_layout,
        "value cache",
        &stream,
    )?;

    let Plan {
        shapes,
        splits,
        partition_size,
    } = plan;
    let (rows, num_heads, head_dim) = (shapes.rows, shapes.num_heads, shapes.head_dim);
    let rows_arg = int(rows, "the step's tokens")?;
    let heads_arg = int(num_heads, "the head count")?;
    let partition_size_arg = int(*partition_size, "the partition size")?;
    let scale = 1.0f32 / (head_dim as f32).sqrt();

    // A step with prompt tokens runs on tensor cores where a kernel
    // exists, in tiles of query rows; the CUDA-core kernel takes a block
    // per query row (and split). Both take the same arguments.
    let heads_per_block = shapes.heads_per_block();
    let (source, name, blocks, splits) = match shapes.prefill_tiles(elem) {
        Some(tiles) => (
            Source::PrefillAttention,
            format!(
                "prefill_attention_{}_d{head_dim}_g{heads_per_block}",
                T::NAME
            ),
            grid(tiles, "query tiles")?,
            1,
        ),
        None => (
            Source::PagedAttention,
            format!("paged_attention_{}_d{head_dim}_g{heads_per_block}", T::NAME),
            grid(rows, "query rows")?,
            *splits,
        ),
    };
    let func = kernel(device, source, &name)?;
    let config = LaunchConfig {
        grid_dim: (blocks, grid_y(shapes.head_blocks())?, grid_y(splits)?),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let attention = Launch::new(&func)
        .arg(&out)
        .arg(&partials) // not read unsplit
        .arg(&q)
        .arg(&keys)
        .arg(&values)
        .arg(&tables)
        .arg(&lens)
        .arg(&starts)
        .arg(&int(shapes.seqs, "the step's sequences")?)
        .arg(&rows_arg)
        .arg(&int(shapes.table_width, "the block-table width")?)
        .arg(&int(shapes.block_size, "the block size")?)
        .arg(&heads_arg)
        .arg(&int(shapes.num_kv_heads, "the KV head count")?)
        .arg(&partition_size_arg)
        .arg(&scale);
    // SAFETY: the arguments match paged_attention_* and prefill_attention_*
    // in kernels/ (which reads neither partials nor the partition size),
    // each waiting for its predecessor before it reads q or the caches;
    // `crate::step` checked that every block and length is within the
    // cache and the table; out and partials are sized by `plan`.
    unsafe { attention.run(config) }?;

    if splits > 1 {
        let func = kernel(
            device,
            Source::PagedAttention,
            &format!("paged_attention_reduce_{}", T::NAME),
        )?;
        let config = LaunchConfig {
            grid_dim: (grid(num_heads, "heads")?, grid_y(rows)?, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: (splits * size_of::<f32>()) as u32,
        };
        let reduce = Launch::new(&func)
            .arg(&out)
            .arg(&partials)
            .arg(&lens)
            .arg(&rows_arg)
            .arg(&heads_arg)
            .arg(&int(head_dim, "head_dim")?)
            .arg(&int(splits, "the context splits")?)
            .arg(&partition_size_arg);
        // SAFETY: as above; the reduce waits for the attention, and reads
        // the splits that have work for each row's context, all written
        // by it.
        unsafe { reduce.run(config) }?;
    }
    Ok(())
}

/// The device address of the part of `slice` that `layout` describes.
fn view_address<T>(
    slice: &CudaSlice<T>,
    layout: &Layout,
    what: &str,
    stream: &Arc<CudaStream>,
) -> Result<u64> {
    Ok(contiguous(slice, layout, what)?.device_ptr(stream).0)
}

/// The contiguous part of a slice that a layout describes.
fn contiguous<'a, T>(
    slice: &'a CudaSlice<T>,
    layout: &Layout,
    what: &str,
) -> Result<CudaView<'a, T>> {
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(slice.slice(start..end)),
        None => bail!("paged attention: {what} must be contiguous"),
    }
}

/// A kernel argument that must fit an `int` (also the decode kernels').
pub(crate) fn int(value: usize, what: &str) -> Result<i32> {
    match i32::try_from(value) {
        Ok(value) => Ok(value),
        Err(_) => {
            bail!("CUDA kernels: {what} ({value}) does not fit their 32-bit indices")
        }
    }
}

/// A grid x dimension (up to 2^31 - 1 blocks).
pub(crate) fn grid(value: usize, what: &str) -> Result<u32> {
    Ok(int(value, what)? as u32)
}

/// A grid y or z dimension (up to 65,535 blocks).
fn grid_y(value: usize) -> Result<u32> {
    match u16::try_from(value) {
        Ok(value) => Ok(u32::from(value)),
        Err(_) => bail!("paged attention: {value} blocks exceed a CUDA grid's 65,535 rows"),
    }
}
