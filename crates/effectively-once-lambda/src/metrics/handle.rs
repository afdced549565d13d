//! The [`Metrics`] handle a handler adds its own metrics through, summed over an invocation and
//! printed on that invocation's line with the driver's counts; and the invocation's start: its
//! cold start and its span.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::emf::{cloudwatch_takes, unreadable};
use super::{Counts, Emf, Unit, DRIVER_METRICS, MAX_METRICS, PROPERTIES};

/// Whether an invocation of this process has begun: the first one is the sandbox's cold start.
static INVOKED: AtomicBool = AtomicBool::new(false);

/// `true` for the process's first invocation, `false` after.
pub(crate) fn take_cold_start() -> bool {
    !INVOKED.swap(true, Ordering::Relaxed)
}

/// The handle through which a handler adds metrics of its own, and the [`Emf`] target every
/// line of the function goes to. Clones share what was added; the driver takes it at the end
/// of each invocation and prints it on that invocation's line. A handler that spawns tasks may
/// add from them, but only what was added before the batch ended is in its line.
#[derive(Debug, Clone)]
pub struct Metrics {
    emf: Arc<Emf>,
    added: Arc<Mutex<BTreeMap<String, (f64, Unit)>>>,
}

impl Metrics {
    /// A handle printing to `emf`.
    pub fn new(emf: Emf) -> Self {
        Metrics { emf: Arc::new(emf), added: Arc::default() }
    }

    /// Where the lines go.
    pub fn emf(&self) -> &Emf {
        &self.emf
    }

    /// Adds `value` to the count `name` for this invocation (unit `Count`).
    pub fn add(&self, name: &str, value: impl Into<f64>) {
        self.add_with_unit(name, value, Unit::Count);
    }

    /// Adds `value` to `name` for this invocation: values added under one name are summed, in
    /// the unit of the first. A name the drivers use (`Applied`, `ColdStart`, ...), a line's
    /// property (`Function`, `service`, ...), an empty name or one over 255 characters, a value
    /// that is not finite, and names past EMF's 100 metrics a line are dropped, with a warning.
    pub fn add_with_unit(&self, name: &str, value: impl Into<f64>, unit: Unit) {
        let value = value.into();
        let refused = if DRIVER_METRICS.contains(&name) || PROPERTIES.contains(&name) {
            Some("the name is the driver's")
        } else {
            unreadable(name, value)
        };
        let mut added = self.added.lock().unwrap_or_else(|p| p.into_inner());
        let refused = refused.or_else(|| {
            (!added.contains_key(name) && added.len() + DRIVER_METRICS.len() >= MAX_METRICS)
                .then_some("EMF takes at most 100 metrics a line")
        });
        let refused = refused.or_else(|| {
            let sum = added.get(name).map_or(value, |(sum, _)| sum + value);
            (!cloudwatch_takes(sum)).then_some("the sum would leave the range CloudWatch takes")
        });
        if let Some(why) = refused {
            drop(added);
            tracing::warn!(metric = name, why, "custom metric dropped");
            return;
        }
        added.entry(name.to_owned()).and_modify(|(sum, _)| *sum += value).or_insert((value, unit));
    }

    /// What was added since the last call, emptied.
    fn take(&self) -> BTreeMap<String, (f64, Unit)> {
        std::mem::take(&mut *self.added.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The invocation's line: `ColdStart`, every count, then what the handler added.
    pub(crate) fn invocation_line(
        &self,
        counts: &Counts,
        cold_start: bool,
        request_id: &str,
        timestamp_ms: u64,
    ) -> String {
        let added = self.take();
        let driver = std::iter::once(("ColdStart", u64::from(cold_start)))
            .chain(counts.metrics())
            .map(|(name, value)| (name, value as f64, Unit::Count));
        let custom = added.iter().map(|(name, (value, unit))| (name.as_str(), *value, *unit));
        self.emf.line_with(timestamp_ms, driver.chain(custom), Some(request_id))
    }

    /// Ends an invocation: prints its line on standard output, where Lambda's log capture picks
    /// it up, when `publish`; otherwise drops what was added.
    pub(crate) fn flush(&self, counts: &Counts, cold_start: bool, request_id: &str, publish: bool) {
        if publish {
            println!("{}", self.invocation_line(counts, cold_start, request_id, crate::now_ms()));
        } else {
            self.take();
        }
    }
}

/// Starts an invocation: takes the cold start, and opens the span every log line of the
/// invocation is in (`request_id`, `function_name`, `function_version`, `cold_start`).
pub(crate) fn invocation_span(emf: &Emf, context: &lambda_runtime::Context) -> (bool, tracing::Span) {
    let cold_start = take_cold_start();
    let span = tracing::info_span!(
        "invocation",
        request_id = context.request_id.as_str(),
        function_name = emf.function(),
        function_version = tracing::field::Empty,
        cold_start,
    );
    if let Some(version) = emf.version() {
        span.record("function_version", version);
    }
    (cold_start, span)
}
