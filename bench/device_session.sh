#!/usr/bin/env bash
# The measurements a lent GPU machine is for (issues 44 and 45), in stages that fit its time.
#
# Here, once, before the first call (downloads the wheels the machine lacks, copies the data):
#     bash bench/device_session.sh prepare
# There (the device tool's run, carry [".whl", "device_kit"], from the checkout's root), one call
# of at most 600 s, then a second while the machine is still warm (it is given back after 30 s
# idle, and what a stage left in /tmp goes with it). 15 device minutes a session; the start took
# 30 s on 2026-11-28. Suggested next (-cuda_graphs, training's and translation's, have never run on
# CUDA: training's first, its lever the larger; where a GPU step's time goes has never been
# profiled; check has not run on CUDA since the defects' fixes):
#     bash bench/device_session.sh graphs                       # call 1, timeout_s 520
#     bash bench/device_session.sh profile                      # call 2, timeout_s 300
# and in the session after, translate (its training, conversion and first row took 290 s: it
# needs a call of its own), graphs_bf16 (if graphs paid in fp32), server, check, mixed, fp16,
# optimizers.
# Here again, without a GPU, a dry run of the stages' commands on the CPU (minutes):
#     DRY_RUN=1 bash bench/device_session.sh check train mixed graphs profile translate \
#         profile_translate
#
# Stages and their time limits (2026-11-28 on an H200: a training run of gpu_speed.py took about
# 60 s, start-up and preprocessing included, whatever its 80 steps; the tables now give each
# run's wall seconds, gpu_translate_speed.py its commands' on standard error):
#   check      bench/gpu_check.py (g) exact resume, (h) fp16 copy, (i) same seed twice     300 s
#   train      bench/gpu_speed.py: transformer and rnn64, fp32, both toolkits               300 s
#   mixed      the same in mixed precision: onmt_lite bf16 and fp16, the peer's fp16          420 s
#   levers     bench/gpu_speed.py -levers: transformer, each speed option alone and together  420 s
#   graphs     bench/gpu_check.py (k), training's -cuda_graphs: the losses without it at      190 s
#              dropout 0, exact resume with dropout; then gpu_speed.py -levers, transformer     320 s
#              and rnn64, fp32, without and with -cuda_graphs and with each step's checks
#              read at once (each_step: as before 2026-11-28), 100 steps after 150
#   graphs_bf16  the same levers none and graphs in bf16 (mixed precision slower than fp32 on  320 s
#              2026-11-28: if autocast's casts are the host's extra launches, graphs replay them)
#   fp16       the levers none and each_step in fp16: its loss scale on the device and its      320 s
#              checks every few steps (2026-11-28), against a read at each step as before
#   profile    bench/gpu_profile.py: transformer and rnn64 training steps, fp32 and bf16      260 s
#   translate  bench/gpu_translate_speed.py: the Transformer, same weights, fp32, onmt_lite   540 s
#              with and without -cuda_graphs (trains the model once: a later call on the same warm
#              machine decodes it again; training, conversion and the first row took 290 s on
#              2026-11-28, with the peer's vocabulary and a 2-step training since left out)
#   profile_translate  bench/gpu_profile.py -translate on translate's model                   180 s
#   server     bench/server_load.py -gpu on translate's models, 1 and 16 clients, onmt_lite  300 s
#              without and with -cuda_graphs (recorded in its first requests, kept after)
#   optimizers bench/optimizer_cost.py -device cuda: Adam, Adafactor, SparseAdam on the FAQ     200 s
#              Transformer's parameters against OpenNMT-py's Adafactor (two host reads a tensor)
#   full       bench/gpu_check.py, every check                                                480 s
# Each stage writes its log to $OUT/STAGE.log; at the end $OUT/results.tgz holds bench/results
# and the stages' work logs (the tool brings back at most 8 files).
set -u
cd "$(dirname "$0")/.."
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || { echo "usage: $0 prepare | STAGE... (see the top of this file)"; exit 2; }

if [ "${STAGES[0]}" = prepare ]; then
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
    grep -qx '/device_kit/' .git/info/exclude 2>/dev/null || echo '/device_kit/' >> .git/info/exclude
    mkdir -p .whl device_kit/data
    # the device's Python is 3.12 and has torch, sacrebleu, sentencepiece, pyyaml, anyio, click,
    # h11, werkzeug, jinja2; flask and waitress are the peer's server's
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl ConfigArgParse==1.9.0 opennmt-py==3.5.1 \
        'pyonmttok>=1.37,<2' starlette==1.10.0 uvicorn==0.54.0 flask==3.1.3 waitress==3.0.2 \
        itsdangerous==2.2.0 blinker==1.9.0 || exit 1
    cp -r ../shared/data/toy-ende ../shared/data/g2p-sr device_kit/data/
    cp -r ../shared/gpu/stubs device_kit/   # spacy, fasttext, ...: imported by the peer, unused
    du -sh .whl device_kit
    exit 0
fi

OUT=${OUT:-/tmp/device_out}
mkdir -p "$OUT"
WORK=${WORK:-/tmp/device_work}
mkdir -p "$WORK"
export ONMT_LITE_SHARED=$PWD/device_kit PYTHONUNBUFFERED=1
if [ -n "${DRY_RUN:-}" ]; then
    PY=${PY:-.venv/bin/python}
    PEER=/tmp/peer-opennmt
    export ONMT_LITE_SHARED=$PWD/../shared
else
    PY=python3
    PEER=python3
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD:$PWD/device_kit/stubs
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/env.log"
fi
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      'cudnn', torch.backends.cudnn.version())" >> "$OUT/env.log" 2>&1
git log --oneline -1 >> "$OUT/env.log" 2>/dev/null
TOY=$ONMT_LITE_SHARED/data/toy-ende

# stage NAME SECONDS COMMAND...: run it with a time limit, its output in $OUT/NAME.log
stage() {
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/env.log"
}

DEVICE=(-device cuda)
DRY=()
REQUESTS=400
if [ -n "${DRY_RUN:-}" ]; then
    DEVICE=(-device cpu -quick)
    DRY=(-dry_run)
    REQUESTS=20  # the dry run's untrained model writes 100 words a line
fi
for name in "${STAGES[@]}"; do
    case $name in
    check) stage check 300 $PY bench/gpu_check.py "${DEVICE[@]}" -checks ghi \
        -toy_ende "$TOY" -work "$WORK/check" ;;
    full) stage full 480 $PY bench/gpu_check.py "${DEVICE[@]}" -toy_ende "$TOY" \
        -work "$WORK/full" ;;
    train) stage train 300 $PY bench/gpu_speed.py "${DRY[@]}" -only transformer rnn64 \
        -precisions fp32 -steps 100 -warmup 50 -peer "$PEER" -work "$WORK/train" ;;
    mixed) stage mixed 420 $PY bench/gpu_speed.py "${DRY[@]}" -only transformer rnn64 \
        -precisions mixed -steps 100 -warmup 50 -peer "$PEER" -work "$WORK/train" ;;
    levers) stage levers 420 $PY bench/gpu_speed.py "${DRY[@]}" -levers -only transformer \
        -steps 50 -warmup 30 -work "$WORK/levers" ;;
    graphs)
        stage graphs_check 190 $PY bench/gpu_check.py "${DEVICE[@]}" -quick -checks k \
            -work "$WORK/graphs_check"
        # the buckets are recorded in the first 120 or so steps: measured after them; each_step
        # (the checks read at each step, as before 2026-11-28) last, the first row a cut call loses
        stage graphs 320 $PY bench/gpu_speed.py "${DRY[@]}" -levers -only transformer rnn64 \
            -lever_names none graphs each_step -dtypes fp32 -steps 100 -warmup 150 \
            -work "$WORK/graphs" ;;
    graphs_bf16)
        # mixed precision's puzzle: autocast's casts are launches a graph replays with the rest
        stage graphs_bf16 320 $PY bench/gpu_speed.py "${DRY[@]}" -levers -only transformer rnn64 \
            -lever_names none graphs -dtypes bf16 -steps 100 -warmup 150 -work "$WORK/graphs" ;;
    fp16)
        # fp16's loss scale on the device (2026-11-28): its checks every few steps against each
        # step's read before its update (each_step: how fp16 trained until then)
        stage fp16 320 $PY bench/gpu_speed.py "${DRY[@]}" -levers -only transformer rnn64 \
            -lever_names none each_step -dtypes fp16 -steps 100 -warmup 50 -work "$WORK/fp16" ;;
    profile) stage profile 260 $PY bench/gpu_profile.py "${DRY[@]}" -only transformer rnn64 \
        -work "$WORK/profile" ;;
    translate) stage translate 540 $PY bench/gpu_translate_speed.py "${DRY[@]}" \
        -only transformer -precisions fp32 -rounds 1 -peer "$PEER" -reuse_models \
        -work "$WORK/translate" ;;
    profile_translate)
        lite=$(ls -t "$WORK"/translate/transformer/lite_step_*.pt 2>/dev/null | head -1)
        [ -n "$lite" ] || { echo "profile_translate: run the translate stage first"; continue; }
        stage profile_translate 180 $PY bench/gpu_profile.py "${DRY[@]}" -only -translate "$lite" \
            -work "$WORK/profile" ;;
    server)
        # translate's Transformer, the same weights in both servers
        models=$WORK/translate/transformer
        lite=$(ls -t "$models"/lite_step_*.pt | head -1)
        [ -f "$models/peer_same.pt" ] || $PY -m onmt_lite.bin.convert -model "$lite" \
            -to opennmt-py -output "$models/peer_same.pt" > "$WORK/convert.log" 2>&1
        gpu=(-gpu)
        [ -n "${DRY_RUN:-}" ] && gpu=(-dry_run)
        stage server 300 $PY bench/server_load.py "${gpu[@]}" -cuda_graphs -clients 1 16 \
            -sentences $REQUESTS \
            -models "$lite" "$models/peer_same.pt" -requests "$TOY/src-val.txt" \
            -peer "$PEER" -work "$WORK/server" ;;
    optimizers) stage optimizers 200 $PY bench/optimizer_cost.py "${DRY[@]}" -device cuda \
        -peer "$PEER" -work "$WORK/optimizers" ;;
    *) echo "unknown stage $name (check train mixed levers graphs graphs_bf16 profile translate" \
        "profile_translate server optimizers full)"; exit 2 ;;
    esac
done
tar czf "$OUT/results.tgz" bench/results $(find "$WORK" -name "*.log" 2>/dev/null) 2>/dev/null
ls -la "$OUT"
