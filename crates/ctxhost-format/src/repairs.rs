//! The warning a request format logs when it changed a request to keep its API's rules (a
//! tool result answering no call sent as user text, a reasoning item left out, ...): one line
//! naming the messages file, the API and each kind of change with its count.

/// `<file>: changed in the request to keep the <api>'s rules: <n> <what>, ...`: the `counts`
/// (`(n, what)`, in the order given) that are not 0. `api` names the API as in a sentence,
/// e.g. `Anthropic API`.
pub fn repairs_text(file: &str, api: &str, counts: &[(u64, &str)]) -> String {
    let parts: Vec<String> = counts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    format!(
        "{file}: changed in the request to keep the {api}'s rules: {}",
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_file_the_api_and_each_change_made_in_order() {
        assert_eq!(
            repairs_text(
                "current.jsonl",
                "Anthropic API",
                &[
                    (2, "tool call(s) answered as missing"),
                    (0, "never shown"),
                    (1, "user turn put first"),
                ]
            ),
            "current.jsonl: changed in the request to keep the Anthropic API's rules: 2 tool call(s) answered as missing, 1 user turn put first"
        );
    }
}
