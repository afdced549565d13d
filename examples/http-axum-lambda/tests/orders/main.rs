//! The orders router's Idempotency-Key semantics over DynamoDB on the local AWS: requests as
//! Lambda delivers them, Function URL events through `lambda_http` (`lambda`), and a held body's
//! takeover after another body's refusal (`held_bodies`). One test binary, one module per
//! behaviour.

mod held_bodies;
mod lambda;
