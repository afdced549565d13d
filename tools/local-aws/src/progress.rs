//! A run's progress on stderr, as a bar drawn only when stderr is a terminal: in CI logs and
//! pipes it stays hidden, so no carriage returns land there. Also times a scenario's phases.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Deliveries so far on a bar, and each phase's wall time.
#[derive(Debug)]
pub struct Tracker {
    bar: ProgressBar,
    done: Progress,
    phases: Vec<(&'static str, Duration)>,
    since: Instant,
}

impl Tracker {
    /// A bar toward `expected` deliveries.
    pub fn new(expected: usize) -> Tracker {
        Tracker::drawn(Some(expected as u64), "[{bar:30}] deliveries {pos:>5}/{len:<5} {msg}")
    }

    /// A count of deliveries with no end known in advance.
    pub fn open() -> Tracker {
        Tracker::drawn(None, "deliveries {pos:>5} {msg}")
    }

    fn drawn(expected: Option<u64>, template: &str) -> Tracker {
        let bar = ProgressBar::with_draw_target(expected, ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(template).expect("a valid progress template");
        bar.set_style(style.progress_chars("#>."));
        Tracker { bar, done: Progress::default(), phases: Vec::new(), since: Instant::now() }
    }

    /// `current`, the progress of the phase under way, on top of the phases done.
    pub fn show(&self, current: Progress) {
        let total = self.done + current;
        self.bar.set_position(total.deliveries as u64);
        self.bar.set_message(format!("failed {:>4}  receipts stream {:>4}", total.failed, total.stream_records));
    }

    /// `more` deliveries are expected than were.
    pub fn expect_more(&self, more: usize) {
        self.bar.inc_length(more as u64);
    }

    /// A phase ended with `finished`; its time is noted under `name`.
    pub fn phase_done(&mut self, name: &'static str, finished: Progress) {
        self.done = self.done + finished;
        self.show(Progress::default());
        self.lap(name);
    }

    /// Notes the time since the last phase under `name`.
    pub fn lap(&mut self, name: &'static str) {
        self.phases.push((name, self.since.elapsed()));
        self.since = Instant::now();
    }

    /// Every phase's progress together.
    pub fn total(&self) -> Progress {
        self.done
    }

    /// Leaves the bar as it stands, and what follows on a line of its own.
    pub fn finish(&self) {
        self.bar.finish();
        if !self.bar.is_hidden() {
            eprintln!();
        }
    }

    /// The phases and their times.
    pub fn into_phases(self) -> Vec<(&'static str, Duration)> {
        self.phases
    }
}

/// Progress of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// SQS deliveries so far.
    pub deliveries: usize,
    /// SQS messages reported failed so far.
    pub failed: usize,
    /// Stream records delivered so far.
    pub stream_records: usize,
}

impl std::ops::Add for Progress {
    type Output = Progress;

    fn add(self, other: Progress) -> Progress {
        Progress {
            deliveries: self.deliveries + other.deliveries,
            failed: self.failed + other.failed,
            stream_records: self.stream_records + other.stream_records,
        }
    }
}
