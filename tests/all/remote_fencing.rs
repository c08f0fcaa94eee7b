//! Issue 38, items 3 and 4: storage that cannot be fenced is refused, and the store's
//! throttling and clock skew are understood. Against the fake S3 of `support::fake_s3` in each
//! mode (a store that ignores `If-None-Match: *`, one that ignores `If-Match`, one that creates
//! a missing key on `If-Match`, one that throttles with `503 SlowDown` and `Retry-After`, one
//! whose clock is 20 min ahead), and against SeaweedFS (`scripts/test-s3.sh`), which honours
//! conditional writes.

use std::time::Duration;

use serde_json::Value;

use crate::support::TestEnv;
use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::fake_s3::{FakeS3, Modes};

/// The bucket `s3://ctxhost-test/PREFIX` at `endpoint`, retried for `retry_secs`.
fn store(endpoint: &str, retry_secs: u64) -> ctxhost::remote::Store {
    let cfg = ctxhost::remote::RemoteConfig {
        url: format!(
            "s3://ctxhost-test/fencing-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
        endpoint: Some(endpoint.to_string()),
        region: Some("us-east-1".into()),
        allow_http: true,
        retry_secs,
        unsafe_unfenced: false,
    };
    let b = object_store::aws::AmazonS3Builder::new()
        .with_access_key_id("ctxhost-test")
        .with_secret_access_key("ctxhost-test-secret");
    ctxhost::remote::Store::open_with(&cfg, b).unwrap()
}

/// Each condition a store may ignore, and the phrase the probe names it with.
fn broken_modes() -> Vec<(Modes, &'static str)> {
    vec![
        (
            Modes {
                if_none_match: false,
                ..Modes::honest()
            },
            "If-None-Match: *",
        ),
        (
            Modes {
                if_match: false,
                ..Modes::honest()
            },
            "If-Match (a PUT with a wrong ETag",
        ),
        (
            Modes {
                if_match_missing: false,
                ..Modes::honest()
            },
            "If-Match on a missing key (the PUT created the object)",
        ),
    ]
}

#[test]
fn the_probe_names_each_conditional_write_a_store_ignores_and_leaves_nothing() {
    let honest = FakeS3::start(Modes::honest());
    assert_eq!(
        ctxhost::remote::fencing::probe(&store(&honest.endpoint(), 5)).unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(honest.keys(), Vec::<String>::new(), "probe objects left");
    for (modes, phrase) in broken_modes() {
        let s3 = FakeS3::start(modes.clone());
        let missing = ctxhost::remote::fencing::probe(&store(&s3.endpoint(), 5)).unwrap();
        assert_eq!(missing.len(), 1, "{modes:?}: {missing:?}");
        assert!(missing[0].starts_with(phrase), "{modes:?}: {missing:?}");
        assert_eq!(s3.keys(), Vec::<String>::new(), "probe objects left");
    }
}

/// The config of `env` with its task directories in the bucket at `endpoint`.
fn remote_config(llm: &FakeLlm, endpoint: &str, extra: &str) -> String {
    crate::support::config_yaml(&llm.base_url(), "openai", "plugins:\n  compressor: none\n")
        .replace(
            "context_storage:\n  base_dir: ./contexts\n",
            &format!(
                "context_storage:\n  base_dir: ./contexts\n  remote:\n    url: s3://ctxhost-test/ask\n    endpoint: \"{endpoint}\"\n    region: us-east-1\n    allow_http: true\n    retry_secs: 5\n{extra}"
            ),
        )
}

fn remote_env(llm: &FakeLlm, endpoint: &str, extra: &str) -> TestEnv {
    let mut env = TestEnv::new();
    env.set_env("AWS_ACCESS_KEY_ID", "ctxhost-test");
    env.set_env("AWS_SECRET_ACCESS_KEY", "ctxhost-test-secret");
    env.write_config(&remote_config(llm, endpoint, extra));
    env.ctxhost(&["init"]).ok();
    env
}

fn probes(s3: &FakeS3) -> usize {
    s3.requests()
        .iter()
        .filter(|r| r.target.contains(".ctxhost-probe"))
        .count()
}

#[test]
fn a_store_that_ignores_conditional_writes_is_refused_unless_unsafe_unfenced_says_otherwise() {
    let llm = FakeLlm::start(vec![
        Reply::text("ok", Some((10, 1))),
        Reply::text("ok again", Some((10, 1))),
    ]);
    let s3 = FakeS3::start(Modes {
        if_none_match: false,
        ..Modes::honest()
    });
    let env = remote_env(&llm, &s3.endpoint(), "");
    let out = env.ctxhost(&["ask", "Say ok"]).fails();
    let err = out.stderr();
    assert!(
        err.contains(&format!(
            "the object store at {} does not honour conditional writes: If-None-Match: *",
            s3.endpoint()
        )),
        "{err}"
    );
    assert!(err.contains("unsafe_unfenced"), "{err}");
    assert_eq!(llm.request_count(), 0, "a task ran on an unfenced store");

    // Overridden: it runs, with a warning at every start.
    env.write_config(&remote_config(
        &llm,
        &s3.endpoint(),
        "    unsafe_unfenced: true\n",
    ));
    for _ in 0..2 {
        let out = env.ctxhost(&["ask", "--json", "Say ok"]).ok();
        let end: Value = serde_json::from_str(out.stdout().lines().last().unwrap()).unwrap();
        assert_eq!(end["status"], "completed", "{}", out.stderr());
        assert!(
            out.stderr().contains("unsafe_unfenced is true")
                && out
                    .stderr()
                    .contains("runs UNFENCED (it does not honour: If-None-Match: *"),
            "{}",
            out.stderr()
        );
    }
    assert_eq!(llm.request_count(), 2);
}

#[test]
fn an_honest_store_is_probed_once_and_then_trusted() {
    let llm = FakeLlm::start(vec![
        Reply::text("ok", Some((10, 1))),
        Reply::text("ok again", Some((10, 1))),
    ]);
    let s3 = FakeS3::start(Modes::honest());
    let env = remote_env(&llm, &s3.endpoint(), "");
    let out = env.ctxhost(&["ask", "--json", "Say ok"]).ok();
    assert!(!out.stderr().contains("UNFENCED"), "{}", out.stderr());
    let after_first = probes(&s3);
    assert!(after_first >= 4, "{:?}", s3.requests());
    env.ctxhost(&["ask", "--json", "Say ok"]).ok();
    assert_eq!(probes(&s3), after_first, "probed again");
    assert_eq!(llm.request_count(), 2);
    assert!(
        s3.keys().iter().all(|k| !k.contains(".ctxhost-probe")),
        "{:?}",
        s3.keys()
    );
}

#[test]
fn a_slow_down_is_retried_after_the_stores_retry_after() {
    let s3 = FakeS3::start(Modes {
        slow_down: 2,
        retry_after: Some(1),
        ..Modes::honest()
    });
    let bucket = store(&s3.endpoint(), 30);
    bucket
        .put(
            "7f3e6a2c-1d2b-4c5e-8f90-0a1b2c3d4e5f",
            "blobs/x",
            b"x".to_vec(),
        )
        .unwrap();
    let puts: Vec<_> = s3
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .collect();
    assert_eq!(
        puts.iter().map(|r| r.status).collect::<Vec<_>>(),
        [503, 503, 200]
    );
    for w in puts.windows(2) {
        let gap = w[1].at - w[0].at;
        assert!(
            gap >= Duration::from_millis(950),
            "retried {gap:?} after a Retry-After of 1 s"
        );
    }
}

#[test]
fn a_clock_off_by_20_minutes_is_reported_as_clock_skew() {
    let s3 = FakeS3::start(Modes {
        skew_secs: Some(1200),
        ..Modes::honest()
    });
    let bucket = store(&s3.endpoint(), 5);
    let err = format!(
        "{:#}",
        bucket
            .get("7f3e6a2c-1d2b-4c5e-8f90-0a1b2c3d4e5f", "manifest.json")
            .unwrap_err()
    );
    let endpoint = s3.endpoint();
    assert!(
        [1199, 1200, 1201].iter().any(|n| err.contains(&format!(
            "clock skew of {n} s against {endpoint} (server Date "
        ))),
        "{err}"
    );
    assert!(!err.contains("privileges"), "{err}");
    // Not retried: it will not pass.
    assert_eq!(s3.requests().len(), 1, "{:?}", s3.requests());
}

#[test]
#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
fn seaweedfs_honours_every_conditional_write_the_fence_needs() {
    let endpoint = std::env::var("CTXHOST_TEST_S3_URL")
        .expect("CTXHOST_TEST_S3_URL: start the server with `scripts/test-s3.sh start`");
    assert_eq!(
        ctxhost::remote::fencing::probe(&store(&endpoint, 10)).unwrap(),
        Vec::<String>::new()
    );
}
