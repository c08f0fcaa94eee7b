//! RFC 3339 timestamps without a date library, for components that only have a wall clock
//! (`std::time::SystemTime` under WASI).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `since_epoch` (time since 1970-01-01T00:00:00Z) as RFC 3339 UTC with milliseconds, e.g.
/// `2024-03-01T12:34:56.789Z` — the host's format (`chrono`'s `SecondsFormat::Millis`, `Z`).
/// Sub-millisecond digits are truncated. Covers years 1970..=9999 (later instants print a
/// five-digit year).
pub fn rfc3339_utc(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let millis = since_epoch.subsec_millis();
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// The current wall-clock time as [`rfc3339_utc`]; a clock before 1970 gives the epoch.
pub fn now_rfc3339_utc() -> String {
    rfc3339_utc(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    )
}

/// (year, month 1..=12, day 1..=31) of day `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64, millis: u32) -> String {
        rfc3339_utc(Duration::new(secs, millis * 1_000_000))
    }

    #[test]
    fn known_instants() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z"); // leap day of a /400 year
        assert_eq!(at(1_709_296_496, 789), "2024-03-01T12:34:56.789Z");
        assert_eq!(at(4_107_542_399, 999), "2100-02-28T23:59:59.999Z"); // 2100 is not a leap year
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
        assert_eq!(at(253_402_300_799, 0), "9999-12-31T23:59:59.000Z");
    }

    #[test]
    fn sub_millisecond_digits_are_truncated() {
        assert_eq!(
            rfc3339_utc(Duration::new(0, 1_999_999)),
            "1970-01-01T00:00:00.001Z"
        );
    }

    #[test]
    fn every_day_follows_the_previous_one() {
        // Walk 1970..2200 day by day: dates must advance by exactly one calendar day.
        let mut prev = civil_from_days(0);
        assert_eq!(prev, (1970, 1, 1));
        for d in 1..(230 * 366) {
            let cur = civil_from_days(d);
            let (y, m, day) = prev;
            let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
            let len = match m {
                1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
                4 | 6 | 9 | 11 => 30,
                _ if leap => 29,
                _ => 28,
            };
            let expected = if day < len {
                (y, m, day + 1)
            } else if m < 12 {
                (y, m + 1, 1)
            } else {
                (y + 1, 1, 1)
            };
            assert_eq!(cur, expected, "day {d}");
            prev = cur;
        }
    }

    #[test]
    fn now_is_well_formed() {
        let s = now_rfc3339_utc();
        assert_eq!(s.len(), 24, "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T', "{s}");
    }
}
