//! The task directory as the host guards it against its components (DESIGN.md §8):
//!
//! - [`guard_filesystem`]: three functions of WASI's `descriptor` are the host's own. `symlink-at`
//!   and `link-at` answer `not-permitted`, so a component can never leave a link in its task
//!   directory (a symbolic link named like a file the host writes, pointing out of the
//!   directory, is how a component could make the host write elsewhere; a hard link would
//!   make two of the host's files one). `open-at` with `create` and `create-directory-at`
//!   count what the call creates: past [`super::RuntimeLimits::files_per_call`] they answer
//!   `quota` (and the call fails, [`super::RuntimeError::FileLimit`]). Everything else of
//!   `wasi:filesystem` is wasmtime's, and so is the work of the three once allowed.
//!
//! The task directory's byte budget is [`super::dir_budget`]'s.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView as _};
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{
    DescriptorFlags, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};

use super::sandbox::StoreState;

/// The WASI filesystem interface the host's linker provides (semver-compatible imports, such
/// as `wasi:filesystem/types@0.2.6`, resolve to it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// What a shadowed WASI function answers: its result, or a trap (wasmtime's own errors that
/// are not an `error-code`).
type Answer<T> = wasmtime::Result<(Result<T, ErrorCode>,)>;

/// A WASI filesystem result as the guest sees it: an `error-code`, or a trap for anything else.
fn answer<T>(r: wasmtime_wasi::p2::FsResult<T>) -> Answer<T> {
    match r {
        Ok(v) => Ok((Ok(v),)),
        Err(e) => Ok((Err(e.downcast()?.into()),)),
    }
}

/// Shadow `descriptor.symlink-at`, `descriptor.link-at`, `descriptor.open-at` and
/// `descriptor.create-directory-at` in `linker` (which already has WASI p2; module docs).
pub(crate) fn guard_filesystem(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let result = (|| {
        let mut fs = linker.instance(FILESYSTEM_TYPES)?;
        fs.func_wrap(
            "[method]descriptor.symlink-at",
            |_store, (_dir, _target, _link): (Resource<Descriptor>, String, String)| {
                Ok((Err::<(), ErrorCode>(ErrorCode::NotPermitted),))
            },
        )?;
        fs.func_wrap(
            "[method]descriptor.link-at",
            |_store,
             (_dir, _flags, _old, _new_dir, _new): (
                Resource<Descriptor>,
                PathFlags,
                String,
                Resource<Descriptor>,
                String,
            )| { Ok((Err::<(), ErrorCode>(ErrorCode::NotPermitted),)) },
        )?;
        fs.func_wrap(
            "[method]descriptor.open-at",
            |mut store: StoreContextMut<'_, StoreState>,
             (dir, path_flags, path, open_flags, flags): (
                Resource<Descriptor>,
                PathFlags,
                String,
                OpenFlags,
                DescriptorFlags,
            )|
             -> Answer<Resource<Descriptor>> {
                let state = store.data_mut();
                // A creation only if nothing is there yet (an open with `create` of an
                // existing file, as every append does, creates nothing).
                let creates = open_flags.contains(OpenFlags::CREATE) && {
                    let probe = Resource::<Descriptor>::new_borrow(dir.rep());
                    HostDescriptor::stat_at(
                        &mut state.filesystem(),
                        probe,
                        PathFlags::empty(),
                        path.clone(),
                    )
                    .is_err()
                };
                if creates && !state.may_create_entry() {
                    return Ok((Err(ErrorCode::Quota),));
                }
                let opened = HostDescriptor::open_at(
                    &mut state.filesystem(),
                    dir,
                    path_flags,
                    path,
                    open_flags,
                    flags,
                );
                if creates && opened.is_ok() {
                    state.entry_created();
                }
                answer(opened)
            },
        )?;
        fs.func_wrap(
            "[method]descriptor.create-directory-at",
            |mut store: StoreContextMut<'_, StoreState>,
             (dir, path): (Resource<Descriptor>, String)|
             -> Answer<()> {
                let state = store.data_mut();
                if !state.may_create_entry() {
                    return Ok((Err(ErrorCode::Quota),));
                }
                let made = HostDescriptor::create_directory_at(&mut state.filesystem(), dir, path);
                if made.is_ok() {
                    state.entry_created();
                }
                answer(made)
            },
        )
    })();
    linker.allow_shadowing(false);
    result
}
