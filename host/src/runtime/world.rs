//! Which plugin world a component implements, read from its exports.
//!
//! A plugin component exports exactly one interface of `ctxhost:plugin` (see `wit/plugin.wit`):
//! `ctxhost:plugin/message-store@1.0.0`, `…/compressor@1.0.0`, `…/request-format@1.0.0` or
//! `…/strategy@1.0.0` (or a 1.0.x patch of them: [`WitVersion::for_export`]). Any other
//! version, such as the pre-1.0 `0.2.0`, is refused naming it and 1.0.0.
//! The export names come from the component's type (`Component::component_type().exports`),
//! so a wrong or outdated component is named precisely before any instantiation is tried, and
//! the version after `@` picks the bindings and shim that run it ([`super::wit`]).

use wasmtime::Engine;
use wasmtime::component::Component;

use super::error::RuntimeError;
use super::mismatch;
use super::wit::WitVersion;

pub use super::plugin_kind::{PluginKind, WIT_PACKAGE, WIT_VERSION};

/// One `ctxhost:plugin` interface a component exports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginExport {
    /// The full export name, e.g. `ctxhost:plugin/request-format@1.0.0`.
    pub name: String,
    /// The plugin kind, when the interface is one of the three.
    pub kind: Option<PluginKind>,
    /// The WIT version after `@` (empty when unversioned).
    pub version: String,
}

/// All export names of `component`, in the component's order.
pub(crate) fn export_names(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The `ctxhost:plugin/*` exports among `names`.
pub(crate) fn plugin_exports(names: &[String]) -> Vec<PluginExport> {
    names
        .iter()
        .filter_map(|name| {
            let rest = name.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
            let (iface, version) = rest.split_once('@').unwrap_or((rest, ""));
            Some(PluginExport {
                name: name.clone(),
                kind: PluginKind::from_interface(iface),
                version: version.to_string(),
            })
        })
        .collect()
}

/// Whether a component built against WIT `version` can be used by this host: it maps to one of
/// [`WitVersion::SUPPORTED`] ([`WitVersion::for_export`]).
pub fn version_compatible(version: &str) -> bool {
    WitVersion::for_export(version).is_some()
}

/// The plugin kind and WIT version a component implements, for `plugin check`: exactly one
/// `ctxhost:plugin` plugin interface at a supported version. Returns the kind, the version as
/// the export names it, and the supported version that runs it.
pub(crate) fn detect(
    component: &str,
    names: &[String],
) -> Result<(PluginKind, String, WitVersion), RuntimeError> {
    let exports = plugin_exports(names);
    let kinds: Vec<(PluginKind, &PluginExport)> = exports
        .iter()
        .filter_map(|e| e.kind.map(|k| (k, e)))
        .collect();
    match kinds.as_slice() {
        [(kind, one)] => {
            let kind = *kind;
            match kind.version_for_export(&one.version) {
                Some(wit) => Ok((kind, one.version.clone(), wit)),
                None => Err(incompatible(component, kind, &one.name)),
            }
        }
        [] => Err(RuntimeError::WrongWorld {
            component: component.to_string(),
            found: describe(names),
            expected: format!(
                "one of {}",
                PluginKind::ALL
                    .iter()
                    .map(|k| k.export_name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            world: PluginKind::ALL
                .iter()
                .map(|k| k.world())
                .collect::<Vec<_>>()
                .join(" | "),
        }),
        several => Err(RuntimeError::WrongWorld {
            component: component.to_string(),
            found: several
                .iter()
                .map(|(_, e)| e.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            expected: "exactly one plugin interface".to_string(),
            world: PluginKind::ALL
                .iter()
                .map(|k| k.world())
                .collect::<Vec<_>>()
                .join(" | "),
        }),
    }
}

/// Check that a component implements `kind` at a supported version; returns the version as
/// its export names it and the supported version that runs it.
pub(crate) fn expect_kind(
    component: &str,
    names: &[String],
    kind: PluginKind,
) -> Result<(String, WitVersion), RuntimeError> {
    let exports = plugin_exports(names);
    if let Some(found) = exports.iter().find(|e| e.kind == Some(kind)) {
        return match kind.version_for_export(&found.version) {
            Some(wit) => Ok((found.version.clone(), wit)),
            None => Err(incompatible(component, kind, &found.name)),
        };
    }
    Err(RuntimeError::WrongWorld {
        component: component.to_string(),
        found: describe(names),
        expected: kind.export_name(),
        world: kind.world().to_string(),
    })
}

fn incompatible(component: &str, kind: PluginKind, found: &str) -> RuntimeError {
    let version = found.split_once('@').map(|(_, v)| v).unwrap_or("");
    RuntimeError::IncompatibleVersion {
        component: component.to_string(),
        built_against: format!("{WIT_PACKAGE}@{version}"),
        found: found.to_string(),
        relation: mismatch::relation(version).to_string(),
        supported: mismatch::supported_versions(),
        world: kind.world().to_string(),
        wasi: mismatch::WASI_PROVIDED.to_string(),
        current: WIT_VERSION.to_string(),
    }
}

/// `ctxhost:plugin/request-format@1.0.0` or `a, b` or `nothing`.
fn describe(names: &[String]) -> String {
    if names.is_empty() {
        "nothing".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn finds_the_kind_and_version() {
        let n = names(&["ctxhost:plugin/message-store@1.0.0"]);
        assert_eq!(
            detect("x.wasm", &n).unwrap(),
            (
                PluginKind::MessageStore,
                "1.0.0".to_string(),
                WitVersion::V1_0_0
            )
        );
        assert_eq!(
            expect_kind("x.wasm", &n, PluginKind::MessageStore).unwrap(),
            ("1.0.0".to_string(), WitVersion::V1_0_0)
        );
        let strategy = names(&["ctxhost:plugin/strategy@1.0.0"]);
        assert_eq!(
            detect("x.wasm", &strategy).unwrap(),
            (
                PluginKind::Strategy,
                "1.0.0".to_string(),
                WitVersion::V1_0_0
            )
        );
    }

    #[test]
    fn wrong_world_names_both_sides() {
        let n = names(&["ctxhost:plugin/request-format@1.0.0"]);
        let e = expect_kind("/x/y.wasm", &n, PluginKind::MessageStore).unwrap_err();
        assert_eq!(
            e.to_string(),
            "component /x/y.wasm: exports ctxhost:plugin/request-format@1.0.0, expected \
             ctxhost:plugin/message-store@1.0.0 (world message-store-plugin)"
        );
    }

    /// Issue 42 item 1: only 1.0 loads; a pre-1.0 component (0.1.0, 0.2.0, 0.3.0), a newer minor
    /// or major, are refused naming their version and 1.0.0.
    #[test]
    fn other_versions_are_refused_naming_theirs_and_1_0_0() {
        for (v, relation) in [
            (
                "0.1.0",
                "an older WIT version than this host loads (before 1.0)",
            ),
            (
                "0.2.0",
                "an older WIT version than this host loads (before 1.0)",
            ),
            (
                "0.3.0",
                "an older WIT version than this host loads (before 1.0)",
            ),
            ("1.1.0", "a newer WIT version than this host loads"),
            ("2.0.0", "a newer WIT version than this host loads"),
        ] {
            let n = names(&[&format!("ctxhost:plugin/message-store@{v}")]);
            let e = expect_kind("x.wasm", &n, PluginKind::MessageStore).unwrap_err();
            assert!(matches!(e, RuntimeError::IncompatibleVersion { .. }), "{e}");
            assert_eq!(
                e.to_string(),
                format!(
                    "component x.wasm: built against ctxhost:plugin@{v} (it exports \
                     ctxhost:plugin/message-store@{v}), {relation}: this host loads \
                     ctxhost:plugin@1.0.0 (world message-store-plugin) and provides WASI 0.2.0 to \
                     0.2.12; rebuild it against wit/plugin.wit (1.0.0)"
                )
            );
            assert!(detect("x.wasm", &n).is_err(), "{v}");
        }
        assert!(version_compatible("1.0.0"));
        assert!(version_compatible("1.0.2"));
        assert!(!version_compatible("0.3.0"));
        assert!(!version_compatible("1.1.0"));
        assert!(!version_compatible(""));
    }

    #[test]
    fn a_command_component_is_no_plugin() {
        let n = names(&["wasi:cli/run@0.2.6"]);
        let e = detect("x.wasm", &n).unwrap_err();
        assert!(
            e.to_string()
                .contains("exports wasi:cli/run@0.2.6, expected one of"),
            "{e}"
        );
    }
}
