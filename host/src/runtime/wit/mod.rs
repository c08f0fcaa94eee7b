//! The WIT version of `ctxhost:plugin` this host loads: `ctxhost:plugin@1.0.0`
//! (`wit/plugin.wit`), in [`v1_0_0`], which holds the bindings `bindgen!` generates from it and
//! the thin shim converting them to the host's own types ([`super::types`],
//! [`ctxhost_format::ChatMessage`]), so nothing outside `runtime/` ever sees a generated type.
//!
//! A component's version is read from its export names (`ctxhost:plugin/compressor@1.0.0`,
//! [`super::world`]); [`WitVersion::for_export`] maps it to the version that runs it. A
//! component built against any other version (the pre-1.0 `0.x` ones included) is refused
//! before it is instantiated, naming its version and 1.0.0.
//!
//! Adding a version: a 1.x is additive (docs/PLUGINS.md "Compatibility"), so a 1.1 host keeps
//! this module for 1.0 components and adds `v1_1_0` beside it, one [`WitVersion`] variant each,
//! and picks the bindings by the component's version; docs/DESIGN.md "WIT versions" shows how.

pub(crate) mod v1_0_0;

use std::fmt;

/// A version of the WIT package `ctxhost:plugin` that this host loads components of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WitVersion {
    /// `ctxhost:plugin@1.0.0`: the first stable contract (`wit/plugin.wit`).
    V1_0_0,
}

impl WitVersion {
    /// Every version this host loads, oldest first.
    pub const SUPPORTED: [WitVersion; 1] = [WitVersion::V1_0_0];
    /// The version of `wit/plugin.wit`, which the builtins and new components are built against.
    pub const CURRENT: WitVersion = WitVersion::V1_0_0;

    /// `1.0.0`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WitVersion::V1_0_0 => "1.0.0",
        }
    }

    /// The supported version that runs a component whose export carries `version` (the text
    /// after `@`, e.g. `1.0.0`): the one with the same major and minor (a patch or pre-release
    /// suffix is ignored: patches change no type). Each supported minor has its own bindings,
    /// since a component's exports are looked up by their exact names; a 1.x host keeps the
    /// bindings of every earlier 1.y (docs/DESIGN.md "WIT versions"). `None` for any other
    /// version (a 0.x, a newer minor, a 2.0), an unversioned export or text that is no version.
    pub fn for_export(version: &str) -> Option<WitVersion> {
        let theirs = major_minor(version)?;
        WitVersion::SUPPORTED
            .into_iter()
            .find(|v| major_minor(v.as_str()) == Some(theirs))
    }

    /// `1.0.0`: the supported versions, for messages.
    pub fn supported_list() -> String {
        WitVersion::SUPPORTED
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for WitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `(major, minor)` of a semver text (pre-release and build suffixes ignored).
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let core = version.split(['-', '+']).next()?;
    let mut it = core.split('.');
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    let _patch: u64 = it.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_1_0_loads() {
        for v in ["1.0.0", "1.0.3", "1.0.1-rc.1"] {
            assert_eq!(WitVersion::for_export(v), Some(WitVersion::V1_0_0), "{v}");
        }
        for other in [
            "0.1.0", "0.2.0", "0.3.0", "0.3.1", "1.1.0", "2.0.0", "", "1.0", "x.y.z",
        ] {
            assert_eq!(WitVersion::for_export(other), None, "{other}");
        }
        assert_eq!(WitVersion::supported_list(), "1.0.0");
        assert_eq!(WitVersion::CURRENT.to_string(), "1.0.0");
    }
}
