//! The tool itself: the local AWS's own tests, the fault proxy's HTTP, and the `local` command's
//! refusal of an endpoint off this machine.

mod local_aws;
mod proxy;
mod remote_endpoint;
