#!/bin/sh
# Builds every example program (examples/ebpf/*.c) into examples/ebpf/build/NAME.o with
# clang's BPF target. Usage: examples/ebpf/build.sh [CLANG]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
clang=${1:-${CLANG:-clang}}
arch=$(uname -m)
mkdir -p "$here/build"
for src in "$here"/*.c; do
	name=$(basename "$src" .c)
	"$clang" -O2 -g -target bpf -Wall -Werror \
		-I"/usr/include/$arch-linux-gnu" -I"$here/include" \
		-c "$src" -o "$here/build/$name.o"
	echo "built $here/build/$name.o"
done
