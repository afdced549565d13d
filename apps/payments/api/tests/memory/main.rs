//! A 6 MB body (Lambda's largest synchronous payload) is answered `413` with memory flat: the
//! API allocates next to nothing for it, because the layer refuses it on its length before
//! reading, copying or parsing it. Its own test binary, for its counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use effectively_once::{Config, Idempotency, InMemoryStore};
use lambda_http::Body;
use payments::PaymentEvent;
use payments_api::{Api, EnqueueError, Queue};
use serde_json::{json, Value};

/// The system allocator, counting the bytes live and the most live at once since the last
/// [`reset_peak`].
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(live, Ordering::SeqCst);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let live = LIVE.fetch_add(new_size - layout.size(), Ordering::SeqCst) + new_size - layout.size();
            PEAK.fetch_max(live, Ordering::SeqCst);
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The live bytes now, and the peak reset to them.
fn reset_peak() -> usize {
    let live = LIVE.load(Ordering::SeqCst);
    PEAK.store(live, Ordering::SeqCst);
    live
}

struct Never;

impl Queue for Never {
    async fn send(&self, _event: &PaymentEvent) -> Result<(), EnqueueError> {
        panic!("an oversized body was sent")
    }
}

/// The largest the API may hold for the request at once, over what it held before: the answer
/// and the layer's bookkeeping, a few KiB; a copy of the body would be 6 MB.
const FLAT: usize = 64 * 1024;

#[test]
fn a_six_megabyte_body_is_413_with_memory_flat() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let store = InMemoryStore::new();
    let api = Api::new(Idempotency::new(store, Config::default()), Never);
    let body = format!(
        r#"{{"account_id": "acct_42", "amount_cents": 1, "currency": "USD", "pad": "{}"}}"#,
        "x".repeat(6 * 1024 * 1024)
    );
    for content_length in [true, false] {
        // As Lambda delivers it: the event parsed by the runtime, the body already in memory.
        let mut event: Value = serde_json::from_str(include_str!("../../../../../events/http-payment.json")).unwrap();
        event["body"] = json!(body);
        if content_length {
            event["headers"]["content-length"] = json!(body.len().to_string());
        }
        let request = lambda_http::request::from_str(&event.to_string()).unwrap();
        drop(event);
        let before = reset_peak();
        let response = runtime.block_on(api.handle(request));
        let peak = PEAK.load(Ordering::SeqCst) - before;
        assert_eq!(response.status().as_u16(), 413, "content-length: {content_length}");
        let Body::Text(text) = response.body() else { panic!("a text body") };
        assert!(text.contains("payload_too_large"), "{text}");
        assert!(peak < FLAT, "{peak} bytes held at once for a 6 MB body (content-length: {content_length})");
    }
}
