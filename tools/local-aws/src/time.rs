//! RFC 3339 timestamps, as Lambda writes them in an on-failure destination's invocation record.

use std::num::NonZeroU8;

use time::format_description::well_known::iso8601::{Config, EncodedConfig, TimePrecision};
use time::format_description::well_known::Iso8601;
use time::OffsetDateTime;

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`: ISO 8601's extended form with milliseconds, always three digits,
/// in UTC: a profile of RFC 3339.
const MILLIS_UTC: EncodedConfig =
    Config::DEFAULT.set_time_precision(TimePrecision::Second { decimal_digits: NonZeroU8::new(3) }).encode();

/// The last millisecond of year 9999: past it the format has no four-digit year.
const MAX_MS: u64 = 253_402_300_799_999;

/// Milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(ms: u64) -> String {
    let nanos = i128::from(ms.min(MAX_MS)) * 1_000_000;
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos).expect("a u64 of milliseconds up to year 9999");
    at.format(&Iso8601::<MILLIS_UTC>).expect("a UTC date-time in four-digit years formats")
}

#[cfg(test)]
mod tests {
    #[test]
    fn milliseconds_are_written_in_utc_with_three_digits() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(super::rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
