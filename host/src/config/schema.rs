//! The JSON Schema (draft 2020-12) of `config.yaml`, derived from the config types themselves
//! (`schemars` derives beside the serde ones), so it cannot drift from what [`Config::from_yaml`]
//! accepts: a section that denies unknown keys has `additionalProperties: false`, every key its
//! type, its default (the value of [`Config::default`]) and its doc comment as description.
//!
//! `ctxhost config schema` prints it; `ctxhost init` writes it as [`SCHEMA_FILE`] in contexts/
//! (where the built-in tools never look; [`crate::ops::init::schema_place`]), and the first line
//! of the config.yaml it writes ([`modeline`]) points editors that use
//! yaml-language-server (VS Code's YAML extension, Neovim, Helix, …) at it, offline.
//! docs/reference/config.schema.json is this schema, and docs/reference/config.md is rendered
//! from it (`ctxhost docs gen`).
//!
//! The schema checks shapes (keys, types, enumerations); ranges and rules across keys stay with
//! [`Config::validate`], whose messages name the key.

use super::Config;

/// The file name `ctxhost init` writes the schema under, in contexts/.
pub const SCHEMA_FILE: &str = "config.schema.json";

/// The schema as JSON: draft 2020-12, every subschema inline (no `$ref`), so it reads top-down.
pub fn schema() -> serde_json::Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<Config>()
        .to_value();
    if let Some(root) = schema.as_object_mut() {
        root.insert("title".into(), "ctxhost config.yaml".into());
        root.insert(
            "description".into(),
            "Every key of ctxhost's config.yaml, with its type and default (`ctxhost config schema`).".into(),
        );
    }
    clean_descriptions(&mut schema);
    schema
}

/// [`schema`] as pretty-printed JSON text ending in a newline.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap_or_default();
    text.push('\n');
    text
}

/// The first line of a config.yaml whose schema is the file `schema` (a path relative to the
/// config file's directory, or a URL): yaml-language-server's modeline.
pub fn modeline(schema: &str) -> String {
    format!("# yaml-language-server: $schema={schema}")
}

/// Where YAML `text` does not match [`schema`]: one line per error, `PATH: what` (`llm: Additional
/// properties are not allowed ('modle' was unexpected)`), empty when it matches. A document that
/// is not YAML is one error saying so. Ranges and rules across keys are not checked here
/// ([`Config::validate`] does).
pub fn schema_errors(text: &str) -> Vec<String> {
    let value: serde_json::Value = match serde_norway::from_str::<serde_norway::Value>(text) {
        Ok(v) if v.is_null() => serde_json::Value::Object(Default::default()),
        Ok(v) => match serde_json::to_value(v) {
            Ok(v) => v,
            Err(e) => return vec![format!("not a JSON-compatible YAML document: {e}")],
        },
        Err(e) => return vec![format!("not YAML: {e}")],
    };
    let validator = match jsonschema::draft202012::options().build(&schema()) {
        Ok(v) => v,
        Err(e) => return vec![format!("the config schema does not compile: {e}")],
    };
    validator
        .iter_errors(&value)
        .map(|e| {
            let at = e.instance_path().as_str().to_string();
            let at = if at.is_empty() {
                "(top level)".to_string()
            } else {
                at.trim_start_matches('/').replace('/', ".")
            };
            format!("{at}: {e}")
        })
        .collect()
}

/// Doc comments written for rustdoc, made readable for people editing a YAML file: intra-doc
/// links (``[`MAX_LLM_SECS`]``, ``[`crate::remote`]``) become their last path segment in code
/// quotes, and a description's line breaks become spaces.
fn clean_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "description"
                    && let serde_json::Value::String(s) = value
                {
                    *s = readable(s);
                } else {
                    clean_descriptions(value);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(clean_descriptions),
        _ => {}
    }
}

/// See [`clean_descriptions`].
fn readable(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(start) = rest.find("[`") {
        let Some(len) = rest[start..].find("`]") else {
            break;
        };
        out.push_str(&rest[..start]);
        let path = &rest[start + 2..start + len];
        let last = path.rsplit("::").next().unwrap_or(path);
        out.push('`');
        out.push_str(last);
        out.push('`');
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doc_links_become_plain_names() {
        assert_eq!(
            readable("1 to [`MAX_LLM_SECS`]; see\n[`crate::config::Config::keep_recent_tokens`]."),
            "1 to `MAX_LLM_SECS`; see `keep_recent_tokens`."
        );
    }

    #[test]
    fn the_schema_is_draft_2020_12_and_closed_where_the_loader_is() {
        let s = schema();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["llm"]["additionalProperties"], false);
        assert_eq!(
            s["properties"]["llm"]["properties"]["context_length"]["default"],
            8192
        );
    }
}
