//! Metrics in CloudWatch Embedded Metric Format (EMF): one log line per invocation, which
//! CloudWatch turns into metrics with no API call from the function.
//!
//! # Where the metrics go, in an account shared by several stacks
//!
//! An [`Emf`] is read from the environment once, when the driver's options are built
//! (`sqs::Options::new`, `streams::Options::new`), never per record:
//!
//! | Variable | What | Default |
//! |---|---|---|
//! | `POWERTOOLS_METRICS_NAMESPACE` | the namespace | [`NAMESPACE`] (`EffectivelyOnce`) |
//! | `AWS_LAMBDA_FUNCTION_NAME` (set by Lambda) | the `Function` dimension | the name the binary passes (`payments-consumer`) |
//! | `POWERTOOLS_SERVICE_NAME` | the `service` property | that same binary name |
//! | `AWS_LAMBDA_FUNCTION_VERSION` (set by Lambda) | the `function_version` property and log field | none |
//!
//! Every metric carries one dimension, `Function`, set to the deployed function's name, so two
//! stacks in one account never add to each other's metrics, and an alarm reads
//! `{Namespace, MetricName, Function = <function name>}`. The service is a property (searchable
//! in CloudWatch Logs Insights), not a dimension: a second dimension would make another metric,
//! which the alarms on `Function` alone would not see.
//!
//! # What each invocation's line holds
//!
//! `ColdStart` (1 on the sandbox's first invocation, 0 after), one count per outcome
//! (`Applied`, `Duplicate`, `Rejected`, `Skipped`, `InProgressElsewhere`, `Failed`, and
//! `PermanentFailures`, the part of `Failed` no retry changes: [`Retry::Never`]),
//! every one of them on every line, zeros included; then the handler's own metrics, added through [`Metrics`] while the batch
//! ran; and the properties `service`, `function_version` and `request_id`.
//!
//! # A handler's own metrics
//!
//! Clone the options' [`Metrics`] handle into the handler and [`add`](Metrics::add) to it; the
//! driver sums what was added during the invocation and prints it on the same line, under the
//! same namespace and dimension.
//!
//! ```
//! use effectively_once_lambda::events::{Context, SqsMessage};
//! use effectively_once_lambda::metrics::{Metrics, Unit};
//! use effectively_once_lambda::{sqs, Handled, Handler, RecordResult};
//!
//! struct Orders {
//!     metrics: Metrics,
//! }
//!
//! impl Handler<SqsMessage> for Orders {
//!     async fn handle(&self, message: &SqsMessage, _context: &Context) -> RecordResult {
//!         // ... place the order ...
//!         self.metrics.add("OrdersPlaced", 1);
//!         self.metrics.add_with_unit("OrderBytes", message.body.as_deref().unwrap_or("").len() as f64, Unit::Bytes);
//!         Ok(Handled::Applied)
//!     }
//! }
//!
//! let options = sqs::Options::new("orders");
//! let handler = Orders { metrics: options.metrics.clone() };
//! // lambda_runtime::run(service_fn(|event| async { Ok::<_, Error>(sqs::process(&handler, event, &options).await) }))
//! # let _ = (handler, options);
//! ```

#[cfg(doc)]
use crate::Retry;

// The constants and the unit are here, the rest by concept: `emf` (where the lines go and how
// one is written), `counts` (what a batch came to) and `handle` (what a handler adds, and the
// invocation's line and span).
mod counts;
mod emf;
mod handle;
#[cfg(test)]
mod tests;

pub use counts::Counts;
pub use emf::Emf;
pub(crate) use handle::invocation_span;
pub use handle::Metrics;

/// The default metric namespace.
pub const NAMESPACE: &str = "EffectivelyOnce";
/// The variable naming the namespace (Powertools' name).
pub const NAMESPACE_VAR: &str = "POWERTOOLS_METRICS_NAMESPACE";
/// The variable naming the service (Powertools' name).
pub const SERVICE_VAR: &str = "POWERTOOLS_SERVICE_NAME";
/// The variable Lambda sets to the deployed function's name.
pub const FUNCTION_NAME_VAR: &str = "AWS_LAMBDA_FUNCTION_NAME";
/// The variable Lambda sets to the function's version (`$LATEST`, `3`).
pub const FUNCTION_VERSION_VAR: &str = "AWS_LAMBDA_FUNCTION_VERSION";
/// The one dimension every metric carries.
pub const FUNCTION_DIMENSION: &str = "Function";

/// The metrics the drivers print on every invocation's line: custom metrics may not reuse them.
pub const DRIVER_METRICS: [&str; 9] = [
    "ColdStart",
    "Applied",
    "Duplicate",
    "Rejected",
    "Skipped",
    "InProgressElsewhere",
    "Failed",
    "PermanentFailures",
    "Parked",
];

/// Keys of the line that are not metrics: custom metrics may not reuse them either.
const PROPERTIES: [&str; 5] = ["_aws", FUNCTION_DIMENSION, "service", "function_version", "request_id"];

/// EMF's limit of metrics per directive.
const MAX_METRICS: usize = 100;

/// A metric's unit (CloudWatch's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Unit {
    /// `Count`.
    #[default]
    Count,
    /// `Seconds`.
    Seconds,
    /// `Milliseconds`.
    Milliseconds,
    /// `Bytes`.
    Bytes,
    /// `Percent`.
    Percent,
    /// `None`: a plain number.
    None,
}

impl Unit {
    /// CloudWatch's name of the unit.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Seconds => "Seconds",
            Unit::Milliseconds => "Milliseconds",
            Unit::Bytes => "Bytes",
            Unit::Percent => "Percent",
            Unit::None => "None",
        }
    }
}
