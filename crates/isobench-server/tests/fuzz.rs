//! Property-based fuzzing of request validation through the real router:
//! arbitrary JSON bodies (and some that are not JSON) sent to a server on
//! 127.0.0.1:0 with the tiny model always get a 2xx answer or a 4xx with an
//! OpenAI error body, never a 5xx or a dropped connection. `max_tokens` is
//! kept small so that valid requests finish at once; 64 cases.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

/// Any JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-3i64..20).prop_map(Value::from),
        any::<f64>().prop_map(|x| json!(x)),
        (-1.0f64..3.0).prop_map(|x| json!(x)),
        "\\PC{0,16}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

const FIELDS: &[&str] = &[
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "ignore_eos",
    "n",
    "stream",
    "stream_options",
    "logprobs",
    "echo",
    "best_of",
    "suffix",
    "tools",
    "extra",
];

/// A plausible prompt, or anything at all.
fn prompt_like() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => "\\PC{0,40}".prop_map(Value::from),
        1 => proptest::collection::vec(0u32..9000, 0..6).prop_map(|ids| json!(ids)),
        1 => any_json(),
    ]
}

/// A plausible message list, or anything at all.
fn messages_like() -> impl Strategy<Value = Value> {
    prop_oneof![
        5 => proptest::collection::vec(("(system|user|assistant|tool)", "\\PC{0,20}"), 0..3)
            .prop_map(|turns| {
                let turns: Vec<Value> = turns
                    .into_iter()
                    .map(|(role, content)| json!({"role": role, "content": content}))
                    .collect();
                json!(turns)
            }),
        1 => any_json(),
    ]
}

/// A value a client could well send in `field`, or anything at all.
fn field_value(field: &'static str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<Value> = match field {
        "max_tokens" | "max_completion_tokens" => (0i64..12).prop_map(Value::from).boxed(),
        "temperature" | "top_p" => (-0.5f64..2.0).prop_map(|x| json!(x)).boxed(),
        "top_k" => (-2i64..10).prop_map(Value::from).boxed(),
        "seed" => any::<u32>().prop_map(Value::from).boxed(),
        "stop" => prop_oneof![
            "[a-z ]{0,3}".prop_map(Value::from),
            proptest::collection::vec("[a-z ]{0,3}", 0..3).prop_map(|v| json!(v)),
        ]
        .boxed(),
        "ignore_eos" | "stream" | "echo" => any::<bool>().prop_map(Value::from).boxed(),
        "n" | "best_of" => (0i64..3).prop_map(Value::from).boxed(),
        "stream_options" => (any::<bool>(), any::<bool>())
            .prop_map(|(usage, continuous)| {
                json!({"include_usage": usage, "continuous_usage_stats": continuous})
            })
            .boxed(),
        _ => Just(Value::Null).boxed(),
    };
    prop_oneof![3 => plausible, 1 => any_json()].boxed()
}

/// The body (or raw text) and the path it goes to.
fn request() -> impl Strategy<Value = (bool, Result<Value, String>)> {
    let body = (
        proptest::bool::weighted(0.9),
        proptest::option::weighted(0.95, prompt_like()),
        proptest::option::weighted(0.95, messages_like()),
        proptest::collection::vec(
            proptest::sample::select(FIELDS).prop_flat_map(|f| (Just(f), field_value(f))),
            0..4,
        ),
    )
        .prop_map(|(right_model, prompt, messages, fields)| {
            let mut object = Map::new();
            object.insert(
                "model".into(),
                json!(if right_model { "tiny-llama" } else { "other" }),
            );
            for (field, value) in fields {
                object.insert(field.into(), value);
            }
            if let Some(prompt) = prompt {
                object.insert("prompt".into(), prompt);
            }
            if let Some(messages) = messages {
                object.insert("messages".into(), messages);
            }
            Ok(Value::Object(object))
        });
    let raw = "\\PC{0,40}".prop_map(Err);
    (any::<bool>(), prop_oneof![9 => body, 1 => raw])
}

/// Keeps generation short: integer token limits become at most 8, and a
/// body without one gets 4.
fn bound_generation(body: &mut Value) {
    let Some(object) = body.as_object_mut() else {
        return;
    };
    for field in ["max_tokens", "max_completion_tokens"] {
        if let Some(limit) = object.get(field).and_then(Value::as_u64) {
            object.insert(field.into(), json!(limit.min(8)));
        }
    }
    if !object.contains_key("max_tokens") {
        object.insert("max_tokens".into(), json!(4));
    }
}

async fn check(url: &str, chat: bool, body: Result<Value, String>) -> Result<(), TestCaseError> {
    let path = if chat {
        "/v1/chat/completions"
    } else {
        "/v1/completions"
    };
    let text = match body {
        Ok(mut value) => {
            bound_generation(&mut value);
            value.to_string()
        }
        Err(raw) => raw,
    };
    let response = common::client()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(text.clone())
        .send()
        .await
        .map_err(|err| TestCaseError::fail(format!("{err} for {text}")))?;
    let status = response.status().as_u16();
    let answer = response
        .text()
        .await
        .map_err(|err| TestCaseError::fail(format!("body cut ({err}) for {text}")))?;
    match status {
        200..=299 => Ok(()),
        400..=499 => {
            let error: Value = serde_json::from_str(&answer)
                .map_err(|_| TestCaseError::fail(format!("{status} {answer:?} for {text}")))?;
            prop_assert!(
                error["error"]["message"].is_string() && error["error"]["type"].is_string(),
                "{status} {answer} for {text}"
            );
            Ok(())
        }
        _ => Err(TestCaseError::fail(format!("{status} {answer} for {text}"))),
    }
}

#[test]
fn any_body_gets_2xx_or_a_4xx_with_an_openai_error() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = runtime.block_on(common::start(|_| {}));
    assert_eq!(server.model_name(), "tiny-llama");
    let url = server.url();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&request(), |(chat, body)| {
        runtime.block_on(check(&url, chat, body))
    });
    runtime.block_on(server.shutdown());
    if let Err(failure) = result {
        panic!("{failure}");
    }
}
