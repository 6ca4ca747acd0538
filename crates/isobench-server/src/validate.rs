//! Request validation: an OpenAI request in, a [`ValidRequest`] out, or a
//! 400/404 naming the field and what is accepted. The engine only ever
//! sees `ValidRequest`s: prompts tokenized and within the context, sampling
//! parameters in range, `max_tokens` resolved.

use isobench_api::{
    ChatCompletionRequest, CompletionRequest, PromptInput, SamplingParams as WireSampling,
};
use isobench_model::Tokenizer;

use crate::chat_template::ChatTemplate;
use crate::error::ServerError;
use crate::sampler::SamplingParams;

/// Body fields of the OpenAI API that this server does not implement. A
/// request that sets one (to anything but null, false, 0 or empty) is
/// refused rather than silently answered without it.
const UNSUPPORTED_FIELDS: &[&str] = &[
    "logprobs",
    "top_logprobs",
    "echo",
    "best_of",
    "logit_bias",
    "suffix",
    "tools",
    "tool_choice",
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "min_tokens",
];

/// A request the engine can run as is.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRequest {
    pub prompt_tokens: Vec<u32>,
    /// Tokens to generate at most; prompt + max_tokens fits the context and
    /// the KV pool.
    pub max_tokens: u32,
    pub sampling: SamplingParams,
    /// Non-empty stop strings.
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens until `max_tokens`.
    pub ignore_eos: bool,
    pub stream: bool,
    /// Send a final usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Send usage in every chunk (`stream_options.continuous_usage_stats`).
    pub continuous_usage: bool,
}

/// What validation needs to know about the served model.
#[derive(Debug)]
pub struct Validator {
    pub model_name: String,
    pub tokenizer: Tokenizer,
    pub chat_template: ChatTemplate,
    /// Whether the template comes from the model (and so adds its own
    /// special tokens) rather than being the plain default.
    pub template_has_special_tokens: bool,
    pub max_model_len: u32,
    pub vocab_size: u32,
    /// Tokens the whole KV pool holds: no request may need more.
    pub pool_tokens: u64,
}

impl Validator {
    pub fn completion(&self, request: &CompletionRequest) -> Result<ValidRequest, ServerError> {
        self.check_model(&request.model)?;
        check_unsupported(&request.extra)?;
        let prompt_tokens = match &request.prompt {
            PromptInput::Text(text) => self.encode_prompt(text)?,
            PromptInput::Tokens(tokens) => self.check_token_ids(tokens.clone())?,
            PromptInput::Texts(texts) if texts.len() == 1 => self.encode_prompt(&texts[0])?,
            PromptInput::TokenLists(lists) if lists.len() == 1 => {
                self.check_token_ids(lists[0].clone())?
            }
            PromptInput::Texts(_) | PromptInput::TokenLists(_) => {
                return Err(ServerError::invalid(
                    "prompt",
                    "`prompt` holds several prompts; accepted: one prompt per request (a string or a list of token ids)",
                ));
            }
        };
        let stream_options = request.stream_options.unwrap_or_default();
        self.finish(
            prompt_tokens,
            &request.sampling,
            request.sampling.max_tokens,
            request.stream,
            stream_options,
        )
    }

    pub fn chat(&self, request: &ChatCompletionRequest) -> Result<ValidRequest, ServerError> {
        self.check_model(&request.model)?;
        check_unsupported(&request.extra)?;
        if request.messages.is_empty() {
            return Err(ServerError::invalid(
                "messages",
                "`messages` is empty; accepted: at least one message",
            ));
        }
        let prompt = self.chat_template.render(&request.messages)?;
        let prompt_tokens = self.encode(&prompt, !self.template_has_special_tokens)?;
        let stream_options = request.stream_options.unwrap_or_default();
        self.finish(
            prompt_tokens,
            &request.sampling,
            request.max_tokens(),
            request.stream,
            stream_options,
        )
    }

    fn check_model(&self, requested: &str) -> Result<(), ServerError> {
        if requested == self.model_name {
            return Ok(());
        }
        Err(ServerError::ModelNotFound {
            requested: requested.to_owned(),
            served: self.model_name.clone(),
        })
    }

    /// A completion prompt: an empty one is refused before the tokenizer
    /// adds its special tokens to it.
    fn encode_prompt(&self, text: &str) -> Result<Vec<u32>, ServerError> {
        if text.is_empty() {
            return Err(empty_prompt());
        }
        self.encode(text, true)
    }

    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ServerError> {
        self.tokenizer
            .encode(text, add_special_tokens)
            .map_err(|err| {
                ServerError::invalid("prompt", format!("the prompt cannot be tokenized: {err}"))
            })
    }

    fn check_token_ids(&self, tokens: Vec<u32>) -> Result<Vec<u32>, ServerError> {
        if let Some(&bad) = tokens.iter().find(|&&t| t >= self.vocab_size) {
            return Err(ServerError::invalid(
                "prompt",
                format!(
                    "token id {bad} in `prompt` is outside the vocabulary; accepted: ids below {}",
                    self.vocab_size
                ),
            ));
        }
        Ok(tokens)
    }

    fn finish(
        &self,
        prompt_tokens: Vec<u32>,
        wire: &WireSampling,
        max_tokens: Option<u32>,
        stream: bool,
        stream_options: isobench_api::StreamOptions,
    ) -> Result<ValidRequest, ServerError> {
        let sampling = sampling_params(wire)?;
        let stop = stop_strings(wire)?;
        let max_tokens = self.output_budget(prompt_tokens.len(), max_tokens)?;
        Ok(ValidRequest {
            prompt_tokens,
            max_tokens,
            sampling,
            stop,
            ignore_eos: wire.ignore_eos.unwrap_or(false),
            stream,
            include_usage: stream_options.include_usage || stream_options.continuous_usage_stats,
            continuous_usage: stream_options.continuous_usage_stats,
        })
    }

    /// Checks the prompt against the context and the pool, and resolves
    /// `max_tokens` (default: whatever room is left).
    fn output_budget(
        &self,
        prompt_len: usize,
        max_tokens: Option<u32>,
    ) -> Result<u32, ServerError> {
        let context = self.max_model_len as u64;
        let limit = context.min(self.pool_tokens);
        let prompt_len = prompt_len as u64;
        if prompt_len == 0 {
            return Err(empty_prompt());
        }
        if prompt_len >= context {
            return Err(ServerError::invalid(
                "prompt",
                format!(
                    "the prompt is {prompt_len} tokens; this server's context is {context} tokens \
                     (--max-model-len, by default the model's), so prompts must be shorter than that"
                ),
            ));
        }
        if prompt_len >= self.pool_tokens {
            return Err(ServerError::invalid(
                "prompt",
                format!(
                    "the prompt is {prompt_len} tokens; the KV-cache pool holds {} tokens in all \
                     (--kv-blocks or --kv-memory), so prompts must be shorter than that",
                    self.pool_tokens
                ),
            ));
        }
        let room = limit - prompt_len;
        match max_tokens {
            None => Ok(room.min(u32::MAX as u64) as u32),
            Some(0) => Err(ServerError::invalid(
                "max_tokens",
                "`max_tokens` is 0; accepted: at least 1",
            )),
            Some(wanted) if wanted as u64 > room => {
                let bound = if context <= self.pool_tokens {
                    format!(
                        "the context of {context} tokens (--max-model-len, by default the model's)"
                    )
                } else {
                    format!(
                        "the KV-cache pool's {} tokens (--kv-blocks or --kv-memory)",
                        self.pool_tokens
                    )
                };
                Err(ServerError::invalid(
                    "max_tokens",
                    format!(
                        "`max_tokens` is {wanted} but the prompt is {prompt_len} tokens and together \
                         they must fit {bound}; accepted: at most {room}"
                    ),
                ))
            }
            Some(wanted) => Ok(wanted),
        }
    }
}

fn empty_prompt() -> ServerError {
    ServerError::invalid(
        "prompt",
        "the prompt is empty; accepted: a non-empty string or at least one token id",
    )
}

fn sampling_params(wire: &WireSampling) -> Result<SamplingParams, ServerError> {
    if let Some(n) = wire.n.filter(|&n| n != 1) {
        return Err(ServerError::invalid(
            "n",
            format!("`n` is {n}; accepted: 1 (one choice per request)"),
        ));
    }
    let temperature = wire.temperature.unwrap_or(1.0);
    if !temperature.is_finite() || temperature < 0.0 {
        return Err(ServerError::invalid(
            "temperature",
            format!("`temperature` is {temperature}; accepted: a number >= 0 (0 is greedy)"),
        ));
    }
    let top_p = wire.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ServerError::invalid(
            "top_p",
            format!("`top_p` is {top_p}; accepted: a number in (0, 1]"),
        ));
    }
    let top_k = match wire.top_k {
        None | Some(-1) | Some(0) => None,
        Some(k) if k > 0 => Some(k as usize),
        Some(k) => {
            return Err(ServerError::invalid(
                "top_k",
                format!("`top_k` is {k}; accepted: a positive number, or -1 or 0 for no limit"),
            ));
        }
    };
    Ok(SamplingParams {
        temperature,
        top_p,
        top_k,
        seed: wire.seed,
    })
}

fn stop_strings(wire: &WireSampling) -> Result<Vec<String>, ServerError> {
    let Some(stop) = &wire.stop else {
        return Ok(Vec::new());
    };
    let strings = stop.strings();
    if strings.iter().any(|s| s.is_empty()) {
        return Err(ServerError::invalid(
            "stop",
            "`stop` holds an empty string; accepted: non-empty strings",
        ));
    }
    Ok(strings.into_iter().map(str::to_owned).collect())
}

fn check_unsupported(
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), ServerError> {
    use serde_json::Value;
    for &field in UNSUPPORTED_FIELDS {
        let set = match extra.get(field) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Number(n)) => n.as_f64() != Some(0.0),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Object(o)) => !o.is_empty(),
            Some(Value::Bool(true)) => true,
        };
        if set {
            return Err(ServerError::invalid(
                field,
                format!(
                    "`{field}` is not supported by the isobench server; remove it from the request"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use isobench_api::StopSpec;

    use super::*;

    #[test]
    fn sampling_parameters_out_of_range_name_the_field() {
        let cases: [(WireSampling, &str, &str); 5] = [
            (
                WireSampling {
                    temperature: Some(-0.5),
                    ..Default::default()
                },
                "temperature",
                ">= 0",
            ),
            (
                WireSampling {
                    top_p: Some(0.0),
                    ..Default::default()
                },
                "top_p",
                "(0, 1]",
            ),
            (
                WireSampling {
                    top_p: Some(1.5),
                    ..Default::default()
                },
                "top_p",
                "(0, 1]",
            ),
            (
                WireSampling {
                    top_k: Some(-3),
                    ..Default::default()
                },
                "top_k",
                "-1 or 0",
            ),
            (
                WireSampling {
                    n: Some(2),
                    ..Default::default()
                },
                "n",
                "accepted: 1",
            ),
        ];
        for (wire, param, accepted) in cases {
            let err = sampling_params(&wire).unwrap_err();
            assert!(
                matches!(err, ServerError::InvalidRequest { param: p, .. } if p == param),
                "{err}"
            );
            assert!(err.to_string().contains(accepted), "{err}");
        }
        let ok = sampling_params(&WireSampling {
            temperature: Some(0.0),
            top_k: Some(-1),
            seed: Some(3),
            ..Default::default()
        })
        .unwrap();
        assert!(ok.is_greedy());
        assert_eq!((ok.top_k, ok.seed), (None, Some(3)));
    }

    #[test]
    fn stop_strings_and_unsupported_fields() {
        let wire = WireSampling {
            stop: Some(StopSpec::Many(vec!["a".into(), String::new()])),
            ..Default::default()
        };
        assert!(
            stop_strings(&wire)
                .unwrap_err()
                .to_string()
                .contains("non-empty")
        );
        let mut extra = serde_json::Map::new();
        extra.insert("logprobs".into(), serde_json::Value::Bool(false));
        extra.insert("user".into(), serde_json::json!("someone"));
        check_unsupported(&extra).unwrap();
        extra.insert("logit_bias".into(), serde_json::json!({"5": 1}));
        let err = check_unsupported(&extra).unwrap_err();
        assert!(
            err.to_string().contains("`logit_bias` is not supported"),
            "{err}"
        );
    }
}
