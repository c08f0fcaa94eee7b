//! Tool-call ids unique in the whole conversation: a `tool` message names the call it answers
//! by id, so an id used twice (formats make up `call_1` for providers that send none, turn after
//! turn; some servers repeat ids) makes a later result ambiguous, to the model, to providers that
//! match results to calls across the conversation, and to the history.

use ctxhost_format::ChatMessage;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The tool-call ids a conversation has used, kept as 64-bit FNV-1a hashes of their bytes in
/// one sorted array, so the set costs 8 bytes per id however long the ids are, and the memory
/// of a task process stays flat with its history (a 1 GiB history holds ~125,000 calls: ~1 MiB
/// here, where the ids as strings took ~16 MiB, and less than a `BTreeSet` of the hashes, whose
/// nodes are only partly full). An insert moves the larger hashes up: a `memmove` of at most
/// the array, once per tool call.
///
/// Two different ids may hash alike (a chance of about n² / 2⁶⁵ for n ids; a provider could
/// also make it happen on purpose): [`make_call_ids_unique`] then renames an id that was in
/// fact unused — harmless, the renamed id is unused too. An id in the set is never reported
/// as unused.
///
/// Serialised (in `history_checkpoint.json`) as a sorted JSON array of the hashes, each 16
/// lowercase hex digits, like [`ctxhost_format::checkpoint::line_hash`] (the same hash). Read
/// element by element; an array out of order is sorted, one with a hash twice is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallIds(Vec<u64>);

impl CallIds {
    /// The hash an id is kept as (FNV-1a, 64 bits, over its UTF-8 bytes).
    fn hash(id: &str) -> u64 {
        ctxhost_format::checkpoint::fnv1a_64(id.as_bytes())
    }

    /// Add `id`; `false` when it (or an id of the same hash) was there already.
    pub fn insert(&mut self, id: &str) -> bool {
        let hash = Self::hash(id);
        match self.0.binary_search(&hash) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, hash);
                true
            }
        }
    }

    /// Whether `id` (or an id of the same hash) is in the set.
    pub fn contains(&self, id: &str) -> bool {
        self.0.binary_search(&Self::hash(id)).is_ok()
    }

    /// How many distinct hashes the set holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Empty the set (its memory is freed).
    pub fn clear(&mut self) {
        self.0 = Vec::new();
    }
}

impl Serialize for CallIds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|h| HexHash(*h)))
    }
}

impl<'de> Deserialize<'de> for CallIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut hashes: Vec<u64> = Vec::<HexHash>::deserialize(d)?
            .into_iter()
            .map(|h| h.0)
            .collect();
        hashes.sort_unstable();
        if hashes.windows(2).any(|w| w[0] == w[1]) {
            return Err(serde::de::Error::custom(
                "a hash is there twice (each id is kept once)",
            ));
        }
        hashes.shrink_to_fit();
        Ok(CallIds(hashes))
    }
}

impl<S: AsRef<str>> Extend<S> for CallIds {
    fn extend<I: IntoIterator<Item = S>>(&mut self, ids: I) {
        for id in ids {
            self.insert(id.as_ref());
        }
    }
}

impl<S: AsRef<str>> FromIterator<S> for CallIds {
    fn from_iter<I: IntoIterator<Item = S>>(ids: I) -> Self {
        let mut set = CallIds::default();
        set.extend(ids);
        set
    }
}

/// One hash as it is written: 16 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HexHash(u64);

impl Serialize for HexHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:016x}", self.0))
    }
}

impl<'de> Deserialize<'de> for HexHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HexHash;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a hash of 16 lowercase hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HexHash, E> {
                let ok = v.len() == 16 && v.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                ok.then(|| u64::from_str_radix(v, 16).ok())
                    .flatten()
                    .map(HexHash)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// Gives every tool call of `message` an id not in `used` (the ids of every earlier call of
/// the conversation) and adds them to it: a call keeps a non-empty id nobody used; any other
/// gets `call_{seq}_{i}` (`seq`: the messages.jsonl seq the message will have, `i` its
/// 1-based position), with `_{n}` added in the unlikely case that is taken too. Returns the
/// `(old, new)` ids replaced.
pub fn make_call_ids_unique(
    message: &mut ChatMessage,
    seq: u64,
    used: &mut CallIds,
) -> Vec<(String, String)> {
    let mut replaced = Vec::new();
    for (i, call) in message.tool_calls.iter_mut().flatten().enumerate() {
        if !call.id.trim().is_empty() && used.insert(&call.id) {
            continue;
        }
        let base = format!("call_{seq}_{}", i + 1);
        let mut id = base.clone();
        let mut n = 1;
        while used.contains(&id) {
            n += 1;
            id = format!("{base}_{n}");
        }
        used.insert(&id);
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
        let mut used = CallIds::default();
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

    #[test]
    fn the_set_round_trips_through_its_json_and_refuses_other_shapes() {
        let ids: CallIds = ["call_1", "toolu_01ABC", "é✓", ""].into_iter().collect();
        let text = serde_json::to_string(&ids).unwrap();
        let back: CallIds = serde_json::from_str(&text).unwrap();
        assert_eq!(back, ids);
        for id in ["call_1", "toolu_01ABC", "é✓", ""] {
            assert!(back.contains(id), "{id}");
        }
        assert!(!back.contains("call_2"));
        // Sorted hashes of 16 lowercase hex digits.
        let v: Vec<String> = serde_json::from_str(&text).unwrap();
        assert!(v.windows(2).all(|w| w[0] < w[1]), "{v:?}");
        assert!(v.iter().all(|h| h.len() == 16), "{v:?}");
        for bad in [
            r#"["call_1"]"#,
            r#"["0123456789ABCDEF"]"#,
            r#"["0123"]"#,
            "[1]",
            "{}",
        ] {
            assert!(serde_json::from_str::<CallIds>(bad).is_err(), "{bad}");
        }
    }
}
