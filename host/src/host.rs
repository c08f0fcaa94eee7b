//! Which machine a task process ran on, as recovery needs to know it: the host name
//! ([`crate::layout::hostname`]) together with a host identity ([`host_id`]). A pid is
//! checked only where both match, because two live machines (or containers) may share a
//! name: a pid recorded by the other one means nothing here, and only its lease tells
//! whether it still runs ([`crate::db::lease`]).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

/// The environment variable that overrides [`host_id`] (tests that play several hosts on one
/// machine; machines whose identity cannot be read).
pub const HOST_ID_ENV: &str = "CTXHOST_HOST_ID";

/// The kernel's id of the current boot (Linux): a new one after every reboot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This host's identity, recorded with the host name in a running task's row (`host_id`):
/// `CTXHOST_HOST_ID` when set; else the kernel's boot id with the inode of this process's pid
/// namespace (`BOOT_ID/pid:[INODE]`: pids are comparable exactly within one pid namespace of
/// one boot, so containers sharing a kernel differ too); else `/etc/machine-id`; else
/// `unknown` (then only the name tells hosts apart, as before there was an identity).
pub fn host_id() -> String {
    if let Ok(id) = std::env::var(HOST_ID_ENV)
        && !id.trim().is_empty()
    {
        return id.trim().to_string();
    }
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    if let Some(boot) = read(BOOT_ID) {
        return match std::fs::read_link("/proc/self/ns/pid") {
            Ok(ns) => format!("{boot}/{}", ns.display()),
            Err(_) => boot,
        };
    }
    read("/etc/machine-id").unwrap_or_else(|| "unknown".to_string())
}

/// [`host_id`] in 12 hexadecimal digits (the start of its SHA-256), for identities written
/// inside other ids (the publishing lease's owner, [`crate::sources`]).
pub fn short_host_id() -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(host_id().as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// This host: its name and identity, to compare with what a row recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThisHost {
    /// [`crate::layout::hostname`].
    pub name: String,
    /// [`host_id`].
    pub id: String,
}

impl ThisHost {
    /// The machine this process runs on.
    pub fn current() -> ThisHost {
        ThisHost {
            name: crate::layout::hostname(),
            id: host_id(),
        }
    }

    /// Whether a process recorded with host name `name` and identity `id` ran here, so its
    /// pid can be checked here. A row without an identity (written before schema version 7)
    /// is not: its lease decides.
    pub fn recorded(&self, name: Option<&str>, id: Option<&str>) -> bool {
        name == Some(self.name.as_str()) && id == Some(self.id.as_str())
    }

    /// The identity of another host with this host's name, if the row recorded one: host
    /// names are not unique among the workers sharing this store ([`warn_name_clash`]).
    pub fn clash<'a>(&self, name: Option<&str>, id: Option<&'a str>) -> Option<&'a str> {
        id.filter(|id| name == Some(self.name.as_str()) && *id != self.id)
    }
}

/// Warn (once per identity in this process) that a worker with identity `other` uses this
/// host's name `name`: its tasks are judged by their leases, not by their pids, and they
/// are told apart in `ctxhost tasks` only by worker id. Returns whether it warned.
pub fn warn_name_clash(me: &ThisHost, other: &str) -> bool {
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let warned = WARNED.get_or_init(|| Mutex::new(HashSet::new()));
    let first = warned
        .lock()
        .map(|mut w| w.insert(format!("{}\n{}\n{other}", me.name, me.id)))
        .unwrap_or(false);
    if first {
        tracing::warn!(
            host = %me.name,
            this_identity = %me.id,
            other_identity = %other,
            "another worker runs tasks under this host name ({}) with a different host identity: \
             host names are not unique among the workers of this store; their tasks are judged \
             by their leases, not their pids. Give each host a name of its own ({})",
            me.name,
            crate::layout::HOSTNAME_ENV
        );
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_its_name_and_identity() {
        let id = host_id();
        assert!(!id.is_empty());
        if std::env::var_os(HOST_ID_ENV).is_none() && std::path::Path::new(BOOT_ID).exists() {
            assert!(id.contains("/pid:["), "{id}");
        }
        let me = ThisHost {
            name: "a".into(),
            id: "1".into(),
        };
        assert!(me.recorded(Some("a"), Some("1")));
        assert!(!me.recorded(Some("a"), Some("2")));
        assert!(!me.recorded(Some("a"), None));
        assert!(!me.recorded(Some("b"), Some("1")));
        assert_eq!(me.clash(Some("a"), Some("2")), Some("2"));
        assert_eq!(me.clash(Some("a"), Some("1")), None);
        assert_eq!(me.clash(Some("b"), Some("2")), None);
        assert_eq!(me.clash(Some("a"), None), None);
        assert!(warn_name_clash(&me, "2"));
        assert!(!warn_name_clash(&me, "2"));
        assert!(warn_name_clash(&me, "3"));
        let short = short_host_id();
        assert_eq!(short.len(), 12);
        assert!(short.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
