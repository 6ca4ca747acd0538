//! Before a run: check that the endpoint answers, serves the model and
//! accepts the key, and fail fast with a message that says which.
//!
//! `GET /v1/models` answers all three at once (and lists the models to
//! suggest when the name is wrong). Servers that do not serve it get one
//! non-streamed request for a single token instead. A redirect is an error
//! that names where it points: requests are never redirected during a run.

use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use isobench_api::{ErrorResponse, ModelList};
use isobench_workload::Prompt;

use crate::LoadgenError;
use crate::openai::{HttpBackend, error_chain};

/// The longest a preflight request may take.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(30);

/// How the endpoint was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreflightCheck {
    /// `GET /v1/models` listed the model.
    ModelList,
    /// `/v1/models` is not served; a one-token request succeeded.
    ProbeRequest,
}

impl HttpBackend {
    /// Checks the endpoint: reachable, serving the configured model, and
    /// accepting the credentials. Sends at most one generation request.
    /// Returns which check showed it.
    pub async fn preflight(&self) -> Result<PreflightCheck, LoadgenError> {
        let models_url = format!("{}/models", self.api_base());
        let response = self
            .client()
            .get(&models_url)
            .headers(self.headers().clone())
            .timeout(self.timeout().min(PREFLIGHT_TIMEOUT))
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        refuse_redirect(&response)?;
        let body = self.body_of(response).await?;
        refuse_credentials(status, &models_url, &body)?;
        if status.is_success()
            && let Ok(list) = serde_json::from_slice::<ModelList>(&body)
        {
            return self.check_listed(list);
        }
        self.probe().await
    }

    fn check_listed(&self, list: ModelList) -> Result<PreflightCheck, LoadgenError> {
        if list.data.iter().any(|card| card.id == self.model()) {
            return Ok(PreflightCheck::ModelList);
        }
        Err(LoadgenError::UnknownModel {
            model: self.model().to_owned(),
            url: self.api_base().to_owned(),
            available: list.data.into_iter().map(|card| card.id).collect(),
            server_message: None,
        })
    }

    /// One non-streamed request for one token.
    async fn probe(&self) -> Result<PreflightCheck, LoadgenError> {
        let body = self.body(&Prompt::Text("Hello".to_owned()), 1, false);
        let mut request = self.request(body);
        *request.timeout_mut() = Some(self.timeout().min(PREFLIGHT_TIMEOUT));
        let url = request.url().to_string();
        let response = self
            .client()
            .execute(request)
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        refuse_redirect(&response)?;
        if status.is_success() {
            return Ok(PreflightCheck::ProbeRequest);
        }
        let body = self.body_of(response).await?;
        refuse_credentials(status, &url, &body)?;
        let message = error_message(&body);
        let about_model = matches!(status, StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST)
            && message.to_lowercase().contains("model");
        if about_model {
            return Err(LoadgenError::UnknownModel {
                model: self.model().to_owned(),
                url: self.api_base().to_owned(),
                available: Vec::new(),
                server_message: Some(message),
            });
        }
        Err(LoadgenError::Preflight {
            method: "POST",
            url,
            status: status.as_u16(),
            message,
        })
    }

    async fn body_of(&self, response: reqwest::Response) -> Result<Bytes, LoadgenError> {
        response.bytes().await.map_err(|e| self.unreachable(&e))
    }

    fn unreachable(&self, error: &reqwest::Error) -> LoadgenError {
        LoadgenError::Unreachable {
            url: self.api_base().to_owned(),
            reason: error_chain(error),
        }
    }
}

fn refuse_redirect(response: &reqwest::Response) -> Result<(), LoadgenError> {
    let status = response.status();
    if !status.is_redirection() {
        return Ok(());
    }
    let location = response
        .headers()
        .get(http::header::LOCATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    Err(LoadgenError::Redirected {
        url: response.url().to_string(),
        status: status.as_u16(),
        location: location.unwrap_or_else(|| "(no Location header)".to_owned()),
    })
}

fn refuse_credentials(status: StatusCode, url: &str, body: &[u8]) -> Result<(), LoadgenError> {
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Err(LoadgenError::KeyRefused {
            url: url.to_owned(),
            status: status.as_u16(),
            message: error_message(body),
        });
    }
    Ok(())
}

/// An answer's error message: the OpenAI error body's, else its first words.
fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorResponse>(body) {
        Ok(parsed) => parsed.error.message,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(300)])
            .trim()
            .to_owned(),
    }
}
