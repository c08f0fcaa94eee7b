//! `ctxhost show UUID --follow`: print a task as `ctxhost ask` does, from its files, until it is
//! no longer queued or running — wherever it runs (under a worker, on another host sharing the
//! store). Read-only: Ctrl-C ends the command, not the task.

use std::process::ExitCode;
use std::time::Duration;

use super::Env;
use super::render::Render;
use crate::db::{Db, Status};
use crate::ops::follow::{Event, Watch};

struct ShowWatch(Render);

impl Watch for ShowWatch {
    fn event(&mut self, event: &Event) -> anyhow::Result<()> {
        self.0.event(event)
    }

    fn tick(&mut self, idle: Option<Duration>) -> anyhow::Result<bool> {
        self.0.progress(idle);
        Ok(true)
    }
}

/// Follow task `uuid` of `db` ([`crate::ops::follow::follow`]); exit 0, or 1 when it failed.
pub(super) fn show_follow(env: &Env, db: &Db, uuid: &str, json: bool) -> anyhow::Result<ExitCode> {
    let render = if json {
        Render::json()
    } else {
        Render::text(true)
    };
    let row = crate::ops::follow::follow(db, &env.layout, uuid, &mut ShowWatch(render))?;
    Ok(if row.status == Status::Failed {
        ExitCode::from(super::EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}
