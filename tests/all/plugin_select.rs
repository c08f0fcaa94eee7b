//! Choosing and loading plugin components: `builtin:NAME` vs a `.wasm` path, and the errors an
//! operator sees for a wrong world, a missing file, a file that is not a component, an unknown
//! builtin; plus the compiled-component cache (hit, corrupt file → recompiled).

use std::fs;
use std::path::{Path, PathBuf};

use ctxhost::runtime::{
    CacheOutcome, PluginKind, PluginSource, Runtime, RuntimeError, RuntimeLimits, builtin_names,
};
use ctxhost_format::ChatMessage;

fn guest(file: &str) -> PathBuf {
    Path::new(env!("CTXHOST_GUEST_DIR")).join(file)
}

fn runtime(cache: &Path) -> Runtime {
    Runtime::new(cache, RuntimeLimits::default()).expect("runtime")
}

#[test]
fn builtins_load_as_their_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));
    for (name, kind) in [
        ("builtin:jsonl-store", PluginKind::MessageStore),
        ("builtin:openai-chat", PluginKind::RequestFormat),
        ("builtin:ollama-chat", PluginKind::RequestFormat),
    ] {
        let p = rt
            .load(&name.parse().unwrap(), kind)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.name(), name);
        assert_eq!(p.kind(), kind);
        assert_eq!(p.wit_version(), "1.0.0");
        let any = rt.load_any(&name.parse().unwrap()).unwrap();
        assert_eq!(any.kind(), kind, "{name} detected as {}", any.kind());
    }
    assert!(builtin_names().contains(&"builtin:jsonl-store".to_string()));
}

#[test]
fn a_builtin_copied_to_a_path_loads_by_path_and_works() {
    let tmp = tempfile::tempdir().unwrap();
    let wasm = tmp.path().join("plugins").join("my-store.wasm");
    fs::create_dir_all(wasm.parent().unwrap()).unwrap();
    fs::copy(guest("jsonl_store.wasm"), &wasm).unwrap();
    let rt = runtime(&tmp.path().join("cache"));

    let source: PluginSource = wasm.to_str().unwrap().parse().unwrap();
    assert_eq!(source, PluginSource::Path(wasm.clone()));
    let plugin = rt.load(&source, PluginKind::MessageStore).unwrap();
    assert_eq!(plugin.name(), wasm.display().to_string());

    let task = tmp.path().join("task");
    fs::create_dir(&task).unwrap();
    let mut store = rt.message_store(&plugin, &task).unwrap();
    assert_eq!(store.component(), wasm.display().to_string());
    store.open().unwrap();
    let added = store
        .add_message(&ChatMessage::text("user", "hello"), "2026-01-02T03:04:05Z")
        .unwrap();
    assert_eq!(added.seq, 1);
    assert_eq!(store.count_messages().unwrap(), 1);
    assert!(
        fs::read_to_string(task.join("messages.jsonl"))
            .unwrap()
            .contains("\"hello\"")
    );
}

#[test]
fn wrong_world_names_the_file_and_the_expected_world() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));

    let err = rt
        .load(
            &"builtin:openai-chat".parse().unwrap(),
            PluginKind::MessageStore,
        )
        .unwrap_err();
    assert!(matches!(err, RuntimeError::WrongWorld { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "component builtin:openai-chat: exports ctxhost:plugin/request-format@1.0.0, expected \
         ctxhost:plugin/message-store@1.0.0 (world message-store-plugin)"
    );

    let wasm = tmp.path().join("x.wasm");
    fs::copy(guest("openai_chat.wasm"), &wasm).unwrap();
    let err = rt
        .load(&PluginSource::Path(wasm.clone()), PluginKind::MessageStore)
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("component {}: ", wasm.display())),
        "{text}"
    );
    assert!(
        text.contains("expected ctxhost:plugin/message-store@1.0.0 (world message-store-plugin)"),
        "{text}"
    );

    let err = rt
        .load(
            &"builtin:jsonl-store".parse().unwrap(),
            PluginKind::Compressor,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("expected ctxhost:plugin/compressor@1.0.0 (world compressor-plugin)"),
        "{err}"
    );

    // A plugin loaded as one kind cannot be instantiated as another.
    let store = rt
        .load(
            &"builtin:jsonl-store".parse().unwrap(),
            PluginKind::MessageStore,
        )
        .unwrap();
    let err = rt
        .request_format(&store, tmp.path())
        .err()
        .expect("a message store is no request format");
    assert!(
        err.to_string()
            .contains("expected ctxhost:plugin/request-format@1.0.0"),
        "{err}"
    );
}

#[test]
fn a_missing_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));
    let missing = tmp.path().join("nowhere").join("store.wasm");
    let err = rt
        .load(
            &PluginSource::Path(missing.clone()),
            PluginKind::MessageStore,
        )
        .unwrap_err();
    assert!(matches!(err, RuntimeError::NotFound { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("component {}: file not found", missing.display())
    );
}

/// A plugin path that is not a regular file (a directory, `/dev/null`, and so `/dev/zero` or a
/// FIFO) or is larger than any component is refused before it is read: `/dev/zero` used to be
/// read until the machine ran out of memory.
#[test]
fn a_path_that_is_not_a_component_file_is_refused_before_reading() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));
    let load = |p: &Path| {
        rt.load(
            &PluginSource::Path(p.to_path_buf()),
            PluginKind::MessageStore,
        )
        .unwrap_err()
    };
    let dir = tmp.path().join("plugins.wasm");
    fs::create_dir(&dir).unwrap();
    let err = load(&dir);
    assert!(matches!(err, RuntimeError::Read { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "component {}: cannot read the file: not a regular file (a directory)",
            dir.display()
        )
    );
    let err = load(Path::new("/dev/null"));
    assert_eq!(
        err.to_string(),
        "component /dev/null: cannot read the file: not a regular file (a device, FIFO or socket)"
    );
    // A sparse file past the limit: refused by its size, nothing read.
    let big = tmp.path().join("big.wasm");
    fs::File::create(&big)
        .unwrap()
        .set_len(ctxhost::runtime::MAX_COMPONENT_FILE_BYTES + 1)
        .unwrap();
    let err = load(&big);
    assert_eq!(
        err.to_string(),
        format!(
            "component {}: cannot read the file: larger than 256 MiB, the most a component file may hold",
            big.display()
        )
    );
}

#[test]
fn files_that_are_not_components_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));

    let random = tmp.path().join("random.wasm");
    let bytes: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&random, bytes).unwrap();
    let err = rt
        .load(
            &PluginSource::Path(random.clone()),
            PluginKind::MessageStore,
        )
        .unwrap_err();
    assert!(matches!(err, RuntimeError::NotAComponent { .. }), "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "component {}: not a WebAssembly component",
            random.display()
        )),
        "{err}"
    );

    let core = tmp.path().join("core.wasm");
    fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let err = rt
        .load(&PluginSource::Path(core.clone()), PluginKind::MessageStore)
        .unwrap_err();
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");

    // A component header followed by garbage: compiling fails, naming the file.
    let broken = tmp.path().join("broken.wasm");
    fs::write(&broken, b"\0asm\x0d\0\x01\0garbage garbage").unwrap();
    let err = rt
        .load(
            &PluginSource::Path(broken.clone()),
            PluginKind::MessageStore,
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("component {}: ", broken.display())),
        "{err}"
    );
}

#[test]
fn an_unknown_builtin_lists_the_available_ones() {
    let err = "builtin:jsonl-stor".parse::<PluginSource>().unwrap_err();
    let text = err.to_string();
    assert!(text.contains("builtin:jsonl-stor"), "{text}");
    assert!(
        text.contains("builtin:jsonl-store") && text.contains("builtin:openai-chat"),
        "{text}"
    );
}

#[test]
fn compiled_components_are_cached_and_a_corrupt_cache_file_is_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("contexts").join(".cache");
    let source: PluginSource = "builtin:jsonl-store".parse().unwrap();

    let first = runtime(&cache)
        .load(&source, PluginKind::MessageStore)
        .unwrap();
    assert_eq!(first.cache_outcome(), CacheOutcome::Compiled);
    let files: Vec<PathBuf> = fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].extension().is_some_and(|e| e == "cwasm"),
        "{files:?}"
    );

    // A new runtime (a new process, in real life) loads the artefact instead of compiling.
    let second = runtime(&cache)
        .load(&source, PluginKind::MessageStore)
        .unwrap();
    assert_eq!(second.cache_outcome(), CacheOutcome::Hit);
    // A hit maps the file: it goes before the file is changed in place below (the cache itself
    // only ever replaces a file by a rename).
    drop(second);

    // Flip a byte in the middle: detected, recompiled, overwritten, and the plugin works.
    let mut bytes = fs::read(&files[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&files[0], &bytes).unwrap();
    let rt = runtime(&cache);
    let third = rt.load(&source, PluginKind::MessageStore).unwrap();
    assert_eq!(third.cache_outcome(), CacheOutcome::Replaced);
    let task = tmp.path().join("task");
    fs::create_dir(&task).unwrap();
    let mut store = rt.message_store(&third, &task).unwrap();
    assert_eq!(store.open().unwrap().history_count, 0);
    assert_eq!(
        runtime(&cache)
            .load(&source, PluginKind::MessageStore)
            .unwrap()
            .cache_outcome(),
        CacheOutcome::Hit
    );

    // A truncated file and a file someone else put there are not loaded either.
    fs::write(&files[0], b"ctxhost-cwasm 1\n").unwrap();
    assert_eq!(
        runtime(&cache)
            .load(&source, PluginKind::MessageStore)
            .unwrap()
            .cache_outcome(),
        CacheOutcome::Replaced
    );
    fs::write(&files[0], fs::read(guest("jsonl_store.wasm")).unwrap()).unwrap();
    assert_eq!(
        runtime(&cache)
            .load(&source, PluginKind::MessageStore)
            .unwrap()
            .cache_outcome(),
        CacheOutcome::Replaced
    );
    assert_eq!(
        runtime(&cache)
            .load(&source, PluginKind::MessageStore)
            .unwrap()
            .cache_outcome(),
        CacheOutcome::Hit
    );
}

/// The mappings of this process whose path is `file`, as `/proc/self/maps` lines.
fn mappings_of(file: &Path) -> Vec<String> {
    let file = file.canonicalize().unwrap();
    fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.ends_with(&*file.to_string_lossy()))
        .map(str::to_string)
        .collect()
}

/// Issue 42 item 3: a cached component's compiled code is mapped from the cache file (pages of
/// the page cache, shared by every task process that loads it), not copied into private
/// memory, and the mapped code runs.
#[test]
fn a_cached_component_is_mapped_from_its_file_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("contexts").join(".cache");
    let source: PluginSource = "builtin:jsonl-store".parse().unwrap();
    let compiled = runtime(&cache)
        .load(&source, PluginKind::MessageStore)
        .unwrap();
    assert_eq!(compiled.cache_outcome(), CacheOutcome::Compiled);
    drop(compiled);
    let file = fs::read_dir(&cache)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(mappings_of(&file).is_empty(), "nothing maps it yet");

    let rt = runtime(&cache);
    let hit = rt.load(&source, PluginKind::MessageStore).unwrap();
    assert_eq!(hit.cache_outcome(), CacheOutcome::Hit);
    let maps = mappings_of(&file);
    assert!(
        maps.iter()
            .any(|l| l.split_whitespace().nth(1) == Some("r-xp")),
        "the compiled code is executed from the file's pages: {maps:?}"
    );
    let task = tmp.path().join("task");
    fs::create_dir(&task).unwrap();
    let mut store = rt.message_store(&hit, &task).unwrap();
    assert_eq!(store.open().unwrap().history_count, 0);
}

#[test]
fn a_missing_task_directory_is_a_sandbox_error() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = runtime(&tmp.path().join("cache"));
    let plugin = rt
        .load(
            &"builtin:jsonl-store".parse().unwrap(),
            PluginKind::MessageStore,
        )
        .unwrap();
    let missing = tmp.path().join("no-such-task");
    let err = rt
        .message_store(&plugin, &missing)
        .err()
        .expect("no task directory");
    assert!(matches!(err, RuntimeError::Sandbox { .. }), "{err}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
}
