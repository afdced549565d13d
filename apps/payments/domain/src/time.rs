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

/// Whether `text` has the shape [`rfc3339`] writes, `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (a
/// fraction of 1 to 9 digits), with a month, day, hour, minute and second in range. A shape
/// check, by hand: the receipt shows only the date, and `time`'s parser is not compiled in.
pub(crate) fn is_utc_timestamp(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| b.get(range.clone()).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let number = |range: std::ops::Range<usize>| text[range].parse::<u32>().unwrap_or(u32::MAX);
    let shape = b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && b[b.len() - 1] == b'Z';
    if !shape {
        return false;
    }
    let fraction = &b[19..b.len() - 1];
    let fraction_ok = fraction.is_empty()
        || (fraction[0] == b'.' && (2..=10).contains(&fraction.len()) && fraction[1..].iter().all(u8::is_ascii_digit));
    fraction_ok
        && (1..=12).contains(&number(5..7))
        && (1..=31).contains(&number(8..10))
        && number(11..13) <= 23
        && number(14..16) <= 59
        && number(17..19) <= 60
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

    #[test]
    fn what_rfc3339_writes_has_the_timestamp_shape_and_other_text_does_not() {
        for ms in [0, 1_795_000_000_123, u64::MAX] {
            assert!(super::is_utc_timestamp(&super::rfc3339(ms)), "{ms}");
        }
        assert!(super::is_utc_timestamp("2026-11-18T11:06:40Z"));
        for text in [
            "",
            "2026-11-18",
            "2026-11-18T11:06:40.123+01:00",
            "2026-13-18T11:06:40.123Z",
            "2026-11-18T11:06:40.Z",
            "2026-11-18 11:06:40.123Z",
            "Call +1 555 0100 now!!!!!Z",
            "2026-11-18T11:06:40.123Zvisit evil.example Z",
        ] {
            assert!(!super::is_utc_timestamp(text), "{text:?}");
        }
    }
}
