//! What `builtin:plan-execute` says to the model: the side calls' instructions and the
//! messages it adds to the task's context.

use ctxhost_plugin::format::planning::Plan;

/// System message of the planning call.
pub const PLANNER: &str = "You are the planner of a coding agent. You do not do the task yourself: you \
write a short plan the agent will follow, step by step, with the tools it has. Reply with only a JSON \
object, no prose: {\"goal\": \"what the task must achieve\", \"steps\": [{\"id\": 1, \"description\": \
\"one concrete action\"}]}. Use 1 to 8 steps.";

/// User message of the planning call: the agent's instructions (its system prompt, with any
/// context inherited from an earlier task), the task and the tools.
pub fn plan_request(instructions: &str, prompt: &str, tools: &[String]) -> String {
    let tools = if tools.is_empty() {
        "The agent has no tools: it answers from its own knowledge.".to_string()
    } else {
        format!("The agent's tools: {}.", tools.join(", "))
    };
    let background = if instructions.trim().is_empty() {
        String::new()
    } else {
        format!(
            "The agent's instructions and background:\n{}\n\n",
            instructions.trim()
        )
    };
    format!("{background}Task:\n{prompt}\n\n{tools}\n\nReply with only the JSON plan.")
}

/// The one repair prompt after a reply that held no usable plan; `cut_at`: the token limit
/// the reply was cut off at, when it was.
pub fn plan_repair(why: &str, cut_at: Option<u32>) -> String {
    let cut = match cut_at {
        Some(limit) => format!(
            " It was cut off at the limit of {limit} tokens before it was complete: write a shorter \
             plan, with short step descriptions and no text around the JSON."
        ),
        None => String::new(),
    };
    format!(
        "That reply cannot be used as a plan ({why}).{cut} Reply again with only a JSON object of the form \
         {{\"goal\": \"...\", \"steps\": [{{\"id\": 1, \"description\": \"...\"}}]}} and nothing else."
    )
}

/// The message that puts a new plan into the task's context.
pub fn plan_message(plan: &Plan) -> String {
    let first = plan
        .current_step()
        .map(|s| format!("Start with step {}: {}", s.id, s.description.trim()))
        .unwrap_or_default();
    format!(
        "Plan for this task:\n{}\n\nWork through the steps in order, using the tools as needed. {first}\n\
         When a step is done, reply with a short summary of what you did and found, without calling a \
         tool; you will then get the next step. If the whole task is already done, reply with the final \
         result.",
        plan.render()
    )
}

/// The message after a step's reply: the next step.
pub fn next_step_message(done: u32, next_id: u32, total: usize, description: &str) -> String {
    format!(
        "Step {done} is done. Next, step {next_id} of {total}: {}\n\
         When it is done, reply with a short summary without calling a tool.",
        description.trim()
    )
}

/// System message of a reflection call.
pub const REFLECTOR: &str = "You review the progress of a coding agent that follows a plan. Judge \
whether the plan still fits what the agent found. Reply with only a JSON object, no prose: \
{\"assessment\": \"one or two sentences\", \"revise\": true or false, \"steps\": [only when revise is \
true: the whole revised plan, each {\"id\": 1, \"description\": \"...\", \"status\": \"done\" or \
\"pending\"}]}.";

/// User message of a reflection call.
pub fn reflection_request(
    prompt: &str,
    plan: &Plan,
    trigger: &str,
    outcomes: &str,
    recent: &str,
) -> String {
    let why = if trigger == "tool-error" {
        "A tool call just failed."
    } else {
        "A regular check of the progress."
    };
    format!(
        "Task:\n{prompt}\n\nCurrent plan:\n{}\n\n{why}\nThe last tool calls:\n{outcomes}\n\nThe latest messages:\n{recent}\n\n\
         Reply with only the JSON object.",
        plan.render()
    )
}

/// The message a reflection adds to the context.
pub fn reflection_message(
    assessment: &str,
    revised: Option<&Plan>,
    next: Option<(u32, &str)>,
) -> String {
    let mut m = format!("Reflection on the progress: {}", assessment.trim());
    if let Some(plan) = revised {
        m.push_str(&format!("\n\nRevised plan:\n{}", plan.render()));
    }
    if let Some((id, d)) = next {
        m.push_str(&format!("\n\nContinue with step {id}: {}", d.trim()));
    }
    m
}

/// System message of a verification call.
pub const VERIFIER: &str = "You check the result of a coding agent against its task and plan, strictly \
but fairly. Reply with only a JSON object, no prose: {\"passed\": true or false, \"problems\": \"what \
is missing or wrong; empty when nothing is\"}.";

/// User message of a verification call.
pub fn verification_request(prompt: &str, plan: &Plan, result: &str) -> String {
    format!(
        "Task:\n{prompt}\n\nPlan:\n{}\n\nThe agent's final result:\n{result}\n\n\
         Does the result complete the task and every step of the plan? Reply with only the JSON object.",
        plan.render()
    )
}

/// The message after a failed verification.
pub fn verification_failed_message(problems: &str) -> String {
    format!(
        "A check of your result against the plan found problems:\n{}\n\nFix them, then reply with the \
         corrected final result, without calling a tool.",
        problems.trim()
    )
}
