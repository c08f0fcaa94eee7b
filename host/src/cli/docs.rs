//! The references under docs/reference/, generated from the code's own definitions so they
//! cannot drift from it: every command and flag (the `clap` command tree), every config key
//! (the JSON Schema derived from the config types, [`crate::config::schema`]), every metric
//! ([`crate::metrics::DEFS`]) and every span and attribute ([`crate::telemetry::genai::SPANS`]).
//!
//! `ctxhost docs gen [DIR]` (hidden) writes them; a test regenerates them in memory and fails,
//! naming the command, when a committed file differs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Where the references live in the repository, and where `ctxhost docs gen` writes by default.
pub const REFERENCE_DIR: &str = "docs/reference";

/// The command that refreshes the committed references (from the repository's root).
pub const REGENERATE: &str = "cargo run -p ctxhost -- docs gen docs/reference";

/// Every reference file: its name in [`REFERENCE_DIR`] and its content. `cli` is the root
/// command (`Cli::command()`).
pub fn files(cli: &clap::Command) -> Vec<(&'static str, String)> {
    vec![
        ("README.md", index()),
        ("cli.md", cli_markdown(cli)),
        (
            "config.md",
            config_markdown(&crate::config::schema::schema()),
        ),
        ("config.schema.json", crate::config::schema::schema_text()),
        ("metrics.md", metrics_markdown()),
        ("spans.md", spans_markdown()),
    ]
}

/// Write [`files`] into `dir` (created), replacing what is there; the paths written.
/// Errors: `dir` or a file cannot be written (the error names it).
pub fn write(dir: &Path, cli: &clap::Command) -> anyhow::Result<Vec<PathBuf>> {
    use anyhow::Context as _;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    for (name, text) in files(cli) {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The files of [`files`] whose copy in `dir` is missing or differs, by name.
pub fn stale(dir: &Path, cli: &clap::Command) -> Vec<&'static str> {
    files(cli)
        .into_iter()
        .filter(|(name, text)| std::fs::read_to_string(dir.join(name)).ok().as_ref() != Some(text))
        .map(|(name, _)| name)
        .collect()
}

fn generated_note(from: &str) -> String {
    format!(
        "<!-- Generated from {from} by `ctxhost docs gen`: do not edit; `{REGENERATE}` refreshes it. -->\n"
    )
}

fn index() -> String {
    let mut out = String::from("# Reference\n\n");
    out.push_str(
        "For: anyone looking up one command, flag, config key, metric or span. Every file here is \
         generated from the code (`ctxhost docs gen`); a test fails when one is stale.\n\n",
    );
    out.push_str(
        "- [cli.md](cli.md): every command and flag (from the `clap` definitions).\n\
         - [config.md](config.md): every key of config.yaml with its type, default and meaning; \
         [config.schema.json](config.schema.json) is its JSON Schema (draft 2020-12), as \
         `ctxhost config schema` prints it.\n\
         - [metrics.md](metrics.md): every Prometheus metric.\n\
         - [spans.md](spans.md): every OpenTelemetry span and attribute.\n",
    );
    out
}

/// A Markdown table cell: no line breaks, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

// ---- the command line ----

/// Every visible command and flag of `cli`, with its help, usage and examples.
pub fn cli_markdown(cli: &clap::Command) -> String {
    let mut cmd = cli.clone();
    cmd.build();
    let mut out = String::from("# Command-line reference\n\n");
    out.push_str(&generated_note("the `clap` definitions in host/src/cli"));
    out.push('\n');
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        writeln!(out, "{}\n", about.to_string().trim()).ok();
    }
    out.push_str("Options of every command:\n\n");
    let globals: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set() && !a.is_hide_set())
        .collect();
    args_table(&mut out, &globals);
    out.push_str("Commands:\n\n");
    for sub in visible(&cmd) {
        writeln!(
            out,
            "- [`ctxhost {}`](#ctxhost-{}): {}",
            sub.get_name(),
            sub.get_name(),
            cell(&sub.get_about().map(|a| a.to_string()).unwrap_or_default())
        )
        .ok();
        for inner in visible(sub) {
            writeln!(
                out,
                "  - [`ctxhost {} {}`](#ctxhost-{}-{}): {}",
                sub.get_name(),
                inner.get_name(),
                sub.get_name(),
                inner.get_name(),
                cell(&inner.get_about().map(|a| a.to_string()).unwrap_or_default())
            )
            .ok();
        }
    }
    out.push('\n');
    for sub in visible(&cmd) {
        command_section(&mut out, sub, &format!("ctxhost {}", sub.get_name()));
        for inner in visible(sub) {
            command_section(
                &mut out,
                inner,
                &format!("ctxhost {} {}", sub.get_name(), inner.get_name()),
            );
        }
    }
    out
}

fn visible(cmd: &clap::Command) -> Vec<&clap::Command> {
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .collect()
}

fn command_section(out: &mut String, cmd: &clap::Command, path: &str) {
    writeln!(out, "## `{path}`\n").ok();
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        writeln!(out, "{}\n", about.to_string().trim()).ok();
    }
    let usage = cmd
        .clone()
        .bin_name(path)
        .render_usage()
        .to_string()
        .replace("Usage: ", "");
    writeln!(out, "```text\n{}\n```\n", usage.trim()).ok();
    let args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set())
        .filter(|a| !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() {
        args_table(out, &args);
    }
    if let Some(after) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        writeln!(out, "```text\n{}\n```\n", after.to_string().trim_end()).ok();
    }
}

fn args_table(out: &mut String, args: &[&clap::Arg]) {
    out.push_str("| argument | meaning |\n|---|---|\n");
    for a in args {
        let names: Vec<String> = a
            .get_value_names()
            .map(|v| v.iter().map(|n| format!("<{n}>")).collect())
            .unwrap_or_default();
        let takes_value = a.get_action().takes_values();
        let value = if takes_value {
            let v = if names.is_empty() {
                format!("<{}>", a.get_id().as_str().to_uppercase())
            } else {
                names.join(" ")
            };
            format!(" {v}")
        } else {
            String::new()
        };
        let form = if a.is_positional() {
            names
                .first()
                .cloned()
                .unwrap_or_else(|| format!("<{}>", a.get_id().as_str().to_uppercase()))
        } else {
            let mut forms = Vec::new();
            if let Some(s) = a.get_short() {
                forms.push(format!("-{s}"));
            }
            if let Some(l) = a.get_long() {
                forms.push(format!("--{l}"));
            }
            format!("{}{value}", forms.join(", "))
        };
        let mut help = a
            .get_long_help()
            .or(a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let possible: Vec<String> = a
            .get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(|p| format!("`{}`", p.get_name()))
            .collect();
        if !possible.is_empty() && takes_value {
            write!(help, " One of: {}.", possible.join(", ")).ok();
        }
        let defaults: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .collect();
        if !defaults.is_empty() {
            write!(help, " Default: `{}`.", defaults.join(" ")).ok();
        }
        if a.is_required_set() {
            help.push_str(" Required.");
        }
        writeln!(out, "| `{}` | {} |", form, cell(&help)).ok();
    }
    out.push('\n');
}

// ---- config.yaml ----

/// Every key of config.yaml, section by section, from the schema `schema` (inline, no `$ref`).
pub fn config_markdown(schema: &Value) -> String {
    let mut out = String::from("# config.yaml reference\n\n");
    out.push_str(&generated_note(
        "the config types in host/src/config (their JSON Schema, `ctxhost config schema`)",
    ));
    out.push_str(
        "\nEvery key is optional; a missing key has its default. Unknown keys are errors, in the \
         loader (`ctxhost config check`) as in the schema ([config.schema.json](config.schema.json), \
         which the config.yaml `ctxhost init` writes names on its first line for editors). \
         Ranges and rules across keys are checked by the loader, whose messages name the key. \
         How to use the keys: [the configuration guide](../configuration.md).\n\n",
    );
    let Some(sections) = schema.get("properties").and_then(Value::as_object) else {
        return out;
    };
    for (name, section) in sections {
        writeln!(out, "## `{name}`\n").ok();
        if let Some(d) = section.get("description").and_then(Value::as_str) {
            writeln!(out, "{d}\n").ok();
        }
        let mut rows = Vec::new();
        if object_of(section).is_none() && map_values_of(section).is_none() {
            // A section that is one value (`task_store: sqlite | {url_env}`).
            rows.push((
                name.clone(),
                type_of(section),
                default_of(section),
                String::new(),
            ));
        }
        key_rows(name, section, &mut rows);
        if rows.is_empty() {
            continue;
        }
        out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
        for (key, ty, default, meaning) in rows {
            writeln!(
                out,
                "| `{key}` | {} | {} | {} |",
                cell(&ty),
                cell(&default),
                cell(&meaning)
            )
            .ok();
        }
        out.push('\n');
    }
    out
}

type Row = (String, String, String, String);

/// The object schema of `node` when it is an object with named keys (directly, or as the
/// non-null alternative of an `Option`).
fn object_of(node: &Value) -> Option<&Value> {
    if node.get("properties").is_some() {
        return Some(node);
    }
    node.get("anyOf")
        .and_then(Value::as_array)
        .and_then(|alts| alts.iter().find(|a| a.get("properties").is_some()))
}

/// The value schema of a map (`additionalProperties` that is a schema with named keys).
fn map_values_of(node: &Value) -> Option<&Value> {
    let values = node.get("additionalProperties")?;
    values.is_object().then_some(values)
}

fn key_rows(path: &str, node: &Value, rows: &mut Vec<Row>) {
    if let Some(obj) = object_of(node) {
        for (key, prop) in obj["properties"].as_object().into_iter().flatten() {
            let sub = format!("{path}.{key}");
            let nested = object_of(prop).is_some()
                || map_values_of(prop).is_some_and(|v| object_of(v).is_some());
            rows.push((
                sub.clone(),
                type_of(prop),
                default_of(prop),
                description(prop),
            ));
            if nested {
                key_rows(&sub, prop, rows);
            }
        }
    } else if let Some(values) = map_values_of(node)
        && let Some(obj) = object_of(values)
    {
        key_rows(&format!("{path}.NAME"), obj, rows);
    }
}

fn description(node: &Value) -> String {
    node.get("description")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| {
            node.get("anyOf")
                .and_then(Value::as_array)
                .and_then(|alts| alts.iter().find_map(|a| a.get("description")?.as_str()))
                .map(str::to_string)
        })
        .unwrap_or_default()
}

fn default_of(node: &Value) -> String {
    match node.get("default") {
        None => "—".to_string(),
        Some(Value::String(s)) if s.chars().count() > 48 => {
            let head: String = s.chars().take(45).collect();
            format!("`{}…`", head.replace('\n', " ").replace('`', "'"))
        }
        Some(v) => format!("`{}`", serde_json::to_string(v).unwrap_or_default()),
    }
}

/// The type of a key in words: `integer ≥ 0`, `string or null`, `` `sqlite` or object ``.
fn type_of(node: &Value) -> String {
    if let Some(c) = node.get("const") {
        return format!(
            "`{}`",
            c.as_str().map_or_else(|| c.to_string(), str::to_string)
        );
    }
    if let Some(values) = node.get("enum").and_then(Value::as_array) {
        return values
            .iter()
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str().map_or_else(|| v.to_string(), str::to_string)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
    }
    for alternatives in ["oneOf", "anyOf"] {
        if let Some(alts) = node.get(alternatives).and_then(Value::as_array) {
            return alts.iter().map(type_of).collect::<Vec<_>>().join(" or ");
        }
    }
    let types: Vec<String> = match node.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => return "any".to_string(),
    };
    types
        .iter()
        .map(|t| match t.as_str() {
            "integer" => match node.get("minimum").and_then(Value::as_i64) {
                Some(0) => "integer ≥ 0".to_string(),
                _ => "integer".to_string(),
            },
            "array" => match node.get("items") {
                Some(items) => format!("list of {}", type_of(items)),
                None => "list".to_string(),
            },
            "object" => match node.get("additionalProperties") {
                Some(v) if v.is_object() && node.get("properties").is_none() => {
                    format!("map of name → {}", type_of(v))
                }
                _ => "object".to_string(),
            },
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

// ---- metrics and spans ----

fn metrics_markdown() -> String {
    let mut out = String::from("# Metrics reference\n\n");
    out.push_str(&generated_note(
        "`ctxhost::metrics::DEFS` (host/src/metrics)",
    ));
    out.push_str(
        "\nServed by `ctxhost run --metrics-addr ADDR` and `ctxhost serve` at `/metrics` \
         (OpenMetrics text). How to scrape them, and what the counters add up to: \
         [observability](../observability.md).\n\n",
    );
    out.push_str("| metric | type | labels | what |\n|---|---|---|---|\n");
    for d in crate::metrics::DEFS {
        let labels: Vec<String> = d.labels.iter().map(|l| format!("`{l}`")).collect();
        writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            d.exposed_name(),
            d.kind.as_str(),
            labels.join(", "),
            cell(d.doc)
        )
        .ok();
    }
    out
}

fn spans_markdown() -> String {
    use crate::telemetry::genai::{ATTRIBUTES, SPANS};
    let mut out = String::from("# Spans reference\n\n");
    out.push_str(&generated_note(
        "`ctxhost::telemetry::genai::SPANS` and `ATTRIBUTES` (host/src/telemetry/genai.rs)",
    ));
    out.push_str(
        "\nExported over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set, named and \
         attributed per the OpenTelemetry GenAI semantic conventions; how to receive them: \
         [observability](../observability.md).\n\n",
    );
    out.push_str("| span | parent | attributes | what |\n|---|---|---|---|\n");
    for s in SPANS {
        let attributes: Vec<String> = s.attributes.iter().map(|a| format!("`{a}`")).collect();
        writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            s.name,
            cell(s.parent),
            attributes.join(", "),
            cell(s.doc)
        )
        .ok();
    }
    out.push_str("\n| attribute | value |\n|---|---|\n");
    for a in ATTRIBUTES {
        writeln!(out, "| `{}` | {} |", a.key, cell(a.doc)).ok();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_reference() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(REFERENCE_DIR)
    }

    /// The committed references are what the code generates now. `CTXHOST_BLESS=1` rewrites
    /// them (as the other generated docs of this repository).
    #[test]
    fn the_committed_references_are_current() {
        let cli = <super::super::Cli as clap::CommandFactory>::command();
        let dir = repo_reference();
        if std::env::var_os("CTXHOST_BLESS").is_some() {
            write(&dir, &cli).unwrap();
        }
        let stale = stale(&dir, &cli);
        assert!(
            stale.is_empty(),
            "docs/reference/ is stale ({}): the code changed what it documents; run `{REGENERATE}` \
             (or `CTXHOST_BLESS=1 cargo test -p ctxhost --lib cli::docs`) and commit the result",
            stale.join(", ")
        );
    }

    #[test]
    fn every_command_flag_key_and_metric_is_in_the_references() {
        let cli = <super::super::Cli as clap::CommandFactory>::command();
        let md = cli_markdown(&cli);
        for needle in [
            "## `ctxhost ask`",
            "## `ctxhost config check`",
            "## `ctxhost plugin new`",
            "`--max-parallel <N>`",
            "`--config <PATH>`",
            "One of: `bash`",
        ] {
            assert!(md.contains(needle), "{needle} missing from cli.md:\n{md}");
        }
        assert!(
            !md.contains("task-exec") && !md.contains("## `ctxhost docs"),
            "hidden commands are left out"
        );
        let config = config_markdown(&crate::config::schema::schema());
        for needle in [
            "| `llm.context_length` | integer ≥ 0 | `8192` |",
            "| `context_storage.remote.url` |",
            "| `mcp_servers.NAME.command` |",
            "| `sources.github.repos` | list of string |",
            "| `task_store` |",
        ] {
            assert!(
                config.contains(needle),
                "{needle} missing from config.md:\n{config}"
            );
        }
        let metrics = metrics_markdown();
        assert!(
            metrics.contains("| `ctxhost_llm_request_duration_seconds` | histogram | `model` |"),
            "{metrics}"
        );
        assert!(spans_markdown().contains("| `chat {model}` |"));
    }
}
