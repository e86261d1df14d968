#!/bin/bash
# side-by-side round cost, iterations 1 vs 2, alternating; chain3 settings, offline, alone
cd /work/main
for rep in 1 2; do for it in 1 2; do
  d=$(mktemp -d /tmp/rc-XXXX)
  /usr/bin/time -f "wall %e s" .venv/bin/python -m engine run --model smollm2-135m --offline --data-dir $d --config docs/results/chain3-it2/chain3.toml --tasks chain_sum --local 8 --external 0 --rounds 4 --eval-every 0 --threads 2 --iterations $it --seed 1 > $d/out.log 2>&1

  python3 - $d $it <<'PY'
import json,sys,pathlib,glob
d=pathlib.Path(sys.argv[1])
rs=[]
for f in d.rglob("*.jsonl"):
    for l in open(f):
        try: r=json.loads(l)
        except Exception: continue
        if r.get("type")=="round" or ("round_s" in r and "train_s" in r): rs.append(r)
print("  iterations",sys.argv[2],[(r.get("round"),r.get("round_s"),r.get("train_s")) for r in rs])
PY
done; done
