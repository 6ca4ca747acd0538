//! The workload file as written: serde types that mirror the TOML, with
//! `deny_unknown_fields` everywhere. They are validated into
//! [`Workload`](crate::Workload) and never used beyond that.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::dataset::RawDataset;
use crate::lengths::RawLength;
use crate::load::RawLoad;
use crate::plan::ApiKind;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawWorkload {
    pub(crate) name: Option<String>,
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) api: ApiKind,
    pub(crate) stream: Option<bool>,
    pub(crate) seed: Option<u64>,
    pub(crate) tokenizer: Option<PathBuf>,
    pub(crate) timeout: Option<HumanDuration>,
    pub(crate) request: RawRequest,
    #[serde(default)]
    pub(crate) load: RawLoad,
    /// Keys with their spans, to keep the file's order.
    #[serde(default)]
    pub(crate) slo: BTreeMap<Spanned<String>, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRequest {
    pub(crate) input_tokens: Option<RawLength>,
    pub(crate) output_tokens: Option<RawLength>,
    pub(crate) dataset: Option<RawDataset>,
    #[serde(default)]
    pub(crate) ignore_eos: bool,
    pub(crate) temperature: Option<f64>,
    pub(crate) top_p: Option<f64>,
    pub(crate) top_k: Option<i64>,
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) extra_body: toml::Table,
}

/// A duration written as a string: `"60s"`, `"500ms"`, `"2m 30s"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HumanDuration(pub(crate) Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl serde::de::Visitor<'_> for DurationVisitor {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration string such as \"60s\", \"500ms\" or \"2m 30s\"")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<HumanDuration, E> {
                humantime::parse_duration(text)
                    .map(HumanDuration)
                    .map_err(|error| {
                        E::custom(format!(
                            "`{text}` is not a duration ({error}); write e.g. \"60s\", \"500ms\" or \"2m 30s\""
                        ))
                    })
            }
        }

        deserializer.deserialize_str(DurationVisitor)
    }
}
