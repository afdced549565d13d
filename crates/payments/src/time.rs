//! RFC 3339 timestamps, as the ledger's entries and the outbox rows store them.

use std::num::NonZeroU8;

use time::format_description::well_known::iso8601::{Config, EncodedConfig, TimePrecision};
use time::format_description::well_known::Iso8601;
use time::OffsetDateTime;

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`: ISO 8601's extended form with milliseconds, always three
/// digits (fixed width, so the strings sort as the instants do), in UTC: a profile of RFC 3339.
const MILLIS_UTC: EncodedConfig =
    Config::DEFAULT.set_time_precision(TimePrecision::Second { decimal_digits: NonZeroU8::new(3) }).encode();

/// Formats milliseconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(ms: u64) -> String {
    // Milliseconds since 1970 as a u64 stay far inside what `time` represents (year 9999 is
    // 2.5e14 ms); beyond that year the format has no four-digit form, so clamp.
    let nanos = i128::from(ms.min(MAX_MS)) * 1_000_000;
    let at = OffsetDateTime::from_unix_timestamp_nanos(nanos).expect("a u64 of milliseconds up to year 9999");
    at.format(&Iso8601::<MILLIS_UTC>).expect("a UTC date-time in four-digit years formats")
}

/// 9999-12-31T23:59:59.999Z.
const MAX_MS: u64 = 253_402_300_799_999;

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
        assert_eq!(super::rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_795_000_000_100), "2026-11-18T11:06:40.100Z", "three digits, always");
        assert_eq!(super::rfc3339(u64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
