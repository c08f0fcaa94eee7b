//! The documentation against the code (issue 43):
//! - every `sh` block of README.md and the guide (docs/*.md) is run here against the fake LLM
//!   (marked `<!-- run: checkout -->`) or says why not (`<!-- not run: … -->`);
//! - every `yaml` config fragment of the guide is a valid config, for the loader and the schema;
//! - `ctxhost config check` and the JSON Schema of config.yaml flag the same bad configs;
//! - `ctxhost init` writes the schema beside config.yaml and points editors at it.
//!
//! The references under docs/reference/ are checked current by `cli::docs` (a unit test).

use std::path::PathBuf;

use crate::support::fake_llm::{FakeLlm, Reply};
use crate::support::{TestEnv, ctxhost_bin, repo_root};

/// README.md and the guide's pages (docs/*.md; the references are generated, the schemas' README
/// is about files).
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo_root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Each page ([`pages`]) by its path in the repository, with its fenced blocks.
fn page_blocks() -> Vec<(String, Vec<Block>)> {
    pages()
        .into_iter()
        .map(|page| {
            let doc = std::fs::read_to_string(&page).unwrap();
            let name = page
                .strip_prefix(repo_root())
                .unwrap()
                .display()
                .to_string();
            (name, blocks(&doc))
        })
        .collect()
}

/// A fenced block: its language, the marker line before it (if any), its first line number and
/// its text.
struct Block {
    lang: String,
    marker: Option<String>,
    line: usize,
    text: String,
}

fn blocks(doc: &str) -> Vec<Block> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(lang) = lines[i].strip_prefix("```")
            && !lang.is_empty()
        {
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .filter(|l| l.trim_start().starts_with("<!--"))
                .map(|l| l.trim().to_string());
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].starts_with("```") {
                end += 1;
            }
            out.push(Block {
                lang: lang.trim().to_string(),
                marker,
                line: start,
                text: lines[start..end].join("\n") + "\n",
            });
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// A sandbox laid out as the docs assume: a ctxhost checkout (`target/debug/ctxhost`, and a
/// `scripts/local-llm.sh` whose `start` prints the fake LLM's URL) and a home with a repository
/// at `~/src/your-project`.
struct Sandbox {
    _dir: tempfile::TempDir,
    checkout: PathBuf,
    home: PathBuf,
}

impl Sandbox {
    fn new(llm_url: &str) -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        let checkout = dir.path().join("ctxhost");
        let home = dir.path().join("home");
        std::fs::create_dir_all(checkout.join("target/debug")).unwrap();
        std::fs::create_dir_all(checkout.join("scripts")).unwrap();
        std::os::unix::fs::symlink(ctxhost_bin(), checkout.join("target/debug/ctxhost")).unwrap();
        let stub = format!(
            "#!/bin/sh\n# The docs test's stand-in for scripts/local-llm.sh: the fake LLM.\ncase \"$1\" in\n  start|url) echo '{llm_url}' ;;\n  *) ;;\nesac\n"
        );
        let script = checkout.join("scripts/local-llm.sh");
        std::fs::write(&script, stub).unwrap();
        let mut perms = std::fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&script, perms).unwrap();
        let project = home.join("src/your-project");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::write(project.join("README.md"), "# your project\n").unwrap();
        Sandbox {
            _dir: dir,
            checkout,
            home,
        }
    }

    /// Run `script` with bash (`-euo pipefail`) in the checkout; its output, or a panic naming
    /// `what` with the output when it fails.
    fn run(&self, what: &str, script: &str) -> String {
        let out = std::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(&self.checkout)
            .env("HOME", &self.home)
            .env("NO_COLOR", "1")
            .env(
                "CTXHOST_CACHE_DIR",
                concat!(env!("CARGO_TARGET_TMPDIR"), "/component-cache"),
            )
            .env_remove("CTXHOST_DATABASE_URL")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{what} failed ({}):\n--- script\n{script}--- output\n{text}",
            out.status
        );
        text
    }
}

/// Every `sh` block of README.md and docs/*.md is run here (`<!-- run: checkout -->`: the
/// page's run blocks in order, as one bash script, in a sandboxed checkout against the fake
/// LLM) or marked `<!-- not run: WHY -->` / run by another test (`<!-- javascript-commands -->`:
/// tests/all/plugin_scaffolds.rs).
#[test]
fn every_shell_block_of_the_guide_is_run_or_says_why_not() {
    let llm = FakeLlm::start(vec![]);
    llm.set_default(Reply::text("Done.", Some((40, 4))));
    let mut unmarked = Vec::new();
    let mut ran = 0;
    for (name, blocks) in page_blocks() {
        let mut script = String::new();
        for b in blocks.into_iter().filter(|b| b.lang == "sh") {
            match b.marker.as_deref() {
                Some("<!-- run: checkout -->") => {
                    script.push_str(&b.text);
                    ran += 1;
                }
                Some("<!-- javascript-commands -->") => {}
                Some(m)
                    if m.starts_with("<!-- not run: ") && m.len() > "<!-- not run:  -->".len() => {}
                _ => unmarked.push(format!("{name}:{}", b.line)),
            }
        }
        if script.is_empty() {
            continue;
        }
        let before = llm.request_count();
        let out = Sandbox::new(&llm.base_url()).run(&name, &script);
        // A page whose commands run tasks shows the model's answer.
        if script.contains("ctxhost ask") || script.contains("run --once") {
            assert!(
                llm.request_count() > before,
                "{name}: no LLM request\n{out}"
            );
            assert!(
                out.contains("Done."),
                "{name}: the answer is not shown\n{out}"
            );
        }
    }
    assert!(
        unmarked.is_empty(),
        "sh blocks neither run (`<!-- run: checkout -->` before the block) nor marked \
         `<!-- not run: WHY -->`: {unmarked:?}"
    );
    assert!(ran >= 4, "only {ran} blocks ran");
}

/// The `yaml` blocks of the guide that are config.yaml fragments (they start with a config
/// section): each loads (the loader `init`/`run` use) and matches the schema.
#[test]
fn every_config_fragment_of_the_guide_is_valid_for_the_loader_and_the_schema() {
    let sections: Vec<String> = ctxhost::config::schema::schema()["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut checked = 0;
    for (name, blocks) in page_blocks() {
        for b in blocks.into_iter().filter(|b| b.lang == "yaml") {
            let first = b
                .text
                .lines()
                .find(|l| !l.trim().is_empty() && !l.starts_with('#'));
            let Some(first) = first else { continue };
            let Some(key) = first.strip_suffix(':').or(first.split(": ").next()) else {
                continue;
            };
            if !sections.iter().any(|s| s == key) {
                continue; // a Prometheus or OpenTelemetry Collector config
            }
            let at = format!("{name}:{}", b.line);
            if let Err(e) = ctxhost::config::Config::from_yaml(&b.text, &at) {
                panic!("{at}: the loader refuses it: {e}\n{}", b.text);
            }
            let errors = ctxhost::config::schema::schema_errors(&b.text);
            assert!(
                errors.is_empty(),
                "{at}: the schema refuses it: {errors:?}\n{}",
                b.text
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} config fragments found");
}

/// What the loader says about `yaml` (its error, or `None`) and what the schema says.
fn both(env: &TestEnv, yaml: &str) -> (Option<String>, Vec<String>) {
    env.write_config(yaml);
    let out = env.ctxhost(&["config", "check", "--config", "config.yaml"]);
    let loader = match out.code() {
        Some(0) => None,
        Some(2) => Some(out.stderr()),
        other => panic!("config check exited {other:?}: {}", out.stderr()),
    };
    (loader, ctxhost::config::schema::schema_errors(yaml))
}

/// A misspelt key (at the top, in a section, in a nested section), a wrong type and an unknown
/// enumeration value are flagged by `ctxhost config check` (with the loader's message, as `run`
/// gives it) and by the schema; good configs pass both.
#[test]
fn config_check_and_the_schema_flag_the_same_bad_configs() {
    let env = TestEnv::new();
    let good = [
        ctxhost::config::Config::default_yaml(),
        "llm:\n  provider: anthropic\n  model: claude-sonnet-4-5\n  thinking: adaptive\n".into(),
        "task_store:\n  url_env: CTXHOST_DATABASE_URL\nmcp_servers:\n  fs:\n    command: npx\n    args: [\"-y\", \"x\"]\n".into(),
        "llm:\n  pricing:\n    m: {input: 1, output: 2}\nstrategy:\n  options: {style: terse}\n".into(),
        String::new(),
    ];
    for yaml in &good {
        let (loader, schema) = both(&env, yaml);
        assert_eq!(loader, None, "{yaml}");
        assert!(schema.is_empty(), "{yaml}: {schema:?}");
    }
    let out = env.ctxhost(&["config", "check"]).ok();
    assert_eq!(out.stdout(), "config.yaml: ok\n");
    let bad = [
        ("llm:\n  modle: gpt-4o\n", "modle", "did you mean `model`?"),
        ("lm:\n  model: gpt-4o\n", "lm", "unknown field `lm`"),
        (
            "context_storage:\n  remote:\n    url: s3://b/p\n    regoin: eu-west-1\n",
            "regoin",
            "did you mean `region`?",
        ),
        (
            "llm:\n  context_length: lots\n",
            "context_length",
            "llm.context_length",
        ),
        ("llm:\n  provider: gemini\n", "provider", "gemini"),
        ("task_store: postgres\n", "task_store", "url_env"),
        ("llm:\n  thinking: lots\n", "thinking", "adaptive"),
    ];
    for (yaml, key, message) in bad {
        let (loader, schema) = both(&env, yaml);
        let loader = loader.unwrap_or_else(|| panic!("config check accepted {yaml}"));
        assert!(
            loader.starts_with("error: config.yaml: ") && loader.contains(message),
            "{yaml}: {loader}"
        );
        assert!(!schema.is_empty(), "the schema accepted {yaml}");
        assert!(
            schema.iter().any(|e| e.contains(key)),
            "{yaml}: the schema's errors do not name {key}: {schema:?}"
        );
    }
    // The same message as `run` gives for the same file.
    env.write_config("llm:\n  modle: gpt-4o\n");
    let run = env.ctxhost(&["run", "--once"]).fails();
    let check = env.ctxhost(&["config", "check"]).fails();
    assert_eq!(run.code(), Some(2));
    assert_eq!(check.stderr(), run.stderr());
    // A missing file named explicitly is an error, as for every command.
    let missing = env
        .ctxhost(&["config", "check", "--config", "nope.yaml"])
        .fails();
    assert!(
        missing
            .stderr()
            .contains("nope.yaml: config file not found"),
        "{}",
        missing.stderr()
    );
}

/// `init` writes config.schema.json (the schema `config schema` prints) into contexts/, where
/// the built-in tools never see it (beside a config.yaml in the project, `list_files` and
/// `search_files` would find it), and config.yaml's first line points yaml-language-server at
/// it: relative to the config when contexts/ is beneath the config's directory, else absolute.
#[test]
fn init_writes_the_schema_into_contexts_and_points_editors_at_it() {
    let env = TestEnv::new();
    env.ctxhost(&["init"]).ok();
    let yaml = std::fs::read_to_string(env.root().join("config.yaml")).unwrap();
    assert_eq!(
        yaml.lines().next(),
        Some("# yaml-language-server: $schema=contexts/config.schema.json")
    );
    assert!(
        !env.root().join("config.schema.json").exists(),
        "the schema lies in the project, where the tools find it"
    );
    let written = std::fs::read_to_string(env.contexts().join("config.schema.json")).unwrap();
    let printed = env.ctxhost(&["config", "schema"]).ok().stdout();
    assert_eq!(written, printed);
    let schema: serde_json::Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(
        jsonschema::meta::is_valid(&schema),
        "not a valid 2020-12 schema"
    );
    // The file it points at validates the config it heads.
    assert!(ctxhost::config::schema::schema_errors(&yaml).is_empty());
    // A config in a directory of its own, contexts/ elsewhere: an absolute path.
    env.ctxhost(&["init", "--config", "conf/config.yaml"]).ok();
    let yaml = std::fs::read_to_string(env.root().join("conf/config.yaml")).unwrap();
    let at = env
        .contexts()
        .canonicalize()
        .unwrap()
        .join("config.schema.json");
    assert_eq!(
        yaml.lines().next(),
        Some(format!("# yaml-language-server: $schema={}", at.display()).as_str())
    );
    assert!(at.exists());
    assert!(!env.root().join("conf/config.schema.json").exists());
}
