//! `context_storage.remote`: the S3-compatible bucket that holds every task directory, and how
//! to reach it (used by [`crate::remote`]). Credentials are never part of it: they come only from the standard environment
//! variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, or the other
//! sources of the AWS default chain such as a web-identity token file), so they never reach the
//! config file, contexts/, the database or the logs.

use serde::{Deserialize, Serialize};

use super::Invalid;

/// `context_storage.remote`: where task directories are kept besides each host's local
/// working copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// Bucket and key prefix of a `s3://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteLocation {
    /// The bucket's name.
    pub bucket: String,
    /// Key prefix without leading or trailing `/` (may be empty).
    pub prefix: String,
}

impl RemoteConfig {
    /// The bucket and prefix `url` names; the error says what is wrong with it.
    pub fn location(&self) -> Result<RemoteLocation, String> {
        let rest = self
            .url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("must start with s3:// (got `{}`)", self.url))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !valid_bucket {
            return Err(format!(
                "`{bucket}` is not a bucket name (3 to 63 lowercase letters, digits, `-` and `.`)"
            ));
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
        Ok(RemoteLocation {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }

    /// Check the URL and the endpoint; the error names the key.
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if let Err(e) = self.location() {
            return Invalid::err("context_storage.remote.url", e);
        }
        if let Some(ep) = &self.endpoint {
            match url::Url::parse(ep) {
                Ok(u) if u.scheme() == "https" => {}
                Ok(u) if u.scheme() == "http" && self.allow_http => {}
                Ok(u) if u.scheme() == "http" => {
                    return Invalid::err(
                        "context_storage.remote.endpoint",
                        format!(
                            "`{ep}` is plain http: set context_storage.remote.allow_http: true to allow it"
                        ),
                    );
                }
                Ok(_) => {
                    return Invalid::err(
                        "context_storage.remote.endpoint",
                        format!("`{ep}` is not an http(s) URL"),
                    );
                }
                Err(e) => {
                    return Invalid::err(
                        "context_storage.remote.endpoint",
                        format!("`{ep}` is not a URL: {e}"),
                    );
                }
            }
            if url::Url::parse(ep).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
            {
                return Invalid::err(
                    "context_storage.remote.endpoint",
                    "must not carry credentials: they come only from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY",
                );
            }
        }
        if self.region.as_deref().is_some_and(str::is_empty) {
            return Invalid::err("context_storage.remote.region", "must not be empty");
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
}
