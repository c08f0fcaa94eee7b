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
//!
//! The summary (2) is marked by the request writer as it passes it. 3 and 4 need the end of the
//! conversation: [`Planner`] finds them from a run over the last messages only (the request
//! writer reads the file backwards until such a run holds two closed user turns, or the whole
//! file), and names them by [`Position`], which a run over the whole file gives the same
//! blocks. So the plan costs the end of the file, not a second pass over all of it.

use std::io;

use super::blocks::{Block, BlockSink, Origin, Position, Role};

/// Most blocks one request may mark with `cache_control` (the API's limit).
pub const MAX_BREAKPOINTS: usize = 4;

/// Which message blocks carry `cache_control` besides the summary (which the request writer
/// marks itself) and the system prompt or last tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachePlan {
    /// Marked blocks, ascending, at most `MAX_BREAKPOINTS - 1`.
    pub blocks: Vec<Position>,
}

impl CachePlan {
    /// Whether the block at `at` is marked.
    pub fn marks(&self, at: Position) -> bool {
        self.blocks.contains(&at)
    }
}

/// A [`BlockSink`] that only follows turns, for the planning run over the end of the messages:
/// [`Planner::finish`] gives the plan of the module doc.
#[derive(Debug, Default)]
pub struct Planner {
    blocks: u64,
    role: Option<Role>,
    last: Option<Position>,
    summary: Option<Position>,
    /// Last block of the last and of the previous closed user turns.
    user_ends: [Option<Position>; 2],
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

    /// Whether both user-turn breakpoints are known whatever came before the blocks seen: two
    /// user turns were closed (the first by an assistant block).
    pub fn complete(&self) -> bool {
        let mut closed = self.user_ends;
        if self.role == Some(Role::User) {
            closed = [self.last, closed[0]];
        }
        closed[1].is_some()
    }

    /// The plan for the blocks seen (the summary included when seen).
    pub fn finish(mut self) -> CachePlan {
        self.close_turn();
        let mut blocks: Vec<Position> = self.summary.into_iter().collect();
        if self.assistant_seen {
            blocks.extend(self.user_ends.iter().flatten());
        }
        blocks.sort_unstable();
        blocks.dedup();
        CachePlan { blocks }
    }

    fn close_turn(&mut self) {
        if self.role == Some(Role::User) {
            self.user_ends = [self.last, self.user_ends[0]];
        }
    }
}

impl BlockSink for Planner {
    fn block(
        &mut self,
        role: Role,
        _block: &Block<'_>,
        origin: Origin,
        at: Position,
    ) -> io::Result<()> {
        if self.role != Some(role) {
            self.close_turn();
            self.role = Some(role);
        }
        if role == Role::Assistant {
            self.assistant_seen = true;
        }
        if origin == Origin::Summary {
            self.summary = Some(at);
        }
        self.last = Some(at);
        self.blocks += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Block `i` at message `i` (one block per message).
    fn at(i: u64) -> Position {
        Position {
            message: Some(i),
            from_end: 0,
        }
    }

    fn plan(turns: &[(Role, Origin)]) -> Vec<u64> {
        let mut p = Planner::new();
        for (i, (role, origin)) in turns.iter().enumerate() {
            p.block(*role, &Block::Text("x".into()), *origin, at(i as u64))
                .unwrap();
        }
        p.finish()
            .blocks
            .iter()
            .map(|b| b.message.unwrap())
            .collect()
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
    fn complete_once_two_user_turns_are_closed() {
        let mut p = Planner::new();
        let x = Block::Text("x".into());
        p.block(User, &x, Message, at(0)).unwrap();
        assert!(!p.complete());
        p.block(Assistant, &x, Message, at(1)).unwrap();
        assert!(!p.complete());
        p.block(User, &x, Message, at(2)).unwrap();
        assert!(p.complete(), "the open user turn closes at the end");
    }

    #[test]
    fn marks_is_a_lookup() {
        let p = CachePlan {
            blocks: vec![at(1), at(4), at(9)],
        };
        assert!(p.marks(at(4)) && !p.marks(at(5)) && !p.marks(at(0)));
    }
}
