#!/usr/bin/env bash
# Real vLLM logs of a process killed by a signal, as the kernel's OOM killer does it (SIGKILL):
#   1. the engine core killed after the server is ready, then a request;  2. killed while it loads.
# usage: capture.sh VENV MODEL OUTDIR
set -u
venv=$1 model=$2 out=$3
mkdir -p "$out"
core_pid() { pgrep -f "VLLM::EngineCore|EngineCore" | while read p; do [ "$(ps -o ppid= -p $p | tr -d ' ')" = "$1" ] && echo $p; done | head -1; }
serve() {  # $1: log, $2: port
  VLLM_CPU_KVCACHE_SPACE=1 setsid "$venv/bin/python" -m vllm.entrypoints.cli.main serve "$model" --dtype float32 \
    --enforce-eager --max-model-len 256 --host 127.0.0.1 --port $2 >"$1" 2>&1 &
  echo $!
}
# 1. after ready
leader=$(serve "$out/killed-after-ready.log" 48611)
for i in $(seq 300); do curl -sf localhost:48611/health >/dev/null && break; sleep 1; done
core=$(core_pid $leader); echo "leader $leader core $core" >&2
kill -9 "$core"; sleep 2
curl -s localhost:48611/v1/completions -H 'content-type: application/json' \
  -d "{\"model\": \"$model\", \"prompt\": \"hello\", \"max_tokens\": 4}" >>"$out/killed-after-ready.response" 2>&1
sleep 10; kill -- -$leader 2>/dev/null; sleep 5; kill -9 -- -$leader 2>/dev/null
# 2. while it loads: as soon as the engine core exists
leader=$(serve "$out/killed-while-loading.log" 48612)
for i in $(seq 600); do core=$(core_pid $leader); [ -n "$core" ] && break; sleep 0.2; done
sleep 3; echo "leader $leader core $core" >&2; kill -9 "$core"
for i in $(seq 60); do kill -0 $leader 2>/dev/null || break; sleep 1; done
kill -9 -- -$leader 2>/dev/null; true
