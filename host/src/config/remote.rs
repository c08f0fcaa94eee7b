//! `context_storage.remote`: the S3-compatible bucket that holds every task directory, and how
//! to reach it (used by [`crate::remote`]). Credentials are never part of it: they come only from the standard environment
//! variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, or the other
//! sources of the AWS default chain such as a web-identity token file), so they never reach the
//! config file, contexts/, the database or the logs.

use serde::{Deserialize, Serialize};

use super::Invalid;

/// `context_storage.remote`: where task directories are kept besides each host's local
/// working copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// `s3://BUCKET/PREFIX` (the prefix may be empty): objects of task `U` are under
    /// `PREFIX/tasks/U/`.
    pub url: String,
    /// The store's endpoint (`https://s3.eu-west-1.amazonaws.com`, `http://127.0.0.1:8333`
    /// for a local SeaweedFS or MinIO); `None`: AWS's own for `region`, or `AWS_ENDPOINT_URL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The bucket's region (`us-east-1` when neither this nor `AWS_REGION` says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Allow a plain `http://` endpoint (a store on the same machine or network); off by default.
    #[serde(default)]
    pub allow_http: bool,
    /// How long a request to the bucket is retried while the store cannot be reached
    /// (connection refused, timeouts, 5xx answers), seconds; then the request fails: a claim
    /// leaves its task paused (resumable), a sync is caught up by the next one. A pause or
    /// stop of the task ends the waiting at once. At most 3600; 0: no retry.
    #[serde(default = "default_retry_secs")]
    pub retry_secs: u64,
    /// Run even when the store does not honour conditional writes (`If-Match`,
    /// `If-None-Match`; probed at start, [`crate::remote::fencing`]): the fence between a
    /// task's holders then does not hold. Off by default; warned about at every start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsafe_unfenced: bool,
}

fn default_retry_secs() -> u64 {
    DEFAULT_RETRY_SECS
}

/// Default of `context_storage.remote.retry_secs`: how long a request to the bucket is retried
/// before it fails, seconds. Long enough for a store that restarts or fails over.
pub const DEFAULT_RETRY_SECS: u64 = 120;

/// Largest `context_storage.remote.retry_secs`.
pub const MAX_RETRY_SECS: u64 = 3600;

/// Bucket and key prefix of a `s3://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteLocation {
    /// The bucket's name.
    pub bucket: String,
    /// Key prefix without leading or trailing `/` (may be empty).
    pub prefix: String,
}

/// The message for a URL or endpoint that carries a user name or password.
const NO_CREDENTIALS: &str = "must not carry credentials (`user:password@`): they come only from \
     AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the rest of the AWS default chain)";

/// The authority (`[userinfo@]host[:port]`) of `url` when it has a `scheme://`, checked by hand
/// so that even a URL that does not parse is never quoted with its credentials.
fn authority(url: &str) -> Option<&str> {
    let rest = &url[url.find("://")? + 3..];
    Some(rest.split(['/', '?', '#']).next().unwrap_or(rest))
}

/// Whether `url`'s authority holds a user name or password (`user:pass@host`).
fn has_userinfo(url: &str) -> bool {
    authority(url).is_some_and(|a| a.contains('@'))
}

/// `url` fit to quote in a message: any `userinfo@` replaced by `***@`.
pub fn redact(url: &str) -> String {
    match authority(url) {
        Some(a) if a.contains('@') => {
            let host = a.rsplit('@').next().unwrap_or_default();
            url.replacen(a, &format!("***@{host}"), 1)
        }
        _ => url.to_string(),
    }
}

/// Why `bucket` is not a valid S3 bucket name (the general-purpose bucket naming rules), if it
/// is not.
fn bucket_problem(bucket: &str) -> Option<&'static str> {
    let bytes = bucket.as_bytes();
    if !(3..=63).contains(&bytes.len())
        || !bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Some("3 to 63 lowercase letters, digits, `-` and `.`");
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return Some("it must begin and end with a letter or digit");
    }
    if bucket.contains("..") || bucket.contains(".-") || bucket.contains("-.") {
        return Some("`.` must not be next to another `.` or a `-`");
    }
    if bucket.parse::<std::net::Ipv4Addr>().is_ok() {
        return Some("it must not look like an IP address");
    }
    None
}

impl RemoteConfig {
    /// The bucket and prefix `url` names; the error says what is wrong with it and never quotes
    /// credentials.
    pub fn location(&self) -> Result<RemoteLocation, String> {
        if has_userinfo(&self.url) {
            return Err(NO_CREDENTIALS.to_string());
        }
        let rest = self
            .url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("must start with s3:// (got `{}`)", redact(&self.url)))?;
        if rest.contains(['?', '#']) {
            return Err(format!(
                "`{}` has a query (`?`) or fragment (`#`): an s3:// URL is only s3://BUCKET/PREFIX",
                self.url
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some(why) = bucket_problem(bucket) {
            return Err(format!("`{bucket}` is not a bucket name ({why})"));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|p| p == "." || p == ".." || (p.is_empty() && !prefix.is_empty()))
            || prefix.chars().any(|c| c.is_control())
        {
            return Err(format!(
                "the key prefix `{prefix}` has an empty, `.` or `..` part or a control character"
            ));
        }
        if prefix.contains('%') {
            return Err(format!(
                "the key prefix `{prefix}` has a `%`: escapes are not decoded, write the key as it is"
            ));
        }
        Ok(RemoteLocation {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// Check the URL, the endpoint and the region; the error names the key and never quotes
    /// credentials.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if let Err(e) = self.location() {
            return Invalid::err("context_storage.remote.url", e);
        }
        if let Some(ep) = &self.endpoint {
            const KEY: &str = "context_storage.remote.endpoint";
            if has_userinfo(ep) {
                return Invalid::err(KEY, NO_CREDENTIALS);
            }
            let quoted = redact(ep);
            let u = match url::Url::parse(ep) {
                Ok(u) => u,
                Err(e) => return Invalid::err(KEY, format!("`{quoted}` is not a URL: {e}")),
            };
            if !u.username().is_empty() || u.password().is_some() {
                return Invalid::err(KEY, NO_CREDENTIALS);
            }
            match u.scheme() {
                "https" => {}
                "http" if self.allow_http => {}
                "http" => {
                    return Invalid::err(
                        KEY,
                        format!(
                            "`{quoted}` is plain http: set context_storage.remote.allow_http: true to allow it"
                        ),
                    );
                }
                _ => return Invalid::err(KEY, format!("`{quoted}` is not an http(s) URL")),
            }
            if u.query().is_some() || u.fragment().is_some() || !matches!(u.path(), "" | "/") {
                return Invalid::err(
                    KEY,
                    format!(
                        "`{quoted}` has a path, query or fragment: the endpoint is scheme://host[:port] only \
                         (the bucket and prefix go in context_storage.remote.url)"
                    ),
                );
            }
        }
        if self.retry_secs > MAX_RETRY_SECS {
            return Invalid::err(
                "context_storage.remote.retry_secs",
                format!(
                    "must be at most {MAX_RETRY_SECS} (an hour), got {}",
                    self.retry_secs
                ),
            );
        }
        if let Some(region) = &self.region {
            let valid = (1..=64).contains(&region.len())
                && region
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !valid {
                return Invalid::err(
                    "context_storage.remote.region",
                    format!(
                        "`{region}` is not a region name (1 to 64 letters, digits, `-` and `_`, such as eu-west-1)"
                    ),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(url: &str) -> RemoteConfig {
        RemoteConfig {
            url: url.into(),
            endpoint: None,
            region: None,
            allow_http: false,
            retry_secs: default_retry_secs(),
            unsafe_unfenced: false,
        }
    }

    #[test]
    fn the_url_names_a_bucket_and_a_prefix() {
        let l = cfg("s3://my-bucket/ctx/prod/").location().unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("my-bucket", "ctx/prod")
        );
        let l = cfg("s3://my-bucket").location().unwrap();
        assert_eq!((l.bucket.as_str(), l.prefix.as_str()), ("my-bucket", ""));
        assert!(
            cfg("https://my-bucket/x")
                .location()
                .unwrap_err()
                .contains("s3://")
        );
        assert!(
            cfg("s3://B/x")
                .location()
                .unwrap_err()
                .contains("bucket name")
        );
        assert!(
            cfg("s3://bucket/a/../b")
                .location()
                .unwrap_err()
                .contains("..")
        );
        assert!(cfg("s3://bucket/a//b").location().is_err());
    }

    #[test]
    fn an_http_endpoint_needs_allow_http_and_no_credentials() {
        let mut c = cfg("s3://bucket/p");
        c.endpoint = Some("http://127.0.0.1:8333".into());
        assert!(c.validate().is_err());
        c.allow_http = true;
        assert!(c.validate().is_ok());
        c.endpoint = Some("http://key:secret@127.0.0.1:8333".into());
        assert!(c.validate().is_err());
        c.endpoint = Some("ftp://x".into());
        assert!(c.validate().is_err());
    }

    /// The error `validate` gives, as text.
    fn refusal(c: &RemoteConfig) -> String {
        let e = c.validate().unwrap_err();
        format!("{}: {}", e.key, e.message)
    }

    #[test]
    fn credentials_are_refused_before_anything_else_and_never_quoted() {
        for ep in [
            "http://AKIAEXAMPLE:wJalrSECRET@127.0.0.1:8333",
            "ftp://AKIAEXAMPLE:wJalrSECRET@x",
            "https://AKIAEXAMPLE:wJalrSECRET@x:99999",
            "https://AKIAEXAMPLE:wJalrSECRET@x/p?q#f",
            "https://AKIAEXAMPLE@x",
        ] {
            let mut c = cfg("s3://bucket/p");
            c.endpoint = Some(ep.into());
            let e = refusal(&c);
            assert!(e.starts_with("context_storage.remote.endpoint"), "{e}");
            assert!(e.contains("credentials"), "{ep}: {e}");
            assert!(
                !e.contains("wJalrSECRET") && !e.contains("AKIAEXAMPLE"),
                "{e}"
            );
        }
        for url in [
            "s3://AKIAXXX:secret@bkt/p",
            "s3://AKIAXXX:secret@bkt",
            "https://AKIAXXX:secret@bkt/p",
        ] {
            let e = refusal(&cfg(url));
            assert!(e.starts_with("context_storage.remote.url"), "{e}");
            assert!(e.contains("credentials"), "{url}: {e}");
            assert!(!e.contains("secret") && !e.contains("AKIAXXX"), "{e}");
        }
        // A refusal for another reason quotes the URL without its userinfo.
        assert_eq!(redact("ftp://k:s@h:1/p?q"), "ftp://***@h:1/p?q");
        assert_eq!(redact("https://h/a@b"), "https://h/a@b");
    }

    #[test]
    fn queries_fragments_and_invalid_names_are_refused() {
        for url in [
            "s3://bkt/p?x=1",
            "s3://bkt//p?versionId=1",
            "s3://bkt/p#frag",
            "s3://bkt/a b%2F..%2F",
            "s3://a..b/p",
            "s3://192.168.1.1/p",
            "s3://-abc/p",
            "s3://abc-/p",
            "s3://a.-b/p",
        ] {
            let e = refusal(&cfg(url));
            assert!(e.starts_with("context_storage.remote.url: "), "{url}: {e}");
        }
        assert!(cfg("s3://my.bucket-1/a b/c").validate().is_ok());
        for ep in [
            "https://s3.example.com/foo?x=1#y",
            "https://s3.example.com/?x=1",
            "https://s3.example.com/#y",
            "https://s3.example.com/foo",
        ] {
            let mut c = cfg("s3://bucket/p");
            c.endpoint = Some(ep.into());
            let e = refusal(&c);
            assert!(e.contains("path, query or fragment"), "{ep}: {e}");
        }
        let mut c = cfg("s3://bucket/p");
        c.endpoint = Some("https://s3.example.com/".into());
        assert!(c.validate().is_ok());
        for region in ["../../x y", "", "eu west"] {
            c.region = Some(region.into());
            assert!(
                refusal(&c).starts_with("context_storage.remote.region: "),
                "{region}"
            );
        }
        c.region = Some("eu-west-1".into());
        assert!(c.validate().is_ok());
    }
}
