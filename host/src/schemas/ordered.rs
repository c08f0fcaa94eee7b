//! A JSON tree that keeps object keys in file order (serde_json's `Value` sorts them, and the
//! field tables must list fields in the order the schemas do). Only for the table generator.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value with object members in their order in the text.
#[derive(Debug, Clone, PartialEq)]
pub enum J {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<J>),
    /// An object, members in file order.
    Object(Vec<(String, J)>),
}

static NULL: J = J::Null;

/// Parse `text` (a schema file); `Null` when it is not JSON (the schema tests report that).
pub fn parse(text: &str) -> J {
    serde_json::from_str(text).unwrap_or(J::Null)
}

impl J {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Object(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            J::String(s) => Some(s),
            _ => None,
        }
    }

    /// The items, if this is an array.
    pub fn as_array(&self) -> Option<&Vec<J>> {
        match self {
            J::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The members, if this is an object.
    pub fn as_object(&self) -> Option<&Vec<(String, J)>> {
        match self {
            J::Object(m) => Some(m),
            _ => None,
        }
    }

    /// Whether this is an object.
    pub fn is_object(&self) -> bool {
        matches!(self, J::Object(_))
    }

    /// The number as u64, if it is one.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            J::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    /// The value at JSON Pointer `pointer` (`/$defs/plain`).
    pub fn pointer(&self, pointer: &str) -> Option<&J> {
        let mut node = self;
        for raw in pointer.split('/').skip(1) {
            let key = raw.replace("~1", "/").replace("~0", "~");
            node = match node {
                J::Object(_) => node.get(&key)?,
                J::Array(a) => a.get(key.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// This object with `other`'s members added (replacing those of the same name).
    pub fn merged(&self, other: &J, skip: &[&str]) -> J {
        let mut members = self.as_object().cloned().unwrap_or_default();
        for (k, v) in other.as_object().into_iter().flatten() {
            if skip.contains(&k.as_str()) {
                continue;
            }
            match members.iter_mut().find(|(m, _)| m == k) {
                Some(slot) => slot.1 = v.clone(),
                None => members.push((k.clone(), v.clone())),
            }
        }
        J::Object(members)
    }
}

impl std::ops::Index<&str> for J {
    type Output = J;

    fn index(&self, key: &str) -> &J {
        self.get(key).unwrap_or(&NULL)
    }
}

impl fmt::Display for J {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            J::Null => f.write_str("null"),
            J::Bool(b) => write!(f, "{b}"),
            J::Number(n) => write!(f, "{n}"),
            J::String(s) => write!(f, "{}", serde_json::Value::String(s.clone())),
            J::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
            J::Object(m) => {
                f.write_str("{")?;
                for (i, (k, v)) in m.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{}:{v}", serde_json::Value::String(k.clone()))?;
                }
                f.write_str("}")
            }
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        d.deserialize_any(JVisitor)
    }
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<J, E> {
        Ok(J::Number(v.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<J, E> {
        Ok(J::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<J, E> {
        Ok(serde_json::Number::from_f64(v).map_or(J::Null, J::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<J, E> {
        Ok(J::String(v.to_string()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element()? {
            out.push(v);
        }
        Ok(J::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut out = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, J>()? {
            out.push((k, v));
        }
        Ok(J::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order() {
        let j = parse(r#"{"z": 1, "a": [true, null, "x"], "m": {"b": 2, "a": 1}}"#);
        let keys: Vec<&str> = j
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["z", "a", "m"]);
        assert_eq!(
            j.to_string(),
            r#"{"z":1,"a":[true,null,"x"],"m":{"b":2,"a":1}}"#
        );
        assert_eq!(j.pointer("/m/a").and_then(J::as_u64), Some(1));
        assert_eq!(j["missing"], J::Null);
    }
}
