//! Where a request's prompt-cache breakpoints go.
//!
//! Anthropic caches the prefix of a request (tools, then system, then messages) up to a block
//! marked `"cache_control":{"type":"ephemeral"}`; a later request that repeats that prefix
//! reads it from the cache (billed at a tenth of the input price) instead of paying for it
//! again, and writing it costs a quarter more than plain input. A request may mark at most
//! [`MAX_BREAKPOINTS`] blocks. ctxhost's context is append-only between compressions, so a
//! request's whole context is the prefix of the next request, until a compression rewrites it
//! behind the summary. The request marks:
//!
//! 1. the system prompt (or, without one, the last tool definition): tools and system prompt
//!    change only with the config, so every call reads them;
//! 2. the summary message of the latest compression: system prompt + summary is the stable
//!    prefix of every call until the next compression;
//! 3. the end of the last user turn: the next call repeats everything up to here and reads it;
//! 4. the end of the user turn before it: the point the previous call wrote, read now, whatever
//!    the number of blocks added since (the API looks back only about 20 blocks from a
//!    breakpoint for an earlier cached prefix).
//!
//! 3 and 4 are only set once the conversation holds an assistant turn: a single-turn request
//! (like a compressor's summary request) is never continued, and writing it to the cache would
//! cost a quarter more for nothing.
//!
//! So a task pays the full price for its prefix once per compression, and for each call's new
//! messages about once (written at 1.25, then read at 0.1 by the calls after it).

use std::io;

use super::blocks::{Block, BlockSink, Origin, Role};

/// Most blocks one request may mark with `cache_control` (the API's limit).
pub const MAX_BREAKPOINTS: usize = 4;

/// Which message blocks carry `cache_control` (the system prompt or last tool is marked by the
/// request writer). Blocks are numbered from 0 over all turns, in request order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachePlan {
    /// Marked blocks, ascending, at most `MAX_BREAKPOINTS - 1`.
    pub blocks: Vec<u64>,
}

impl CachePlan {
    /// Whether block `index` is marked.
    pub fn marks(&self, index: u64) -> bool {
        self.blocks.binary_search(&index).is_ok()
    }
}

/// A [`BlockSink`] that only counts blocks and turns, for the first pass over the messages:
/// [`Planner::finish`] gives the plan of the module doc.
#[derive(Debug, Default)]
pub struct Planner {
    blocks: u64,
    role: Option<Role>,
    summary: Option<u64>,
    /// Last block of the last and of the previous closed user turns.
    user_ends: [Option<u64>; 2],
    assistant_seen: bool,
}

impl Planner {
    /// A planner that has seen no block.
    pub fn new() -> Planner {
        Planner::default()
    }

    /// Blocks seen so far.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The plan for the blocks seen.
    pub fn finish(mut self) -> CachePlan {
        self.close_turn();
        let mut blocks: Vec<u64> = self.summary.into_iter().collect();
        if self.assistant_seen {
            blocks.extend(self.user_ends.iter().flatten());
        }
        blocks.sort_unstable();
        blocks.dedup();
        CachePlan { blocks }
    }

    fn close_turn(&mut self) {
        if self.role == Some(Role::User) {
            self.user_ends = [Some(self.blocks - 1), self.user_ends[0]];
        }
    }
}

impl BlockSink for Planner {
    fn block(&mut self, role: Role, _block: &Block, origin: Origin) -> io::Result<()> {
        if self.role != Some(role) {
            self.close_turn();
            self.role = Some(role);
        }
        if role == Role::Assistant {
            self.assistant_seen = true;
        }
        if origin == Origin::Summary {
            self.summary = Some(self.blocks);
        }
        self.blocks += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(turns: &[(Role, Origin)]) -> Vec<u64> {
        let mut p = Planner::new();
        for (role, origin) in turns {
            p.block(*role, &Block::Text("x".into()), *origin).unwrap();
        }
        p.finish().blocks
    }

    use Origin::*;
    use Role::*;

    #[test]
    fn single_turn_requests_mark_only_a_summary() {
        assert_eq!(plan(&[(User, Message)]), Vec::<u64>::new());
        assert_eq!(plan(&[(User, Summary), (User, Message)]), [0]);
    }

    #[test]
    fn the_last_two_user_turns_and_the_summary_are_marked() {
        // 0 summary, 1 user | 2 asst 3 asst | 4 user 5 user | 6 asst | 7 user
        let turns = [
            (User, Summary),
            (User, Message),
            (Assistant, Message),
            (Assistant, Message),
            (User, Message),
            (User, Repair),
            (Assistant, Message),
            (User, Message),
        ];
        assert_eq!(plan(&turns), [0, 5, 7]);
        // The summary's block closing the second-to-last user turn is marked once.
        assert_eq!(
            plan(&[(User, Summary), (Assistant, Message), (User, Message)]),
            [0, 2]
        );
        // A request ending with the assistant (prefill): the user turns before it.
        assert_eq!(
            plan(&[
                (User, Message),
                (Assistant, Message),
                (User, Message),
                (Assistant, Message)
            ]),
            [0, 2]
        );
    }

    #[test]
    fn marks_is_a_lookup() {
        let p = CachePlan {
            blocks: vec![1, 4, 9],
        };
        assert!(p.marks(4) && !p.marks(5) && !p.marks(0));
    }
}
