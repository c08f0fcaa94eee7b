//! `ctxhost plugin new`: a new plugin project that builds and passes `ctxhost plugin check` as
//! generated.
//!
//! Templates (this folder, compiled into the binary): `rust-compressor/`,
//! `rust-request-format/` (the OpenAI chat-completions API), `rust-message-store/` (two JSONL
//! files, as `builtin:jsonl-store`) and `rust-strategy/` (crates on the `ctxhost-plugin` SDK),
//! `python-compressor/` and `python-strategy/` (componentize-py 0.25.1, with the WIT contract
//! written next to them), `js-compressor/` and `js-strategy/` with `js/` (componentize-js
//! 0.23.0: package.json pinning it, `lines.js` for line-by-line file access over
//! `wasi:filesystem`, the plugin's world and the WIT it refers to, WASI 0.2.12 from
//! wasmtime-wasi 48 in `js/wasi/`).
//!
//! A Rust project gets the SDK vendored: `vendor/ctxhost-plugin/` and its dependency
//! `vendor/ctxhost-format/`, the sources this binary was built from (embedded by host/build.rs),
//! depended on by path with their version (`ctxhost-plugin = { path = "vendor/ctxhost-plugin",
//! version = "1.0.0" }`), so the project builds anywhere with no ctxhost checkout. `--sdk DIR`
//! names a checkout of the SDK to depend on by path instead (SDK development).
//!
//! Placeholders in templates: `{{name}}` (the plugin's name), `{{crate}}` (the name with `_`
//! for `-`: the Rust crate and the `.wasm` file), `{{sdk_dependency}}`, `{{kind}}`.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::error::usage;

/// The plugin kinds a project can be generated for (the worlds of `wit/plugin.wit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// World `compressor-plugin`.
    Compressor,
    /// World `request-format-plugin`.
    RequestFormat,
    /// World `message-store-plugin`.
    MessageStore,
    /// An agent strategy (world `strategy-plugin`).
    Strategy,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Compressor => "compressor",
            Kind::RequestFormat => "request-format",
            Kind::MessageStore => "message-store",
            Kind::Strategy => "strategy",
        })
    }
}

/// The language of the generated project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust on the `ctxhost-plugin` SDK (wit-bindgen), built with cargo for wasm32-wasip2.
    Rust,
    /// Python, built with componentize-py 0.25.1.
    Python,
    /// JavaScript, built with componentize-js 0.23.0 (npm).
    #[value(alias = "javascript")]
    Js,
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        })
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct NewPlugin {
    /// The plugin kind.
    pub kind: Kind,
    /// The language.
    pub lang: Lang,
    /// The project directory to create (its last component is the plugin's name: lowercase
    /// ASCII letters, digits and `-`, starting with a letter).
    pub dir: PathBuf,
    /// A checkout of the `ctxhost-plugin` crate to depend on by path instead of the vendored
    /// copy (Rust only).
    pub sdk: Option<PathBuf>,
}

/// What was generated.
#[derive(Debug, Clone)]
pub struct Created {
    /// The project directory.
    pub dir: PathBuf,
    /// The plugin's name.
    pub name: String,
    /// Files written, relative to `dir`.
    pub files: Vec<String>,
    /// The commands that build it and check it, in order, to run in `dir`.
    pub next_steps: Vec<String>,
}

/// The WIT contract of this build (`wit/plugin.wit`).
const PLUGIN_WIT: &str = include_str!("../../../../wit/plugin.wit");

/// One template file: where it goes in the project and its text.
type Template = (&'static str, &'static str);

const RUST_COMPRESSOR: &[Template] = &[
    ("Cargo.toml", include_str!("rust-compressor/Cargo.toml")),
    (
        ".cargo/config.toml",
        include_str!("rust-compressor/config.toml"),
    ),
    ("src/lib.rs", include_str!("rust-compressor/lib.rs")),
    ("README.md", include_str!("rust-compressor/README.md")),
    (".gitignore", include_str!("rust-compressor/gitignore")),
];

const RUST_STRATEGY: &[Template] = &[
    ("Cargo.toml", include_str!("rust-strategy/Cargo.toml")),
    (
        ".cargo/config.toml",
        include_str!("rust-compressor/config.toml"),
    ),
    ("src/lib.rs", include_str!("rust-strategy/lib.rs")),
    ("README.md", include_str!("rust-strategy/README.md")),
    (".gitignore", include_str!("rust-compressor/gitignore")),
];

const RUST_REQUEST_FORMAT: &[Template] = &[
    ("Cargo.toml", include_str!("rust-request-format/Cargo.toml")),
    (
        ".cargo/config.toml",
        include_str!("rust-compressor/config.toml"),
    ),
    ("src/lib.rs", include_str!("rust-request-format/lib.rs")),
    ("README.md", include_str!("rust-request-format/README.md")),
    (".gitignore", include_str!("rust-compressor/gitignore")),
];

const RUST_MESSAGE_STORE: &[Template] = &[
    ("Cargo.toml", include_str!("rust-message-store/Cargo.toml")),
    (
        ".cargo/config.toml",
        include_str!("rust-compressor/config.toml"),
    ),
    ("src/lib.rs", include_str!("rust-message-store/lib.rs")),
    ("README.md", include_str!("rust-message-store/README.md")),
    (".gitignore", include_str!("rust-compressor/gitignore")),
];

const PYTHON_STRATEGY: &[Template] = &[
    ("app.py", include_str!("python-strategy/app.py")),
    ("build.sh", include_str!("python-strategy/build.sh")),
    ("wit/plugin.wit", PLUGIN_WIT),
    ("README.md", include_str!("python-strategy/README.md")),
    (".gitignore", include_str!("python-compressor/gitignore")),
];

/// The WIT a JavaScript project's world refers to: the contract and the WASI 0.2 packages
/// `wasi:filesystem` needs.
const JS_WIT_DEPS: [Template; 4] = [
    ("wit/deps/ctxhost-plugin/plugin.wit", PLUGIN_WIT),
    ("wit/deps/io/io.wit", include_str!("js/wasi/io.wit")),
    (
        "wit/deps/clocks/clocks.wit",
        include_str!("js/wasi/clocks.wit"),
    ),
    (
        "wit/deps/filesystem/filesystem.wit",
        include_str!("js/wasi/filesystem.wit"),
    ),
];

const JS_COMPRESSOR: &[Template] = &[
    ("package.json", include_str!("js/package-compressor.json")),
    ("app.js", include_str!("js-compressor/app.js")),
    ("lines.js", include_str!("js/lines.js")),
    ("wit/world.wit", include_str!("js/world-compressor.wit")),
    JS_WIT_DEPS[0],
    JS_WIT_DEPS[1],
    JS_WIT_DEPS[2],
    JS_WIT_DEPS[3],
    ("README.md", include_str!("js/README.md")),
    (".gitignore", include_str!("js/gitignore")),
];

const JS_STRATEGY: &[Template] = &[
    ("package.json", include_str!("js/package-strategy.json")),
    ("app.js", include_str!("js-strategy/app.js")),
    ("lines.js", include_str!("js/lines.js")),
    ("wit/world.wit", include_str!("js/world-strategy.wit")),
    JS_WIT_DEPS[0],
    JS_WIT_DEPS[1],
    JS_WIT_DEPS[2],
    JS_WIT_DEPS[3],
    ("README.md", include_str!("js/README.md")),
    (".gitignore", include_str!("js/gitignore")),
];

/// The SDK's version, as its vendored Cargo.toml says (`ctxhost-plugin` 1.x implements
/// `ctxhost:plugin@1.0.0`).
pub const SDK_VERSION: &str = "1.0.0";

/// The SDK crates this binary was built from, written into a Rust project under `vendor/`:
/// (path in the project, text); generated by host/build.rs from `crates/ctxhost-plugin`
/// (Cargo.toml, src/, wit/) and `crates/ctxhost-format` (Cargo.toml, src/).
const VENDORED_SDK: &[Template] = include!(concat!(env!("OUT_DIR"), "/vendored_sdk.rs"));

/// The version of `ctxhost-format` (the workspace's version, which its Cargo.toml inherits).
const FORMAT_VERSION: &str = env!("CARGO_PKG_VERSION");

const PYTHON_COMPRESSOR: &[Template] = &[
    ("app.py", include_str!("python-compressor/app.py")),
    ("build.sh", include_str!("python-compressor/build.sh")),
    ("wit/plugin.wit", PLUGIN_WIT),
    ("README.md", include_str!("python-compressor/README.md")),
    (".gitignore", include_str!("python-compressor/gitignore")),
];

/// Generate the project `spec` describes.
///
/// Errors: a usage error for a bad name, an existing non-empty directory, or a kind/language
/// with no template in this build; I/O errors naming the file.
pub fn new_plugin(spec: &NewPlugin) -> anyhow::Result<Created> {
    let name = spec
        .dir
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    check_name(&name)?;
    let templates = match (spec.kind, spec.lang) {
        (Kind::Compressor, Lang::Rust) => RUST_COMPRESSOR,
        (Kind::Compressor, Lang::Python) => PYTHON_COMPRESSOR,
        (Kind::Compressor, Lang::Js) => JS_COMPRESSOR,
        (Kind::Strategy, Lang::Rust) => RUST_STRATEGY,
        (Kind::Strategy, Lang::Python) => PYTHON_STRATEGY,
        (Kind::Strategy, Lang::Js) => JS_STRATEGY,
        (Kind::RequestFormat, Lang::Rust) => RUST_REQUEST_FORMAT,
        (Kind::MessageStore, Lang::Rust) => RUST_MESSAGE_STORE,
        (kind, lang) => {
            return Err(usage(format!(
                "no {lang} template for --kind {kind} in this build (there are Rust templates for \
                 every kind, and Python and JavaScript ones for --kind compressor and --kind \
                 strategy); docs/PLUGINS.md describes the {kind} interface, and the builtin \
                 components in guest-components/ are complete examples"
            )));
        }
    };
    if spec.dir.exists()
        && fs::read_dir(&spec.dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(usage(format!(
            "{} already exists and is not empty; choose another name or directory",
            spec.dir.display()
        )));
    }
    let crate_name = name.replace('-', "_");
    let sdk_dependency = sdk_dependency(spec.sdk.as_deref())?;
    let vendored: Vec<(&str, String)> = if spec.lang == Lang::Rust && spec.sdk.is_none() {
        VENDORED_SDK
            .iter()
            .map(|(path, text)| (*path, vendored_text(path, text)))
            .collect()
    } else {
        Vec::new()
    };
    let filled = templates.iter().map(|(path, text)| {
        let text = text
            .replace("{{name}}", &name)
            .replace("{{crate}}", &crate_name)
            .replace("{{sdk_dependency}}", &sdk_dependency)
            .replace("{{kind}}", &spec.kind.to_string());
        (*path, text)
    });
    let mut files = Vec::new();
    for (path, text) in filled.chain(vendored) {
        let target = spec.dir.join(path);
        if let Some(parent) = target.parent() {
            create_user_dirs(parent)?;
        }
        fs::write(&target, text).with_context(|| format!("writing {}", target.display()))?;
        user_mode(&target, if path.ends_with(".sh") { 0o777 } else { 0o666 })?;
        files.push(path.to_string());
    }
    let next_steps = match spec.lang {
        Lang::Rust => vec![
            "rustup target add wasm32-wasip2".to_string(),
            "cargo build --release".to_string(),
            format!("ctxhost plugin check target/wasm32-wasip2/release/{crate_name}.wasm"),
        ],
        Lang::Python => vec![
            "pip install componentize-py==0.25.1".to_string(),
            "./build.sh".to_string(),
            format!("ctxhost plugin check {crate_name}.wasm"),
        ],
        Lang::Js => vec![
            "npm install".to_string(),
            "npm run build".to_string(),
            format!("ctxhost plugin check {crate_name}.wasm"),
        ],
    };
    Ok(Created {
        dir: spec.dir.clone(),
        name,
        files,
        next_steps,
    })
}

/// The SDK dependency of a Rust project: the vendored copy (`vendor/ctxhost-plugin`), or the
/// checkout `sdk` names, by path with the SDK's version.
fn sdk_dependency(sdk: Option<&Path>) -> anyhow::Result<String> {
    let version = format!("version = \"{SDK_VERSION}\"");
    let Some(dir) = sdk else {
        return Ok(format!("path = \"vendor/ctxhost-plugin\", {version}"));
    };
    if !dir.join("Cargo.toml").is_file() {
        return Err(usage(format!(
            "--sdk {}: no Cargo.toml there (give the crates/ctxhost-plugin folder of a ctxhost checkout)",
            dir.display()
        )));
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    // TOML basic string: escape backslashes and quotes.
    let path = dir
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    Ok(format!("path = \"{path}\", {version}"))
}

/// A vendored SDK file as it goes into a project: `ctxhost-format`'s Cargo.toml without what
/// it inherits from the ctxhost workspace (version, edition, …: written out), its dev
/// dependencies (tests of the ctxhost repository) and its lints; anything else as it is.
fn vendored_text(path: &str, text: &str) -> String {
    if path != "vendor/ctxhost-format/Cargo.toml" {
        return text.to_string();
    }
    let mut out = String::new();
    let mut skipping = false;
    for line in text.lines() {
        if line.starts_with('[') {
            skipping = line == "[dev-dependencies]" || line == "[lints]";
        }
        if skipping {
            continue;
        }
        let line = match line.split_once(".workspace = true") {
            Some(("version", _)) => format!("version = \"{FORMAT_VERSION}\""),
            Some(("edition", _)) => "edition = \"2024\"".to_string(),
            Some(("rust-version", _)) => "rust-version = \"1.95\"".to_string(),
            Some(("license", _)) => "license = \"Apache-2.0\"".to_string(),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A plugin name: 1–64 of `a-z`, `0-9`, `-`, starting with a letter, not ending with `-`.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(usage(format!(
            "plugin name {name:?}: use lowercase letters, digits and `-`, starting with a letter (e.g. my-compressor)"
        )))
    }
}

/// `fs::create_dir_all(dir)`, each folder it creates given the user's mode ([`user_mode`]).
fn create_user_dirs(dir: &Path) -> anyhow::Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    missing.iter().try_for_each(|d| user_mode(d, 0o777))
}

/// Give `path` `mode` less the umask ctxhost was started with, as any tool writing the user's
/// source tree does (e.g. 0o666 → 0644 under umask 022): ctxhost itself runs with umask 077
/// for its task data ([`crate::layout::use_owner_only_umask`]), which a project is not.
#[cfg(unix)]
fn user_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mask = crate::layout::inherited_umask().map_or(0o022, u32::from);
    fs::set_permissions(path, fs::Permissions::from_mode(mode & !mask))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

#[cfg(not(unix))]
fn user_mode(_path: &Path, _mode: u32) -> anyhow::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_sdk_is_complete_and_stands_alone() {
        let paths: Vec<&str> = VENDORED_SDK.iter().map(|(p, _)| *p).collect();
        for needed in [
            "vendor/ctxhost-plugin/Cargo.toml",
            "vendor/ctxhost-plugin/src/lib.rs",
            "vendor/ctxhost-plugin/wit/plugin.wit",
            "vendor/ctxhost-format/Cargo.toml",
            "vendor/ctxhost-format/src/lib.rs",
        ] {
            assert!(paths.contains(&needed), "{needed} not vendored: {paths:?}");
        }
        let sdk = VENDORED_SDK
            .iter()
            .find(|(p, _)| *p == "vendor/ctxhost-plugin/Cargo.toml")
            .map(|(_, t)| *t)
            .unwrap_or_default();
        assert!(
            sdk.contains(&format!("version = \"{SDK_VERSION}\"")),
            "SDK_VERSION is the SDK's version:\n{sdk}"
        );
        let format = VENDORED_SDK
            .iter()
            .find(|(p, _)| *p == "vendor/ctxhost-format/Cargo.toml")
            .map(|(p, t)| vendored_text(p, t))
            .unwrap_or_default();
        assert!(!format.contains("workspace"), "{format}");
        assert!(!format.contains("proptest"), "{format}");
        assert!(
            format.contains(&format!("version = \"{FORMAT_VERSION}\"")),
            "{format}"
        );
    }

    #[test]
    fn names_are_checked() {
        for good in ["a", "my-compressor", "x2-y"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "My", "1abc", "a_b", "a-", "a b", "../x"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn templates_have_no_unfilled_placeholders_after_substitution() {
        for (path, text) in RUST_COMPRESSOR
            .iter()
            .chain(RUST_STRATEGY)
            .chain(RUST_REQUEST_FORMAT)
            .chain(RUST_MESSAGE_STORE)
            .chain(PYTHON_COMPRESSOR)
            .chain(PYTHON_STRATEGY)
            .chain(JS_COMPRESSOR)
            .chain(JS_STRATEGY)
        {
            let filled = text
                .replace("{{name}}", "n")
                .replace("{{crate}}", "n")
                .replace("{{sdk_dependency}}", "version = \"1.0.0\"")
                .replace("{{kind}}", "compressor");
            assert!(!filled.contains("{{"), "{path} has an unknown placeholder");
        }
    }
}
