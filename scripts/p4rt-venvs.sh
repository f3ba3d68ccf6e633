#!/usr/bin/env bash
# Installs the P4Runtime clients the tests in tests/p4runtime_clients.rs drive, one venv each
# (p4runtime-shell pins an old protobuf that finsy cannot use):
#   /opt/snic-venv/p4rt-shell  p4runtime-shell (and the p4runtime stubs it pulls in)
#   /opt/snic-venv/finsy       finsy (needs Python >= 3.10)
# Idempotent: an existing venv is reused and pip only installs what is missing. Prints the
# versions at the end. SNIC_VENV_ROOT overrides /opt/snic-venv; PYTHON picks the interpreter.
set -euo pipefail

root="${SNIC_VENV_ROOT:-/opt/snic-venv}"
py="${PYTHON:-python3}"

"$py" -c 'import sys; assert sys.version_info >= (3, 10), sys.version' ||
    { echo "p4rt-venvs: $py is older than 3.10 (finsy needs 3.10)" >&2; exit 1; }

make_venv() { # DIR PACKAGE...
    local dir="$1"; shift
    if [ ! -x "$dir/bin/python" ]; then
        # Debian's python3 needs python3-venv for ensurepip; try it, install it, then retry.
        "$py" -m venv "$dir" || {
            rm -rf "$dir"
            if command -v apt-get >/dev/null; then
                apt-get install -y python3-venv
            fi
            "$py" -m venv "$dir"
        }
    fi
    "$dir/bin/python" -m pip install --disable-pip-version-check -q "$@"
}

# Pinned: the tests check these clients' behaviour; bump on purpose (both Apache-2.0).
make_venv "$root/p4rt-shell" p4runtime-shell==0.0.6
make_venv "$root/finsy" finsy==0.30.0

"$root/p4rt-shell/bin/python" - <<'PY'
import importlib.metadata as m
for name in ("p4runtime-shell", "p4runtime", "protobuf", "grpcio"):
    print(f"p4rt-shell venv: {name} {m.version(name)}")
PY
"$root/finsy/bin/python" - <<'PY'
import importlib.metadata as m
for name in ("finsy", "protobuf", "grpcio"):
    print(f"finsy venv: {name} {m.version(name)}")
PY
