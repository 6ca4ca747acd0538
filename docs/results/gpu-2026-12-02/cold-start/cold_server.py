"""Starts `BIN serve` with the driver's compile cache off, times /health,
then the first and second completions (16 tokens each)."""
import json, os, subprocess, sys, time, urllib.request

bin_path, port, log = sys.argv[1], sys.argv[2], sys.argv[3]
env = dict(os.environ, CUDA_CACHE_DISABLE="1")
start = time.time()
server = subprocess.Popen([bin_path, "serve", "--device", "cuda:0", "--dtype", "bf16", "--port", port,
                           "--model", "models/llama-3.2-1b-shape"], env=env,
                          stdout=open(log, "w"), stderr=subprocess.STDOUT)
base = f"http://127.0.0.1:{port}"
try:
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=1).read(); break
        except Exception:
            if server.poll() is not None or time.time() - start > 300:
                print("server failed"); sys.exit(1)
            time.sleep(0.05)
    print(f"{bin_path}: healthy after {time.time() - start:.1f} s")
    model = json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
    for n in (1, 2):
        body = json.dumps({"model": model, "prompt": "The quick brown fox", "max_tokens": 16,
                           "temperature": 0}).encode()
        t = time.time()
        req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
        answer = json.load(urllib.request.urlopen(req, timeout=300))
        print(f"  request {n}: {1000 * (time.time() - t):.0f} ms, {answer['usage']['completion_tokens']} tokens")
finally:
    server.terminate(); server.wait()
