#!/usr/bin/env bash
# The text corpus of examples/char_lm.rs: the English fortune-cookie files of Debian's
# `fortunes` package (wisdom, science, computers, people, politics, humorists), '%' separator lines
# dropped, concatenated into OUT. Run once, before the recipe (the recipe itself reads only OUT).
# usage: scripts/char_corpus.sh OUT.txt   (needs apt-get and dpkg-deb; no root needed)
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: $0 OUT.txt" >&2
    exit 2
fi
out=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && apt-get download fortunes >/dev/null)
dpkg-deb -x "$tmp"/fortunes_*.deb "$tmp/x"
dir="$tmp/x/usr/share/games/fortunes"
for f in wisdom science computers people politics humorists; do
    grep -v '^%$' "$dir/$f"
done >"$out"
dpkg-deb -f "$tmp"/fortunes_*.deb Package Version | tr '\n' ' '
echo "-> $out: $(wc -c <"$out") bytes"
