//! Property tests of the client's stream parsing: the SSE decoder and the
//! chunk view never panic on arbitrary bytes, and give the same result
//! however the stream is split into reads. Bounded case counts keep them
//! inside a normal `cargo test`.

use isobench_api::sse::{SseDecoder, encode_data};
use isobench_api::view::ChunkView;
use proptest::prelude::*;

/// What a decoder made of a stream: each event's name and data, and
/// whether it stopped on an oversized event.
#[derive(Debug, PartialEq)]
struct Decoded {
    events: Vec<(Option<Vec<u8>>, Vec<u8>)>,
    too_large: bool,
}

/// Feeds `stream` to a decoder capped at `cap` in pieces cut at `cuts`
/// (offsets, any order), draining events after each piece.
fn decode(stream: &[u8], cuts: &[usize], cap: usize) -> Decoded {
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    bounds.push(0);
    bounds.push(stream.len());
    bounds.sort_unstable();
    let mut decoder = SseDecoder::with_max_event_bytes(cap);
    let mut decoded = Decoded {
        events: Vec::new(),
        too_large: false,
    };
    for piece in bounds.windows(2) {
        decoder.push(&stream[piece[0]..piece[1]]);
        loop {
            match decoder.next_event() {
                Ok(Some(event)) => {
                    // The view must not panic on whatever an event holds.
                    let _ = ChunkView::parse(event.data).map(|view| view.content().len());
                    decoded
                        .events
                        .push((event.event.map(<[u8]>::to_vec), event.data.to_vec()));
                }
                Ok(None) => break,
                Err(_) => {
                    decoded.too_large = true;
                    return decoded;
                }
            }
        }
    }
    decoded
}

/// Bytes drawn mostly from what SSE streams are made of, so that events,
/// separators and fields actually occur.
fn sse_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"event: error".to_vec()),
        Just(b": comment".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"[DONE]".to_vec()),
        Just(br#"{"choices":[{"text":"a"}]}"#.to_vec()),
        proptest::collection::vec(any::<u8>(), 0..8),
    ];
    proptest::collection::vec(piece, 0..60).prop_map(|pieces| pieces.concat())
}

/// A valid completions stream of `texts`, with `\n` or `\r\n` line ends
/// and keep-alive comments between events, then `[DONE]`.
fn valid_stream(texts: &[String], crlf: bool, comments: bool) -> Vec<u8> {
    let mut out = String::new();
    for text in texts {
        let chunk = serde_json::json!({
            "id": "c", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": null}],
        });
        out.push_str(&encode_data(&chunk.to_string()));
        if comments {
            out.push_str(": keep-alive\n\n");
        }
    }
    out.push_str(&encode_data("[DONE]"));
    if crlf {
        out = out.replace('\n', "\r\n");
    }
    out.into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_decode_the_same_for_any_split(
        stream in sse_like_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        cap in prop_oneof![Just(16usize), Just(64), Just(1 << 20)],
    ) {
        let whole = decode(&stream, &[], cap);
        prop_assert_eq!(decode(&stream, &cuts, cap), whole);
    }

    #[test]
    fn arbitrary_raw_bytes_never_panic(
        stream in proptest::collection::vec(any::<u8>(), 0..512),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = decode(&stream, &[], 64);
        prop_assert_eq!(decode(&stream, &cuts, 64), whole);
        let _ = ChunkView::parse(&stream);
    }

    #[test]
    fn a_valid_stream_yields_its_texts_for_any_split(
        texts in proptest::collection::vec(any::<String>(), 1..8),
        crlf in any::<bool>(),
        comments in any::<bool>(),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let stream = valid_stream(&texts, crlf, comments);
        let decoded = decode(&stream, &cuts, 1 << 20);
        prop_assert!(!decoded.too_large);
        let (last, chunks) = decoded.events.split_last().unwrap();
        prop_assert_eq!(&last.1[..], b"[DONE]");
        let got: Vec<String> = chunks
            .iter()
            .map(|(_, data)| ChunkView::parse(data).unwrap().content().to_owned())
            .collect();
        prop_assert_eq!(got, texts);
    }

    #[test]
    fn arbitrary_json_never_panics_the_view(value in json_value()) {
        let text = value.to_string();
        if let Ok(view) = ChunkView::parse(text.as_bytes()) {
            let _ = (view.content(), view.finish_reason());
        }
    }
}

/// Arbitrary JSON, biased towards the keys a chunk view reads.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        let key = prop_oneof![
            Just("choices".to_owned()),
            Just("text".to_owned()),
            Just("delta".to_owned()),
            Just("content".to_owned()),
            Just("usage".to_owned()),
            Just("error".to_owned()),
            Just("finish_reason".to_owned()),
            any::<String>(),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((key, inner), 0..4)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}
