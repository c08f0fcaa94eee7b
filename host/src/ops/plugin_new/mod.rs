//! `ctxhost plugin new`: a new plugin project that builds and passes `ctxhost plugin check` as
//! generated.
//!
//! Templates (this folder, compiled into the binary): `rust-compressor/`,
//! `rust-request-format/` (the OpenAI chat-completions API), `rust-message-store/` (two JSONL
//! files, as `builtin:jsonl-store`) and `rust-strategy/` (crates on the `ctxhost-plugin` SDK,
//! `crates/ctxhost-plugin`) and `python-compressor/`
//! (componentize-py 0.25.1, with the WIT contract written next to it). The Rust project depends on the SDK by
//! path when this binary's source tree is still where it was built (or `--sdk DIR` names a
//! checkout of the SDK), else on the registry version `ctxhost-plugin = "0.3.0"`.
//!
//! Placeholders in templates: `{{name}}` (the plugin's name), `{{crate}}` (the name with `_`
//! for `-`: the Rust crate and the `.wasm` file), `{{sdk_dependency}}`.

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
}

impl fmt::Display for Lang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
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
    /// A checkout of the `ctxhost-plugin` crate to depend on by path (Rust only).
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

/// The SDK crate of the source tree this binary was built from.
fn built_in_sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/ctxhost-plugin")
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
        (Kind::Strategy, Lang::Rust) => RUST_STRATEGY,
        (Kind::RequestFormat, Lang::Rust) => RUST_REQUEST_FORMAT,
        (Kind::MessageStore, Lang::Rust) => RUST_MESSAGE_STORE,
        (kind, lang) => {
            return Err(usage(format!(
                "no {lang} template for --kind {kind} in this build (there are Rust templates for \
                 every kind, and a Python one for --kind compressor); docs/PLUGINS.md describes \
                 the {kind} interface and how to build it in Python, and the builtin components \
                 in guest-components/ are complete examples"
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
    let mut files = Vec::new();
    for (path, text) in templates {
        let text = text
            .replace("{{name}}", &name)
            .replace("{{crate}}", &crate_name)
            .replace("{{sdk_dependency}}", &sdk_dependency);
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
    };
    Ok(Created {
        dir: spec.dir.clone(),
        name,
        files,
        next_steps,
    })
}

/// `path = "…", version = "0.3.0"` for a local SDK (`sdk`, or this build's source tree), else
/// the registry version.
fn sdk_dependency(sdk: Option<&Path>) -> anyhow::Result<String> {
    let version = "version = \"0.3.0\"";
    let local = match sdk {
        Some(dir) => {
            if !dir.join("Cargo.toml").is_file() {
                return Err(usage(format!(
                    "--sdk {}: no Cargo.toml there (give the crates/ctxhost-plugin folder of a ctxhost checkout)",
                    dir.display()
                )));
            }
            Some(dir.to_path_buf())
        }
        None => Some(built_in_sdk()).filter(|d| d.join("Cargo.toml").is_file()),
    };
    Ok(match local {
        Some(dir) => {
            let dir = dir.canonicalize().unwrap_or(dir);
            // TOML basic string: escape backslashes and quotes.
            let path = dir
                .display()
                .to_string()
                .replace('\\', "\\\\")
                .replace('"', "\\\"");
            format!("path = \"{path}\", {version}")
        }
        None => version.to_string(),
    })
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
        {
            let filled = text
                .replace("{{name}}", "n")
                .replace("{{crate}}", "n")
                .replace("{{sdk_dependency}}", "version = \"0.3.0\"");
            assert!(!filled.contains("{{"), "{path} has an unknown placeholder");
        }
    }
}
