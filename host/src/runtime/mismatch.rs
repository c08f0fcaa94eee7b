//! Why a component's imports do not fit its world, said as the real cause.
//!
//! wasmtime reports a failed link as one chain of text, e.g. ``component imports instance
//! `ctxhost:plugin/llm@1.0.0`, but a matching implementation was not found in the linker:
//! instance export `complete-stream` has the wrong type: function implementation is missing``.
//! [`explain_link_error`] reads that chain against the WIT this host loads (`wit/plugin.wit`)
//! and names what does not fit: a function the interface does not
//! have, an interface the package does not have, an interface the world does not import, a WIT
//! or WASI version the host does not load; with the versions it does load.

use super::plugin_kind::{PluginKind, WIT_PACKAGE, WIT_VERSION};
use super::wit::WitVersion;

/// The WASI versions a component may import: wasmtime-wasi 48 defines `wasi:*@0.2.12`, and a
/// component built against any earlier 0.2.x links to it (semver).
pub const WASI_PROVIDED: &str = "WASI 0.2.0 to 0.2.12";

/// `ctxhost:plugin@1.0.0`: the WIT versions this host loads, for messages.
pub fn supported_versions() -> String {
    version_list(&WitVersion::SUPPORTED)
}

/// `ctxhost:plugin@1.0.0 and 1.1.0`: `versions` for messages.
pub fn version_list(versions: &[WitVersion]) -> String {
    let all: Vec<&str> = versions.iter().map(|v| v.as_str()).collect();
    match all.split_last() {
        Some((last, [])) => format!("{WIT_PACKAGE}@{last}"),
        Some((last, rest)) => format!("{WIT_PACKAGE}@{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `a newer WIT version than this host loads` (e.g. `1.1.0`, `2.0.0`), `an older WIT version
/// than this host loads (before 1.0)` (the pre-1.0 `0.x` contracts, whose shims were removed
/// with 1.0) or `a WIT version this host does not load` (an unreadable one).
pub fn relation(version: &str) -> &'static str {
    match (numbers(version), numbers(WIT_VERSION)) {
        (Some(theirs), Some(ours)) if theirs > ours => "a newer WIT version than this host loads",
        (Some((0, _, _)), _) => "an older WIT version than this host loads (before 1.0)",
        _ => "a WIT version this host does not load",
    }
}

/// `(major, minor, patch)` of `1.2.3`.
fn numbers(version: &str) -> Option<(u64, u64, u64)> {
    let mut it = version.split('.').map(|p| p.parse::<u64>().ok());
    let v = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(v)
}

/// The interfaces of `ctxhost:plugin` at `wit` (the `interface` items of its WIT file).
fn interfaces(wit: WitVersion) -> &'static [&'static str] {
    match wit {
        WitVersion::V1_0_0 => &[
            "types",
            "log",
            "llm",
            "message-store",
            "compressor",
            "request-format",
            "planning",
            "history",
            "strategy",
        ],
    }
}

/// The `ctxhost:plugin` interfaces `kind`'s world imports at `wit` (`types` comes with them).
fn world_imports(kind: PluginKind, wit: WitVersion) -> &'static [&'static str] {
    match (kind, wit) {
        (PluginKind::MessageStore | PluginKind::RequestFormat, _) => &["types", "log"],
        (PluginKind::Compressor, WitVersion::V1_0_0) => &["types", "log", "llm", "history"],
        (PluginKind::Strategy, WitVersion::V1_0_0) => {
            &["types", "log", "llm", "planning", "history"]
        }
    }
}

/// wasmtime's link error `reason` for a component loaded as `kind` at WIT `wit`, as a person
/// can act on it (see the module doc). Errors that are not about a missing or mismatched import
/// are returned as they are.
pub fn explain_link_error(reason: &str, kind: PluginKind, wit: WitVersion) -> String {
    const MISSING: &str = "but a matching implementation was not found in the linker";
    let Some(import) = reason
        .contains(MISSING)
        .then(|| reason.split('`').nth(1))
        .flatten()
    else {
        return reason.to_string();
    };
    let chain = reason
        .split_once(MISSING)
        .map(|(_, rest)| rest.trim_start_matches(':').trim())
        .unwrap_or("");
    let world = kind.world();
    let rebuild = format!("rebuild it against wit/plugin.wit ({WIT_VERSION})");
    let loads = format!(
        "this host loads {} and provides {WASI_PROVIDED}",
        supported_versions()
    );
    let not_provided = |hint: &str| {
        format!(
            "this component imports {import}, which ctxhost does not provide to a {world} ({hint})"
        )
    };
    let (path, version) = import.split_once('@').unwrap_or((import, ""));
    if import.starts_with("wasi:http/") {
        return not_provided(
            "components get no network (a compressor asks the task's LLM through the `llm` import); \
             with componentize-js, build with `-d http -d fetch-event` so the component does not import it",
        );
    }
    if import.starts_with("wasi:") {
        if !version.starts_with("0.2.") {
            return format!(
                "this component imports {import}, built against WASI {version}; ctxhost provides \
                 {WASI_PROVIDED} (filesystem on its task directory, clocks, random and stdio)"
            );
        }
        return not_provided(&format!(
            "a plugin gets {WASI_PROVIDED}: filesystem (its task directory), clocks, random and stdio only"
        ));
    }
    let Some(iface) = path
        .strip_prefix(WIT_PACKAGE)
        .and_then(|p| p.strip_prefix('/'))
    else {
        return not_provided("a plugin may import only what its world in wit/plugin.wit imports");
    };
    if WitVersion::for_export(version).is_none() {
        return format!(
            "this component imports {import}: it was built against {WIT_PACKAGE}@{version}, {}; \
             {loads}; {rebuild}",
            relation(version)
        );
    }
    if !interfaces(wit).contains(&iface) {
        return format!(
            "this component imports {import}, an interface {WIT_PACKAGE}@{wit} does not have (it has {}): \
             it was built against a newer or modified WIT; {loads}; {rebuild}",
            interfaces(wit).join(", ")
        );
    }
    if !world_imports(kind, wit).contains(&iface) {
        let hint = match iface {
            "llm" => {
                "only a compressor or a strategy (worlds compressor-plugin, strategy-plugin) may import `llm`"
            }
            "planning" => "only a strategy (world strategy-plugin) may import `planning`",
            "history" => {
                "only a compressor or a strategy (worlds compressor-plugin, strategy-plugin) may import `history`"
            }
            _ => "a plugin may import only what its world in wit/plugin.wit imports",
        };
        return not_provided(hint);
    }
    // The interface is the world's: one of its functions is what does not fit.
    let function = chain
        .strip_prefix("instance export `")
        .and_then(|r| r.split_once("` has the wrong type"));
    match function {
        Some((f, cause))
            if cause.trim_start_matches(':').trim() == "function implementation is missing" =>
        {
            format!(
                "this component imports function `{f}` of {import}, which {WIT_PACKAGE}@{wit} does not \
                 have: it was built against a newer or modified WIT; {loads}; {rebuild}"
            )
        }
        Some((f, cause)) => format!(
            "this component imports function `{f}` of {import} with another type than \
             {WIT_PACKAGE}@{wit} gives it ({}): it was built against a modified WIT; {rebuild}",
            cause.trim_start_matches(':').trim()
        ),
        None => reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_import_is_named_with_what_to_do() {
        let http = explain_link_error(
            "component imports instance `wasi:http/outgoing-handler@0.2.6`, but a matching implementation was not found in the linker",
            PluginKind::Compressor,
            WitVersion::V1_0_0,
        );
        assert!(
            http.starts_with("this component imports wasi:http/outgoing-handler@0.2.6, which ctxhost does not provide to a compressor-plugin"),
            "{http}"
        );
        assert!(http.contains("-d http -d fetch-event"), "{http}");
        let llm = explain_link_error(
            "component imports instance `ctxhost:plugin/llm@1.0.0`, but a matching implementation was not found in the linker",
            PluginKind::MessageStore,
            WitVersion::V1_0_0,
        );
        assert!(llm.contains("only a compressor or a strategy"), "{llm}");
        let planning = explain_link_error(
            "component imports instance `ctxhost:plugin/planning@1.0.0`, but a matching implementation was not found in the linker",
            PluginKind::Compressor,
            WitVersion::V1_0_0,
        );
        assert!(
            planning.contains("to a compressor-plugin")
                && planning
                    .contains("only a strategy (world strategy-plugin) may import `planning`"),
            "{planning}"
        );
        assert_eq!(
            explain_link_error("type mismatch", PluginKind::Compressor, WitVersion::V1_0_0),
            "type mismatch"
        );
    }

    #[test]
    fn history_is_named_for_the_worlds_and_versions_that_do_not_have_it() {
        let missing = |kind, wit| {
            explain_link_error(
                &format!(
                    "component imports instance `ctxhost:plugin/history@{wit}`, but a matching implementation was not found in the linker"
                ),
                kind,
                wit,
            )
        };
        let store = missing(PluginKind::MessageStore, WitVersion::V1_0_0);
        assert!(
            store.contains("to a message-store-plugin")
                && store.contains("only a compressor or a strategy (worlds compressor-plugin, strategy-plugin) may import `history`"),
            "{store}"
        );
        // Both worlds import it: a missing function of it is what does not fit.
        for kind in [PluginKind::Compressor, PluginKind::Strategy] {
            let e = explain_link_error(
                "component imports instance `ctxhost:plugin/history@1.0.0`, but a matching implementation was not found in the linker: instance export `grep` has the wrong type: function implementation is missing",
                kind,
                WitVersion::V1_0_0,
            );
            assert!(
                e.starts_with("this component imports function `grep` of ctxhost:plugin/history@1.0.0, which ctxhost:plugin@1.0.0 does not have"),
                "{e}"
            );
        }
    }

    #[test]
    fn wasi_of_another_version_names_what_the_host_provides() {
        let e = explain_link_error(
            "component imports instance `wasi:filesystem/types@0.3.0`, but a matching implementation was not found in the linker: instance export `x` has the wrong type: function implementation is missing",
            PluginKind::Compressor,
            WitVersion::V1_0_0,
        );
        assert_eq!(
            e,
            "this component imports wasi:filesystem/types@0.3.0, built against WASI 0.3.0; ctxhost \
             provides WASI 0.2.0 to 0.2.12 (filesystem on its task directory, clocks, random and stdio)"
        );
    }

    #[test]
    fn a_function_of_another_type_is_named() {
        let e = explain_link_error(
            "component imports instance `ctxhost:plugin/log@1.0.0`, but a matching implementation was not found in the linker: instance export `write` has the wrong type: expected 2 parameters, found 1",
            PluginKind::RequestFormat,
            WitVersion::V1_0_0,
        );
        assert_eq!(
            e,
            "this component imports function `write` of ctxhost:plugin/log@1.0.0 with another type \
             than ctxhost:plugin@1.0.0 gives it (expected 2 parameters, found 1): it was built \
             against a modified WIT; rebuild it against wit/plugin.wit (1.0.0)"
        );
        assert_eq!(
            relation("1.1.0"),
            "a newer WIT version than this host loads"
        );
        assert_eq!(
            relation("0.2.0"),
            "an older WIT version than this host loads (before 1.0)"
        );
        assert_eq!(relation("x"), "a WIT version this host does not load");
        assert_eq!(supported_versions(), "ctxhost:plugin@1.0.0");
    }
}
