//! DESIGN.md's per-file field tables, generated from the schemas (so the schemas stay the one
//! source of the field lists): [`tables`] renders them, and the test compares them with the
//! part of docs/DESIGN.md between [`BEGIN`] and [`END`]. `CTXHOST_BLESS=1 cargo test -p ctxhost
//! --lib schemas::doc` rewrites that part after a schema changed.

use std::fmt::Write as _;

use super::Schema;
use super::ordered::{J as Value, parse};

/// The line before the generated tables in docs/DESIGN.md.
pub const BEGIN: &str = "<!-- BEGIN field tables: generated from docs/schemas/ by host/src/schemas/doc.rs (CTXHOST_BLESS=1 cargo test -p ctxhost --lib schemas::doc rewrites them) -->";
/// The line after them.
pub const END: &str = "<!-- END field tables -->";

/// One row: a field (dotted path for nested fields) and its schema.
struct Field<'a> {
    name: String,
    schema: &'a Value,
    required: bool,
    extension: bool,
}

/// The markdown of every schema's table, in [`Schema::ALL`] order.
pub fn tables() -> String {
    let mut out = String::new();
    for s in Schema::ALL {
        let parsed = parse(s.text());
        let root = &parsed;
        let unit = if s.is_line() { "one line" } else { "the file" };
        let ext = if is_extension(root) {
            " — a ctxhost extension"
        } else {
            ""
        };
        writeln!(
            out,
            "\n#### `{}` ({unit}; [{}](schemas/{})){ext}\n",
            s.task_file(),
            s.file_name(),
            s.file_name()
        )
        .ok();
        writeln!(out, "{}\n", text(root, "description")).ok();
        let kinds = kinds(root);
        if kinds.is_empty() {
            writeln!(out, "| field | type | required | origin | description |").ok();
            writeln!(out, "|---|---|---|---|---|").ok();
            for f in fields(root, root, "", is_extension(root)) {
                writeln!(
                    out,
                    "| `{}` | {} | {} | {} | {} |",
                    f.name,
                    type_of(root, f.schema),
                    if f.required { "yes" } else { "no" },
                    origin(f.extension),
                    cell(&description(root, f.schema)),
                )
                .ok();
            }
        } else {
            kinds_table(&mut out, root, &kinds, is_extension(root));
        }
    }
    out
}

/// The kinds of a schema with line kinds: the `$defs` entries the `if`/`then`/`else` chain
/// dispatches to, in the order `$defs` lists them.
fn kinds(root: &Value) -> Vec<(&str, &Value)> {
    let mut targets = Vec::new();
    let mut node = root;
    loop {
        for branch in ["then", "else"] {
            if let Some(t) = node
                .get(branch)
                .and_then(|b| b.get("$ref"))
                .and_then(Value::as_str)
            {
                targets.push(t.to_string());
            }
        }
        match node.get("else") {
            Some(e) if e.get("if").is_some() => node = e,
            _ => break,
        }
    }
    root["$defs"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(name, _)| targets.contains(&format!("#/$defs/{name}")))
        .map(|(_, def)| (def["title"].as_str().unwrap_or("?"), def))
        .collect()
}

fn kinds_table(out: &mut String, root: &Value, kinds: &[(&str, &Value)], file_ext: bool) {
    // One row per field of any kind, in the order the kinds list them.
    let per_kind: Vec<Vec<Field<'_>>> = kinds
        .iter()
        .map(|(_, k)| fields(root, k, "", file_ext || is_extension(k)))
        .collect();
    let mut names: Vec<String> = Vec::new();
    for fs in &per_kind {
        for f in fs {
            if !names.contains(&f.name) {
                names.push(f.name.clone());
            }
        }
    }
    let header: Vec<String> = kinds
        .iter()
        .map(|(t, k)| {
            if !file_ext && is_extension(k) {
                format!("{t} (ctxhost)")
            } else {
                t.to_string()
            }
        })
        .collect();
    writeln!(
        out,
        "Line kinds: {}.\n",
        kinds
            .iter()
            .map(|(t, k)| format!("*{t}*: {}", text(k, "description")))
            .collect::<Vec<_>>()
            .join(" ")
    )
    .ok();
    writeln!(
        out,
        "| field | type | {} | origin | description |",
        header.join(" | ")
    )
    .ok();
    writeln!(out, "|---|---|{}---|---|", "---|".repeat(kinds.len())).ok();
    for name in names {
        let present: Vec<(&str, &Field<'_>)> = kinds
            .iter()
            .zip(&per_kind)
            .filter_map(|((t, _), fs)| fs.iter().find(|f| f.name == name).map(|f| (*t, f)))
            .collect();
        let Some((_, first)) = present.first() else {
            continue;
        };
        let ty = type_of(root, first.schema);
        let cells: Vec<String> = per_kind
            .iter()
            .map(|fs| match fs.iter().find(|f| f.name == name) {
                None => "—".to_string(),
                Some(f) => {
                    let mut c = if f.required { "required" } else { "optional" }.to_string();
                    let t = type_of(root, f.schema);
                    if t != ty {
                        c.push_str(": ");
                        c.push_str(&t);
                    }
                    c
                }
            })
            .collect();
        let mut descriptions: Vec<(Vec<&str>, String)> = Vec::new();
        for (t, f) in &present {
            let d = description(root, f.schema);
            match descriptions.iter_mut().find(|(_, x)| *x == d) {
                Some((ts, _)) => ts.push(t),
                None => descriptions.push((vec![t], d)),
            }
        }
        let description = if descriptions.len() == 1 {
            descriptions[0].1.clone()
        } else {
            descriptions
                .iter()
                .map(|(ts, d)| format!("*{}*: {d}", ts.join(", ")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let extension = present.iter().all(|(_, f)| f.extension);
        writeln!(
            out,
            "| `{name}` | {ty} | {} | {} | {} |",
            cells.join(" | "),
            origin(extension),
            cell(&description)
        )
        .ok();
    }
}

/// The fields of object schema `node` (following `$ref`s), nested objects and arrays of
/// objects flattened as `a.b` and `a[].b`.
fn fields<'a>(root: &'a Value, node: &'a Value, prefix: &str, ext: bool) -> Vec<Field<'a>> {
    let node = deref(root, node);
    let required: Vec<&str> = node["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    let Some(props) = node["properties"].as_object() else {
        return out;
    };
    for (name, schema) in props {
        let full = format!("{prefix}{name}");
        let extension = ext || is_extension(schema) || is_extension(deref(root, schema));
        out.push(Field {
            name: full.clone(),
            schema,
            required: required.contains(&name.as_str()),
            extension,
        });
        let target = deref(root, schema);
        if target["properties"].is_object() {
            out.extend(fields(root, target, &format!("{full}."), extension));
        } else if let Some(items) = target.get("items") {
            let items = deref(root, items);
            if items["properties"].is_object() {
                out.extend(fields(root, items, &format!("{full}[]."), extension));
            }
        }
    }
    out
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    root.pointer(reference.strip_prefix('#')?)
}

fn deref<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node.get("$ref").and_then(Value::as_str) {
        Some(r) => resolve(root, r).unwrap_or(node),
        None => node,
    }
}

fn is_extension(node: &Value) -> bool {
    node.get("x-ctxhost-extension") == Some(&Value::Bool(true))
}

fn origin(extension: bool) -> &'static str {
    if extension { "ctxhost" } else { "spec" }
}

fn text<'a>(node: &'a Value, key: &str) -> &'a str {
    node.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The property's own description, else its `$ref` target's.
fn description(root: &Value, schema: &Value) -> String {
    let own = text(schema, "description");
    if own.is_empty() {
        text(deref(root, schema), "description").to_string()
    } else {
        own.to_string()
    }
}

/// A short type: `integer ≥ 1`, `string (date-time)`, `"tool"`, `ok \| error`,
/// `string \| null`, `array of object`, `any JSON`.
fn type_of(root: &Value, schema: &Value) -> String {
    let merged = deref(root, schema).merged(schema, &["$ref", "description"]);
    let s = &merged;
    if let Some(c) = s.get("const") {
        return format!("`{c}`");
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return e
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(" \\| ");
    }
    let mut base = match s.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" \\| "),
        _ => "any JSON".to_string(),
    };
    if base == "array"
        && let Some(items) = s.get("items")
    {
        base = format!("array of {}", type_of(root, items));
    }
    let mut notes = Vec::new();
    if let Some(f) = s.get("format").and_then(Value::as_str) {
        notes.push(f.to_string());
    }
    if let Some(m) = s.get("minimum") {
        notes.push(format!("≥ {m}"));
    }
    if let Some(m) = s.get("exclusiveMinimum") {
        notes.push(format!("> {m}"));
    }
    if let Some(m) = s
        .get("maximum")
        .filter(|m| m.as_u64() != Some(u64::from(u32::MAX)))
    {
        notes.push(format!("≤ {m}"));
    }
    if s.get("maximum").and_then(Value::as_u64) == Some(u64::from(u32::MAX)) {
        notes.push("u32".to_string());
    }
    if let Some(n) = s.get("minItems") {
        notes.push(format!("≥ {n} items"));
    }
    if let Some(n) = s.get("maxItems") {
        notes.push(format!("≤ {n} items"));
    }
    if let Some(n) = s.get("maxLength") {
        notes.push(format!("≤ {n} chars"));
    }
    if notes.is_empty() {
        base
    } else {
        format!("{base} ({})", notes.join(", "))
    }
}

/// Text safe in a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn design_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/DESIGN.md")
    }

    #[test]
    fn design_md_field_tables_are_generated_from_the_schemas() {
        let path = design_path();
        let design = std::fs::read_to_string(&path).unwrap();
        let (Some(start), Some(end)) = (design.find(BEGIN), design.find(END)) else {
            panic!(
                "{}: the markers {BEGIN:?} and {END:?} are missing",
                path.display()
            );
        };
        let current = &design[start + BEGIN.len()..end];
        let wanted = format!("\n{}\n", tables().trim());
        if current == wanted {
            return;
        }
        if std::env::var_os("CTXHOST_BLESS").is_some() {
            let text = format!("{}{BEGIN}{wanted}{}", &design[..start], &design[end..]);
            std::fs::write(&path, text).unwrap();
            return;
        }
        let first = current
            .lines()
            .zip(wanted.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(current.lines().count().min(wanted.lines().count()));
        panic!(
            "docs/DESIGN.md's field tables differ from docs/schemas/ (first difference at table \
             line {}):\n  DESIGN.md: {:?}\n  schemas:   {:?}\nrun `CTXHOST_BLESS=1 cargo test -p \
             ctxhost --lib schemas::doc` to regenerate them",
            first + 1,
            current.lines().nth(first).unwrap_or(""),
            wanted.lines().nth(first).unwrap_or("")
        );
    }

    #[test]
    fn every_property_of_every_schema_has_a_row_and_a_description() {
        let t = tables();
        for s in Schema::ALL {
            let parsed = parse(s.text());
            let root = &parsed;
            let kinds = kinds(root);
            let nodes: Vec<&Value> = if kinds.is_empty() {
                vec![root]
            } else {
                kinds.iter().map(|(_, k)| *k).collect()
            };
            for node in nodes {
                for f in fields(root, node, "", false) {
                    assert!(t.contains(&format!("| `{}` |", f.name)), "{s}: {}", f.name);
                    assert!(
                        !description(root, f.schema).is_empty(),
                        "{s}: {} has no description",
                        f.name
                    );
                }
            }
        }
        // Kinds are columns, extensions are marked.
        assert!(t.contains("| field | type | plain message | tool call (ctxhost) | tool result | summary | origin | description |"), "{t}");
        assert!(t.contains("| `tool_call_id` |"), "{t}");
    }
}
