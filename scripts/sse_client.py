#!/usr/bin/env python3
"""An independent closed-loop client for OpenAI-compatible streaming
completions, standard library only (asyncio sockets, HTTP/1.1 with chunked
decoding, one connection per request), for scripts/compare-llama-cpp.sh:
the same figures as `isobench run` from code that shares nothing with it.

    python3 scripts/sse_client.py --url http://127.0.0.1:8000 --model NAME \
        --concurrency 8 --requests 32 --max-tokens 64 --prompt-words 24

Each of `concurrency` workers sends one greedy streamed request
(`temperature` 0, `ignore_eos`, `max_tokens`) after another until
`requests` are done (the first `warmup` per worker are not counted).
Every request's prompt starts with its own number, so that no two share a
prefix: llama-server reuses a slot's cached prompt prefix (and picks the
slot whose last prompt is most alike), and an identical prompt every time
gave it a 5 ms TTFT where prefilling took 20 ms.
Prints one JSON line: output tokens/s over the measured window (first send
to last byte; a token is a streamed event with non-empty text), TTFT and
TPOT percentiles in ms (TPOT = (last token - first token) / (tokens - 1)).
"""
import argparse
import asyncio
import json
import statistics
import time
import urllib.parse

WORDS = ("the quick brown fox jumps over a lazy dog while seven wise owls "
         "watch from an old oak tree near the quiet river bank at dawn").split()


async def one_request(host, port, path, body):
    reader, writer = await asyncio.open_connection(host, port)
    payload = json.dumps(body).encode()
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: {len(payload)}\r\n\r\n"
        .encode() + payload)
    sent = time.perf_counter()
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"HTTP status {status!r}")
    chunked = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    times = []
    buffer = b""

    def events(data):
        nonlocal buffer
        buffer += data
        while b"\n" in buffer:
            raw, buffer = buffer.split(b"\n", 1)
            raw = raw.strip()
            if raw.startswith(b"data:") and raw[5:].strip() != b"[DONE]":
                event = json.loads(raw[5:])
                choices = event.get("choices") or []
                if choices and choices[0].get("text"):
                    times.append(time.perf_counter())

    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                break
            events(await reader.readexactly(size))
            await reader.readexactly(2)
    else:
        while data := await reader.read(65536):
            events(data)
    end = time.perf_counter()
    writer.close()
    return sent, times, end


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-words", type=int, default=24)
    args = p.parse_args()
    url = urllib.parse.urlparse(args.url)
    sent = [0]

    def body():
        sent[0] += 1
        words = [str(sent[0])] + [WORDS[i % len(WORDS)] for i in range(args.prompt_words - 1)]
        prompt = " ".join(words)
        return {"model": args.model, "prompt": prompt, "max_tokens": args.max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": True}

    results = []
    remaining = [args.requests]

    async def worker():
        for _ in range(args.warmup):
            await one_request(url.hostname, url.port, "/v1/completions", body())
        while remaining[0] > 0:
            remaining[0] -= 1
            results.append(await one_request(url.hostname, url.port, "/v1/completions", body()))

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    start = min(r[0] for r in results)
    end = max(r[2] for r in results)
    tokens = sum(len(r[1]) for r in results)
    ttft = sorted((r[1][0] - r[0]) * 1e3 for r in results if r[1])
    tpot = sorted((r[1][-1] - r[1][0]) / (len(r[1]) - 1) * 1e3 for r in results if len(r[1]) > 1)
    q = lambda xs, f: xs[min(len(xs) - 1, int(f * len(xs)))]
    print(json.dumps({
        "requests": len(results), "output_tokens": tokens,
        "output_tokens_per_s": tokens / (end - start),
        "ttft_p50_ms": statistics.median(ttft), "tpot_p50_ms": statistics.median(tpot),
        "tpot_p90_ms": q(tpot, 0.9),
    }))


asyncio.run(main())
