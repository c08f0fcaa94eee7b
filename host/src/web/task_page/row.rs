//! The task page's row part: the row's fields, and the GitHub / GitLab item the task answers.

use crate::db::TaskRow;
use crate::db::sources::{Publication, is_web_url};
use crate::sources::ItemRef;
use crate::sources::publish::{error_sentence, status_sentence};

/// The GitHub / GitLab item a task answers (a task whose key names one) and what was
/// published to it: the task page's "Source item" block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceItem {
    /// `acme/app#42 (GitHub issue)`.
    pub item: String,
    /// The item's web page (polled tasks; `http(s)://` only).
    pub item_href: Option<String>,
    /// `result posted at TIME; labels done`, empty when nothing was published.
    pub published: String,
    /// The result comment's web page, once posted.
    pub comment_href: Option<String>,
    /// Why the last publishing attempt failed, empty if it did not.
    pub error: String,
}

/// The source item block of `row`, `None` unless its key names a GitHub / GitLab item.
/// Links are kept only when they are `http(s)://` URLs ([`crate::db::sources::is_web_url`]).
pub fn source_item(row: &TaskRow, publication: Option<&Publication>) -> Option<SourceItem> {
    let item = ItemRef::from_task(row)?;
    let link = |u: &Option<String>| u.clone().filter(|u| is_web_url(u));
    let (item_href, published, comment_href, error) = match publication {
        None => (None, String::new(), None, String::new()),
        Some(p) => (
            link(&p.item_url),
            status_sentence(p, None),
            link(&p.comment_url),
            error_sentence(p, None).unwrap_or_default(),
        ),
    };
    Some(SourceItem {
        item: format!("{} ({})", item.short(), item.describe_kind()),
        item_href,
        published,
        comment_href,
        error,
    })
}

/// The row's fields as label/value pairs.
pub fn row_fields(row: &TaskRow) -> Vec<(String, String)> {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".into());
    let mut f = vec![
        ("UUID", row.uuid.clone()),
        ("Status", row.status.to_string()),
        ("Source", row.task_source.clone()),
        (
            "Owner / repo",
            match (&row.owner, &row.repo) {
                (None, None) => "—".into(),
                (o, r) => format!("{}/{}", opt(o), opt(r)),
            },
        ),
        (
            "Type / id",
            match (&row.task_type, &row.task_id) {
                (None, None) => "—".into(),
                (t, i) => format!("{} #{}", opt(t), opt(i)),
            },
        ),
        ("User", opt(&row.user)),
        ("Created", row.created_at.clone()),
        ("Started", opt(&row.started_at)),
        ("Completed", opt(&row.completed_at)),
        ("Updated", row.updated_at.clone()),
        (
            "LLM",
            format!(
                "{} {} (context {})",
                opt(&row.llm_provider),
                opt(&row.model),
                row.context_length.map_or("—".into(), |c| c.to_string())
            ),
        ),
        ("LLM calls", row.llm_call_count.to_string()),
        ("Tool calls", row.tool_call_count.to_string()),
        ("Tokens", row.total_tokens.to_string()),
        (
            "Prompt cache",
            format!(
                "{} read, {} written",
                row.cache_read_tokens, row.cache_creation_tokens
            ),
        ),
        ("Compressions", row.compression_count.to_string()),
        (
            "Process",
            match (row.process_id, &row.hostname) {
                (Some(p), Some(h)) => format!("{p} on {h}"),
                (Some(p), None) => p.to_string(),
                _ => "—".into(),
            },
        ),
        ("Resumed", format!("{} time(s)", row.resume_count)),
        ("Crashes", row.crash_count.to_string()),
    ];
    if let Some(d) = &row.files_deleted_at {
        f.push(("Files deleted", d.clone()));
    }
    f.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_item_block_links_only_web_urls() {
        let mut row = crate::db::testing::task_row("u");
        assert_eq!(source_item(&row, None), None, "a local task has none");
        row.task_source = "gitlab".into();
        row.owner = Some("group".into());
        row.repo = Some("proj".into());
        row.task_type = Some("pull_request".into());
        row.task_id = Some("7".into());
        let bare = source_item(&row, None).unwrap();
        assert_eq!(bare.item, "group/proj!7 (GitLab merge request)");
        assert_eq!((bare.item_href, bare.published), (None, String::new()));
        let p = Publication {
            task_uuid: "u".into(),
            labels_state: Some("failed".into()),
            comment_state: crate::db::sources::CommentState::Posted,
            comment_id: Some("9".into()),
            comment_url: Some("javascript:alert(1)".into()),
            posted_at: Some("2026-11-30T17:00:00Z".into()),
            lease_owner: None,
            lease_until_ms: None,
            attempts: 2,
            last_error: Some("HTTP 502".into()),
            next_attempt_ms: None,
            item_url: Some("https://gitlab.example/group/proj/-/merge_requests/7".into()),
            change_state: crate::db::sources::ChangeState::None,
            change_commit: None,
            change_branch: None,
            change_base: None,
            pr_number: None,
            pr_url: None,
        };
        let s = source_item(&row, Some(&p)).unwrap();
        assert_eq!(
            s.item_href.as_deref(),
            Some("https://gitlab.example/group/proj/-/merge_requests/7")
        );
        assert_eq!(s.comment_href, None, "not a web URL: no link");
        assert_eq!(
            s.published,
            "result posted at 2026-11-30T17:00:00Z; labels failed"
        );
        assert_eq!(s.error, "HTTP 502 (2 failed attempt(s))");
    }
}
