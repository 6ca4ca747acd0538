//! The `[request]` section: what each request looks like — where prompts
//! and lengths come from, sampling fields, extra headers and body fields.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::context::FileContext;
use crate::dataset::Dataset;
use crate::error::WorkloadError;
use crate::file::RawRequest;
use crate::lengths::LengthDistribution;

/// Sampling fields sent with every request when set.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Sampling {
    /// `temperature` (>= 0).
    pub temperature: Option<f64>,
    /// `top_p` (in (0, 1]).
    pub top_p: Option<f64>,
    /// `top_k` (>= 1).
    pub top_k: Option<u32>,
}

/// Where prompts and lengths come from.
#[derive(Debug, Clone)]
pub(crate) enum Requests {
    Synthetic {
        input: LengthDistribution,
        output: LengthDistribution,
    },
    /// `output` replaces the dataset's output lengths when set.
    Dataset {
        dataset: Dataset,
        output: Option<LengthDistribution>,
    },
}

/// The validated `[request]` section.
#[derive(Debug, Clone)]
pub(crate) struct RequestSettings {
    pub(crate) requests: Requests,
    pub(crate) ignore_eos: bool,
    pub(crate) sampling: Sampling,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) extra_body: serde_json::Map<String, serde_json::Value>,
}

/// Headers isobench sets itself, or that must not live in a file.
const RESERVED_HEADERS: &[(&str, &str)] = &[
    ("content-type", "isobench sends JSON and sets it"),
    ("content-length", "isobench sets it"),
    ("transfer-encoding", "isobench sets it"),
    ("host", "it comes from the target URL"),
    (
        "authorization",
        "the API key is read only from the environment, never from a file",
    ),
];

/// Body fields isobench sets itself, and where to set them instead.
const RESERVED_BODY_FIELDS: &[(&str, &str)] = &[
    ("model", "set by the --model flag"),
    (
        "prompt",
        "built from request.input_tokens or request.dataset",
    ),
    (
        "messages",
        "built from request.input_tokens or request.dataset",
    ),
    ("max_tokens", "set from request.output_tokens"),
    ("max_completion_tokens", "set from request.output_tokens"),
    ("stream", "set by the top-level `stream`"),
    ("stream_options", "set by isobench to get usage"),
    ("ignore_eos", "use request.ignore_eos"),
    ("temperature", "use request.temperature"),
    ("top_p", "use request.top_p"),
    ("top_k", "use request.top_k"),
];

impl RequestSettings {
    pub(crate) fn from_raw(raw: &RawRequest, context: &FileContext) -> Result<Self, WorkloadError> {
        let length = |raw, field| LengthDistribution::from_raw(raw, field, context);
        let output = raw
            .output_tokens
            .as_ref()
            .map(|raw| length(raw, "request.output_tokens"))
            .transpose()?;
        let requests = match (&raw.dataset, &raw.input_tokens, output) {
            (Some(_), Some(_), _) => {
                return Err(context.field_error(
                    "request.input_tokens",
                    "not used with request.dataset (prompts come from the dataset)",
                ));
            }
            (Some(dataset), None, output) => Requests::Dataset {
                dataset: Dataset::load(dataset, context)?,
                output,
            },
            (None, Some(input), Some(output)) => Requests::Synthetic {
                input: length(input, "request.input_tokens")?,
                output,
            },
            (None, None, _) | (None, Some(_), None) => {
                let missing = if raw.input_tokens.is_none() {
                    "input_tokens"
                } else {
                    "output_tokens"
                };
                return Err(context.field_error(
                    "request",
                    format!(
                        "missing `{missing}`: give request.input_tokens and request.output_tokens \
                         (e.g. input_tokens = {{ dist = \"uniform\", min = 16, max = 32 }}), \
                         or a request.dataset"
                    ),
                ));
            }
        };
        Ok(RequestSettings {
            requests,
            ignore_eos: raw.ignore_eos,
            sampling: sampling(raw, context)?,
            headers: headers(&raw.headers, context)?,
            extra_body: extra_body(&raw.extra_body, context)?,
        })
    }
}

fn sampling(raw: &RawRequest, context: &FileContext) -> Result<Sampling, WorkloadError> {
    if let Some(temperature) = raw.temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(context.field_error(
            "request.temperature",
            format!("must be a number >= 0, got {temperature}"),
        ));
    }
    if let Some(top_p) = raw.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(context.field_error(
            "request.top_p",
            format!("must be a number in (0, 1], got {top_p}"),
        ));
    }
    let top_k = raw
        .top_k
        .map(|k| {
            u32::try_from(k).ok().filter(|&k| k >= 1).ok_or_else(|| {
                context.field_error(
                    "request.top_k",
                    format!("must be an integer >= 1 (leave it out to disable top-k), got {k}"),
                )
            })
        })
        .transpose()?;
    Ok(Sampling {
        temperature: raw.temperature,
        top_p: raw.top_p,
        top_k,
    })
}

fn headers(
    raw: &BTreeMap<String, String>,
    context: &FileContext,
) -> Result<BTreeMap<String, String>, WorkloadError> {
    const TOKEN_SYMBOLS: &str = "!#$%&'*+-.^_`|~";
    for (name, value) in raw {
        let field = format!("request.headers.{name}");
        let valid_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || TOKEN_SYMBOLS.contains(c));
        if !valid_name {
            return Err(context.field_error(
                &field,
                format!(
                    "`{name}` is not an HTTP header name (letters, digits and {TOKEN_SYMBOLS})"
                ),
            ));
        }
        if let Some((_, why)) = RESERVED_HEADERS
            .iter()
            .find(|(reserved, _)| name.eq_ignore_ascii_case(reserved))
        {
            return Err(context.field_error(&field, format!("cannot be set here: {why}")));
        }
        if value
            .chars()
            .any(|c| (c.is_control() && c != '\t') || !c.is_ascii())
        {
            return Err(context.field_error(
                &field,
                "the value must be printable ASCII (no line breaks or control characters)",
            ));
        }
    }
    Ok(raw.clone())
}

fn extra_body(
    raw: &toml::Table,
    context: &FileContext,
) -> Result<serde_json::Map<String, serde_json::Value>, WorkloadError> {
    let mut body = serde_json::Map::new();
    for (key, value) in raw {
        let field = format!("request.extra_body.{key}");
        if let Some((_, instead)) = RESERVED_BODY_FIELDS.iter().find(|(name, _)| name == key) {
            return Err(context.field_error(&field, format!("cannot be set here: {instead}")));
        }
        let json = to_json(value).map_err(|message| context.field_error(&field, message))?;
        body.insert(key.clone(), json);
    }
    Ok(body)
}

/// A TOML value as JSON; dates become RFC 3339 strings.
fn to_json(value: &toml::Value) -> Result<serde_json::Value, String> {
    use serde_json::Value as Json;
    Ok(match value {
        toml::Value::String(text) => Json::String(text.clone()),
        toml::Value::Integer(integer) => Json::from(*integer),
        toml::Value::Float(float) => serde_json::Number::from_f64(*float)
            .map(Json::Number)
            .ok_or_else(|| format!("{float} has no JSON form (JSON numbers are finite)"))?,
        toml::Value::Boolean(flag) => Json::Bool(*flag),
        toml::Value::Datetime(datetime) => Json::String(datetime.to_string()),
        toml::Value::Array(items) => {
            Json::Array(items.iter().map(to_json).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(table) => Json::Object(
            table
                .iter()
                .map(|(key, value)| Ok((key.clone(), to_json(value)?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}
