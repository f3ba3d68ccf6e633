#!/usr/bin/env bash
# The vSwitch fast path against the simplest fast path (hashbrown lookup + header copy), both
# measured in the same run by `cargo bench -p snic-io --bench vswitch_fastpath`; prints Mpps and
# the ratio per flow count for every run, then the medians.
#
#   scripts/bench_vswitch.sh                      # build the bench here, 3 runs
#   RUNS=3 FLOWS=1000,10000 scripts/bench_vswitch.sh
#   scripts/bench_vswitch.sh OLD_BIN NEW_BIN      # compare two built bench binaries,
#                                                 # alternating runs (before/after a change)
#
# The bench binaries are `target/release/deps/vswitch_fastpath-*` (run with `--bench`). Runs are
# not niced: run them on a machine as quiet as you have, and note `/proc/loadavg`.
set -euo pipefail
RUNS=${RUNS:-3}
FLOWS=${FLOWS:-1000,10000,100000,1000000}
cd "$(dirname "$0")/.."
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
    out=$(cargo bench -p snic-io --bench vswitch_fastpath --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "vswitch_fastpath" and m.get("executable"):
        print(m["executable"])')
    bins=("$out")
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq 1 "$RUNS"); do
    for b in "${!bins[@]}"; do
        echo "== run $r, ${bins[$b]} (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
        SNIC_BENCH_FLOWS=$FLOWS "${bins[$b]}" --bench fastpath 2>&1 |
            tee -a "$tmp/log" >"$tmp/run.$b.$r"
    done
done
python3 - "$tmp" "$RUNS" "${#bins[@]}" "${bins[@]}" <<'EOF'
import re, statistics, sys
tmp, runs, nb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = sys.argv[4:]
unit = {"Kelem/s": 1e-3, "Melem/s": 1.0, "Gelem/s": 1e3, "elem/s": 1e-6}
for b in range(nb):
    table = {}
    for r in range(1, runs + 1):
        text = open(f"{tmp}/run.{b}.{r}").read()
        # criterion: "fastpath/vswitch/1000 ... thrpt:  [lo mid hi]" (the middle is the estimate)
        for m in re.finditer(r"fastpath/(vswitch|hashbrown\+copy)/(\d+)\s.*?thrpt:\s+\[\S+ \S+ (\S+) (\S+)", text, re.S):
            kind, n, v, u = m.group(1), int(m.group(2)), float(m.group(3)), m.group(4)
            table.setdefault(n, {}).setdefault(kind, []).append(v * unit[u])
    print(f"# {names[b]}")
    print("flows | vswitch Mpps (runs) | hashbrown+copy Mpps (runs) | ratio (runs) | median ratio")
    for n in sorted(table):
        vs, hb = table[n].get("vswitch", []), table[n].get("hashbrown+copy", [])
        ratios = [a / c for a, c in zip(vs, hb)]
        fmt = lambda xs: " ".join(f"{x:.1f}" for x in xs)
        print(f"{n} | {fmt(vs)} | {fmt(hb)} | {' '.join(f'{x:.2f}' for x in ratios)} | "
              f"{statistics.median(ratios):.2f}" if ratios else f"{n} | incomplete")
EOF
