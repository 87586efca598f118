//! The inputs and result of the runner the tests define with the runner
//! kit alone (`tests/testkit.rs`, `docs/RUNNERS.md`): built only with the
//! `testkit` feature, never in a release. Its one operation prints a
//! message, then sleeps.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::OperationInputs;
use super::{Governed, KeyKind};
use crate::contract::Operation;
use crate::contract::Problem;

/// The longest `testkit.echo.run` sleeps.
pub const MAX_SLEEP_SECONDS: u32 = 86_400;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestkitEcho {
    /// What the tool prints: text, or a `{"$secret": ...}` reference.
    pub message: Value,
    /// How long the tool then sleeps.
    #[serde(default)]
    pub seconds: u32,
    /// A word of the tool's processes' command lines (`[a-z0-9-]{1,64}`),
    /// by which a test finds them on the host.
    pub tag: String,
}

super::runner_inputs! {
    /// The inputs of the testkit runner's operations.
    TestkitInputs {
    TestkitEchoRun(TestkitEcho),
    }
}

impl super::Vocabulary for TestkitInputs {
    /// It acts on nothing but its own processes.
    fn target_keys(&self, _tenant: &str) -> Vec<(KeyKind, String)> {
        match self {
            Self::TestkitEchoRun(_) => Vec::new(),
        }
    }

    /// Nothing the operator's policy rules on beyond the operation itself.
    fn governed(&self) -> Vec<Governed<'_>> {
        match self {
            Self::TestkitEchoRun(_) => Vec::new(),
        }
    }

    fn result_problem(_: Operation, result: &Value) -> Result<(), String> {
        super::shaped::<TestkitResult>(result)
    }
}

/// The sleep is bounded and the tag a plain word.
pub(super) fn problems_of(inputs: &OperationInputs) -> Vec<Problem> {
    let OperationInputs::TestkitEchoRun(echo) = inputs else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    if echo.seconds > MAX_SLEEP_SECONDS {
        problems.push(Problem::new(
            "inputs.seconds",
            format!("at most {MAX_SLEEP_SECONDS}"),
        ));
    }
    let word = |byte: u8| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-';
    if echo.tag.is_empty() || echo.tag.len() > 64 || !echo.tag.bytes().all(word) {
        problems.push(Problem::new("inputs.tag", "[a-z0-9-]{1,64}"));
    }
    problems
}

// Results: what its executor reports.

/// The result of `testkit.echo.run`: how its tool ended.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestkitResult {
    pub exit_code: Option<i32>,
    pub seconds: u32,
}
