//! A scripted stream function for the mapping tests: it records each batch it is handed, as
//! the records' keys, and answers call `n` (from 0) as the test says.

use std::sync::Mutex;

/// (key, sequence number) of each record of a batch.
pub type Batch = [(String, String)];

type Answer<R> = Box<dyn Fn(usize, &Batch) -> local::Result<R> + Send + Sync>;

/// A function answering call `n` on a batch; `R` is the stream's response type.
pub struct Script<R> {
    answer: Answer<R>,
    calls: Mutex<Vec<Vec<String>>>,
}

impl<R> Script<R> {
    pub fn new(answer: impl Fn(usize, &Batch) -> local::Result<R> + Send + Sync + 'static) -> Self {
        Script { answer: Box::new(answer), calls: Mutex::default() }
    }

    /// The keys of every batch so far, in order.
    pub fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap().clone()
    }

    /// Records `batch` as a call and answers it.
    pub fn call(&self, batch: Vec<(String, String)>) -> local::Result<R> {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(batch.iter().map(|(k, _)| k.clone()).collect());
            calls.len() - 1
        };
        (self.answer)(n, &batch)
    }
}
