#!/usr/bin/env bash
# Projects (issue 13): time from a signed GitHub-style webhook to a `ready` version, and the
# build's own time (checkout + command + pack + artifact into the store), on `silk up`.
# A small project (two files) in a bare repository served as file://; the build command
# copies a file. N tags are pushed and announced one after the other.
#
#   bench/projects.sh                   # release build (cargo build --release -p silk first)
#   SILK=target/debug/silk N=10 bench/projects.sh
#
# Needs: git, curl, openssl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
SILK=$(realpath "${SILK:-target/release/silk}")
N=${N:-5}
W=$(mktemp -d)
trap 'kill $UP 2>/dev/null || true; rm -rf "$W"' EXIT
cd "$W"
git init -q --bare srv/shop.git
git init -q -b main work
(cd work && printf 'print(1)\n' > spider.py && printf 'requests\n' > requirements.txt &&
  git -c user.name=b -c user.email=b@b add -A && git -c user.name=b -c user.email=b@b commit -qm first &&
  git remote add origin "$W/srv/shop.git" && git push -q origin main)
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$SILK" up --agents 1 --allow-network 127.0.0.0/8 --data-dir .silk --listen "127.0.0.1:$PORT" > up.log 2>&1 &
UP=$!
for _ in $(seq 200); do
  [ -f .silk/hub/admin.token ] && curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break
  sleep 0.05
done
export SILK_SERVER="http://127.0.0.1:$PORT" SILK_TOKEN
SILK_TOKEN=$(cat .silk/hub/admin.token)
printf 'name: shop\ngit_url: file://%s/srv/shop.git\nbuild: {kind: command, command: "mkdir -p dist && cp spider.py dist/"}\n' "$W" > p.yaml
SECRET=$("$SILK" projects create -f p.yaml 2> /dev/null)
for n in $(seq "$N"); do
  (cd work && git -c user.name=b -c user.email=b@b tag -a -m v "release/shop/1.0.$n" && git push -q origin --tags)
  C=$(git -C work rev-parse HEAD)
  BODY="{\"ref\":\"refs/tags/release/shop/1.0.$n\",\"after\":\"$C\"}"
  SIG=$(printf '%s' "$BODY" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
  T0=$(date +%s%N)
  curl -sf -X POST "http://127.0.0.1:$PORT/api/v1/webhooks/shop" -H "X-GitHub-Event: push" \
    -H "X-GitHub-Delivery: bench-$n" -H "X-Hub-Signature-256: sha256=$SIG" -d "$BODY" > /dev/null
  until curl -sf -H "Authorization: Bearer $SILK_TOKEN" \
      "http://127.0.0.1:$PORT/api/v1/projects/shop/versions/1.0.$n" | grep -q '"state":"ready"'; do
    sleep 0.005
  done
  T1=$(date +%s%N)
  TOOK=$("$SILK" versions shop "1.0.$n" --json | python3 -c 'import json,sys;v=json.load(sys.stdin);print(v["finished_ms"]-v["started_ms"])')
  echo "1.0.$n: webhook -> ready $(( (T1 - T0) / 1000000 )) ms; build (checkout + command + pack + store) $TOOK ms"
done
