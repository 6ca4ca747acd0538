//! The shipped tokenizer: round trips, special tokens, the chat template,
//! and streaming detokenization across multi-byte characters.

mod common;

use common::repo_path;
use isobench_model::{ModelFolder, Tokenizer};

const MIXED_TEXT: &str = "Héllo wörld: naïve café, 世界 🎉 done.";

fn tokenizer() -> Tokenizer {
    ModelFolder::open(repo_path("models/tiny-llama"))
        .expect("models/tiny-llama opens")
        .tokenizer()
        .clone()
}

#[test]
fn text_round_trips_and_special_tokens_are_known() {
    let tok = tokenizer();
    let ids = tok.encode(MIXED_TEXT, false).unwrap();
    assert_eq!(tok.decode(&ids, false).unwrap(), MIXED_TEXT);
    let with_bos = tok.encode(MIXED_TEXT, true).unwrap();
    assert_eq!(with_bos[0], tok.bos_token_id().unwrap());
    assert_eq!(&with_bos[1..], &ids[..]);
    assert_eq!(tok.bos_token(), Some("<|begin_of_text|>"));
    assert_eq!(tok.eos_token(), Some("<|eot_id|>"));
    assert_eq!(tok.eos_token_ids(), &[1, 4]);
    assert!(tok.is_eos(4) && !tok.is_eos(5));
    assert_eq!(tok.vocab_size(), 8192);
}

#[test]
fn chat_template_renders_llama3_turns() {
    let tok = tokenizer();
    let mut env = minijinja::Environment::new();
    env.add_template("chat", tok.chat_template().expect("a chat template"))
        .unwrap();
    let rendered = env
        .get_template("chat")
        .unwrap()
        .render(minijinja::context! {
            messages => vec![
                minijinja::context! { role => "system", content => "Be brief." },
                minijinja::context! { role => "user", content => " Hi! " },
            ],
            add_generation_prompt => true,
            bos_token => tok.bos_token(),
        })
        .unwrap();
    assert_eq!(
        rendered,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    let ids = tok.encode(&rendered, false).unwrap();
    assert_eq!(ids[..2], [0, 2], "bos, then a header token");
    assert_eq!(
        ids.iter().filter(|&&id| id == 4).count(),
        2,
        "one <|eot_id|> per turn"
    );
}

#[test]
fn incremental_decoding_never_splits_a_character() {
    let tok = tokenizer();
    let ids = tok.encode(MIXED_TEXT, false).unwrap();
    let split_chars = ids
        .iter()
        .filter(|&&id| tok.decode(&[id], false).unwrap().contains('\u{FFFD}'))
        .count();
    assert!(
        split_chars > 0,
        "the text must contain characters spread over several tokens"
    );

    let mut decoder = tok.incremental_decoder(true);
    let mut streamed = String::new();
    let mut held_back = 0;
    for &id in &ids {
        match decoder.push(id).unwrap() {
            Some(text) => {
                assert!(
                    !text.contains('\u{FFFD}'),
                    "emitted half a character: {text:?}"
                );
                streamed.push_str(&text);
            }
            None => held_back += 1,
        }
    }
    assert!(held_back > 0);
    assert_eq!(decoder.finish().unwrap(), None);
    assert_eq!(streamed, MIXED_TEXT);
}

#[test]
fn incremental_decoding_skips_special_tokens_and_flushes_at_the_end() {
    let tok = tokenizer();
    let mut decoder = tok.incremental_decoder(true);
    assert_eq!(decoder.push(tok.bos_token_id().unwrap()).unwrap(), None);
    let mut streamed = String::new();
    for id in tok.encode("ok 🎉", false).unwrap() {
        streamed.extend(decoder.push(id).unwrap());
    }
    assert_eq!(streamed, "ok 🎉");

    // Generation that stops inside a character: the rest comes from finish().
    let mut decoder = tok.incremental_decoder(true);
    let ids = tok.encode("a🎉", false).unwrap();
    let mut streamed = String::new();
    for &id in &ids[..ids.len() - 1] {
        streamed.extend(decoder.push(id).unwrap());
    }
    assert_eq!(streamed, "a");
    let rest = decoder.finish().unwrap().expect("held-back bytes");
    assert!(rest.contains('\u{FFFD}'));
    assert_eq!(
        streamed + &rest,
        tok.decode(&ids[..ids.len() - 1], true).unwrap()
    );
}

/// Regression: a model that emits stray bytes (seeded random weights do)
/// must not have its whole answer held back until the end, which made the
/// load generator see one event and a TTFT equal to the E2E latency.
#[test]
fn stray_bytes_are_emitted_once_no_character_can_complete() {
    let tok = tokenizer();
    let stray = (0..tok.vocab_size() as u32)
        .find(|&id| {
            tok.decode(&[id], false).unwrap() == "\u{FFFD}"
                && tok.decode(&[id, id], false).unwrap() == "\u{FFFD}\u{FFFD}"
        })
        .expect("a byte token that cannot start and end a character alone");
    let mut decoder = tok.incremental_decoder(true);
    let mut emitted_before_finish = String::new();
    for _ in 0..12 {
        emitted_before_finish.extend(decoder.push(stray).unwrap());
    }
    assert!(
        emitted_before_finish.chars().count() >= 8,
        "held back: {emitted_before_finish:?}"
    );
    let rest = decoder.finish().unwrap().unwrap_or_default();
    assert_eq!(emitted_before_finish + &rest, "\u{FFFD}".repeat(12));
}
