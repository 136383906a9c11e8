//! With the `tracing` feature: spans around permit waits and calls, events on refusals and call
//! timeouts, seen by a subscriber that records them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inflight::{Budget, BudgetConfig, CallError};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

#[derive(Default)]
struct Recorder {
    next: AtomicU64,
    spans: Mutex<Vec<String>>,
    events: Mutex<Vec<String>>,
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut fields = Message(String::new());
        span.record(&mut fields);
        self.spans
            .lock()
            .unwrap()
            .push(format!("{} {}", span.metadata().name(), fields.0.trim()));
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Message(String::new());
        event.record(&mut fields);
        self.events.lock().unwrap().push(format!(
            "{} {}",
            event.metadata().level(),
            fields.0.trim()
        ));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

// One test: tracing caches per call site whether anyone listens, and a second test thread without
// a subscriber could make a call site look unwanted while this one records.
#[test]
fn waits_and_calls_are_spans_and_refusals_and_timeouts_are_events() {
    let recorder = Arc::new(Recorder::default());
    let _guard = tracing::subscriber::set_default(recorder.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let b = Budget::new(
            "records",
            BudgetConfig::new(1)
                .max_queued(0)
                .call_timeout(Duration::from_millis(50)),
        )
        .unwrap();
        // A call that times out: a call span and a warning.
        let r = b
            .call(|| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, std::io::Error>(())
            })
            .await;
        assert!(matches!(r, Err(CallError::Timeout)));
        // A refusal with the only permit held and no queue: a wait span and an event.
        let held = b.acquire().await.unwrap();
        assert!(b.acquire().await.unwrap_err().is_queue_full());
        drop(held);
    });
    let spans = recorder.spans.lock().unwrap().clone();
    let events = recorder.events.lock().unwrap().clone();
    assert!(
        spans
            .iter()
            .any(|s| s.starts_with("inflight.call budget=records")),
        "{spans:?}"
    );
    assert!(
        spans
            .iter()
            .any(|s| s.starts_with("inflight.permit_wait budget=records")),
        "{spans:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("WARN") && e.contains("call timed out")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("the queue is full") && e.contains("budget=records")),
        "{events:?}"
    );
}
