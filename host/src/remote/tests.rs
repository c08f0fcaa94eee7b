//! Sync up, claim, download and fencing against a real S3-compatible server (the SeaweedFS of
//! `scripts/test-s3.sh`, `CTXHOST_TEST_S3_URL`): each "host" is a contexts tree of its own.
//! Built `#[ignore]`d without the server (outside CI).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::layout::DirState;

/// A store on the test server under a prefix of its own (bucket `ctxhost-test`, made by
/// scripts/test-s3.sh).
pub(super) fn test_store() -> Arc<Store> {
    let endpoint = std::env::var("CTXHOST_TEST_S3_URL")
        .expect("CTXHOST_TEST_S3_URL: start the server with `scripts/test-s3.sh start` and export what it prints");
    let cfg = RemoteConfig {
        url: format!(
            "s3://ctxhost-test/unit-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ),
        endpoint: Some(endpoint),
        region: Some("us-east-1".into()),
        allow_http: true,
        retry_secs: 30,
        unsafe_unfenced: false,
    };
    let b = object_store::aws::AmazonS3Builder::new()
        .with_access_key_id("ctxhost-test")
        .with_secret_access_key("ctxhost-test");
    Arc::new(Store::open_with(&cfg, b).unwrap())
}

/// A contexts tree ("host") in a temporary folder.
pub(super) fn host() -> (tempfile::TempDir, Layout) {
    let t = tempfile::tempdir().unwrap();
    let layout = Layout::new(t.path().join("contexts"));
    layout.ensure().unwrap();
    (t, layout)
}

fn append(dir: &Path, name: &str, bytes: &[u8]) -> u64 {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
    bytes.len() as u64
}

/// Every regular file under `dir` that is synced, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let d = TaskDir::open(dir).unwrap();
    d.walk(|rel, m| {
        if m.is_file() && manifest::kind_of(rel) != manifest::Kind::Skipped {
            out.insert(rel.to_string(), std::fs::read(dir.join(rel)).unwrap());
        }
    })
    .unwrap();
    out
}

fn new_task(layout: &Layout) -> (String, std::path::PathBuf) {
    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    let dir = layout.task_dir(DirState::Running, &uuid);
    crate::layout::create_private_dir_all(&dir).unwrap();
    (uuid, dir)
}

#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
#[test]
fn a_task_synced_on_one_host_resumes_on_another_and_the_old_host_is_fenced() {
    let store = test_store();
    let (_a, host_a) = host();
    let (_b, host_b) = host();
    let (uuid, dir_a) = new_task(&host_a);
    append(&dir_a, "metadata.json", br#"{"uuid":"x"}"#);
    append(&dir_a, "messages.jsonl", b"{\"seq\":1}\n");
    append(&dir_a, "current.jsonl", b"{\"role\":\"system\"}\n");
    append(&dir_a, "tool-results/1.txt", b"output");
    append(
        &dir_a,
        &format!("planning/{uuid}.jsonl"),
        b"{\"type\":\"plan\"}\n",
    );
    append(&dir_a, "request.json", b"{}"); // a step temporary: never synced
    let mut a = TaskSync::claim(store.clone(), &host_a, &uuid, "host-a/1", &dir_a).unwrap();
    assert_eq!((a.manifest().epoch, a.downloaded()), (1, 0));
    let r = a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap();
    assert!(r.written && r.objects == 5, "{r:?}");
    append(&dir_a, "messages.jsonl", b"{\"seq\":2}\n");
    a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap();
    // A compaction replaces current.jsonl: it goes up whole again.
    std::fs::write(
        dir_a.join("current.jsonl.new"),
        b"{\"role\":\"system\"}\n{\"s\":1}\n",
    )
    .unwrap();
    std::fs::rename(dir_a.join("current.jsonl.new"), dir_a.join("current.jsonl")).unwrap();
    let r = a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap();
    assert_eq!(r.data_bytes, 26, "{r:?}");

    // Host b claims it (the lease moved): it downloads the directory and takes epoch 2.
    let (_, dir_b) = (0, host_b.task_dir(DirState::Running, &uuid));
    crate::layout::create_private_dir_all(&dir_b).unwrap();
    let mut b = TaskSync::claim(store.clone(), &host_b, &uuid, "host-b/7", &dir_b).unwrap();
    assert!(b.downloaded() > 0);
    assert_eq!(b.manifest().epoch, 2);
    let mut want = files(&dir_a);
    assert!(!want.contains_key("request.json"));
    assert_eq!(files(&dir_b), want);
    assert!(!dir_b.join("request.json").exists());

    // Host a, fenced, writes late: refused, and the bucket keeps b's manifest.
    append(&dir_a, "messages.jsonl", b"{\"seq\":3,\"late\":true}\n");
    let e = a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap_err();
    let fenced = e.downcast_ref::<Fenced>().expect("a Fenced error");
    assert_eq!(
        (fenced.theirs, fenced.ours, fenced.holder.as_str()),
        (2, 1, "host-b/7")
    );
    let now = read_manifest(&store, &uuid).unwrap().unwrap().manifest;
    assert_eq!((now.epoch, now.holder.as_str()), (2, "host-b/7"));

    // b goes on; a third host then gets b's work, not a's late line.
    append(&dir_b, "messages.jsonl", b"{\"seq\":3}\n");
    b.sync(&TaskDir::open(&dir_b).unwrap()).unwrap();
    let (_c, host_c) = host();
    let dir_c = host_c.task_dir(DirState::Running, &uuid);
    crate::layout::create_private_dir_all(&dir_c).unwrap();
    let c = TaskSync::claim(store.clone(), &host_c, &uuid, "host-c/9", &dir_c).unwrap();
    assert_eq!(c.manifest().epoch, 3);
    want.insert(
        "messages.jsonl".into(),
        b"{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n".to_vec(),
    );
    assert_eq!(files(&dir_c), want);

    // Host b claims it again later with its copy out of date: downloaded again; a host whose
    // copy is the bucket's downloads nothing.
    let b2 = TaskSync::claim(store.clone(), &host_b, &uuid, "host-b/8", &dir_b).unwrap();
    assert!(b2.downloaded() > 0, "b's copy was behind c's claim");
    let b3 = TaskSync::claim(store.clone(), &host_b, &uuid, "host-b/9", &dir_b).unwrap();
    assert_eq!((b3.downloaded(), b3.manifest().epoch), (0, 5));

    // Deleting the task removes every object.
    assert!(delete_task(&store, &host_b, &uuid).unwrap() > 5);
    assert!(store.list(&uuid).unwrap().is_empty());
}

#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
#[test]
fn bytes_uploaded_per_step_are_the_bytes_appended_plus_the_manifest() {
    let store = test_store();
    let (_a, layout) = host();
    let (uuid, dir) = new_task(&layout);
    append(&dir, "metadata.json", br#"{"uuid":"x"}"#);
    let mut sync = TaskSync::claim(store.clone(), &layout, &uuid, "h/1", &dir).unwrap();
    sync.sync(&TaskDir::open(&dir).unwrap()).unwrap();
    let mut history = 0u64;
    for step in 0..200u64 {
        let before = store.uploaded_bytes();
        // One step: a reply, a tool call and its result, an LLM-call record, the context.
        let line = format!(
            "{{\"seq\":{step},\"content\":\"{}\"}}\n",
            "x".repeat((step % 7 * 40) as usize)
        );
        let mut appended = append(&dir, "messages.jsonl", line.as_bytes());
        appended += append(&dir, "current.jsonl", line.as_bytes());
        appended += append(&dir, "tools.jsonl", b"{\"seq\":1,\"tool\":\"t\"}\n");
        appended += append(&dir, "llm_calls.jsonl", b"{\"call\":1}\n");
        history += line.len() as u64;
        let r = sync.sync(&TaskDir::open(&dir).unwrap()).unwrap();
        assert_eq!(r.data_bytes, appended, "step {step}");
        assert_eq!(r.objects, 4, "step {step}");
        // Every SEAL-th step of a file seals its segments into an index object.
        assert_eq!(
            r.indexes > 0,
            (step + 1) % manifest::SEAL as u64 == 0,
            "step {step}: {r:?}"
        );
        assert_eq!(
            store.uploaded_bytes() - before,
            appended + r.index_bytes + r.manifest_bytes,
            "step {step}"
        );
    }
    // A step that changed nothing uploads nothing.
    let before = store.uploaded_bytes();
    let r = sync.sync(&TaskDir::open(&dir).unwrap()).unwrap();
    assert!(!r.written);
    assert_eq!(store.uploaded_bytes(), before);
    let m = read_manifest(&store, &uuid).unwrap().unwrap().manifest;
    assert_eq!(m.files["messages.jsonl"].size(), history);
    delete_task(&store, &layout, &uuid).unwrap();
}

/// The entries of the manifest's file `name`: (indexes by level, open segments).
fn shape(m: &Manifest, name: &str) -> (Vec<u32>, usize) {
    match &m.files[name] {
        manifest::FileEntry::Appended {
            indexes, segments, ..
        } => (indexes.iter().map(|i| i.level).collect(), segments.len()),
        e => panic!("{name}: {e:?}"),
    }
}

#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
#[test]
fn the_manifest_stays_small_as_old_segments_are_sealed_into_index_objects() {
    let store = test_store();
    let (_a, layout) = host();
    let (uuid, dir) = new_task(&layout);
    append(&dir, "metadata.json", br#"{"uuid":"x"}"#);
    let mut sync = TaskSync::claim(store.clone(), &layout, &uuid, "h/1", &dir).unwrap();
    let mut largest = 0;
    let steps = 600u64;
    for step in 1..=steps {
        let line = format!("{{\"seq\":{step},\"content\":\"{}\"}}\n", "y".repeat(100));
        for f in [
            "messages.jsonl",
            "current.jsonl",
            "tools.jsonl",
            "llm_calls.jsonl",
        ] {
            append(&dir, f, line.as_bytes());
        }
        let r = sync.sync(&TaskDir::open(&dir).unwrap()).unwrap();
        largest = largest.max(r.manifest_bytes);

        if step == 1 {
            assert_eq!(
                sync.manifest().format,
                1,
                "no index yet: readable by format-1 hosts"
            );
        }
    }
    let m = sync.manifest().clone();
    assert_eq!(m.format, 2);
    // 600 = 1·512 + 1·64 + 3·8: one index of each of levels 3 and 2, three of level 1, no
    // open segment.
    assert_eq!(shape(&m, "messages.jsonl"), (vec![3, 2, 1, 1, 1], 0));
    // Bounded: at most SEAL-1 entries per level and file, 12.7 KB at the worst step (511 =
    // 7·64 + 7·8 + 7); the format-1 manifest of the same task listed 2,400 segments, ~400 KB.
    assert!(largest < 16 * 1024, "largest manifest {largest} B");
    assert!(
        sync.manifest_bytes() < 4 * 1024,
        "{}",
        sync.manifest_bytes()
    );
    // The bucket holds exactly what the manifest names through its indexes, and another host
    // gets the same files.
    let named = index::objects(&store, &uuid, &m).unwrap();
    let listed: Vec<String> = store
        .list(&uuid)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let mut want: Vec<String> = named.keys().cloned().collect();
    want.push(manifest::MANIFEST.to_string());
    want.sort();
    assert_eq!(listed, want);
    assert_eq!(
        named.keys().filter(|k| k.starts_with("seg/")).count(),
        4 * steps as usize
    );
    let (_b, host_b) = host();
    let dir_b = host_b.task_dir(DirState::Running, &uuid);
    let b = TaskSync::claim(store.clone(), &host_b, &uuid, "h/2", &dir_b).unwrap();
    assert!(b.downloaded() > 0);
    assert_eq!(files(&dir_b), files(&dir));
    delete_task(&store, &host_b, &uuid).unwrap();
    assert!(store.list(&uuid).unwrap().is_empty());
}

#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
#[test]
fn a_format_1_manifest_still_loads_and_its_segments_are_sealed_at_the_next_sync() {
    let store = test_store();
    let uuid = uuid::Uuid::new_v4().hyphenated().to_string();
    // A manifest as the first version wrote it: format 1, every segment listed.
    let mut content = Vec::new();
    let mut segments = Vec::new();
    for i in 0..20u64 {
        let bytes = format!("{{\"seq\":{i}}}\n").into_bytes();
        let key = manifest::segment_key("messages.jsonl", 1, i + 1, content.len() as u64);
        segments.push(serde_json::json!({
            "key": key, "start": content.len(), "len": bytes.len(),
            "sha256": manifest::sha256_hex(&bytes),
        }));
        store.put(&uuid, &key, bytes.clone()).unwrap();
        content.extend_from_slice(&bytes);
    }
    let tail = &content[content.len().saturating_sub(manifest::TAIL_BYTES as usize)..];
    let old = serde_json::json!({
        "format": 1, "uuid": uuid, "version": 20, "epoch": 1, "holder": "old/1",
        "written_at": "2026-12-01T00:00:00Z",
        "files": {"messages.jsonl": {"kind": "appended", "size": content.len(),
            "tail_sha256": manifest::sha256_hex(tail), "segments": segments}},
    });
    let bytes = serde_json::to_vec(&old).unwrap();
    assert!(matches!(
        store.put_manifest(&uuid, bytes, None).unwrap(),
        store::Written::Ok(_)
    ));
    let (_a, layout) = host();
    let dir = layout.task_dir(DirState::Running, &uuid);
    let mut a = TaskSync::claim(store.clone(), &layout, &uuid, "new/1", &dir).unwrap();
    assert_eq!(std::fs::read(dir.join("messages.jsonl")).unwrap(), content);
    assert_eq!(a.manifest().format, 1);
    append(&dir, "messages.jsonl", b"{\"seq\":20}\n");
    let r = a.sync(&TaskDir::open(&dir).unwrap()).unwrap();
    // 21 segments: two level-1 indexes, 5 open.
    assert_eq!(r.indexes, 2, "{r:?}");
    let m = read_manifest(&store, &uuid).unwrap().unwrap().manifest;
    assert_eq!(
        (m.format, shape(&m, "messages.jsonl")),
        (2, (vec![1, 1], 5))
    );
    let (_b, host_b) = host();
    let dir_b = host_b.task_dir(DirState::Running, &uuid);
    TaskSync::claim(store.clone(), &host_b, &uuid, "new/2", &dir_b).unwrap();
    assert_eq!(files(&dir_b), files(&dir));
    delete_task(&store, &host_b, &uuid).unwrap();
}

#[cfg_attr(
    not(ctxhost_s3_tests),
    ignore = "needs CTXHOST_TEST_S3_URL (scripts/test-s3.sh start)"
)]
#[test]
fn a_fenced_hosts_sealed_index_is_garbage_no_manifest_names() {
    let store = test_store();
    let (_a, host_a) = host();
    let (uuid, dir_a) = new_task(&host_a);
    let mut a = TaskSync::claim(store.clone(), &host_a, &uuid, "a/1", &dir_a).unwrap();
    for i in 0..manifest::SEAL - 1 {
        append(
            &dir_a,
            "messages.jsonl",
            format!("{{\"seq\":{i}}}\n").as_bytes(),
        );
        a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap();
    }
    // Host b takes the task over; a, not knowing, syncs the step that fills its segment list:
    // the index object goes up first, then the manifest is refused.
    let (_b, host_b) = host();
    let dir_b = host_b.task_dir(DirState::Running, &uuid);
    let b = TaskSync::claim(store.clone(), &host_b, &uuid, "b/1", &dir_b).unwrap();
    append(&dir_a, "messages.jsonl", b"{\"seq\":99,\"late\":true}\n");
    let e = a.sync(&TaskDir::open(&dir_a).unwrap()).unwrap_err();
    assert!(e.is::<Fenced>(), "{e:#}");
    let m = read_manifest(&store, &uuid).unwrap().unwrap().manifest;
    assert_eq!(m, *b.manifest());
    assert_eq!(shape(&m, "messages.jsonl"), (vec![], manifest::SEAL - 1));
    let named = index::objects(&store, &uuid, &m).unwrap();
    let stray: Vec<String> = store
        .list(&uuid)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k != manifest::MANIFEST && !named.contains_key(k))
        .collect();
    // a's late segment and the index sealing it: what `ctxhost fsck` reports as unreferenced.
    assert_eq!(stray.len(), 2, "{stray:?}");
    assert!(
        stray.iter().any(|k| k.starts_with("idx/messages.jsonl/")),
        "{stray:?}"
    );
    assert!(
        stray.iter().any(|k| k.starts_with("seg/messages.jsonl/")),
        "{stray:?}"
    );
    // b's copy is the bucket's, without a's late line.
    assert_eq!(
        files(&dir_b)["messages.jsonl"].len() as u64,
        m.files["messages.jsonl"].size()
    );
    delete_task(&store, &host_b, &uuid).unwrap();
}
