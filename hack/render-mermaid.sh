#!/usr/bin/env bash
# Renders every ```mermaid block in README.md and docs/**/*.md to an SVG and a
# PNG, and fails if any block does not render. The code host draws the same
# blocks with its own copy of Mermaid; a block that fails here would show there
# as an error box instead of a diagram.
#
#   hack/render-mermaid.sh [OUT_DIR]     # default bin/docs (bin/ is gitignored)
#
# Needs node and npm, and Chromium (Debian: apt-get install -y chromium; set
# CHROMIUM to use another binary). mermaid-cli is pinned, with puppeteer, in
# hack/mermaid/package-lock.json; the first run installs exactly that with
# `npm ci` into bin/mermaid, with PUPPETEER_SKIP_DOWNLOAD=1 so that puppeteer
# downloads no browser of its own, and later runs reuse it until the lock file
# changes. mermaid-cli 11.17 still runs on Node 20; 12.x needs Node 22.
set -euo pipefail

cd "$(dirname "$0")/.."
out=${1:-bin/docs}
tools=bin/mermaid
chromium=${CHROMIUM:-/usr/bin/chromium}

for cmd in node npm; do
  command -v "$cmd" >/dev/null || { echo "render-mermaid: $cmd not found" >&2; exit 1; }
done
if [[ ! -x $chromium ]]; then
  echo "render-mermaid: no Chromium at $chromium: apt-get install -y chromium, or set CHROMIUM" >&2
  exit 1
fi

mmdc=$tools/node_modules/.bin/mmdc
if [[ ! -x $mmdc ]] || ! cmp -s hack/mermaid/package-lock.json "$tools/package-lock.json"; then
  echo "render-mermaid: installing the pinned mermaid-cli into $tools"
  mkdir -p "$tools"
  cp hack/mermaid/package.json hack/mermaid/package-lock.json "$tools/"
  (cd "$tools" && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
fi

mkdir -p "$out"
# The sandbox needs user namespaces, which containers and root often lack; the
# pages rendered are our own diagrams. The other flags keep Chromium from
# calling home.
config=$out/puppeteer-config.json
cat >"$config" <<EOF
{"executablePath": "$chromium",
 "args": ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--no-first-run"]}
EOF

# Extract the blocks: one .mmd file per block, and a list of "source:line file".
list=$out/blocks.txt
: >"$list"
rm -f "$out"/*.mmd
while IFS= read -r md; do
  stem=${md%.md}
  stem=${stem//\//_}
  awk -v dir="$out" -v stem="$stem" -v src="$md" '
    !inblock && /^```mermaid[[:space:]]*$/ {
      n++; inblock = 1; file = sprintf("%s/%s-%d.mmd", dir, stem, n)
      printf "" > file; print src ":" FNR " " file; next
    }
    inblock && /^```[[:space:]]*$/ { inblock = 0; close(file); next }
    inblock { print > file }
    END { if (inblock) { print src ": mermaid block not closed" > "/dev/stderr"; exit 1 } }
  ' "$md" >>"$list"
done < <({ [[ -f README.md ]] && echo README.md; find docs -name '*.md' | sort; })

total=$(wc -l <"$list")
if [[ $total -eq 0 ]]; then
  echo "render-mermaid: no mermaid blocks in README.md or docs/"
  exit 0
fi
echo "render-mermaid: $total block(s), $("$mmdc" --version) (mermaid-cli), $("$chromium" --version 2>/dev/null | tail -1)"

failed=0
while read -r src mmd; do
  base=${mmd%.mmd}
  log=$base.log
  if "$mmdc" -q -p "$config" -i "$mmd" -o "$base.svg" >"$log" 2>&1 &&
    "$mmdc" -q -p "$config" -i "$mmd" -o "$base.png" -b white -s 2 >>"$log" 2>&1; then
    size=$(file -b "$base.png" | grep -o '[0-9]* x [0-9]*' || true)
    echo "ok     $src -> $base.svg, $base.png ($size)"
  else
    failed=$((failed + 1))
    echo "FAILED $src ($mmd):"
    grep -v '^\s*at ' "$log" | sed -n '1,12s/^/    /p'
  fi
done <"$list"

if [[ $failed -gt 0 ]]; then
  echo "render-mermaid: $failed of $total block(s) failed to render" >&2
  exit 1
fi
echo "render-mermaid: all $total block(s) rendered into $out"
