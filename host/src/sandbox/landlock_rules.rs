//! The Landlock ruleset of a sandboxed command ([`super::Policy`]), through the `landlock`
//! crate in best-effort mode: every right the running kernel knows is handled (denied unless a
//! rule grants it), rights it does not know are left out.

use std::os::fd::OwnedFd;

use landlock::{
    ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};

use super::{Policy, SYSTEM_READ_PATHS};

/// The newest ABI this code asks for; the crate downgrades to the kernel's.
const WANTED: ABI = ABI::V10;

/// Device files a command may read and write (shells redirect to /dev/null).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The kernel's Landlock ABI version (0 when Landlock is missing or disabled).
pub fn landlock_abi() -> i32 {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only returns
    // the ABI version (or -1).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

/// Build the ruleset of `policy` and return its descriptor (close-on-exec; the child applies
/// it with landlock_restrict_self). Errors: a ruleset the kernel refuses, a workspace or temp
/// dir that cannot be opened.
pub fn ruleset(policy: &Policy) -> Result<OwnedFd, String> {
    let e = |what: &str, err: landlock::RulesetError| format!("landlock {what}: {err}");
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(WANTED))
        .map_err(|x| e("fs access", x))?;
    if !policy.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(WANTED))
            .map_err(|x| e("net access", x))?;
    }
    let ruleset = ruleset
        .scope(Scope::from_all(WANTED))
        .map_err(|x| e("scope", x))?;
    let mut created = ruleset.create().map_err(|x| e("create", x))?;
    let rw: Vec<&std::path::PathBuf> = [&policy.workspace, &policy.temp_dir]
        .into_iter()
        .chain(&policy.write_paths)
        .collect();
    for p in &rw {
        // The read-write places must exist: a missing one is an error, not a skipped rule.
        if !p.is_dir() {
            return Err(format!("{} is not a directory", p.display()));
        }
    }
    created = created
        .add_rules(path_beneath_rules(rw, AccessFs::from_all(WANTED)))
        .map_err(|x| e("rw rules", x))?;
    let read: Vec<std::path::PathBuf> = SYSTEM_READ_PATHS
        .iter()
        .map(std::path::PathBuf::from)
        .chain(policy.read_paths.iter().cloned())
        .collect();
    created = created
        .add_rules(path_beneath_rules(&read, AccessFs::from_read(WANTED)))
        .map_err(|x| e("read rules", x))?
        .add_rules(path_beneath_rules(
            DEVICES,
            AccessFs::ReadFile | AccessFs::WriteFile,
        ))
        .map_err(|x| e("device rules", x))?;
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "landlock: the kernel gave no ruleset".to_string())
}
