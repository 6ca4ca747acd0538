//! `Recorder::record` must not allocate: it runs once per request on the
//! load generator's hot path. A counting global allocator (this test binary
//! only) checks it on streamed, chunked, failed and warm-up requests.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use isobench_metrics::{ErrorKind, Recorder, RequestError, RequestRecord, Slo, TokenSource};

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn streamed(i: u64, events: usize, tokens_per_event: Option<u32>) -> RequestRecord {
    let scheduled = i * 1_000_000;
    let mut record = RequestRecord::new(i, false, scheduled, events);
    record.sent_ns = scheduled + 10_000;
    for e in 0..events as u64 {
        record
            .content_event_ns
            .push(record.sent_ns + 50_000_000 + e * 7_000_000);
    }
    if let Some(k) = tokens_per_event {
        record.event_tokens = vec![k; events];
    }
    record.end_ns = record
        .content_event_ns
        .last()
        .copied()
        .unwrap_or(record.sent_ns)
        + 1_000;
    record.output_tokens = events as u32 * tokens_per_event.unwrap_or(1);
    record.token_source = TokenSource::Usage;
    record
}

#[test]
fn recording_allocates_nothing_once_an_error_kind_is_known() {
    let slos = Slo::parse_list("ttft_p99=500ms,itl_p99=50ms").unwrap();
    let mut recorder = Recorder::with_slos(&slos);
    let mut timeout = streamed(0, 0, None);
    timeout.error = Some(RequestError {
        kind: ErrorKind::Timeout,
        message: "timed out".into(),
    });
    recorder.record(&timeout); // The first of a kind may allocate its counter.

    let mut records: Vec<RequestRecord> = (1..200)
        .map(|i| streamed(i, 1 + (i as usize % 64), (i % 3 == 0).then_some(4)))
        .collect();
    records.push(timeout);
    let mut warmup = streamed(500, 16, None);
    warmup.warmup = true;
    records.push(warmup);

    let allocations = allocations_during(|| {
        for record in &records {
            recorder.record(record);
        }
    });
    assert_eq!(allocations, 0);
    assert_eq!(recorder.measured(), 201);
}
