//! Turning a chat conversation into a prompt.
//!
//! The template is the model's `chat_template` from tokenizer_config.json
//! (Jinja, rendered with minijinja, as Hugging Face's `apply_chat_template`
//! does: `messages`, `bos_token`, `eos_token`, `add_generation_prompt` and
//! `raise_exception` are defined). A model without one gets
//! [`DEFAULT_CHAT_TEMPLATE`], a plain-text layout that works with any
//! tokenizer:
//!
//! ```text
//! system: You are terse.
//!
//! user: Hello!
//!
//! assistant:
//! ```

use isobench_api::ChatMessage;
use minijinja::{Environment, ErrorKind, context};
use serde::Serialize;

use crate::error::ServerError;

/// The template used when the model folder defines none: each message as
/// `role: content` followed by a blank line, then `assistant:` to prompt
/// the reply.
pub const DEFAULT_CHAT_TEMPLATE: &str = "{% for message in messages %}{{ message.role }}: {{ message.content }}\n\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

const TEMPLATE_NAME: &str = "chat";

#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'a str,
    content: String,
}

impl ChatTemplate {
    /// Compiles `template` (or the default when `None`); `source_name` names
    /// where it came from in errors.
    pub fn new(
        template: Option<&str>,
        source_name: &str,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self, ServerError> {
        let mut env = Environment::new();
        env.add_function("raise_exception", raise_exception);
        let source = template.unwrap_or(DEFAULT_CHAT_TEMPLATE).to_owned();
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|err| ServerError::Template {
                source_name: source_name.to_owned(),
                message: err.to_string(),
            })?;
        Ok(Self {
            env,
            bos_token: bos_token.unwrap_or_default().to_owned(),
            eos_token: eos_token.unwrap_or_default().to_owned(),
        })
    }

    /// The prompt for `messages`, ending where the assistant's reply starts.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, ServerError> {
        let messages: Vec<Message<'_>> = messages
            .iter()
            .map(|m| Message {
                role: &m.role,
                content: m.content.text(),
            })
            .collect();
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|err| ServerError::Generation(format!("chat template missing: {err}")))?;
        template
            .render(context! {
                messages => messages,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
                add_generation_prompt => true,
            })
            .map_err(|err| {
                let detail = match err.kind() {
                    ErrorKind::InvalidOperation => err.detail().unwrap_or("rejected").to_owned(),
                    _ => err.to_string(),
                };
                ServerError::invalid(
                    "messages",
                    format!("the model's chat template rejected `messages`: {detail}"),
                )
            })
    }
}

/// `raise_exception(message)`, which Hugging Face templates call to reject
/// a conversation (for example roles that do not alternate).
fn raise_exception(message: String) -> Result<String, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA3: &str = "{% for message in messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

    fn conversation() -> Vec<ChatMessage> {
        vec![
            ChatMessage::new("system", "Be brief."),
            ChatMessage::new("user", " Hi "),
        ]
    }

    #[test]
    fn model_template_is_rendered_with_bos_and_generation_prompt() {
        let template = ChatTemplate::new(
            Some(LLAMA3),
            "tokenizer_config.json",
            Some("<|begin_of_text|>"),
            None,
        )
        .unwrap();
        assert_eq!(
            template.render(&conversation()).unwrap(),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn default_template_is_plain_text() {
        let template = ChatTemplate::new(None, "default", None, None).unwrap();
        assert_eq!(
            template.render(&conversation()).unwrap(),
            "system: Be brief.\n\nuser:  Hi \n\nassistant:"
        );
    }

    #[test]
    fn broken_and_rejecting_templates_give_clear_errors() {
        let err = ChatTemplate::new(
            Some("{% for %}"),
            "models/x/tokenizer_config.json",
            None,
            None,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("models/x/tokenizer_config.json"),
            "{err}"
        );
        let strict = "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}";
        let template = ChatTemplate::new(Some(strict), "t", None, None).unwrap();
        let err = template.render(&conversation()).unwrap_err();
        assert_eq!(err.kind(), "invalid_request_error");
        assert!(
            err.to_string()
                .contains("first message must be from the user"),
            "{err}"
        );
    }
}
