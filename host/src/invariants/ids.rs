//! Tool-call ids unique in the whole conversation: a `tool` message names the call it answers
//! by id, so an id used twice (formats make up `call_1` for providers that send none, turn after
//! turn; some servers repeat ids) makes a later result ambiguous, to the model, to providers that
//! match results to calls across the conversation, and to the history.

use std::collections::HashSet;

use ctxhost_format::ChatMessage;

/// Gives every tool call of `message` an id not in `used` (the ids of every earlier call of
/// the conversation) and adds them to it: a call keeps a non-empty id nobody used; any other
/// gets `call_{seq}_{i}` (`seq`: the messages.jsonl seq the message will have, `i` its
/// 1-based position), with `_{n}` added in the unlikely case that is taken too. Returns the
/// `(old, new)` ids replaced.
pub fn make_call_ids_unique(
    message: &mut ChatMessage,
    seq: u64,
    used: &mut HashSet<String>,
) -> Vec<(String, String)> {
    let mut replaced = Vec::new();
    for (i, call) in message.tool_calls.iter_mut().flatten().enumerate() {
        if !call.id.trim().is_empty() && used.insert(call.id.clone()) {
            continue;
        }
        let base = format!("call_{seq}_{}", i + 1);
        let mut id = base.clone();
        let mut n = 1;
        while used.contains(&id) {
            n += 1;
            id = format!("{base}_{n}");
        }
        used.insert(id.clone());
        replaced.push((std::mem::replace(&mut call.id, id.clone()), id));
    }
    replaced
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxhost_format::ToolCall;

    fn reply(ids: &[&str]) -> ChatMessage {
        ChatMessage::assistant_calls(
            ids.iter()
                .map(|id| ToolCall::new(*id, "read", "{}"))
                .collect(),
        )
    }

    fn ids(m: &ChatMessage) -> Vec<&str> {
        m.calls().iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn made_up_ids_repeated_turn_after_turn_become_unique() {
        let mut used = HashSet::new();
        let mut first = reply(&["call_1", "call_2"]);
        assert!(make_call_ids_unique(&mut first, 3, &mut used).is_empty());
        let mut second = reply(&["call_1", "", "call_1"]);
        let replaced = make_call_ids_unique(&mut second, 5, &mut used);
        assert_eq!(ids(&second), ["call_5_1", "call_5_2", "call_5_3"]);
        assert_eq!(replaced.len(), 3);
        // Even an id that looks like ours is never reused.
        let mut third = reply(&["call_5_1"]);
        make_call_ids_unique(&mut third, 5, &mut used);
        assert_eq!(ids(&third), ["call_5_1_2"]);
        assert_eq!(used.len(), 6);
    }
}
