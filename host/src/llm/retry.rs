//! Retry policy: which HTTP statuses are retried, how long to wait, `Retry-After` parsing.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

/// First backoff delay; attempt `n` (1-based retry) waits about `INITIAL_BACKOFF × 2^(n-1)`.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// Whether an HTTP status is worth another attempt: 408 Request Timeout, 409 Conflict,
/// 429 Too Many Requests, 500, 502, 503, 504, and 529 (Anthropic's `overloaded_error`). Every
/// other 4xx/5xx is final.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// Whether a failed response should be retried: the server's `x-should-retry` header when it
/// says `true` or `false` (Anthropic and OpenAI send it; their SDKs obey it), otherwise
/// [`is_retryable_status`].
pub fn should_retry(status: u16, x_should_retry: Option<&str>) -> bool {
    match x_should_retry.map(str::trim) {
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        _ => is_retryable_status(status),
    }
}

/// Delay before retry number `retry` (1 = the first retry): exponential from `initial`
/// (`initial × 2^(retry-1)`), capped at `max`, with "equal jitter": a uniformly random value in
/// `[d/2, d]`, so concurrent tasks hitting the same rate limit spread out.
pub fn backoff_delay(retry: u32, initial: Duration, max: Duration) -> Duration {
    let exp = retry.saturating_sub(1).min(20);
    let full = initial.saturating_mul(1u32 << exp).min(max);
    let half = full / 2;
    let span = (full - half).as_nanos() as u64;
    let jitter = if span == 0 {
        0
    } else {
        random_u64() % (span + 1)
    };
    half + Duration::from_nanos(jitter)
}

/// Parse a `Retry-After` header value: either delay-seconds (`"120"`, fractional values are
/// accepted) or an HTTP date (`"Wed, 21 Oct 2015 07:28:00 GMT"`, RFC 9110 IMF-fixdate or any
/// RFC 2822 date). A date in the past means "now" (zero). Returns `None` for anything else.
/// `now` is passed in so tests are deterministic.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if v.is_empty() {
        return None;
    }
    if v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok().map(Duration::from_secs);
    }
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e9)));
    }
    let date = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let at: SystemTime = date.with_timezone(&chrono::Utc).into();
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The wait before the next attempt: the server's `Retry-After` when given (capped at `max`),
/// otherwise [`backoff_delay`].
pub fn next_delay(
    retry: u32,
    retry_after: Option<Duration>,
    initial: Duration,
    max: Duration,
) -> Duration {
    match retry_after {
        Some(d) => d.min(max),
        None => backoff_delay(retry, initial, max),
    }
}

/// A random number from the std hasher's per-process random keys (no extra dependency; quality
/// is ample for jitter).
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(parse_retry_after("1", at(0)), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 120 ", at(0)),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after("0", at(0)), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("1.5", at(0)),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn retry_after_http_date() {
        // Wed, 21 Oct 2015 07:28:00 GMT = 1445412480.
        let now = at(1_445_412_480 - 30);
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::from_secs(30))
        );
        // In the past: retry now.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", at(1_445_412_480 + 5)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_garbage() {
        for v in ["", "soon", "-3", "NaN", "Wed, 99 Foo 2015"] {
            assert_eq!(parse_retry_after(v, at(0)), None, "{v:?}");
        }
    }

    #[test]
    fn retry_after_is_capped() {
        let d = next_delay(
            1,
            Some(Duration::from_secs(3600)),
            INITIAL_BACKOFF,
            Duration::from_secs(60),
        );
        assert_eq!(d, Duration::from_secs(60));
        let d = next_delay(
            1,
            Some(Duration::from_secs(2)),
            INITIAL_BACKOFF,
            Duration::from_secs(60),
        );
        assert_eq!(d, Duration::from_secs(2));
    }

    #[test]
    fn backoff_grows_with_jitter_and_cap() {
        let init = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        for _ in 0..50 {
            let d1 = backoff_delay(1, init, max);
            assert!(d1 >= Duration::from_millis(50) && d1 <= init, "{d1:?}");
            let d3 = backoff_delay(3, init, max);
            assert!(
                d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400),
                "{d3:?}"
            );
            let d10 = backoff_delay(10, init, max);
            assert!(d10 >= max / 2 && d10 <= max, "{d10:?}");
            assert!(backoff_delay(u32::MAX, init, max) <= max);
        }
    }

    #[test]
    fn retryable_statuses() {
        for s in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(s), "{s}");
        }
        for s in [400, 401, 403, 404, 413, 422, 501, 505] {
            assert!(!is_retryable_status(s), "{s}");
        }
    }

    #[test]
    fn x_should_retry_overrides_the_status() {
        assert!(should_retry(400, Some("true")));
        assert!(!should_retry(529, Some("false")));
        assert!(!should_retry(503, Some(" FALSE ")));
        assert!(should_retry(529, None));
        assert!(should_retry(503, Some("maybe")));
        assert!(!should_retry(401, None));
    }
}
