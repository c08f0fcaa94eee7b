//! What the store's refusals say that `object_store`'s errors drop: the HTTP client under the
//! [`super::Store`] ([`Observing`], `object_store`'s own reqwest client wrapped) notes of each
//! answer that is not a success its status, its `Retry-After` (a `503 SlowDown` or `429`: how
//! long the store asks to be left alone) and its `Date` (the store's clock, for
//! `RequestTimeTooSkewed`), with this host's clock when it arrived. The notes go to the
//! [`Answers`] of the request being made ([`Answers::scope`], a tokio task-local), so
//! requests made at the same time on other threads never mix theirs up.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService,
    ReqwestConnector,
};

/// The longest `Retry-After` taken as it is (a longer one is waited for this long).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// The last answer of one request that was not a success.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusal {
    /// Its HTTP status.
    pub status: u16,
    /// Its `Retry-After` (delay seconds or an HTTP date), as a wait from when it arrived; at
    /// most [`MAX_RETRY_AFTER`].
    pub retry_after: Option<Duration>,
    /// Its `Date` header as sent (an HTTP date).
    pub date: Option<String>,
    /// The store's clock minus this host's when it arrived, seconds (from `Date`).
    pub skew_secs: Option<i64>,
}

/// What the answers to one request said (its attempts are retried by `object_store`, so the
/// last refusal is the one kept).
#[derive(Debug, Clone, Default)]
pub struct Answers(Arc<Mutex<Option<Refusal>>>);

tokio::task_local! {
    static CURRENT: Answers;
}

impl Answers {
    /// Run `fut` (one request to the store) with its refusals noted here.
    pub async fn scope<F: std::future::Future>(&self, fut: F) -> F::Output {
        CURRENT.scope(self.clone(), fut).await
    }

    /// The last refusal noted, if any.
    pub fn last(&self) -> Option<Refusal> {
        self.0.lock().ok().and_then(|g| g.clone())
    }

    /// Forget what was noted (before the next attempt).
    pub fn clear(&self) {
        if let Ok(mut g) = self.0.lock() {
            *g = None;
        }
    }

    fn note(&self, r: Refusal) {
        if let Ok(mut g) = self.0.lock() {
            *g = Some(r);
        }
    }
}

/// Parse a `Retry-After` value: delay seconds, or an HTTP date (a wait from `now`; a date past
/// is no wait). `None` when it is neither.
pub fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or_default()
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// What `response` (not a success) says, read when it arrived at `now`.
fn refusal(response: &HttpResponse, now: chrono::DateTime<chrono::Utc>) -> Refusal {
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let date = header("date");
    let skew_secs = date
        .as_deref()
        .and_then(|d| chrono::DateTime::parse_from_rfc2822(d.trim()).ok())
        .map(|d| (d.with_timezone(&chrono::Utc) - now).num_seconds());
    Refusal {
        status: response.status().as_u16(),
        retry_after: header("retry-after")
            .as_deref()
            .and_then(|v| parse_retry_after(v, now)),
        date,
        skew_secs,
    }
}

/// `object_store`'s reqwest client, noting refusals in the current [`Answers`].
#[derive(Debug)]
struct ObservingService(HttpClient);

#[async_trait::async_trait]
impl HttpService for ObservingService {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let response = self.0.execute(req).await?;
        if !response.status().is_success() {
            let r = refusal(&response, chrono::Utc::now());
            // Outside a scope (no request of the Store's): nothing to note.
            let _ = CURRENT.try_with(|a| a.note(r));
        }
        Ok(response)
    }
}

/// The [`HttpConnector`] the store is built with: `object_store`'s reqwest one (the same
/// [`ClientOptions`]: timeouts, `allow_http`, proxies), observed.
#[derive(Debug, Default)]
pub struct Observing;

impl HttpConnector for Observing {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(ObservingService(inner)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date_and_is_bounded() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-07T04:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Mon, 07 Dec 2026 04:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Mon, 07 Dec 2026 03:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("86400", now), Some(MAX_RETRY_AFTER));
        assert_eq!(parse_retry_after("soon", now), None);
    }
}
