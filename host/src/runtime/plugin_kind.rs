//! The four kinds of plugin, one per world of `ctxhost:plugin` (`wit/plugin.wit`), and the
//! package and version the host implements: what [`super::world`] reads a component's exports
//! against and [`super::mismatch`] names in its errors.

use std::fmt;

use super::wit::WitVersion;

/// The WIT package the host implements.
pub const WIT_PACKAGE: &str = "ctxhost:plugin";
/// Its current version (`wit/plugin.wit`); components of the versions in
/// [`WitVersion::SUPPORTED`] load, any other version is refused.
pub const WIT_VERSION: &str = WitVersion::CURRENT.as_str();

/// The four kinds of plugin, one per WIT world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginKind {
    /// `message-store-plugin`: keeps messages.jsonl and current.jsonl.
    MessageStore,
    /// `compressor-plugin`: compacts the context.
    Compressor,
    /// `request-format-plugin`: writes requests, reads responses.
    RequestFormat,
    /// `strategy-plugin`: decides the task's flow around the model's replies.
    Strategy,
}

impl PluginKind {
    /// Every kind.
    pub const ALL: [PluginKind; 4] = [
        PluginKind::MessageStore,
        PluginKind::Compressor,
        PluginKind::RequestFormat,
        PluginKind::Strategy,
    ];

    /// The exported interface's name: `message-store`, `compressor`, `request-format`,
    /// `strategy`.
    pub fn interface(self) -> &'static str {
        match self {
            PluginKind::MessageStore => "message-store",
            PluginKind::Compressor => "compressor",
            PluginKind::RequestFormat => "request-format",
            PluginKind::Strategy => "strategy",
        }
    }

    /// The world's name: `message-store-plugin`, `compressor-plugin`, `request-format-plugin`,
    /// `strategy-plugin`.
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::MessageStore => "message-store-plugin",
            PluginKind::Compressor => "compressor-plugin",
            PluginKind::RequestFormat => "request-format-plugin",
            PluginKind::Strategy => "strategy-plugin",
        }
    }

    /// The supported version that runs a component exporting this kind's interface at
    /// `version`: [`WitVersion::for_export`] (every supported version has all four worlds).
    pub fn version_for_export(self, version: &str) -> Option<WitVersion> {
        WitVersion::for_export(version)
    }

    /// The fully qualified export at the current WIT version, e.g.
    /// `ctxhost:plugin/message-store@1.0.0`.
    pub fn export_name(self) -> String {
        self.export_name_at(WitVersion::CURRENT)
    }

    /// The fully qualified export at `version`, e.g. `ctxhost:plugin/message-store@1.0.0`.
    pub fn export_name_at(self, version: WitVersion) -> String {
        format!("{WIT_PACKAGE}/{}@{version}", self.interface())
    }

    pub(super) fn from_interface(name: &str) -> Option<PluginKind> {
        PluginKind::ALL.into_iter().find(|k| k.interface() == name)
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.interface())
    }
}
